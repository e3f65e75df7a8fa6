#!/usr/bin/env bash
# The tensor-parallel GPT step at 4 ranks (bench_tensor, under cohort-run) over shared memory and,
# with --tcp, over UCX's tcp too: one table per transport, printed by rank 0.
#   bench/tensor/run.sh BUILD_DIR [--tcp] [--ranks 4] [-- bench_tensor args: --grids, --batch, --steps, ...]
# Every rank runs 1 thread (OMP_NUM_THREADS=1, no spinning). On a box with fewer cores than ranks
# the ranks are oversubscribed: bench_tensor says so in its output, and its figures then include
# each rank's wait for a core.
set -euo pipefail
BUILD="${1:?usage: run.sh BUILD_DIR [--tcp] [--ranks N] [-- bench_tensor args]}"
shift
TRANSPORTS=(shm); RANKS=4; ARGS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --tcp) TRANSPORTS+=(tcp); shift ;;
    --ranks) RANKS="$2"; shift 2 ;;
    --) shift; ARGS=("$@"); break ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
BUILD="$(cd "$BUILD" && pwd)"
RUNNER="$BUILD/transport/launcher/cohort-run"
BENCH="$BUILD/bench/tensor/bench_tensor"
for f in "$RUNNER" "$BENCH"; do [[ -x "$f" ]] || { echo "run.sh: $f not built" >&2; exit 2; }; done
CORES=$(nproc)  # before OMP_NUM_THREADS, which GNU nproc honours
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive OPENBLAS_NUM_THREADS=1
echo "bench/tensor: $(date -u +%Y-%m-%dT%H:%MZ), $CORES cores, $RANKS ranks$([[ $RANKS -gt $CORES ]] && echo " (oversubscribed: more ranks than cores)"), load average $(cut -d' ' -f1-3 /proc/loadavg)"
for t in "${TRANSPORTS[@]}"; do
  tls="self,sm"; [[ "$t" == tcp ]] && tls="tcp"
  echo
  echo "######## $t (UCX_TLS=$tls) ########"
  UCX_TLS="$tls" "$RUNNER" -n "$RANKS" -- "$BENCH" "${ARGS[@]}" 2>&1 |
    sed -n -e '/^\[rank 0\] /{s///;p;d}' -e '/[Ee]rror\|[Ff]ail\|bench_tensor:\|cohort-run/p'
done
