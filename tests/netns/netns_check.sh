#!/usr/bin/env bash
# The netns tests' driver (ctest label netns): runs bench/netns/netns.sh with a tag of its own,
# checks what the ranks printed and the exit code, and checks that no namespace of that tag is
# left. Exits 77 (ctest SKIP_RETURN_CODE) when netns.sh skips because namespaces are not allowed.
#   netns_check.sh NETNS_SH NETNS_BW bandwidth N RATES EXPECT_P2P_MBIT EXPECT_ALLREDUCE_MBIT [BYTES]
#   netns_check.sh NETNS_SH NETNS_BW killed N RATE
#   netns_check.sh NETNS_SH NETNS_BW timeout
set -euo pipefail

NETNS_SH="$1" NETNS_BW="$2" MODE="$3"
shift 3
TAG="p$$"   # netns.sh treats p<pid> as owned by pid: removed as stale once we are gone
LOG=$(mktemp /tmp/cohort-netns-check.XXXXXX)
RUNNER=""

fail() { echo "netns_check: FAILED: $*" >&2; exit 1; }
finish() {
  local rc=$? k
  trap - EXIT INT TERM
  # A runner still going (we were interrupted or timed out) cleans up on TERM; wait, bounded.
  if [[ -n "$RUNNER" ]] && kill -0 "$RUNNER" 2>/dev/null; then
    kill -TERM "$RUNNER" 2>/dev/null || true
    for ((k = 0; k < 100; ++k)); do kill -0 "$RUNNER" 2>/dev/null || break; sleep 0.1; done
  fi
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
  *) fail "unknown mode $MODE" ;;
esac
