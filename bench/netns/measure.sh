#!/usr/bin/env bash
# measure.sh: fills bench/netns/README.md's table. For each rate, runs netns_bw under netns.sh at
# 2 and 4 ranks (K runs each: median and range) and prints a markdown row: p2p MB/s (rank 0 -> 1)
# and 4 MiB all-reduce bus bandwidth at 2 and 4 ranks; "loopback" rows run under cohort-run
# (127.0.0.1, UCX_TLS=tcp, no namespaces) and "none" under netns.sh with unshaped veths.
#   measure.sh BUILD_DIR [--runs K] [--rates 10gbit,1gbit,100mbit,10mbit,none,loopback]
# With --geo INTER1,INTER2,.. it fills the two-site table instead: 4 ranks, sites {0,1} and {2,3}
# (netns.sh --sites 0,1/2,3 --intra INTRA --inter INTERk), p2p MB/s inside a site (0->1, 2->3;
# 64 MiB) and across (0->2, 1->3, 3->0; about 1 s of the inter rate, 1-64 MiB), median of K runs.
#   measure.sh BUILD_DIR --geo 8mbit,100mbit,1gbit [--intra 10gbit] [--runs K]
set -euo pipefail

BUILD="${1:?usage: measure.sh BUILD_DIR [--runs K] [--rates r1,r2,..]}"
shift
RUNS=3
RATES="loopback,none,10gbit,1gbit,100mbit,10mbit"
GEO=""
INTRA=10gbit
while [[ $# -gt 0 ]]; do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --rates) RATES="$2"; shift 2 ;;
    --geo) GEO="$2"; shift 2 ;;
    --intra) INTRA="$2"; shift 2 ;;
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

# One two-site run at INTER; prints "MB/s(0->1) MB/s(2->3) MB/s(0->2) MB/s(1->3) MB/s(3->0)".
geo_once() {
  local inter="$1" bytes out rc=0
  bytes=$(awk -v b="$(rate_bytes "$inter")" 'BEGIN { m = 1048576; x = int(b / m + 0.5) * m
                                                     print (x < m ? m : (x > 64 * m ? 64 * m : x)) }')
  out=$("$HERE/netns.sh" run 4 --sites 0,1/2,3 --intra "$INTRA" --inter "$inter" --timeout 300 -- sh -c \
        "'$BW' --pairs 0-1,2-3 --bytes 67108864 && '$BW' --pairs 0-2,1-3,3-0 --bytes $bytes" 2>&1) || rc=$?
  if ((rc != 0)); then echo "$out" >&2; echo "measure.sh: geo $inter: exit code $rc" >&2; return 1; fi
  echo "$out" | awk '/\] p2p [0-9]+->[0-9]+: / { for (i = 1; i <= NF; i++) if ($i ~ /^MB\/s=/) { split($i, a, "="); v[$4] = a[2] } }
                     END { print v["0->1:"], v["2->3:"], v["0->2:"], v["1->3:"], v["3->0:"] }'
}

# Bytes per second of a tc rate (as netns.sh reads it).
rate_bytes() {
  awk -v r="$1" 'BEGIN { match(r, /^[0-9]+(\.[0-9]+)?/); v = substr(r, 1, RLENGTH); u = tolower(substr(r, RLENGTH + 1))
    m["kbit"] = 1e3/8; m["mbit"] = 1e6/8; m["gbit"] = 1e9/8; printf "%.0f\n", v * m[u] }'
}

if [[ -n "$GEO" ]]; then
  echo "| inter (intra $INTRA) | 0->1 | 2->3 | 0->2 | 1->3 | 3->0 | intra / configured | inter / configured |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
  IFS=, read -r -a LIST <<<"$GEO"
  for inter in "${LIST[@]}"; do
    cols=("" "" "" "" "")
    for ((k = 0; k < RUNS; ++k)); do
      read -r -a v < <(geo_once "$inter")
      for c in 0 1 2 3 4; do cols[c]+="${v[c]} "; done
    done
    med=()
    for c in 0 1 2 3 4; do med[c]=$(printf '%s\n' ${cols[c]} | median); done
    # Shares of the configured rate: the lower intra median, the lowest inter median.
    share() { awk -v a="$1" -v b="$2" -v r="$(rate_bytes "$3")" 'BEGIN { m = (a < b ? a : b); printf "%.0f %%", 100 * m * 1e6 / r }'; }
    lo_inter=$(printf '%s\n' "${med[2]%% *}" "${med[3]%% *}" "${med[4]%% *}" | sort -g | head -1)
    printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n" "$inter" "${med[@]}" \
      "$(share "${med[0]%% *}" "${med[1]%% *}" "$INTRA")" "$(share "$lo_inter" "$lo_inter" "$inter")"
  done
  exit 0
fi

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
