#!/usr/bin/env bash
# cohort train --plan auto under cohort-run (cohort_plan_choose through the C ABI): the mlp at 2
# ranks lets the planner choose the layout for the global batch --batch x 2, rank 0 alone prints
# the report and the choice once, and the chosen layout trains a few steps to a finite loss (also
# under a --memory-limit that only a model split over the ranks fits); the
# layout flags with --plan auto are refused naming them; a --memory-limit nothing fits fails naming
# memory_limit_bytes.
#   parallel_auto.sh COHORT_RUN COHORT_CLI
set -euo pipefail
run=$1 cli=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(train --model mlp --hidden 64 --batch 16 --steps 6 --log-every 3 --threads 1 --no-eval)
"$run" -n 2 -- "$cli" "${common[@]}" --parallel sync --plan auto --metrics "$dir/auto.jsonl" >"$dir/auto.out" 2>&1 ||
  { cat "$dir/auto.out"; echo "FAIL: --plan auto at 2 ranks exited non-zero"; exit 1; }
out=$dir/auto.out
# The report (the probe, the ranked layouts, the choice) once, from rank 0 only.
[ "$(grep -c '^\[rank 0\] auto plan: chose ' "$out")" -eq 1 ] && ! grep -q '^\[rank 1\] auto plan' "$out" ||
  { cat "$out"; echo "FAIL: rank 0 did not print the choice once (alone)"; exit 1; }
grep -q '^\[rank 0\] auto plan: communication ' "$out" ||
  { cat "$out"; echo "FAIL: the report lacks the probe's line"; exit 1; }
# The header names the chosen layout, once.
[ "$(grep -c 'sync plan auto: data [12]' "$out")" -eq 1 ] ||
  { cat "$out"; echo "FAIL: the banner does not name the chosen layout once"; exit 1; }
# Trained to a finite loss at step 6.
grep -q '^\[rank 0\] step 6/6 | epoch [0-9.]* | loss [0-9]\.[0-9]*' "$out" ||
  { cat "$out"; echo "FAIL: no finite loss printed at step 6"; exit 1; }
loss=$(grep -o '"loss":[0-9.e+-]*' "$dir/auto.jsonl" | tail -1 | cut -d: -f2)
awk -v l="$loss" 'BEGIN { exit !(l != "" && l > 0 && l < 100) }' || { echo "FAIL: metrics loss '$loss'"; exit 1; }
# The global batch is --batch x world: the job's samples per step are 32 whatever the layout.
grep -q 'batch [0-9]* x 2 rank(s)' "$out" || { cat "$out"; echo "FAIL: the banner's batch"; exit 1; }
# 0.6 MiB a rank: the replicated model (~0.8 MiB of parameters, gradients and AdamW state) does
# not fit, so the planner splits or shards it (a tensor grid or a pipeline, whose ranks share
# rows, or ZeRO; which one depends on the links measured), and that trains.
"$run" -n 2 -- "$cli" "${common[@]}" --parallel sync --plan auto --memory-limit 0.6 >"$dir/split.out" 2>&1 ||
  { cat "$dir/split.out"; echo "FAIL: --plan auto --memory-limit 0.6 exited non-zero"; exit 1; }
chose=$(grep '^\[rank 0\] auto plan: chose ' "$dir/split.out" || true)
case "$chose" in
  *"data 1 x "* | *"zero "[123]*) ;;
  *) cat "$dir/split.out"; echo "FAIL: under 0.6 MiB the plain replicas were chosen: $chose"; exit 1 ;;
esac
grep -q 'sync plan auto: data [12] \(tensor\|grid\|pipeline\|zero\)' "$dir/split.out" &&
  grep -q '^\[rank 0\] step 6/6 | epoch [0-9.]* | loss [0-9]\.[0-9]*' "$dir/split.out" ||
  { cat "$dir/split.out"; echo "FAIL: under 0.6 MiB the chosen layout was not named or did not train"; exit 1; }

bad() {  # bad <name> <expected text> <args...>: fails (one rank, no launcher), the message naming it
  local name=$1 expect=$2; shift 2
  if "$cli" "$@" >"$dir/$name.out" 2>&1; then cat "$dir/$name.out"; echo "FAIL: $name succeeded"; exit 1; fi
  grep -qF -- "$expect" "$dir/$name.out" || { cat "$dir/$name.out"; echo "FAIL: $name: expected '$expect'"; exit 1; }
}
bad grid "--plan auto chooses the layout itself: drop --tensor / --grid" "${common[@]}" --parallel sync --plan auto \
  --grid 1x2x1
bad layout "drop --pipeline, --micro-batches, --zero" "${common[@]}" --parallel sync --plan auto --pipeline 2 \
  --micro-batches 2 --zero 1
bad no_parallel "--plan auto needs --parallel" "${common[@]}" --plan auto
bad plan_value "--plan must be auto" "${common[@]}" --parallel sync --plan manual
bad trials_without_auto "--auto-trials needs --plan auto" "${common[@]}" --parallel sync --auto-trials 2
bad trials_range "--auto-trials must be in" "${common[@]}" --parallel sync --plan auto --auto-trials 65
# Nothing fits in a kilobyte: at 2 ranks, every rank fails naming memory.
if "$run" -n 2 -- "$cli" "${common[@]}" --parallel sync --plan auto --memory-limit 0.001 >"$dir/mem.out" 2>&1; then
  cat "$dir/mem.out"; echo "FAIL: --memory-limit 0.001 succeeded"; exit 1
fi
grep -q 'no layout of the model fits 2 ranks with .* (memory_limit_bytes)' "$dir/mem.out" ||
  { cat "$dir/mem.out"; echo "FAIL: --memory-limit 0.001 does not name memory_limit_bytes"; exit 1; }
# A layout given by the flags over the limit is refused before training, naming it too.
bad forced_memory "memory_limit_bytes" "${common[@]}" --parallel sync --memory-limit 0.001
echo "parallel_auto: ok"
