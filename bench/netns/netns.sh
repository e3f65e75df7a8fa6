#!/usr/bin/env bash
# netns.sh: emulates a cluster of machines joined by slow, uneven links on one host. A hub
# namespace holds a bridge; each rank gets its own network namespace joined to the bridge by a
# veth pair whose two ends are both shaped with tc tbf (rank egress = its upload, hub egress =
# its download). Only addresses inside these namespaces (10.250.77.0/24) and loopback are used;
# nothing in the root namespace is touched. `run` starts one process per rank with the COHORT_*
# variables that cohort's detect_job_env() reads, like cohort-run, then removes everything.
#
#   netns.sh up N --rate R [--rates r0,r1,..] [--delay D] [--name TAG]
#   netns.sh exec I [--name TAG] -- CMD ARGS...
#   netns.sh rate I|all --rate R [--name TAG]     (re-shape running ranks' links, both directions)
#   netns.sh down [--name TAG | --all]
#   netns.sh list
#   netns.sh run N --rate R [--rates ..] [--delay D] [--port P] [--timeout S] [--linger S]
#                [--grace S] [--name TAG] -- PROGRAM ARGS...
#
# Rates are tc rates (10gbit, 1gbit, 100mbit, 10mbit, ...) or "none" (unshaped veth).
# Exit codes: 0 success; 2 bad usage; 77 skipped (not root, ip/tc missing, namespaces or tbf
# not permitted; the reason is printed); 124 `run` timed out; else the first failing rank's code
# (128+signal when killed).
set -euo pipefail

readonly PREFIX="cohortns"           # every namespace this script makes is named cohortns-<tag>-*
readonly SUBNET="10.250.77"          # the one private /24, only on interfaces inside our namespaces
readonly HOST_BASE=10                # rank i has ${SUBNET}.$((HOST_BASE + i))
readonly MAX_RANKS=64
readonly SKIP_CODE=77
readonly RANK_DEV="veth0"            # the rank's end, inside its namespace (UCX_NET_DEVICES)
readonly BRIDGE="br0"                # in the hub namespace

say() { echo "netns.sh: $*" >&2; }
die() { say "$*"; exit 2; }
skip() { say "SKIP: $*"; exit "$SKIP_CODE"; }

usage() {
  sed -n '/^#   netns.sh/,/^# Exit codes/p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

ns_hub() { echo "${PREFIX}-$1-hub"; }
ns_rank() { echo "${PREFIX}-$1-r$2"; }
rank_addr() { echo "${SUBNET}.$((HOST_BASE + $1))"; }

# Our namespaces (optionally only those of one tag), one name per line.
our_namespaces() {
  local tag="${1:-}"
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${PREFIX}-${tag:+${tag}-}" || true
}

# Stops every process inside one of our namespaces (TERM, then KILL after `grace` seconds).
kill_in_ns() {
  local ns="$1" grace="${2:-2}" pids i
  pids=$(ip netns pids "$ns" 2>/dev/null || true)
  [[ -z "$pids" ]] && return 0
  # shellcheck disable=SC2086  # one word per pid
  kill -TERM $pids 2>/dev/null || true
  for ((i = 0; i < grace * 10; ++i)); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [[ -z "$pids" ]] && return 0
    sleep 0.1
  done
  # shellcheck disable=SC2086
  kill -KILL $pids 2>/dev/null || true
}

# Deletes the namespaces of one tag (their veths and bridge go with them), stopping what runs there.
teardown() {
  local tag="$1" ns
  for ns in $(our_namespaces "$tag"); do kill_in_ns "$ns" 2; done
  for ns in $(our_namespaces "$tag"); do ip netns del "$ns" 2>/dev/null || say "cannot delete $ns"; done
}

# Whether a process runs (a zombie does not: an orphan's may never be reaped here).
alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat="${stat##*) }"
  [[ "${stat:0:1}" != Z ]]
}

# Removes leftovers whose owner is gone: a tag p<pid> (run's default; tests pass their own pid)
# belongs to that process. Other named setups (up/down) stay until `down`.
stale_cleanup() {
  local ns pid
  for ns in $(our_namespaces); do
    if [[ "$ns" =~ ^${PREFIX}-p([0-9]+)- ]]; then
      pid="${BASH_REMATCH[1]}"
      if ! alive "$pid"; then
        say "removing stale namespace $ns"
        kill_in_ns "$ns" 1
        ip netns del "$ns" 2>/dev/null || true
      fi
    fi
  done
}

# Skips (exit 77) unless this host lets us make namespaces, veths, bridges and tbf qdiscs.
preflight() {
  [[ "$(id -u)" == 0 ]] || skip "needs root (uid $(id -u)) to create network namespaces"
  command -v ip >/dev/null || skip "ip (iproute2) not found"
  command -v tc >/dev/null || skip "tc (iproute2) not found"
  local probe="${PREFIX}-p$$-probe" ok=1 why=""
  if ! why=$(ip netns add "$probe" 2>&1); then
    skip "cannot create a network namespace: $why"
  fi
  trap 'ip netns del "$probe" 2>/dev/null || true' EXIT   # replaced by the command's own trap
  if ! why=$(ip -n "$probe" link add pa type veth peer name pb 2>&1); then ok=0; why="veth: $why"
  elif ! why=$(ip -n "$probe" link add pbr type bridge 2>&1); then ok=0; why="bridge: $why"
  elif ! why=$(tc -n "$probe" qdisc add dev pa root tbf rate 10mbit burst 256kb latency 400ms 2>&1); then
    ok=0; why="tc tbf: $why"
  elif ! why=$(ip netns exec "$probe" true 2>&1); then ok=0; why="ip netns exec: $why"
  fi
  ip netns del "$probe" 2>/dev/null || true
  trap - EXIT
  ((ok)) || skip "not permitted here: $why"
}

# Bytes per second of a tc rate ("100mbit", "1gbit", "5mbps"), for the tbf burst.
rate_bytes() {
  awk -v r="$1" 'BEGIN {
    if (!match(r, /^[0-9]+(\.[0-9]+)?/)) exit 1
    v = substr(r, 1, RLENGTH); u = tolower(substr(r, RLENGTH + 1))
    m["bit"] = 1/8; m["kbit"] = 1e3/8; m["mbit"] = 1e6/8; m["gbit"] = 1e9/8; m["tbit"] = 1e12/8
    m["bps"] = 1; m["kbps"] = 1e3; m["mbps"] = 1e6; m["gbps"] = 1e9
    if (!(u in m)) exit 1
    printf "%.0f\n", v * m[u] }'
}

valid_rate() { [[ "$1" == none ]] || rate_bytes "$1" >/dev/null 2>&1; }

# tbf on one device: burst = max(256 KiB, 5 ms of the rate), well above the 64 KB GSO segments
# that a smaller burst drops (TCP resets); latency 400 ms bounds the queue.
shape() {
  local ns="$1" dev="$2" rate="$3" delay="$4" bytes burst
  [[ "$rate" == none && -z "$delay" ]] && return 0
  if [[ -n "$delay" ]]; then
    # netem root (delay) with tbf as its child, when the kernel has netem.
    tc -n "$ns" qdisc add dev "$dev" root handle 1: netem delay "$delay" limit 100000
    [[ "$rate" == none ]] && return 0
    set -- parent 1:1 handle 10:
  else
    set -- root handle 1:
  fi
  bytes=$(rate_bytes "$rate")
  burst=$((bytes / 200 > 262144 ? bytes / 200 : 262144))
  tc -n "$ns" qdisc add dev "$dev" "$@" tbf rate "$rate" burst "$burst" latency 400ms
}

# A new rate on a device shaped by shape(): the tbf replaced where it sits.
reshape() {
  local ns="$1" dev="$2" rate="$3" bytes burst
  bytes=$(rate_bytes "$rate")
  burst=$((bytes / 200 > 262144 ? bytes / 200 : 262144))
  if tc -n "$ns" qdisc show dev "$dev" | grep -q netem; then
    tc -n "$ns" qdisc replace dev "$dev" parent 1:1 handle 10: tbf rate "$rate" burst "$burst" latency 400ms
  else
    tc -n "$ns" qdisc replace dev "$dev" root handle 1: tbf rate "$rate" burst "$burst" latency 400ms
  fi
}

# up: the hub, its bridge and n ranks; rates[i] per rank; delay added once per direction.
setup() {
  local tag="$1" n="$2" delay="$3" hub i ns
  hub=$(ns_hub "$tag")
  ip netns add "$hub"
  ip -n "$hub" link set lo up
  ip -n "$hub" link add "$BRIDGE" type bridge
  ip -n "$hub" link set "$BRIDGE" up
  for ((i = 0; i < n; ++i)); do
    ns=$(ns_rank "$tag" "$i")
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    # Both ends are created directly inside their namespaces: nothing appears in the root one.
    ip link add "$RANK_DEV" netns "$ns" type veth peer name "h$i" netns "$hub"
    ip -n "$hub" link set "h$i" master "$BRIDGE"
    ip -n "$ns" addr add "$(rank_addr "$i")/24" dev "$RANK_DEV"
    shape "$ns" "$RANK_DEV" "${RATES[i]}" "$delay"   # rank -> hub: upload (+ delay)
    shape "$hub" "h$i" "${RATES[i]}" ""                # hub -> rank: download
    ip -n "$hub" link set "h$i" up
    ip -n "$ns" link set "$RANK_DEV" up
  done
  say "up: $n ranks (tag $tag), rates ${RATES[*]}${delay:+, delay $delay}, rank i at $(rank_addr 0)+i"
}

# Waits (bounded) until every rank can reach rank 0's address: the bridge may need a moment.
wait_links() {
  local tag="$1" n="$2" i k
  command -v ping >/dev/null || return 0
  for ((i = 1; i < n; ++i)); do
    for ((k = 0; k < 50; ++k)); do
      ip netns exec "$(ns_rank "$tag" "$i")" ping -c1 -W1 "$(rank_addr 0)" >/dev/null 2>&1 && break
      sleep 0.1
    done
  done
}

random_token() { od -An -N16 -tx1 /dev/urandom | tr -d ' \n'; }

# ---- argument parsing ------------------------------------------------------------------------
CMD="${1:-}"
[[ -n "$CMD" ]] || usage
shift
N=""; RATE=""; RATE_LIST=""; DELAY=""; TAG=""; ALL=0; PORT=29500; TIMEOUT=600; LINGER=0; GRACE=3
INDEX=""
case "$CMD" in
  up|run) [[ $# -gt 0 && "$1" =~ ^[0-9]+$ ]] || die "$CMD: expected the number of ranks"; N="$1"; shift ;;
  exec) [[ $# -gt 0 && "$1" =~ ^[0-9]+$ ]] || die "exec: expected a rank index"; INDEX="$1"; shift ;;
  rate) [[ $# -gt 0 && "$1" =~ ^([0-9]+|all)$ ]] || die "rate: expected a rank index or 'all'"; INDEX="$1"; shift ;;
  down|list) ;;
  -h|--help|help) usage ;;
  *) die "unknown command '$CMD' (up, exec, rate, down, list, run)" ;;
esac
while [[ $# -gt 0 ]]; do
  case "$1" in
    --) shift; break ;;
    --rate) RATE="${2:?--rate needs a value}"; shift 2 ;;
    --rates) RATE_LIST="${2:?--rates needs a value}"; shift 2 ;;
    --delay) DELAY="${2:?--delay needs a value}"; shift 2 ;;
    --name) TAG="${2:?--name needs a value}"; shift 2 ;;
    --port) PORT="${2:?}"; shift 2 ;;
    --timeout) TIMEOUT="${2:?}"; shift 2 ;;
    --linger) LINGER="${2:?}"; shift 2 ;;
    --grace) GRACE="${2:?}"; shift 2 ;;
    --all) ALL=1; shift ;;
    *) die "unknown argument '$1'" ;;
  esac
done
[[ -z "$TAG" || "$TAG" =~ ^[a-zA-Z0-9]{1,24}$ ]] || die "--name: 1-24 letters or digits"
for v in PORT TIMEOUT LINGER GRACE; do [[ "${!v}" =~ ^[0-9]+$ ]] || die "--${v,,} must be a whole number"; done
((TIMEOUT >= 1)) || die "--timeout must be at least 1 second"
((PORT >= 1 && PORT <= 65535)) || die "--port out of range"

if [[ "$CMD" == up || "$CMD" == run ]]; then
  ((N >= 1 && N <= MAX_RANKS)) || die "ranks must be 1..$MAX_RANKS"
  RATES=()
  if [[ -n "$RATE_LIST" ]]; then
    IFS=, read -r -a RATES <<<"$RATE_LIST"
    ((${#RATES[@]} == N)) || die "--rates lists ${#RATES[@]} rates for $N ranks"
  else
    [[ -n "$RATE" ]] || die "$CMD: --rate R (or --rates r0,r1,..) is required; 'none' for unshaped"
    for ((i = 0; i < N; ++i)); do RATES[i]="$RATE"; done
  fi
  for r in "${RATES[@]}"; do valid_rate "$r" || die "bad rate '$r' (e.g. 10gbit, 100mbit, 10mbit, none)"; done
  [[ -z "$DELAY" || "$DELAY" =~ ^[0-9]+(\.[0-9]+)?(us|ms|s)$ ]] || die "bad --delay '$DELAY' (e.g. 20ms)"
fi
if [[ "$CMD" == run || "$CMD" == exec ]]; then
  [[ $# -gt 0 ]] || die "$CMD: expected -- PROGRAM ARGS..."
fi

# ---- commands --------------------------------------------------------------------------------
case "$CMD" in
  list)
    our_namespaces
    exit 0 ;;
  down)
    command -v ip >/dev/null || skip "ip (iproute2) not found"
    stale_cleanup
    if ((ALL)); then
      for t in $(our_namespaces | sed -E "s/^${PREFIX}-([^-]+)-.*/\1/" | sort -u); do teardown "$t"; done
    else
      teardown "${TAG:-default}"
    fi
    exit 0 ;;
  rate)
    # A link that changes under a running job (bench/time_to_accuracy/slowdown.sh): the tbf of
    # rank i's two ends is replaced in place (under netem when the tag was set up with a delay).
    TAG="${TAG:-default}"
    [[ "$RATE" != none ]] && valid_rate "$RATE" || die "rate: --rate R (a tc rate such as 10mbit) is required"
    hub=$(ns_hub "$TAG")
    our_namespaces "$TAG" | grep -qx "$hub" || die "no namespaces of tag $TAG"
    for ns in $(our_namespaces "$TAG" | grep -E -- "-r[0-9]+$"); do
      i=${ns##*-r}
      [[ "$INDEX" == all || "$INDEX" == "$i" ]] || continue
      reshape "$ns" "$RANK_DEV" "$RATE"
      reshape "$hub" "h$i" "$RATE"
    done
    say "rate: rank(s) $INDEX of tag $TAG now $RATE"
    exit 0 ;;
  exec)
    TAG="${TAG:-default}"
    ns=$(ns_rank "$TAG" "$INDEX")
    our_namespaces "$TAG" | grep -qx "$ns" || die "no namespace $ns (run 'netns.sh up' first)"
    exec ip netns exec "$ns" "$@" ;;
esac

preflight
stale_cleanup
if [[ -n "$DELAY" ]]; then
  probe="${PREFIX}-p$$-probe"
  ip netns add "$probe"; ip -n "$probe" link add pa type veth peer name pb
  if ! tc -n "$probe" qdisc add dev pa root netem delay 1ms >/dev/null 2>&1; then
    ip netns del "$probe"; skip "--delay needs the netem qdisc, which this kernel lacks"
  fi
  ip netns del "$probe"
fi

if [[ "$CMD" == up ]]; then
  TAG="${TAG:-default}"
  teardown "$TAG"                                 # a fresh setup replaces an older one of the tag
  trap 'rc=$?; ((rc == 0)) || teardown "$TAG"; exit $rc' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  setup "$TAG" "$N" "$DELAY"
  wait_links "$TAG" "$N"
  exit 0
fi

# run: up, one process per rank, wait (bounded), first failure wins, down — always.
TAG="${TAG:-p$$}"
declare -a PIDS=() FINISHED=()
FIRST_RC=0
cleanup() {
  local rc=$? i
  trap - EXIT INT TERM
  for ((i = 0; i < ${#PIDS[@]}; ++i)); do kill_in_ns "$(ns_rank "$TAG" "$i")" "$GRACE"; done
  teardown "$TAG"
  if [[ -n "$(our_namespaces "$TAG")" ]]; then say "namespaces of tag $TAG left behind"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'say "interrupted"; exit 130' INT
trap 'say "terminated"; exit 143' TERM
teardown "$TAG"
setup "$TAG" "$N" "$DELAY"
wait_links "$TAG" "$N"
TOKEN=$(random_token)
MASTER=$(rank_addr 0)
for ((i = 0; i < N; ++i)); do
  # ip netns exec and env both exec: the pid below is the rank's program itself.
  ip netns exec "$(ns_rank "$TAG" "$i")" env \
    COHORT_RANK="$i" COHORT_WORLD_SIZE="$N" COHORT_LOCAL_RANK=0 COHORT_LOCAL_WORLD_SIZE=1 \
    COHORT_NODE_RANK="$i" COHORT_NNODES="$N" \
    COHORT_MASTER_ADDR="$MASTER" COHORT_MASTER_PORT="$PORT" COHORT_JOB_TOKEN="$TOKEN" \
    COHORT_NETNS_ADDR="$(rank_addr "$i")" COHORT_NETNS_RATE="${RATES[i]}" \
    UCX_TLS=tcp UCX_NET_DEVICES="$RANK_DEV" "$@" \
    > >(sed -u "s/^/[rank $i] /") 2> >(sed -u "s/^/[rank $i] /" >&2) &
  PIDS[i]=$!
  FINISHED[i]=0
done

deadline=$((SECONDS + TIMEOUT))
stop_at=-1
live=$N
while ((live > 0)); do
  for ((i = 0; i < N; ++i)); do
    ((FINISHED[i])) && continue
    kill -0 "${PIDS[i]}" 2>/dev/null && continue
    rc=0; { wait "${PIDS[i]}"; } 2>/dev/null || rc=$?   # quiet: no "Killed" job report
    FINISHED[i]=1; live=$((live - 1))
    if ((rc != 0 && FIRST_RC == 0)); then
      FIRST_RC=$rc
      if ((rc > 128)); then say "rank $i killed by signal $((rc - 128)) (code $rc)"; else say "rank $i failed with code $rc"; fi
      stop_at=$((SECONDS + LINGER))
      ((LINGER > 0)) && say "giving the other ranks ${LINGER}s to finish on their own"
    fi
  done
  ((live == 0)) && break
  if ((SECONDS >= deadline)); then
    say "timed out after ${TIMEOUT}s; stopping the ranks"
    FIRST_RC=124
    break
  fi
  if ((stop_at >= 0 && SECONDS >= stop_at)); then
    say "stopping the remaining ranks"
    break
  fi
  sleep 0.2
done
for ((i = 0; i < N; ++i)); do
  ((FINISHED[i])) && continue
  kill_in_ns "$(ns_rank "$TAG" "$i")" "$GRACE"
  { wait "${PIDS[i]}"; } 2>/dev/null || true
done
sleep 0.1   # let the output filters flush
exit "$FIRST_RC"
