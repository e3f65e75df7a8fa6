#!/usr/bin/env bash
# cohort train --parallel co2 --optimizer sgd averages plainly (outer lr 1, no momentum): alone
# (a world of one, fp32 messages) that is plain training, step for step, where DiLoCo's Nesterov constants —
# the preset's, kept for AdamW — move the anchor away from the rank's own steps. And its defaults:
# rounds of 2 steps (of F with --outer-fragments F > 2; also where --tau auto starts) and 8-bit
# messages, where AdamW keeps tau 8 and 4 bits.
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

# The defaults, read from the start line ("co2 tau N") and the summary ("syncs of at most X KiB").
short=(train --model mlp --steps 8 --threads 1 --no-eval)
tau_of() { "$cli" "${short[@]}" "$@" 2>/dev/null | sed -n 's/.*, co2 tau \([0-9]*\),.*/\1/p'; }
kib_of() { "$cli" "${short[@]}" "$@" 2>/dev/null | sed -n 's/.*syncs of at most \([0-9.]*\) KiB.*/\1/p'; }
sgd=(--parallel co2 --optimizer sgd)
tau_sgd=$(tau_of "${sgd[@]}"); tau_frag=$(tau_of "${sgd[@]}" --outer-fragments 3)
tau_auto=$(tau_of "${sgd[@]}" --tau auto); tau_adamw=$(tau_of --parallel co2)
kib_sgd=$(kib_of "${sgd[@]}"); kib_fp32=$(kib_of "${sgd[@]}" --outer-bits 32); kib_adamw=$(kib_of --parallel co2)
echo "defaults: sgd tau $tau_sgd ($tau_frag with 3 fragments, auto from $tau_auto), adamw tau $tau_adamw;" \
  "a sync's KiB: sgd $kib_sgd, sgd fp32 $kib_fp32, adamw $kib_adamw"
[[ "$tau_sgd" == 2 && "$tau_frag" == 3 && "$tau_auto" == 2 && "$tau_adamw" == 8 ]] ||
  { echo "FAIL: co2's default tau (want 2, 3, 2 with sgd and 8 with adamw)"; exit 1; }
# 8 bits a value plus a scale a block: just over a quarter of fp32's bytes; 4 bits just over an eighth.
awk -v s="$kib_sgd" -v f="$kib_fp32" -v a="$kib_adamw" \
  'BEGIN {exit !(s > 0.25 * f && s < 0.27 * f && a > 0.125 * f && a < 0.14 * f)}' ||
  { echo "FAIL: co2's default message bits (want 8 with sgd, 4 with adamw)"; exit 1; }
