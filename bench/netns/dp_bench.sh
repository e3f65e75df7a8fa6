#!/usr/bin/env bash
# dp_bench.sh: data-parallel training throughput under shaped links. For each rate and each mode
# (sync = DDP, localsgd, co2) runs dp_throughput under `netns.sh run N --rate R`, plus the
# no-communication anchor (`--mode none`: every rank trains alone, the same N processes on the
# same cores, run the same way over unshaped veths), and prints a markdown table per N: steps/s
# as a fraction of the anchor, hidden_fraction, and the blocked share (time the training thread
# waited on collectives / the timed window: this part is the network's, whatever the load). The
# machine's load drifts within minutes, so the anchor runs before each rate's group and after
# the last, and each row is divided by the mean of the two around it. It also prints the GPT's
# parameter count, the bytes all-reduced per round, the time a ring all-reduce of them needs at
# each rate (2(n-1)/n x bytes through each rank's link) and tau x the anchor's step time: CO2
# hides its all-reduce fully only when all-reduce time <= tau x step time.
#   dp_bench.sh BUILD_DIR [--ranks N[,N..]] [--tau T[,T..]] [--rates r1,r2,..] [--modes m1,m2,..]
#               [--steps S] [--warmup W] [--runs K] [--timeout S] [-- DP_THROUGHPUT_ARGS...]
# Defaults: ranks 2, tau 8, rates 10gbit,1gbit,100mbit,10mbit, modes sync,localsgd,co2, steps 32
# (timed, identical for every mode), warmup 8 (localsgd/co2: one round, tau steps, when tau > 8),
# runs 1 (K > 1: the run with the median steps/s is kept), timeout 300 s per run. Every --tau
# must divide --steps. Exits 0 with a message when network namespaces are not permitted here.
set -euo pipefail

BUILD="${1:?usage: dp_bench.sh BUILD_DIR [--ranks N] [--tau T] [--rates r1,..] [--modes m1,..] [--steps S] [--runs K] [--timeout S] [-- ARGS]}"
shift
RANKS="2"; TAUS="8"; RATES="10gbit,1gbit,100mbit,10mbit"; MODES="sync,localsgd,co2"
STEPS=32; WARMUP=8; RUNS=1; TIMEOUT=300
EXTRA=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ranks) RANKS="$2"; shift 2 ;;
    --tau) TAUS="$2"; shift 2 ;;
    --rates) RATES="$2"; shift 2 ;;
    --modes) MODES="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    --timeout) TIMEOUT="$2"; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) echo "dp_bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
HERE="$(cd "$(dirname "$0")" && pwd)"
DP="$BUILD/bench/netns/dp_throughput"
[[ -x "$DP" ]] || { echo "dp_bench.sh: $DP not built (ninja -C $BUILD dp_throughput)" >&2; exit 2; }
IFS=, read -r -a RANK_LIST <<<"$RANKS"
IFS=, read -r -a TAU_LIST <<<"$TAUS"
IFS=, read -r -a RATE_LIST <<<"$RATES"
IFS=, read -r -a MODE_LIST <<<"$MODES"
for t in "${TAU_LIST[@]}"; do
  ((t >= 1 && STEPS % t == 0)) || { echo "dp_bench.sh: --tau $t must divide --steps $STEPS" >&2; exit 2; }
done
CORES=$(nproc --all)
# Several ranks share few cores: one thread per rank, no spinning.
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1

# Skip cleanly where namespaces are not permitted (netns.sh exits 77 and says why).
probe_rc=0
probe_out=$("$HERE/netns.sh" run 1 --rate none --timeout 30 -- true 2>&1) || probe_rc=$?
if ((probe_rc == 77)); then
  echo "dp_bench.sh: SKIP: network namespaces are not available here:" >&2
  echo "$probe_out" | grep SKIP >&2 || true
  exit 0
elif ((probe_rc != 0)); then
  echo "$probe_out" >&2; echo "dp_bench.sh: netns.sh probe failed with code $probe_rc" >&2; exit 1
fi

# key=value field of a dp_throughput line.
field() { awk -v k="$2" '{for (i = 1; i <= NF; i++) { split($i, a, "="); if (a[1] == k) print a[2] }}' <<<"$1"; }

# One run; prints rank 0's dp_throughput line (the median of RUNS runs by steps/s).
run_mode() {
  local n="$1" rate="$2" mode="$3" tau="$4" warm="$WARMUP" k out rc lines=()
  if [[ "$mode" == localsgd || "$mode" == co2 ]] && ((tau > warm || warm % tau != 0)); then warm="$tau"; fi
  for ((k = 0; k < RUNS; ++k)); do
    rc=0
    out=$("$HERE/netns.sh" run "$n" --rate "$rate" --timeout "$TIMEOUT" -- \
      "$DP" --mode "$mode" --tau "$tau" --steps "$STEPS" --warmup "$warm" "${EXTRA[@]}" 2>&1) || rc=$?
    if ((rc != 0)); then
      echo "$out" >&2; echo "dp_bench.sh: $mode at $rate, $n ranks: exit code $rc" >&2; return 1
    fi
    lines+=("$(grep -o 'dp_throughput: .*' <<<"$out" | head -1)")
  done
  printf '%s\n' "${lines[@]}" | awk '{for (i = 1; i <= NF; i++) if ($i ~ /^steps_per_s=/) {split($i, a, "="); print a[2], $0}}' |
    sort -g | awk '{v[NR] = $0} END {s = v[int((NR + 1) / 2)]; sub(/^[^ ]+ /, "", s); print s}'
}

echo "dp_bench.sh: $(date -u '+%Y-%m-%d %H:%M UTC'), $CORES cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "dp_bench.sh: dp_throughput ${EXTRA[*]:-(default model)} --steps $STEPS, runs $RUNS, ranks $RANKS, tau $TAUS"
for n in "${RANK_LIST[@]}"; do
  # The machine is shared and its load drifts within minutes: the anchor runs before every
  # rate's group and once after the last; each row is divided by the mean of the anchors just
  # before and just after its group.
  ANCH=(); ROWS=(); ri=0
  for rate in "${RATE_LIST[@]}" END; do
    anchor=$(run_mode "$n" none none "${TAU_LIST[0]}") || { echo "dp_bench.sh: the anchor failed" >&2; exit 1; }
    echo "anchor: $anchor" >&2
    ANCH+=("$(field "$anchor" steps_per_s)")
    a_ms=$(field "$anchor" step_ms)
    params=$(field "$anchor" params)
    bytes=$(field "$anchor" allreduce_bytes)
    [[ "$rate" == END ]] && break
    # Ring all-reduce: each rank sends and receives 2(n-1)/n x bytes through its link.
    ar=$(awk -v b="$bytes" -v n="$n" -v r="$rate" 'BEGIN {
      match(r, /^[0-9.]+/); v = substr(r, 1, RLENGTH); u = tolower(substr(r, RLENGTH + 1))
      m["kbit"] = 1e3/8; m["mbit"] = 1e6/8; m["gbit"] = 1e9/8
      printf "%.3f", (n > 1 ? 2 * (n - 1) / n : 0) * b / (v * m[u]) }')
    for mode in "${MODE_LIST[@]}"; do
      taus=("${TAU_LIST[@]}")
      [[ "$mode" == sync ]] && taus=(1)
      for tau in "${taus[@]}"; do
        if ! line=$(run_mode "$n" "$rate" "$mode" "$tau") || [[ -z "$line" ]]; then
          ROWS+=("$ri|$rate|$mode|$tau|failed|-|-|-|-|$ar|-")
          continue
        fi
        echo "$line" >&2
        rounds=$(field "$line" rounds)
        comm=$(field "$line" comm_seconds)
        blocked=$(awk -v w="$(field "$line" wait_seconds)" -v s="$(field "$line" seconds)" 'BEGIN {printf "%.2f", w / s}')
        ROWS+=("$ri|$rate|$mode|$tau|$(field "$line" steps_per_s)|$(field "$line" hidden_fraction)|$blocked|$(awk -v c="$comm" -v r="$rounds" 'BEGIN {if (r > 0) printf "%.3f", c / r; else print "-"}')|$(field "$line" step_ms)|$ar|$(awk -v t="$tau" -v m="$a_ms" 'BEGIN {printf "%.3f", t * m / 1000}')")
      done
    done
    ri=$((ri + 1))
  done
  echo
  echo "### $n ranks: GPT $params parameters, $bytes bytes (f32) all-reduced per round"
  echo
  echo "Anchor (--mode none, no communication, $n ranks on the same cores), steps/s per rank, before each"
  echo "rate's group and after the last: ${ANCH[*]}."
  echo
  echo "| link | mode | tau | steps/s | vs none | hidden_fraction | blocked share | comm s/round | step ms | all-reduce s at link rate | tau x step s (anchor) |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
  for row in "${ROWS[@]}"; do
    IFS='|' read -r ri rate mode tau sps hid blk cpr sms ar tst <<<"$row"
    if [[ "$sps" == failed ]]; then
      printf "| %s | %s | %s | failed | | | | | | %s | |\n" "$rate" "$mode" "$tau" "$ar"
      continue
    fi
    base=$(awk -v x="${ANCH[ri]}" -v y="${ANCH[ri + 1]}" 'BEGIN {print (x + y) / 2}')
    printf "| %s | %s | %s | %.2f | %.2f | %.2f | %s | %s | %.0f | %s | %s |\n" "$rate" "$mode" "$tau" "$sps" \
      "$(awk -v a="$sps" -v b="$base" 'BEGIN {print a / b}')" "$hid" "$blk" "$cpr" "$sms" "$ar" "$tst"
  done
done
leftover=$(ip netns list 2>/dev/null | grep -c '^cohortns-' || true)
echo
echo "dp_bench.sh: done; cohortns-* namespaces left: $leftover"
