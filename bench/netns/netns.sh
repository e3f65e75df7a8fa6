#!/usr/bin/env bash
# netns.sh: emulates a cluster of machines joined by slow, uneven links on one host. A hub
# namespace holds a bridge; each rank gets its own network namespace joined to the bridge by a
# veth pair whose two ends are both shaped with tc htb (rank egress = its upload, hub egress =
# its download). Pairs of ranks may have links of their own (--links, --sites): those are shaped
# once, at the sender, by a class per destination, and pass the hub unshaped. Only addresses
# inside these namespaces (10.250.77.0/24) and loopback are used; nothing in the root namespace
# is touched. `run` starts one process per rank with the COHORT_* variables that cohort's
# detect_job_env() reads, like cohort-run, then removes everything.
#
#   netns.sh up N --rate R [--rates r0,r1,..] [--delay D] [LINKS] [--name TAG]
#   netns.sh exec I [--name TAG] -- CMD ARGS...
#   netns.sh rate I|all --rate R [--name TAG]     (re-shape running ranks' default links, both directions)
#   netns.sh rate I-J --rate R [--name TAG]       (re-shape the link between ranks I and J, both directions)
#   netns.sh links [--name TAG]                   (print the rate matrix in effect, sender x receiver)
#   netns.sh down [--name TAG | --all]
#   netns.sh list
#   netns.sh run N --rate R [--rates ..] [--delay D] [LINKS] [--port P] [--timeout S] [--linger S]
#                [--grace S] [--name TAG] -- PROGRAM ARGS...
#
# LINKS, links between pairs of ranks (symmetric: each direction gets the rate, shaped at its sender):
#   --links I-J=RATE[@DELAY],K-L=RATE[@DELAY],..
#   --sites "0,1/2,3" [--intra RATE[@DELAY]] [--inter RATE[@DELAY]]   (pairs within a site get
#       --intra, pairs across sites --inter; --links entries given too override these)
# Pairs not listed run at the slower of the sender's and the receiver's --rate/--rates, plus --delay
# (--rate defaults to none when LINKS are given). A pair's DELAY replaces --delay for that pair.
# Rates are tc rates (10gbit, 1gbit, 100mbit, 10mbit, ...) or "none" (not limited).
# Exit codes: 0 success; 2 bad usage; 77 skipped (not root, ip/tc missing, namespaces or htb
# not permitted, a delay without netem; the reason is printed); 124 `run` timed out; else the
# first failing rank's code (128+signal when killed).
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
  sed -n '/^#   netns.sh/,/^set -euo pipefail/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2
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

# Skips (exit 77) unless this host lets us make namespaces, veths, bridges, htb qdiscs and u32 filters.
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
  elif ! why=$(ip -n "$probe" link set pa gso_max_segs "$GSO_SEGS" 2>&1); then
    ok=0; why="veth gso_max_segs (iproute2 too old?): $why"
  elif ! why=$(ip -n "$probe" link add pbr type bridge 2>&1); then ok=0; why="bridge: $why"
  elif ! why=$(tc -n "$probe" qdisc add dev pa root handle 1: htb default 1 2>&1); then ok=0; why="tc htb: $why"
  elif ! why=$(tc -n "$probe" class add dev pa parent 1: classid 1:1 htb rate 10mbit 2>&1); then
    ok=0; why="tc htb class: $why"
  elif ! why=$(tc -n "$probe" filter add dev pa parent 1: protocol ip prio 1 u32 \
                 match ip dst "$(rank_addr 0)/32" flowid 1:1 2>&1); then
    ok=0; why="tc u32 filter: $why"
  elif ! why=$(ip netns exec "$probe" true 2>&1); then ok=0; why="ip netns exec: $why"
  fi
  ip netns del "$probe" 2>/dev/null || true
  trap - EXIT
  ((ok)) || skip "not permitted here: $why"
}

# Bytes per second of a tc rate ("100mbit", "1gbit", "5mbps", or tc's own "8Mbit"), for bursts.
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
valid_delay() { [[ -z "$1" || "$1" =~ ^[0-9]+(\.[0-9]+)?(us|ms|s)$ ]]; }

# ---- shaping -----------------------------------------------------------------------------------
# Each shaped egress has an htb root (handle 1:, default class 1:1). Class 1:1 carries the
# traffic no filter picks out, at the rank's --rate; without it (rate none, no delay) that
# traffic takes htb's direct queue, unshaped. On a rank's veth0, a listed pair (I,J) has class
# 1:<0x100+J> at the pair's rate, picked by a u32 filter on J's address (node 800::<J+1>, so
# that `rate` can replace it); a netem child of a class adds its delay. On the hub's h<J>, a
# filter on I's address (node 800::<I+1>) sends the pair's traffic to the direct queue
# (flowid 1:0), so that J's download rate does not cap a link shaped already at its sender.
# Every class hangs from the root with rate = ceil and borrows nothing: each link is independent
# of the others (a rank's upload to one peer shares no budget with its upload to another).
readonly UNSHAPED_RATE="100gbit"   # a class that only carries a delay: no limit this host reaches
readonly QUANTUM=200000            # bytes per DRR round: above a 64 KB GSO segment, htb's maximum

# Packets: a veth passes the stack's GSO packets whole, up to 64 KB each, and htb meters a packet
# as a unit, where a real link's frames are 1.5 KB. With 64 KB packets a message one packet long
# passed at veth speed and a message a few bytes longer waited a packet's debt (4 ranks at 1
# Gbit/s, netns_bw p2p: 65000 B 0.4-0.5 ms, 65536 B 0.8-1.1 ms; all-reduce 1.0 against 2.2 ms), so
# `cohort train --grid 1x4x1` (GPT 4x64, batch 8, context 64) ran 2 micro-batches, whose
# all-reduces are 64 KiB, at 2131-2766 tokens/s against 5623-6892 for 1 and 4 at 1 Gbit/s, and at
# 100 Mbit/s 714 / 536 / 1252 tokens/s for 1 / 2 / 4. Each veth end therefore caps its GSO packets
# at GSO_SEGS segments (NETNS_GSO_SEGS overrides it). 20 (~29 KB): no step from 28 to 131 KB
# (p2p 65000 and 65536 B both 0.5-0.6 ms), the same run 6755 / 6624 / 6967 tokens/s at 1 Gbit/s
# and 1021 / 1204 / 1244 at 100 Mbit/s, and a 4 MiB all-reduce over 4 ranks at 108 MB/s bus
# bandwidth at 1 Gbit/s (64 KB packets: 108-115) and 10.5-11.0 at 100 Mbit/s (11.2-11.8). Smaller
# packets cost this 2-core host the packets' processor time: 10 segments read 84-88 MB/s at 1
# Gbit/s, 5 moved p2p at 0.72-0.87 of the rate, 1 (real frames) at 170-195 Mbit/s.
#
# burst = cburst = max(32 KiB, 50 us of the rate). A token bucket lets a message shorter than its
# burst, sent after the link has idled long enough to refill it, pass at the veth's own speed; a
# real link of that rate has no such allowance. The tbf this script used first needed a burst
# above the 64 KB GSO segments (it drops a larger packet, and TCP resets), so it had max(256 KiB,
# 5 ms of the rate), which htb kept — and at 1 Gbit/s its 625 KB passed most of a small model's
# gradient all-reduce (0.87 MB) at veth speed: DDP steps measured 0.65x of the planner's price
# (bench/planner). htb lets a packet above the burst through and runs the class into debt, so a
# small burst keeps the rate; but one well below a packet puts every packet in debt, and the link
# then moves at htb's timer (10 segments at 1 Gbit/s, the run above: 4 micro-batches 3603-4164
# tokens/s with 8 or 16 KiB, 5660 with 32; with 20 segments a 64 KiB burst let 1 and 4 micro-
# batches run faster than the rate, 8139 and 9563 tokens/s). The 50 us term leaves fast rates a
# few packets per timer wake-up. NETNS_BURST (bytes) overrides it, for experiments.
readonly GSO_SEGS="${NETNS_GSO_SEGS:-20}"
[[ "$GSO_SEGS" =~ ^[1-9][0-9]{0,3}$ ]] || die "NETNS_GSO_SEGS must be 1-9999, not '$GSO_SEGS'"
burst_for() {
  local bytes
  if [[ -n "${NETNS_BURST:-}" ]]; then echo "$NETNS_BURST"; return; fi
  bytes=$(rate_bytes "$1")
  echo $((bytes / 20000 > 32768 ? bytes / 20000 : 32768))
}
pair_class() { printf '1:%x' $((0x100 + $1)); }   # on rank I's veth0: the class for destination J
filter_node() { printf '800::%x' $(($1 + 1)); }   # the u32 node that names peer J

htb_root() {
  tc -n "$1" qdisc show dev "$2" | grep -q '^qdisc htb 1: root' ||
    tc -n "$1" qdisc add dev "$2" root handle 1: htb default 1
}
has_class() { tc -n "$1" class show dev "$2" classid "$3" 2>/dev/null | grep -q .; }
has_netem() { tc -n "$1" qdisc show dev "$2" 2>/dev/null | grep -q "^qdisc netem [0-9a-f]*: parent $3 "; }
del_class() { ! has_class "$@" || tc -n "$1" class del dev "$2" classid "$3"; }

# Class CLASSID of DEV at RATE ("none" with a delay: UNSHAPED_RATE), and a netem DELAY under it
# ("" keeps the class's delay as it is).
set_class() {
  local ns="$1" dev="$2" cls="$3" rate="$4" delay="$5" burst
  [[ "$rate" == none ]] && rate="$UNSHAPED_RATE"
  burst=$(burst_for "$rate")
  tc -n "$ns" class replace dev "$dev" parent 1: classid "$cls" htb rate "$rate" ceil "$rate" \
    burst "$burst" cburst "$burst" quantum "$QUANTUM"
  [[ -z "$delay" ]] || tc -n "$ns" qdisc replace dev "$dev" parent "$cls" netem delay "$delay" limit 100000
}

# The default class 1:1 of one egress: RATE (+ DELAY) for the traffic no pair filter picks out.
# "none" without a delay (now or from before) removes it: that traffic goes unshaped.
set_default() {
  local ns="$1" dev="$2" rate="$3" delay="$4"
  if [[ "$rate" == none && -z "$delay" ]] && ! has_netem "$ns" "$dev" 1:1; then
    del_class "$ns" "$dev" 1:1
    return 0
  fi
  htb_root "$ns" "$dev"
  set_class "$ns" "$dev" 1:1 "$rate" "$delay"
}

# The link from rank I to rank J (one direction) at RATE (+ DELAY; "" keeps the present one):
# shaped at I's egress, let through J's download unshaped.
set_pair() {
  local tag="$1" i="$2" j="$3" rate="$4" delay="$5" ns hub cls flow
  ns=$(ns_rank "$tag" "$i"); hub=$(ns_hub "$tag"); cls=$(pair_class "$j")
  htb_root "$ns" "$RANK_DEV"
  htb_root "$hub" "h$j"
  tc -n "$hub" filter replace dev "h$j" parent 1: protocol ip prio 1 handle "$(filter_node "$i")" \
    u32 match ip src "$(rank_addr "$i")/32" flowid 1:0
  flow=1:0                                         # none, no delay: I's direct queue
  if [[ "$rate" != none || -n "$delay" ]] || has_netem "$ns" "$RANK_DEV" "$cls"; then
    set_class "$ns" "$RANK_DEV" "$cls" "$rate" "$delay"
    flow="$cls"
  fi
  tc -n "$ns" filter replace dev "$RANK_DEV" parent 1: protocol ip prio 1 handle "$(filter_node "$j")" \
    u32 match ip dst "$(rank_addr "$j")/32" flowid "$flow"
  [[ "$flow" != 1:0 ]] || del_class "$ns" "$RANK_DEV" "$cls"   # after no filter points at it
}

# up: the hub, its bridge and n ranks; RATES[i] per rank, the delay on each rank's upload, then
# the listed pairs (PAIR_RATE / PAIR_DELAY, keyed "I-J" with I < J).
setup() {
  local tag="$1" n="$2" delay="$3" hub i j ns key
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
    ip -n "$hub" link set "h$i" gso_max_segs "$GSO_SEGS"
    ip -n "$ns" link set "$RANK_DEV" gso_max_segs "$GSO_SEGS"
    ip -n "$ns" addr add "$(rank_addr "$i")/24" dev "$RANK_DEV"
    set_default "$ns" "$RANK_DEV" "${RATES[i]}" "$delay"   # rank -> hub: upload (+ delay)
    set_default "$hub" "h$i" "${RATES[i]}" ""                # hub -> rank: download
  done
  for key in "${PAIR_KEYS[@]}"; do
    i=${key%-*}; j=${key#*-}
    set_pair "$tag" "$i" "$j" "${PAIR_RATE[$key]}" "${PAIR_DELAY[$key]:-$delay}"
    set_pair "$tag" "$j" "$i" "${PAIR_RATE[$key]}" "${PAIR_DELAY[$key]:-$delay}"
  done
  for ((i = 0; i < n; ++i)); do
    ip -n "$hub" link set "h$i" up
    ip -n "$(ns_rank "$tag" "$i")" link set "$RANK_DEV" up
  done
  say "up: $n ranks (tag $tag), rates ${RATES[*]}${delay:+, delay $delay}${LINKS_SPEC:+, links $LINKS_SPEC}," \
      "rank i at $(rank_addr 0)+i"
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

# ---- pairs of ranks ----------------------------------------------------------------------------
declare -A PAIR_RATE=() PAIR_DELAY=()
PAIR_KEYS=()    # "I-J" with I < J, in order
LINKS_SPEC=""   # the pairs in effect, I-J=RATE[@DELAY],.. (COHORT_NETNS_LINKS)

# Lists the pair I-J (either order) at VALUE = RATE[@DELAY]; WHAT names the option for messages.
add_pair() {
  local i=$((10#$1)) j=$((10#$2)) value="$3" what="$4" rate delay=""
  rate="${value%%@*}"
  [[ "$value" == *@* ]] && delay="${value#*@}"
  ((i != j)) || die "$what: a rank has no link to itself ($i-$j)"
  ((i < N && j < N)) || die "$what: pair $i-$j names a rank beyond $((N - 1))"
  valid_rate "$rate" || die "$what: bad rate '$rate' in $i-$j (e.g. 10gbit, 100mbit, 8mbit, none)"
  if [[ "$value" == *@* && ! "$delay" =~ ^[0-9]+(\.[0-9]+)?(us|ms|s)$ ]]; then
    die "$what: bad delay '$delay' in $i-$j (e.g. 20ms)"
  fi
  ((i < j)) || { local t=$i; i=$j; j=$t; }
  PAIR_RATE["$i-$j"]="$rate"
  PAIR_DELAY["$i-$j"]="$delay"
}

# --sites "0,1/2,3": every pair inside a site at INTRA, every pair across sites at INTER (either
# may be empty: those pairs are then not listed).
parse_sites() {
  local sites="$1" intra="$2" inter="$3" s r i j group
  local -a groups members
  local -A site_of=()
  [[ "$sites" =~ ^[0-9]+(,[0-9]+)*(/[0-9]+(,[0-9]+)*)*$ ]] || die "--sites: expected ranks like 0,1/2,3"
  [[ -n "$intra$inter" ]] || die "--sites needs --intra RATE and/or --inter RATE"
  IFS=/ read -r -a groups <<<"$sites"
  for ((s = 0; s < ${#groups[@]}; ++s)); do
    IFS=, read -r -a members <<<"${groups[s]}"
    for r in "${members[@]}"; do
      r=$((10#$r))
      ((r < N)) || die "--sites: rank $r beyond $((N - 1))"
      [[ -z "${site_of[$r]:-}" ]] || die "--sites: rank $r is in two sites"
      site_of[$r]=$s
    done
  done
  for ((i = 0; i < N; ++i)); do
    [[ -n "${site_of[$i]:-}" ]] || continue
    for ((j = i + 1; j < N; ++j)); do
      [[ -n "${site_of[$j]:-}" ]] || continue
      if [[ "${site_of[$i]}" == "${site_of[$j]}" ]]; then group="$intra"; else group="$inter"; fi
      [[ -z "$group" ]] || add_pair "$i" "$j" "$group" "--sites"
    done
  done
}

# --links I-J=RATE[@DELAY],..
parse_links() {
  local item
  local -a items
  IFS=, read -r -a items <<<"$1"
  for item in "${items[@]}"; do
    [[ "$item" =~ ^([0-9]+)-([0-9]+)=(.+)$ ]] || die "--links: expected I-J=RATE[@DELAY], got '$item'"
    add_pair "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" "${BASH_REMATCH[3]}" "--links"
  done
}

# PAIR_KEYS and LINKS_SPEC from the pairs listed, in rank order.
order_pairs() {
  local i j key
  PAIR_KEYS=()
  for ((i = 0; i < N; ++i)); do
    for ((j = i + 1; j < N; ++j)); do
      key="$i-$j"
      [[ -n "${PAIR_RATE[$key]:-}" ]] || continue
      PAIR_KEYS+=("$key")
      LINKS_SPEC+="${LINKS_SPEC:+,}$key=${PAIR_RATE[$key]}${PAIR_DELAY[$key]:+@${PAIR_DELAY[$key]}}"
    done
  done
}

# What one egress is shaped to, one line each: "class CLASSID RATE", "netem CLASSID DELAY",
# "filter NODE FLOWID" (NODE the u32 node 800::<PEER+1> in hex; flowid "1:" is the direct queue).
egress_state() {
  { tc -n "$1" class show dev "$2"; tc -n "$1" qdisc show dev "$2"; tc -n "$1" filter show dev "$2"; } |
    awk '$1 == "class" && $2 == "htb" { for (k = 3; k < NF; ++k) if ($k == "rate") print "class", $3, $(k + 1) }
         $1 == "qdisc" && $2 == "netem" {
           p = ""; d = ""
           for (k = 3; k < NF; ++k) { if ($k == "parent") p = $(k + 1); if ($k == "delay") d = $(k + 1) }
           if (p != "") print "netem", p, d }
         $1 == "filter" {
           n = ""; f = ""
           for (k = 1; k < NF; ++k) {
             if ($k == "fh" && $(k + 1) ~ /^800::[0-9a-f]+$/) n = substr($(k + 1), 6)
             if ($k == "flowid" || $k == "*flowid") f = $(k + 1) }
           if (n != "" && f != "") print "filter", n, f }'
}

# A rate as shown: "none" for no class or the unshaped one.
shown_rate() {
  if [[ -z "$1" ]] || [[ "$(rate_bytes "$1")" == "$(rate_bytes "$UNSHAPED_RATE")" ]]; then echo none
  else echo "$1"; fi
}

# The slower of two shown rates (none = no limit).
slower() {
  if [[ "$1" == none ]]; then echo "$2"
  elif [[ "$2" == none ]]; then echo "$1"
  elif (($(rate_bytes "$1") <= $(rate_bytes "$2"))); then echo "$1"
  else echo "$2"; fi
}

# links: the rate from each rank (row) to each other (column) as the qdiscs now stand.
print_links() {
  local tag="$1" n="$2" hub i j kind a b entry
  local -A cls=() net=() flow=() down=()
  hub=$(ns_hub "$tag")
  for ((i = 0; i < n; ++i)); do
    while read -r kind a b; do
      case "$kind" in
        class) cls["$i,$a"]="$b" ;;
        netem) net["$i,$a"]="$b" ;;
        filter) flow["$i,$((16#$a - 1))"]="$b" ;;
      esac
    done < <(egress_state "$(ns_rank "$tag" "$i")" "$RANK_DEV")
    while read -r kind a b; do
      [[ "$kind $a" == "class 1:1" ]] && down[$i]="$b"
    done < <(egress_state "$hub" "h$i")
  done
  echo "links of tag $tag: rate from the row's rank to the column's; * = a listed pair (shaped at"
  echo "its sender), else the slower of the sender's upload and the receiver's download; @ = delay"
  printf '%-8s' "from\\to"
  for ((j = 0; j < n; ++j)); do printf '%-16s' "$j"; done
  printf '\n'
  for ((i = 0; i < n; ++i)); do
    printf '%-8s' "$i"
    for ((j = 0; j < n; ++j)); do
      if ((i == j)); then entry="-"
      elif [[ -n "${flow[$i,$j]:-}" ]]; then
        a="${flow[$i,$j]}"
        entry="$(shown_rate "${cls[$i,$a]:-}")${net[$i,$a]:+@${net[$i,$a]}}*"
      else
        entry="$(slower "$(shown_rate "${cls[$i,1:1]:-}")" "$(shown_rate "${down[$j]:-}")")"
        entry+="${net[$i,1:1]:+@${net[$i,1:1]}}"
      fi
      printf '%-16s' "$entry"
    done
    printf '\n'
  done
}

# ---- argument parsing ------------------------------------------------------------------------
CMD="${1:-}"
[[ -n "$CMD" ]] || usage
shift
N=""; RATE=""; RATE_LIST=""; DELAY=""; TAG=""; ALL=0; PORT=29500; TIMEOUT=600; LINGER=0; GRACE=3
INDEX=""; LINKS=""; SITES=""; INTRA=""; INTER=""
case "$CMD" in
  up|run) [[ $# -gt 0 && "$1" =~ ^[0-9]+$ ]] || die "$CMD: expected the number of ranks"; N="$1"; shift ;;
  exec) [[ $# -gt 0 && "$1" =~ ^[0-9]+$ ]] || die "exec: expected a rank index"; INDEX="$1"; shift ;;
  rate) [[ $# -gt 0 && "$1" =~ ^([0-9]+|all|[0-9]+-[0-9]+)$ ]] ||
          die "rate: expected a rank index, 'all' or a pair I-J"
        INDEX="$1"; shift ;;
  down|list|links) ;;
  -h|--help|help) usage ;;
  *) die "unknown command '$CMD' (up, exec, rate, links, down, list, run)" ;;
esac
while [[ $# -gt 0 ]]; do
  case "$1" in
    --) shift; break ;;
    --rate) RATE="${2:?--rate needs a value}"; shift 2 ;;
    --rates) RATE_LIST="${2:?--rates needs a value}"; shift 2 ;;
    --delay) DELAY="${2:?--delay needs a value}"; shift 2 ;;
    --links) LINKS="${2:?--links needs a value}"; shift 2 ;;
    --sites) SITES="${2:?--sites needs a value}"; shift 2 ;;
    --intra) INTRA="${2:?--intra needs a value}"; shift 2 ;;
    --inter) INTER="${2:?--inter needs a value}"; shift 2 ;;
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
  [[ -n "$SITES" || -z "$INTRA$INTER" ]] || die "--intra/--inter need --sites"
  RATES=()
  [[ -z "$LINKS$SITES" || -n "$RATE$RATE_LIST" ]] || RATE=none   # pairs listed: the rest unshaped
  if [[ -n "$RATE_LIST" ]]; then
    IFS=, read -r -a RATES <<<"$RATE_LIST"
    ((${#RATES[@]} == N)) || die "--rates lists ${#RATES[@]} rates for $N ranks"
  else
    [[ -n "$RATE" ]] || die "$CMD: --rate R (or --rates r0,r1,..) is required; 'none' for unshaped"
    for ((i = 0; i < N; ++i)); do RATES[i]="$RATE"; done
  fi
  for r in "${RATES[@]}"; do valid_rate "$r" || die "bad rate '$r' (e.g. 10gbit, 100mbit, 10mbit, none)"; done
  valid_delay "$DELAY" || die "bad --delay '$DELAY' (e.g. 20ms)"
  [[ -z "$SITES" ]] || parse_sites "$SITES" "$INTRA" "$INTER"
  [[ -z "$LINKS" ]] || parse_links "$LINKS"   # after --sites: its entries override
  order_pairs
elif [[ -n "$LINKS$SITES$INTRA$INTER" ]]; then
  die "--links/--sites/--intra/--inter belong to up and run (rate I-J changes one pair)"
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
    # A link that changes under a running job (bench/time_to_accuracy/slowdown.sh). Rank I (or
    # all): its default class on both ends, i.e. its upload and download to unlisted peers.
    # Pair I-J: the class for the other rank at each sender (added if the pair was not listed);
    # netem delays stay as they are.
    TAG="${TAG:-default}"
    valid_rate "$RATE" || die "rate: --rate R (a tc rate such as 10mbit, or none) is required"
    hub=$(ns_hub "$TAG")
    our_namespaces "$TAG" | grep -qx "$hub" || die "no namespaces of tag $TAG"
    if [[ "$INDEX" == *-* ]]; then
      i=$((10#${INDEX%-*})); j=$((10#${INDEX#*-}))
      ((i != j)) || die "rate: a rank has no link to itself ($INDEX)"
      for r in "$i" "$j"; do
        our_namespaces "$TAG" | grep -qx "$(ns_rank "$TAG" "$r")" || die "rate: no rank $r in tag $TAG"
      done
      set_pair "$TAG" "$i" "$j" "$RATE" ""
      set_pair "$TAG" "$j" "$i" "$RATE" ""
      say "rate: link $i-$j of tag $TAG now $RATE both ways"
      exit 0
    fi
    for ns in $(our_namespaces "$TAG" | grep -E -- "-r[0-9]+$"); do
      i=${ns##*-r}
      [[ "$INDEX" == all || "$INDEX" == "$i" ]] || continue
      set_default "$ns" "$RANK_DEV" "$RATE" ""
      set_default "$hub" "h$i" "$RATE" ""
    done
    say "rate: rank(s) $INDEX of tag $TAG now $RATE"
    exit 0 ;;
  links)
    TAG="${TAG:-default}"
    hub=$(ns_hub "$TAG")
    our_namespaces "$TAG" | grep -qx "$hub" || die "no namespaces of tag $TAG"
    print_links "$TAG" "$(our_namespaces "$TAG" | grep -cE -- "-r[0-9]+$")"
    exit 0 ;;
  exec)
    TAG="${TAG:-default}"
    ns=$(ns_rank "$TAG" "$INDEX")
    our_namespaces "$TAG" | grep -qx "$ns" || die "no namespace $ns (run 'netns.sh up' first)"
    exec ip netns exec "$ns" "$@" ;;
esac

preflight
stale_cleanup
if [[ -n "$DELAY" || "$LINKS_SPEC" == *@* ]]; then
  probe="${PREFIX}-p$$-probe"
  ip netns add "$probe"; ip -n "$probe" link add pa type veth peer name pb
  if ! tc -n "$probe" qdisc add dev pa root netem delay 1ms >/dev/null 2>&1; then
    ip netns del "$probe"; skip "a delay (--delay, @DELAY) needs the netem qdisc, which this kernel lacks"
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
    COHORT_NETNS_ADDR="$(rank_addr "$i")" COHORT_NETNS_RATE="${RATES[i]}" COHORT_NETNS_LINKS="$LINKS_SPEC" \
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
