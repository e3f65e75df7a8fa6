#!/usr/bin/env bash
# cohort train --pipeline under cohort-run (pipeline parallelism through the C ABI's plan fields):
# the mlp cut into 2 stages over 2 ranks with 4 micro-batches trains like one process on the same
# batches — the same evaluations as printed, the last step's loss and gradient norm within 1e-5
# relative (fp32 sums in another order) — under 1F1B and GPipe alike; rank 0 prints the stage
# cuts at the start and the bubble at the end; composed with a tensor grid (--grid 1x2x1) and
# with data parallelism at 4 ranks (the data shards are the replicas: rank / (stages x X*Y*Z));
# the gpt at cuts named by --pipeline-cuts, also interleaved (2 chunks per rank); bad values fail on
# one line naming the flag or field.
#   parallel_pipeline.sh COHORT_RUN COHORT_CLI
set -euo pipefail
run=$1 cli=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(train --model mlp --steps 20 --eval-every 20 --eval-examples 500 --log-every 10 --threads 1)
pipe=(--parallel sync --pipeline 2 --micro-batches 4)
go() {  # go <name> <ranks> <args...>: runs, keeping <name>.out and <name>.jsonl
  local name=$1 n=$2; shift 2
  "$run" -n "$n" -- "$cli" "$@" --metrics "$dir/$name.jsonl" >"$dir/$name.out" 2>&1 ||
    { cat "$dir/$name.out"; echo "FAIL: $name ($*) exited non-zero"; exit 1; }
}
"$cli" "${common[@]}" --metrics "$dir/one.jsonl" >"$dir/one.out" 2>&1 ||
  { cat "$dir/one.out"; echo "FAIL: the single-process run exited non-zero"; exit 1; }
go 1f1b 2 "${common[@]}" "${pipe[@]}"
go gpipe 2 "${common[@]}" "${pipe[@]}" --schedule gpipe
evals() { grep -o 'eval step [0-9]*: loss [0-9.]* | accuracy [0-9.]*%' "$1"; }
field() { grep -o "\"$2\":[0-9.e+-]*" "$1" | tail -1 | cut -d: -f2; }
same_run() {  # same_run <name a> <name b> <fields>: the same evaluations, the fields within 1e-5
  [ "$(evals "$dir/$1.out" | wc -l)" -eq 1 ] || { cat "$dir/$1.out"; echo "FAIL: $1 did not evaluate once"; exit 1; }
  if [ "$(evals "$dir/$1.out")" != "$(evals "$dir/$2.out")" ]; then
    paste <(evals "$dir/$1.out") <(evals "$dir/$2.out"); echo "FAIL: $2 evaluates differently from $1"; exit 1
  fi
  for f in $3; do
    a=$(field "$dir/$1.jsonl" $f) b=$(field "$dir/$2.jsonl" $f)
    awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 1e-5 * a) }' ||
      { echo "FAIL: $f differs: $1 $a, $2 $b"; exit 1; }
  done
}
same_run one 1f1b "loss grad_norm"
same_run one gpipe "loss grad_norm"
grep -q "sync pipeline 2 (1f1b) micro-batches 4" "$dir/1f1b.out" &&
  grep -q "sync pipeline 2 (gpipe) micro-batches 4" "$dir/gpipe.out" ||
  { cat "$dir/1f1b.out" "$dir/gpipe.out"; echo "FAIL: the banner does not name the pipeline"; exit 1; }
# Rank 0 prints the two stages it cut, once; the loss is printed and finite; the summary reports
# the bubble (and the metrics its fraction, in [0, 1)).
for s in 1f1b gpipe; do
  [ "$(grep -c '^\[rank 0\] stage [01]: nodes ' "$dir/$s.out")" -eq 2 ] && ! grep -q '^\[rank 1\] stage ' "$dir/$s.out" ||
    { cat "$dir/$s.out"; echo "FAIL: $s: rank 0 did not print the two stage cuts (alone)"; exit 1; }
  grep -q '^\[rank 0\] step 20/20 | epoch [0-9.]* | loss [0-9]\.[0-9]*' "$dir/$s.out" ||
    { cat "$dir/$s.out"; echo "FAIL: $s: no finite loss printed at step 20"; exit 1; }
  grep -q "pipeline: 2 stages, 4 micro-batches ($s) | bubble [0-9]*% of rank 0's last step" "$dir/$s.out" ||
    { cat "$dir/$s.out"; echo "FAIL: $s: the summary does not report the bubble"; exit 1; }
  b=$(field "$dir/$s.jsonl" pipeline_bubble_fraction)
  awk -v b="$b" 'BEGIN { exit !(b != "" && b >= 0 && b < 1) }' || { echo "FAIL: $s: bubble fraction '$b'"; exit 1; }
done
# 4 ranks: a pipeline of 2 stages over a 1x2x1 tensor grid (one replica) trains like one process;
# 2 data replicas of 2 stages like DDP over 2 ranks (each replica reads its own shard).
go pt 4 "${common[@]}" "${pipe[@]}" --grid 1x2x1
same_run one pt "loss grad_norm"
grep -q "sync tensor 2 pipeline 2 (1f1b) micro-batches 4" "$dir/pt.out" || { cat "$dir/pt.out"; echo "FAIL: the banner"; exit 1; }
go ddp 2 "${common[@]}" --parallel sync
go dp 4 "${common[@]}" "${pipe[@]}"
same_run ddp dp grad_norm  # the loss: DDP's rank 0 logs its own rows', as does the first replica
grep -q "(937 per epoch)" "$dir/dp.out" || { cat "$dir/dp.out"; echo "FAIL: 2 replicas should read 2 shards"; exit 1; }
# The gpt (Brown) at a named cut: stage 1 starts at h.1.ln_1, the loss is finite; and under the
# interleaved schedule, 2 chunks per rank at 3 named cuts.
gpt=(train --model gpt --layers 2 --width 64 --heads 4 --context 64 --batch 4 --steps 3 --threads 1 --no-eval
     --parallel sync --pipeline 2 --micro-batches 2)
go gpt 2 "${gpt[@]}" --pipeline-cuts h.1.ln_1
go gpt_interleaved 2 "${gpt[@]}" --schedule interleaved --pipeline-chunks 2 --pipeline-cuts h.0.ln_2,h.1.ln_1,h.1.ln_2
grep -q "^\[rank 0\] stage 1: nodes [0-9]*-[0-9]* 'h.1.ln_1' .. " "$dir/gpt.out" &&
  grep -q "^\[rank 0\] stage 3: nodes [0-9]*-[0-9]* 'h.1.ln_2' .. 'loss'" "$dir/gpt_interleaved.out" ||
  { cat "$dir/gpt.out" "$dir/gpt_interleaved.out"; echo "FAIL: the gpt's stages are not the named cuts"; exit 1; }
for s in gpt gpt_interleaved; do
  grep -q '^\[rank 0\] step 3/3 | epoch [0-9.]* | loss [0-9]\.[0-9]*' "$dir/$s.out" ||
    { cat "$dir/$s.out"; echo "FAIL: $s did not print a finite loss at step 3"; exit 1; }
done
refused() {  # refused <expected text> <args...>
  local want=$1; shift
  if "$run" -n 2 -- "$cli" train --steps 2 --threads 1 --parallel sync "$@" >"$dir/bad.out" 2>&1; then
    echo "FAIL: accepted: $*"; exit 1
  fi
  grep -q -- "$want" "$dir/bad.out" || { cat "$dir/bad.out"; echo "FAIL: '$*' without '$want'"; exit 1; }
}
refused "error: --micro-batches (3) must divide --batch (32)" --model mlp --pipeline 2 --micro-batches 3
refused "error: creating the trainer: .*pipeline_cuts names 'nonsense', which is no node of the model" \
  --model mlp --pipeline 2 --pipeline-cuts nonsense
refused "error: creating the trainer: .*pipeline_stages 3 x the tensor grid tensor_x 1 x tensor_y 1 x tensor_z 1 = 3 ranks does not divide the world size 2" \
  --model mlp --pipeline 3
refused "error: --pipeline-chunks 2 needs --schedule interleaved" --model mlp --pipeline 2 --pipeline-chunks 2
echo "ok: --pipeline 2 (1f1b and gpipe, with --grid 1x2x1, with 2 replicas) trains like one process / DDP; bubble" \
  "1f1b $(field "$dir/1f1b.jsonl" pipeline_bubble_fraction), gpipe $(field "$dir/gpipe.jsonl" pipeline_bubble_fraction)"
