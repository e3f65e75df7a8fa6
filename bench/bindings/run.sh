#!/usr/bin/env bash
# Call overhead of the bindings: the same training step timed from C and from each language
# (see README.md), at a tiny size (pure overhead) and at a ~1 ms step, languages alternating
# within each of ROUNDS rounds so machine load hits them alike. Prints each language's best
# median per step and its ratio to C's.
#
#   build/bench/bindings/run.sh [ROUNDS]     (default 3)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rounds=${1:-3}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

langs=(c)
for l in python java rust; do
  if [ -x "$here/step_$l" ]; then langs+=("$l"); else echo "note: step_$l not built, skipped" >&2; fi
done

sizes=("16 8 2000 200" "512 128 200 20")
printf '%-8s %-14s %12s %12s %8s\n' language "hidden/batch" "median us" "mean us" "x C"
for size in "${sizes[@]}"; do
  read -r hidden batch steps warmup <<<"$size"
  declare -A best=() mean=()
  for ((r = 0; r < rounds; ++r)); do
    for l in "${langs[@]}"; do
      read -r _ med avg < <("$here/step_$l" --hidden "$hidden" --batch "$batch" --steps "$steps" --warmup "$warmup" |
        grep '^step_us')
      if [ -z "${best[$l]:-}" ] || awk -v a="$med" -v b="${best[$l]}" 'BEGIN{exit !(a < b)}'; then
        best[$l]=$med
        mean[$l]=$avg
      fi
    done
  done
  for l in "${langs[@]}"; do
    printf '%-8s %-14s %12s %12s %8s\n' "$l" "$hidden/$batch" "${best[$l]}" "${mean[$l]}" \
      "$(awk -v a="${best[$l]}" -v c="${best[c]}" 'BEGIN{printf "%.3f", a / c}')"
  done
  unset best mean
done
