#!/usr/bin/env bash
# measure.sh: fills bench/netns/README.md's table. For each rate, runs netns_bw under netns.sh at
# 2 and 4 ranks (K runs each: median and range) and prints a markdown row: p2p MB/s (rank 0 -> 1)
# and 4 MiB all-reduce bus bandwidth at 2 and 4 ranks; "loopback" rows run under cohort-run
# (127.0.0.1, UCX_TLS=tcp, no namespaces) and "none" under netns.sh with unshaped veths.
#   measure.sh BUILD_DIR [--runs K] [--rates 10gbit,1gbit,100mbit,10mbit,none,loopback]
set -euo pipefail

BUILD="${1:?usage: measure.sh BUILD_DIR [--runs K] [--rates r1,r2,..]}"
shift
RUNS=3
RATES="loopback,none,10gbit,1gbit,100mbit,10mbit"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --rates) RATES="$2"; shift 2 ;;
    *) echo "measure.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
HERE="$(cd "$(dirname "$0")" && pwd)"
BW="$BUILD/bench/netns/netns_bw"
RUN="$BUILD/transport/launcher/cohort-run"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

# One run of n ranks at a rate; prints "p2p_MBps busbw_MBps".
once() {
  local rate="$1" n="$2" out rc=0
  if [[ "$rate" == loopback ]]; then
    out=$(UCX_TLS=tcp timeout 300 "$RUN" -n "$n" -- "$BW" 2>&1) || rc=$?
  else
    out=$("$HERE/netns.sh" run "$n" --rate "$rate" --timeout 300 -- "$BW" 2>&1) || rc=$?
  fi
  if ((rc != 0)); then echo "$out" >&2; echo "measure.sh: $rate, $n ranks: exit code $rc" >&2; return 1; fi
  echo "$out" | awk '/p2p: /{for(i=1;i<=NF;i++) if ($i ~ /^MB\/s=/) {split($i,a,"="); p=a[2]}}
                     /all_reduce: /{for(i=1;i<=NF;i++) if ($i ~ /^busbw_MB\/s=/) {split($i,a,"="); b=a[2]}}
                     END {if (p == "" || b == "") exit 1; print p, b}' || { echo "$out" >&2; return 1; }
}

# "median (min-max)" of numbers on stdin.
median() { sort -g | awk '{v[NR]=$1} END {m=v[int((NR+1)/2)]; if (NR > 1) print m " (" v[1] "-" v[NR] ")"; else print m}'; }

echo "| link | p2p MB/s | all-reduce 4 MiB busbw, 2 ranks (MB/s) | all-reduce 4 MiB busbw, 4 ranks (MB/s) |"
echo "| --- | --- | --- | --- |"
IFS=, read -r -a LIST <<<"$RATES"
for rate in "${LIST[@]}"; do
  p2p=(); ar2=(); ar4=()
  for ((k = 0; k < RUNS; ++k)); do
    read -r p b < <(once "$rate" 2); p2p+=("$p"); ar2+=("$b")
    read -r p b < <(once "$rate" 4); p2p+=("$p"); ar4+=("$b")
  done
  printf "| %s | %s | %s | %s |\n" "$rate" "$(printf '%s\n' "${p2p[@]}" | median)" \
    "$(printf '%s\n' "${ar2[@]}" | median)" "$(printf '%s\n' "${ar4[@]}" | median)"
done
