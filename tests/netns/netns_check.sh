#!/usr/bin/env bash
# The netns tests' driver (ctest label netns): runs bench/netns/netns.sh with a tag of its own,
# checks what the ranks printed and the exit code, and checks that no namespace of that tag is
# left. Exits 77 (ctest SKIP_RETURN_CODE) when netns.sh skips because namespaces are not allowed.
#   netns_check.sh NETNS_SH NETNS_BW bandwidth N RATES EXPECT_P2P_MBIT EXPECT_ALLREDUCE_MBIT [BYTES]
#   netns_check.sh NETNS_SH NETNS_BW killed N RATE
#   netns_check.sh NETNS_SH NETNS_BW timeout
#   netns_check.sh NETNS_SH NETNS_BW links N RATE LINKS SLOW_PAIRS SLOW_MBIT FAST_PAIRS
#   netns_check.sh NETNS_SH NETNS_BW matrix
set -euo pipefail

NETNS_SH="$1" NETNS_BW="$2" MODE="$3"
shift 3
TAG="p$$"   # netns.sh treats p<pid> as owned by pid: removed as stale once we are gone
LOG=$(mktemp /tmp/cohort-netns-check.XXXXXX)
RUNNER=""
UP=0        # matrix: a setup made with `up` that finish() takes down

fail() { echo "netns_check: FAILED: $*" >&2; exit 1; }
finish() {
  local rc=$? k
  trap - EXIT INT TERM
  # A runner still going (we were interrupted or timed out) cleans up on TERM; wait, bounded.
  if [[ -n "$RUNNER" ]] && kill -0 "$RUNNER" 2>/dev/null; then
    kill -TERM "$RUNNER" 2>/dev/null || true
    for ((k = 0; k < 100; ++k)); do kill -0 "$RUNNER" 2>/dev/null || break; sleep 0.1; done
  fi
  ((UP == 0)) || "$NETNS_SH" down --name "$TAG" || true
  rm -f "$LOG"
  exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Runs netns.sh in the background with our tag, output to $LOG; sets RUNNER.
start() {
  "$NETNS_SH" run "$@" > "$LOG" 2>&1 &
  RUNNER=$!
}

# Waits (bounded) for the runner; prints its output; sets RC. 77 passes straight through.
finish_run() {
  RC=0
  wait "$RUNNER" || RC=$?
  RUNNER=""
  cat "$LOG"
  if ((RC == 77)); then echo "netns_check: skipped (netns.sh cannot make namespaces here)"; exit 77; fi
}

check_cleanup() {
  local left
  left=$(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^cohortns-${TAG}-" || true)
  [[ -z "$left" ]] || fail "namespaces left behind: $left"
  echo "netns_check: no namespace of tag $TAG left"
}

case "$MODE" in
  bandwidth)
    N="$1" RATES="$2" P2P="$3" AR="$4" BYTES="${5:-4194304}"
    start "$N" --rates "$RATES" --name "$TAG" --timeout 50 -- \
      "$NETNS_BW" --bytes "$BYTES" --expect-mbit "$P2P" --expect-allreduce-mbit "$AR"
    finish_run
    ((RC == 0)) || fail "netns.sh run exited with $RC"
    grep -q "check p2p: .*: ok" "$LOG" || fail "no passing p2p check"
    grep -q "check all_reduce busbw: .*: ok" "$LOG" || fail "no passing all-reduce check"
    check_cleanup ;;
  killed)
    N="$1" RATE="$2" VICTIM=$(($1 - 1))
    start "$N" --rate "$RATE" --name "$TAG" --timeout 50 --linger 25 -- \
      "$NETNS_BW" --mode failure --repeats 20 --timeout-ms 15000
    # Kill the victim mid-all-reduce: 1.5 s after it started its first one (bounded wait).
    for ((k = 0; k < 300; ++k)); do
      grep -q "^\[rank $VICTIM\] rank $VICTIM: all-reduce 0 started" "$LOG" && break
      kill -0 "$RUNNER" 2>/dev/null || break
      sleep 0.1
    done
    sleep 1.5
    PIDS=$(ip netns pids "cohortns-${TAG}-r${VICTIM}" 2>/dev/null || true)
    if [[ -n "$PIDS" ]]; then
      echo "netns_check: killing rank $VICTIM (pid $PIDS) inside its namespace"
      # shellcheck disable=SC2086
      kill -KILL $PIDS
    fi
    finish_run
    [[ -n "$PIDS" ]] || fail "rank $VICTIM never started its all-reduce"
    ((RC == 137)) || fail "netns.sh run exited with $RC, expected 137 (the killed rank's SIGKILL)"
    for ((r = 0; r < VICTIM; ++r)); do
      grep -q "^\[rank $r\] rank $r: peer failure reported as expected" "$LOG" ||
        fail "rank $r did not report the failure of rank $VICTIM"
    done
    check_cleanup ;;
  timeout)
    # A run that outlives --timeout is stopped with 124 and still cleans up.
    start 2 --rate 10mbit --name "$TAG" --timeout 3 -- "$NETNS_BW" --repeats 50
    finish_run
    ((RC == 124)) || fail "netns.sh run exited with $RC, expected 124"
    check_cleanup ;;
  links)
    # Links per pair (netns.sh --links): each slow pair I-J within netns_bw's tolerance of
    # SLOW_MBIT, each fast pair at least 5x the fastest slow one measured.
    N="$1" RATE="$2" LINKS="$3" SLOW="$4" SLOW_MBIT="$5" FAST="$6"
    PAIRS=""
    IFS=, read -r -a SLOW_LIST <<<"$SLOW"
    IFS=, read -r -a FAST_LIST <<<"$FAST"
    for p in "${SLOW_LIST[@]}"; do PAIRS+="${PAIRS:+,}$p=$SLOW_MBIT"; done
    for p in "${FAST_LIST[@]}"; do PAIRS+=",$p"; done
    start "$N" --rate "$RATE" --links "$LINKS" --name "$TAG" --timeout 50 -- \
      "$NETNS_BW" --pairs "$PAIRS" --bytes 1048576
    finish_run
    ((RC == 0)) || fail "netns.sh run exited with $RC"
    mbit() {   # measured Mbit/s of pair I-J
      awk -v p="p2p ${1%-*}->${1#*-}:" 'index($0, p) { for (k = 1; k <= NF; ++k) if ($k ~ /^Mbit\/s=/) print substr($k, 8) }' "$LOG"
    }
    fastest_slow=0
    for p in "${SLOW_LIST[@]}"; do
      grep -q "check p2p ${p%-*}->${p#*-}: .*: ok" "$LOG" || fail "slow pair $p not within tolerance of $SLOW_MBIT Mbit/s"
      fastest_slow=$(awk -v a="$fastest_slow" -v b="$(mbit "$p")" 'BEGIN { print (b > a ? b : a) }')
    done
    for p in "${FAST_LIST[@]}"; do
      m=$(mbit "$p")
      [[ -n "$m" ]] || fail "no measurement of fast pair $p"
      awk -v f="$m" -v s="$fastest_slow" 'BEGIN { exit !(f >= 5 * s) }' ||
        fail "fast pair $p at $m Mbit/s is not 5x the slow pairs' $fastest_slow"
      echo "netns_check: fast pair $p at $m Mbit/s >= 5 x $fastest_slow"
    done
    check_cleanup ;;
  matrix)
    # up --links, `links`, `rate I-J` and `rate I` without traffic: the matrix read back from tc.
    expect_row() {   # expect_row ROW ENTRIES...: that row of $MATRIX (`netns.sh links`)
      local got row="$1"
      shift
      got=$(echo "$MATRIX" | awk -v r="$row" '$1 == r { $1 = ""; sub(/^ /, ""); print }' | tr -s ' ' | sed 's/ $//')
      [[ "$got" == "$*" ]] || fail "links row $row: got '$got', expected '$*'"
    }
    RC=0
    "$NETNS_SH" up 4 --rates 1gbit,1gbit,100mbit,1gbit --links 0-1=10gbit,2-3=8mbit --name "$TAG" || RC=$?
    if ((RC == 77)); then echo "netns_check: skipped (netns.sh cannot make namespaces here)"; exit 77; fi
    UP=1
    ((RC == 0)) || fail "netns.sh up exited with $RC"
    MATRIX=$("$NETNS_SH" links --name "$TAG")
    echo "$MATRIX"
    expect_row 0 - '10Gbit*' 100Mbit 1Gbit
    expect_row 1 '10Gbit*' - 100Mbit 1Gbit
    expect_row 2 100Mbit 100Mbit - '8Mbit*'
    expect_row 3 1Gbit 1Gbit '8Mbit*' -
    "$NETNS_SH" rate 1-2 --rate 20mbit --name "$TAG"
    "$NETNS_SH" rate 3 --rate 10mbit --name "$TAG"
    "$NETNS_SH" rate 0-1 --rate none --name "$TAG"
    MATRIX=$("$NETNS_SH" links --name "$TAG")
    echo "$MATRIX"
    expect_row 0 - 'none*' 100Mbit 10Mbit
    expect_row 1 'none*' - '20Mbit*' 10Mbit
    expect_row 2 100Mbit '20Mbit*' - '8Mbit*'
    expect_row 3 10Mbit 10Mbit '8Mbit*' -
    "$NETNS_SH" down --name "$TAG"
    UP=0
    check_cleanup ;;
  *) fail "unknown mode $MODE" ;;
esac
