#!/usr/bin/env bash
# The planner against measurements (bench_planner): at each world size, over shared memory
# (cohort-run, UCX's shared-memory transports) and over links shaped in network namespaces
# (bench/netns/netns.sh run: one namespace per rank, tc htb on each veth, UCX over tcp). Rank 0's
# table per run: every plan that fits, predicted and measured, the median error and the top-1 check.
#   bench/planner/run.sh BUILD_DIR [--ranks 2,4] [--links shm,1gbit,100mbit] [--timeout S] [-- bench_planner args]
# Ranks run 1 thread each; more ranks than cores are oversubscribed (the output says so).
set -euo pipefail
BUILD="${1:?usage: run.sh BUILD_DIR [--ranks 2,4] [--links shm,1gbit,100mbit] [--timeout S] [-- ARGS]}"
shift
RANKS="2,4"; LINKS="shm,1gbit,100mbit"; TIMEOUT=900; ARGS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ranks) RANKS="$2"; shift 2 ;;
    --links) LINKS="$2"; shift 2 ;;
    --timeout) TIMEOUT="$2"; shift 2 ;;
    --) shift; ARGS=("$@"); break ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
HERE="$(cd "$(dirname "$0")" && pwd)"
BUILD="$(cd "$BUILD" && pwd)"
RUNNER="$BUILD/transport/launcher/cohort-run"
BENCH="$BUILD/bench/planner/bench_planner"
for f in "$RUNNER" "$BENCH"; do [[ -x "$f" ]] || { echo "run.sh: $f not built" >&2; exit 2; }; done
CORES=$(nproc)
# A fresh workload cache per invocation: timings calibrated under another load would skew the
# predictions (the estimator's cache is meant for one machine's steady state).
COHORT_CACHE_DIR="$(mktemp -d)"
export COHORT_CACHE_DIR
trap 'rm -rf "$COHORT_CACHE_DIR"' EXIT
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive OPENBLAS_NUM_THREADS=1
IFS=, read -r -a RANK_LIST <<<"$RANKS"
IFS=, read -r -a LINK_LIST <<<"$LINKS"
for n in "${RANK_LIST[@]}"; do
  for link in "${LINK_LIST[@]}"; do
    echo
    echo "######## $n ranks, $link ($(date -u +%H:%MZ), $CORES cores$( ((n > CORES)) && echo ", oversubscribed" || true), load $(cut -d' ' -f1 /proc/loadavg)) ########"
    if [[ "$link" == shm ]]; then
      UCX_TLS=self,sm timeout "$TIMEOUT" "$RUNNER" -n "$n" -- "$BENCH" "${ARGS[@]}" 2>&1 |
        sed -n -e '/^\[rank 0\] /{s///;p;d}' -e '/[Ee]rror\|[Ff]ail\|bench_planner:\|cohort-run/p'
    else
      "$HERE/../netns/netns.sh" run "$n" --rate "$link" --timeout "$TIMEOUT" -- "$BENCH" "${ARGS[@]}" 2>&1 |
        sed -n -e '/^\[rank 0\] /{s///;p;d}' -e '/[Ee]rror\|[Ff]ail\|bench_planner:\|SKIP/p'
    fi
  done
done
