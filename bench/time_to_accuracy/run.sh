#!/usr/bin/env bash
# Time to accuracy of data parallelism over shaped links: every rank in its own network namespace
# with its veth shaped by tc (bench/netns/netns.sh), the CNN on Fashion-MNIST and the GPT on Brown,
# for sync (DDP), DiLoCo (blocking outer step) and co2, at each rate and seed. For each model and
# rate it prints, per mode, the mean over the seeds and their range (min-max) of:
#   - the training seconds until the first evaluation at or past the target (CNN: test accuracy,
#     GPT: validation nats/byte at or below it), evaluation time left out; "-" if never reached;
#   - the final metric at equal samples (the same steps for every mode: the full test/validation
#     split at the end);
#   - co2's and DiLoCo's ratio to sync's time and co2's share of communication hidden (rank 0's),
#     and co2's waits every rank shared: the transfers' own exposed time, the rest of rank 0's
#     waits having gone to ranks slower to reach a round's end (cohort_parallel_stats).
# The anchor is sync in the same invocation, over the same links, seeds and evaluation points.
#
#   bench/time_to_accuracy/run.sh BUILD_DIR [--models cnn,gpt] [--rates 1gbit,100mbit]
#       [--modes sync,diloco,co2] [--seeds 1,2] [--ranks 4] [--tau 8] [--co2 "ARGS"] [--diloco "ARGS"]
#       [--train "ARGS"]
#       [--cnn-steps 1404] [--cnn-target 0.89] [--cnn-eval-every 117]
#       [--gpt-steps 2500] [--gpt-target 1.75] [--gpt-eval-every 250] [--timeout 14400] [--keep DIR]
#       [--report-only]
# --keep DIR keeps every run's metrics and log there; --report-only prints the tables from a kept
# DIR again (another target, say) without running anything.
# --co2 passes extra arguments to co2's runs (default "--tau auto": the overlap chosen from the
# measured times, tau at least --tau); --diloco passes extra arguments to DiLoCo's (default none;
# give both the same inner settings, e.g. --noise-scaling 1 to each); --train passes extra arguments
# to every mode's runs (e.g. "--optimizer sgd"). Defaults are the CLI's full
# runs (3 CNN epochs, 2500 GPT steps); on a box of 2 shared cores that is hours per run: pass
# fewer steps and a nearer target.
# Exits 0 with a message where network namespaces are not permitted (netns.sh says why).
set -euo pipefail

BUILD="${1:?usage: run.sh BUILD_DIR [options] (see the header)}"
shift
MODELS=cnn,gpt; RATES=1gbit,100mbit; MODES=sync,diloco,co2; SEEDS=1,2; RANKS=4; TAU=8; CO2="--tau auto"; DILOCO=""; TRAIN=""
CNN_STEPS=1404; CNN_TARGET=0.89; CNN_EVAL=117; GPT_STEPS=2500; GPT_TARGET=1.75; GPT_EVAL=250
TIMEOUT=14400; KEEP=""; REPORT_ONLY=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --models) MODELS="$2"; shift 2 ;;
    --rates) RATES="$2"; shift 2 ;;
    --modes) MODES="$2"; shift 2 ;;
    --seeds) SEEDS="$2"; shift 2 ;;
    --ranks) RANKS="$2"; shift 2 ;;
    --tau) TAU="$2"; shift 2 ;;
    --co2) CO2="$2"; shift 2 ;;
    --diloco) DILOCO="$2"; shift 2 ;;
    --train) TRAIN="$2"; shift 2 ;;
    --cnn-steps) CNN_STEPS="$2"; shift 2 ;;
    --cnn-target) CNN_TARGET="$2"; shift 2 ;;
    --cnn-eval-every) CNN_EVAL="$2"; shift 2 ;;
    --gpt-steps) GPT_STEPS="$2"; shift 2 ;;
    --gpt-target) GPT_TARGET="$2"; shift 2 ;;
    --gpt-eval-every) GPT_EVAL="$2"; shift 2 ;;
    --timeout) TIMEOUT="$2"; shift 2 ;;
    --keep) KEEP="$2"; shift 2 ;;
    --report-only) REPORT_ONLY=1; shift ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
HERE="$(cd "$(dirname "$0")" && pwd)"
NETNS="$HERE/../netns/netns.sh"
CLI="$(cd "$BUILD" && pwd)/cli/cohort"
[[ -x "$CLI" ]] || { echo "run.sh: $CLI not built" >&2; exit 2; }
OUT="${KEEP:-$(mktemp -d)}"
mkdir -p "$OUT"
[[ -z "$KEEP" ]] && trap 'rm -rf "$OUT"' EXIT
# Several ranks share few cores: one thread per rank, no spinning.
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive OPENBLAS_NUM_THREADS=1

[[ $REPORT_ONLY == 1 && -z "$KEEP" ]] && { echo "run.sh: --report-only needs --keep DIR" >&2; exit 2; }
probe_rc=0
((REPORT_ONLY)) || probe_out=$("$NETNS" run 1 --rate none --timeout 30 --name tta -- true 2>&1) || probe_rc=$?
if ((probe_rc == 77)); then
  echo "run.sh: SKIP: network namespaces are not available here:" >&2
  echo "$probe_out" | grep SKIP >&2 || true
  exit 0
elif ((probe_rc != 0)); then
  echo "$probe_out" >&2; echo "run.sh: netns.sh probe failed with code $probe_rc" >&2; exit 1
fi

IFS=, read -r -a MODEL_LIST <<<"$MODELS"
IFS=, read -r -a RATE_LIST <<<"$RATES"
IFS=, read -r -a MODE_LIST <<<"$MODES"
IFS=, read -r -a SEED_LIST <<<"$SEEDS"
read -r -a TRAIN_ARGS <<<"$TRAIN"

((REPORT_ONLY)) && MODEL_LIST=()
echo "time_to_accuracy: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc --all) cores, load $(cut -d' ' -f1-3 /proc/loadavg)," \
  "$RANKS ranks, seeds $SEEDS, tau $TAU, co2 '$CO2', diloco '$DILOCO', every mode '$TRAIN'"
for model in "${MODEL_LIST[@]}"; do
  if [[ "$model" == cnn ]]; then
    steps=$CNN_STEPS; every=$CNN_EVAL; extra=()
  else
    steps=$GPT_STEPS; every=$GPT_EVAL; extra=(--eval-examples 512)
  fi
  for rate in "${RATE_LIST[@]}"; do
    for mode in "${MODE_LIST[@]}"; do
      # shellcheck disable=SC2206  # --diloco and --co2 are lists of words
      case "$mode" in
        sync) args=(--parallel sync) ;;
        diloco) args=(--parallel diloco --tau "$TAU" $DILOCO) ;;
        co2) args=(--parallel co2 --tau "$TAU" $CO2) ;;
        *) echo "run.sh: unknown mode $mode" >&2; exit 2 ;;
      esac
      for seed in "${SEED_LIST[@]}"; do
        name="$model-$rate-$mode-s$seed"
        rc=0
        rm -f "$OUT/$name.jsonl"  # cohort train appends to a metrics file (a resumed run continues it)
        "$NETNS" run "$RANKS" --rate "$rate" --timeout "$TIMEOUT" --name tta -- "$CLI" train --model "$model" \
          --steps "$steps" --threads 1 --seed "$seed" --eval-every "$every" "${extra[@]}" \
          --metrics "$OUT/$name.jsonl" "${TRAIN_ARGS[@]}" "${args[@]}" >"$OUT/$name.log" 2>&1 || rc=$?
        ((rc == 0)) || { tail -5 "$OUT/$name.log" >&2; echo "run.sh: $name failed with code $rc" >&2; }
        echo "run.sh: $name done (code $rc)" >&2
      done
    done
  done
done

# The tables: one per model and rate, from the metrics files (rank 0 writes them).
python3 - "$OUT" "$MODELS" "$RATES" "$MODES" "$SEEDS" "$CNN_TARGET" "$GPT_TARGET" <<'EOF'
import json, os, sys
out, models, rates, modes, seeds, cnn_target, gpt_target = sys.argv[1:]
def run(path, model, target):
    """(seconds to the target or None, final metric, hidden fraction, co2's waits every rank
    shared) of one metrics file."""
    if not os.path.exists(path):
        return None
    lines = [json.loads(l) for l in open(path) if l.strip()]
    key = "eval_accuracy" if model == "cnn" else "eval_nats_per_byte"
    evals, reached, final, hidden, shared = 0.0, None, None, None, None
    for l in lines:
        if key in l:
            hit = l[key] >= target if model == "cnn" else l[key] <= target
            if hit and reached is None:
                reached = l["elapsed_s"] - evals  # training time: the evaluations before it left out
            evals += l.get("eval_s", 0.0)
            final = l[key]
        if "parallel" in l:
            hidden = l["parallel"]["hidden_fraction"]
            shared = l["parallel"].get("outer_shared_wait_s")  # absent before the field
    return reached, final, hidden, shared
def stat(values, fmt):
    v = [x for x in values if x is not None]
    if not v:
        return "-"
    mean = sum(v) / len(v)
    s = fmt % mean
    if len(v) > 1:
        s += " (" + fmt % min(v) + "-" + fmt % max(v) + ")"
    if len(v) < len(values):
        s += " [%d of %d]" % (len(v), len(values))
    return s
for model in models.split(","):
    target = float(cnn_target if model == "cnn" else gpt_target)
    unit = "test accuracy" if model == "cnn" else "validation nats/byte"
    for rate in rates.split(","):
        print("\n%s at %s: seconds to %s %s %g; final %s; mean (min-max) over seeds %s" %
              (model, rate, unit, ">=" if model == "cnn" else "<=", target, unit, seeds))
        print("| mode | time to target (s) | speed-up: sync's time / this | final | hidden | waits all ranks shared (s) |")
        print("| --- | --- | --- | --- | --- | --- |")
        sync_times = None
        for mode in modes.split(","):
            rs = [run(os.path.join(out, "%s-%s-%s-s%s.jsonl" % (model, rate, mode, s)), model, target)
                  for s in seeds.split(",")]
            times = [r[0] if r else None for r in rs]
            if mode == "sync":
                sync_times = times
            ratios = [st / t if t and st else None for t, st in zip(times, sync_times or [None] * len(times))]
            shared = stat([r[3] if r else None for r in rs], "%.2f") if mode == "co2" else "-"
            print("| %s | %s | %s | %s | %s | %s |" % (mode, stat(times, "%.0f"), stat(ratios, "%.3fx"),
                  stat([r[1] if r else None for r in rs], "%.4f"), stat([r[2] if r else None for r in rs], "%.2f"),
                  shared))
EOF
