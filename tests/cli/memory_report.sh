#!/usr/bin/env bash
# The memory line every rank of `cohort train` prints at the end ("memory rank R/W: parameters N
# B, gradients, optimizer state, activations ..."): under --tensor 2 each rank holds at most 0.6x
# the parameter, gradient and optimizer bytes of one process training the same model. Why 0.6:
# the split layers hold all but a small share u of the parameters, so a rank holds (1 - u) / 2 + u
# of them: the gpt (defaults: 4 layers, width 256, context 128, vocab 256) leaves wte, wpe, the
# layernorms and the row-parallel biases whole, u = 104960 / 3257856 = 3.2% -> 0.516; the mlp
# (784-256-10) only fc2's bias, u < 0.01% -> 0.500. 0.6 is that plus a margin, and below what
# any layer left whole by mistake would give (c_fc alone is 8% of the gpt). Activations are
# measured (the executor's live bytes), not derived: the head (logits B T V) and the layernorms
# stay whole, so they shrink less — checked below 0.8x.
#   memory_report.sh COHORT_RUN COHORT_CLI
set -euo pipefail
run=$1 cli=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# bytes FILE RANK FIELD: the number of bytes in rank RANK's memory line
bytes() { grep "memory rank $2/" "$1" | grep -o "$3 [0-9]* B" | grep -o '[0-9]*'; }
for model in mlp gpt; do
  args=(train --model "$model" --steps 2 --no-eval --threads 1)
  "$cli" "${args[@]}" >"$dir/one.out" 2>&1 || { cat "$dir/one.out"; echo "FAIL: $model on one process"; exit 1; }
  "$run" -n 2 -- "$cli" "${args[@]}" --parallel sync --tensor 2 >"$dir/tp.out" 2>&1 ||
    { cat "$dir/tp.out"; echo "FAIL: $model --tensor 2"; exit 1; }
  [ "$(grep -c "memory rank [01]/2: parameters" "$dir/tp.out")" -eq 2 ] ||
    { cat "$dir/tp.out"; echo "FAIL: $model --tensor 2: not one memory line per rank"; exit 1; }
  for rank in 0 1; do
    for f in parameters gradients "optimizer state" activations; do
      whole=$(bytes "$dir/one.out" 0 "$f") part=$(bytes "$dir/tp.out" $rank "$f")
      bound=0.6
      [ "$f" = activations ] && bound=0.8
      awk -v w="$whole" -v p="$part" -v b=$bound 'BEGIN { exit !(w > 0 && p > 0 && p <= b * w) }' ||
        { grep memory "$dir/one.out" "$dir/tp.out"; echo "FAIL: $model rank $rank holds $f $part B, one process $whole B (bound ${bound}x)"; exit 1; }
      printf '%s rank %s %s: %s / %s = %.3f\n' "$model" "$rank" "$f" "$part" "$whole" "$(awk -v w="$whole" -v p="$part" 'BEGIN { print p / w }')"
    done
  done
done
echo "ok: --tensor 2 holds at most 0.6x the model state and 0.8x the activations of one process, per rank"
