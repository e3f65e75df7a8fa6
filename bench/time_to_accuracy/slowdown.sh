#!/usr/bin/env bash
# A link that slows under a running co2 job: RANKS ranks train a small GPT on Brown with
# `--parallel co2 --tau auto`, each in its own network namespace with its link shaped at FROM;
# AFTER seconds in, every link drops to TO (bench/netns/netns.sh rate). Prints rank 0's metrics
# lines as a table — elapsed seconds, step, the overlap and tau co2 chose, the seconds it has
# waited on communication so far — then the share of wall time spent waiting before and after
# the change, and co2's own log of each choice with the times it came from. The claim checked:
# a slower link raises overlap and tau instead of stalling the steps.
#   bench/time_to_accuracy/slowdown.sh BUILD_DIR [--ranks 4] [--from 100mbit] [--to 10mbit]
#       [--after 60] [--steps 300] [-- EXTRA_TRAIN_ARGS...]
# Exits 0 with a message where network namespaces are not permitted.
set -euo pipefail

BUILD="${1:?usage: slowdown.sh BUILD_DIR [--ranks N] [--from R] [--to R] [--after S] [--steps N]}"
shift
RANKS=4; FROM=100mbit; TO=10mbit; AFTER=60; STEPS=300
EXTRA=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ranks) RANKS="$2"; shift 2 ;;
    --from) FROM="$2"; shift 2 ;;
    --to) TO="$2"; shift 2 ;;
    --after) AFTER="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) echo "slowdown.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
HERE="$(cd "$(dirname "$0")" && pwd)"
NETNS="$HERE/../netns/netns.sh"
CLI="$(cd "$BUILD" && pwd)/cli/cohort"
[[ -x "$CLI" ]] || { echo "slowdown.sh: $CLI not built" >&2; exit 2; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive OPENBLAS_NUM_THREADS=1

probe_rc=0
probe_out=$("$NETNS" run 1 --rate none --timeout 30 --name slowp -- true 2>&1) || probe_rc=$?
if ((probe_rc == 77)); then
  echo "slowdown.sh: SKIP: network namespaces are not available here:" >&2
  echo "$probe_out" | grep SKIP >&2 || true
  exit 0
fi

echo "slowdown.sh: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc --all) cores, load $(cut -d' ' -f1-3 /proc/loadavg);" \
  "$RANKS ranks, $FROM, then $TO after ${AFTER}s"
rc=0
"$NETNS" run "$RANKS" --rate "$FROM" --timeout 7200 --name slow -- "$CLI" train --model gpt --layers 2 --width 128 \
  --steps "$STEPS" --threads 1 --parallel co2 --tau auto --log-every 5 --no-eval --metrics "$OUT/m.jsonl" \
  "${EXTRA[@]}" >"$OUT/run.log" 2>&1 &
job=$!
sleep "$AFTER"
"$NETNS" rate all --rate "$TO" --name slow 2>&1 || echo "slowdown.sh: the links could not be re-shaped" >&2
date +%s.%N >"$OUT/changed"
wait "$job" || rc=$?
((rc == 0)) || { tail -20 "$OUT/run.log" >&2; echo "slowdown.sh: the run failed with code $rc" >&2; exit 1; }

python3 - "$OUT/m.jsonl" "$AFTER" <<'EOF'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
after = float(sys.argv[2])
print("| elapsed s | step | overlap | tau | waited s (so far) | hidden |")
print("| --- | --- | --- | --- | --- | --- |")
shown = None
for l in lines:
    p = l["parallel"]
    key = (p["overlap"], p["tau"])
    if key != shown or l is lines[-1]:
        print("| %.1f | %d | %d | %d | %.2f | %.2f |" % (l["elapsed_s"], l["step"], p["overlap"], p["tau"], p["wait_s"],
                                                      p["hidden_fraction"]))
        shown = key
def window(first, last):
    if last is None or first is None or last["elapsed_s"] <= first["elapsed_s"]:
        return "-"
    dt = last["elapsed_s"] - first["elapsed_s"]
    waited = last["parallel"]["wait_s"] - first["parallel"]["wait_s"]
    steps = last["step"] - first["step"]
    return "%.1f%% of %.0f s waiting, %.2f steps/s" % (100 * waited / dt, dt, steps / dt)
before = [l for l in lines if l["elapsed_s"] < after]
later = [l for l in lines if l["elapsed_s"] >= after]
print("before the change: " + window(before[len(before) // 2] if before else None, before[-1] if before else None))
print("after the change:  " + window(later[0] if later else None, later[-1] if later else None))
EOF
echo "co2's choices (rank 0):"
grep "co2: overlap" "$OUT/run.log" | sed 's/^/  /'
