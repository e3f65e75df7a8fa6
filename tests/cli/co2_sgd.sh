#!/usr/bin/env bash
# cohort train --parallel co2 --optimizer sgd averages plainly (outer lr 1, no momentum): alone
# (a world of one, fp32 messages) that is plain training, step for step, where DiLoCo's Nesterov constants —
# the preset's, kept for AdamW — move the anchor away from the rank's own steps.
#   co2_sgd.sh COHORT_CLI
set -euo pipefail
cli="$1"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(train --model mlp --steps 12 --optimizer sgd --lr 0.05 --threads 1 --quiet --no-eval)
"$cli" "${common[@]}" --loss-log "$dir/plain" >/dev/null
"$cli" "${common[@]}" --parallel co2 --tau 4 --outer-bits 32 --loss-log "$dir/co2" >/dev/null
"$cli" "${common[@]}" --parallel co2 --tau 4 --outer-bits 32 --outer-lr 0.7 --outer-momentum 0.9 --nesterov 1 \
  --loss-log "$dir/nesterov" >/dev/null
# Largest relative difference of the per-step losses from plain training's.
diff_of() {
  paste "$dir/plain" "$1" | awk '{d = $2 - $4; if (d < 0) d = -d; d /= ($2 > 0 ? $2 : 1); if (d > m) m = d}
    END {printf "%.3g\n", m}'
}
co2=$(diff_of "$dir/co2"); nesterov=$(diff_of "$dir/nesterov")
echo "co2 with sgd: loss differs from plain training by at most $co2 (relative); with DiLoCo's constants $nesterov"
awk -v a="$co2" -v b="$nesterov" 'BEGIN {exit !(a < 1e-5 && b > 1e-3)}' ||
  { echo "FAIL: co2 with sgd is not plain averaging"; exit 1; }
