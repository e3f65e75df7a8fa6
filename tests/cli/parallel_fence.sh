#!/usr/bin/env bash
# cohort train --plan fence under cohort-run (OP-Fence through the C ABI's fence fields): the mlp
# at 2 ranks (its two layers), uncompressed, trains like one process on the same batches (the same
# evaluation, the last loss and gradient norm within 1e-5 relative: a pipeline of 2 stages); rank 0 prints the
# link matrix and the partition once; a pipeline whose one cut sends a tenth of its activations
# (--pipeline-keep 0.1) trains to a finite loss that differs from the uncompressed run's; bad
# values fail on one line naming the flag or field.
#   parallel_fence.sh COHORT_RUN COHORT_CLI
set -euo pipefail
run=$1 cli=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(train --model mlp --steps 20 --eval-every 20 --eval-examples 500 --log-every 10 --threads 1)
go() {  # go <name> <ranks> <args...>: runs, keeping <name>.out and <name>.jsonl
  local name=$1 n=$2; shift 2
  "$run" -n "$n" -- "$cli" "$@" --metrics "$dir/$name.jsonl" >"$dir/$name.out" 2>&1 ||
    { cat "$dir/$name.out"; echo "FAIL: $name ($*) exited non-zero"; exit 1; }
}
evals() { grep -o 'eval step [0-9]*: loss [0-9.]* | accuracy [0-9.]*%' "$1"; }
field() { grep -o "\"$2\":[0-9.e+-]*" "$1" | tail -1 | cut -d: -f2; }
close() {  # close <a> <b>: within 1e-5 relative
  awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 1e-5 * a) }'
}
"$cli" "${common[@]}" --metrics "$dir/one.jsonl" >"$dir/one.out" 2>&1 ||
  { cat "$dir/one.out"; echo "FAIL: the single-process run exited non-zero"; exit 1; }
go fence 2 "${common[@]}" --parallel sync --plan fence --fence-compression 0 --micro-batches 4
if [ "$(evals "$dir/one.out")" != "$(evals "$dir/fence.out")" ] || [ -z "$(evals "$dir/one.out")" ]; then
  paste <(evals "$dir/one.out") <(evals "$dir/fence.out"); echo "FAIL: fence evaluates differently from one process"; exit 1
fi
for f in loss grad_norm; do
  close "$(field "$dir/one.jsonl" $f)" "$(field "$dir/fence.jsonl" $f)" ||
    { echo "FAIL: $f: one process $(field "$dir/one.jsonl" $f), fence $(field "$dir/fence.jsonl" $f)"; exit 1; }
done
grep -q "sync plan fence: data 1 pipeline 2 (1f1b) micro-batches 4" "$dir/fence.out" ||
  { cat "$dir/fence.out"; echo "FAIL: the banner does not name the fence plan"; exit 1; }
[ "$(grep -c '^\[rank 0\] links, Mbit/s' "$dir/fence.out")" -eq 1 ] &&
  [ "$(grep -c '^\[rank 0\] fence: bottleneck' "$dir/fence.out")" -eq 1 ] &&
  [ "$(grep -c '^\[rank 0\] stage [01]: nodes ' "$dir/fence.out")" -eq 2 ] &&
  ! grep -q '^\[rank 1\] \(links\|fence\|stage\)' "$dir/fence.out" ||
  { cat "$dir/fence.out"; echo "FAIL: rank 0 (alone) should print the links, the partition and 2 stages"; exit 1; }
# One cut at a tenth: it trains, and not like the whole activations.
go keep 2 "${common[@]}" --parallel sync --pipeline 2 --micro-batches 4 --pipeline-keep 0.1
go whole 2 "${common[@]}" --parallel sync --pipeline 2 --micro-batches 4
grep -q '^\[rank 0\] step 20/20 | epoch [0-9.]* | loss [0-9]\.[0-9]*' "$dir/keep.out" ||
  { cat "$dir/keep.out"; echo "FAIL: --pipeline-keep 0.1 did not print a finite loss at step 20"; exit 1; }
if close "$(field "$dir/whole.jsonl" loss)" "$(field "$dir/keep.jsonl" loss)"; then
  echo "FAIL: --pipeline-keep 0.1 trained like the whole activations ($(field "$dir/keep.jsonl" loss))"; exit 1
fi
refused() {  # refused <expected text> <args...>
  local want=$1; shift
  if "$run" -n 2 -- "$cli" train --model mlp --steps 2 --threads 1 --parallel sync "$@" >"$dir/bad.out" 2>&1; then
    echo "FAIL: accepted: $*"; exit 1
  fi
  grep -q -- "$want" "$dir/bad.out" || { cat "$dir/bad.out"; echo "FAIL: '$*' without '$want'"; exit 1; }
}
refused "error: --plan fence chooses the layout itself: drop --pipeline" --plan fence --pipeline 2
refused "error: --fence-min-keep must be in (0, 1]" --plan fence --fence-min-keep 0
refused "error: --fence-compression and --fence-min-keep need --plan fence" --fence-compression 0
refused "error: --pipeline-keep expects shares in (0, 1]" --pipeline 2 --pipeline-keep 1.5
refused "error: creating the trainer: .*plan: pipeline keep gives 2 ratio(s); 2 stages have 1 cut(s)" \
  --pipeline 2 --pipeline-keep 0.5,0.5
echo "ok: --plan fence at 2 ranks trains like one process; --pipeline-keep 0.1 trains (loss" \
  "$(field "$dir/keep.jsonl" loss) vs $(field "$dir/whole.jsonl" loss) whole)"
