#!/usr/bin/env bash
# co2 against synchronous DDP and blocking DiLoCo at the same number of samples/tokens: 4 ranks
# under cohort-run, the CNN on Fashion-MNIST and the GPT on Brown. Prints the final smoothed
# training loss of each run and its ratio to sync. co2 runs with its preset (DiLoCo's outer
# optimizer, the average merged 1 step into the next round), merged later (overlap 4 and 8 =
# tau: on the next round end), with plain averaging (outer lr 1, no momentum), with the
# staleness penalty on the carried-over steps, and at tau 2; DiLoCo and local SGD at tau 8 are
# the blocking references.
# --long runs CNN 3 epochs (1404 steps) and GPT 1000 steps, sync, DiLoCo and co2 at tau 8 only;
# --full the CLI's default lengths (CNN 3 epochs, GPT 2500 steps), the same three (~2 h here).
#
#   bench/convergence/run.sh [BUILD_DIR] [--quick|--long|--full]
set -euo pipefail
build=${1:-build}
quick=${2:-}
run=$build/transport/launcher/cohort-run
cli=$build/cli/cohort
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1

cnn_steps=468; gpt_steps=300
variants=("localsgd --tau 8" "diloco --tau 8" "co2 --tau 8" "co2 --tau 8 --overlap 4" "co2 --tau 8 --overlap 8"
          "co2 --tau 8 --outer-lr 1 --outer-momentum 0 --nesterov 0" "co2 --tau 8 --staleness-penalty 1"
          "co2 --tau 2")
[ "$quick" = "--quick" ] && cnn_steps=60 && gpt_steps=40
[ "$quick" = "--long" ] && cnn_steps=1404 && gpt_steps=1000 && variants=("diloco --tau 8" "co2 --tau 8")
[ "$quick" = "--full" ] && cnn_steps=1404 && gpt_steps=2500 && variants=("diloco --tau 8" "co2 --tau 8")

train() {  # name model steps extra...
  local name=$1 model=$2 steps=$3
  shift 3
  timeout 1800 "$run" -n 4 -- "$cli" train --model "$model" --steps "$steps" --threads 1 --quiet --no-eval \
    --metrics "$out/$name.jsonl" "$@" >/dev/null
  # The last metrics line's smoothed loss.
  tail -n 1 "$out/$name.jsonl" | sed -n 's/.*"loss_smoothed":\([-0-9.e+]*\).*/\1/p'
}

printf '%-6s %-34s %10s %10s\n' model run "final loss" "vs sync"
for model in cnn gpt; do
  steps=$cnn_steps
  [ "$model" = gpt ] && steps=$gpt_steps
  sync=$(train "$model-sync" "$model" "$steps" --parallel sync)
  printf '%-6s %-34s %10.4f %10s\n' "$model" "sync (DDP)" "$sync" "1.000"
  for variant in "${variants[@]}"; do
    # shellcheck disable=SC2086
    loss=$(train "$model-${variant// /_}" "$model" "$steps" --parallel $variant)
    printf '%-6s %-34s %10.4f %10.3f\n' "$model" "${variant//--/}" "$loss" "$(echo "$loss / $sync" | bc -l)"
  done
done
