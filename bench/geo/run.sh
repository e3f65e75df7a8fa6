#!/usr/bin/env bash
# Geo-distributed training over uneven links (core/parallel/fence.h): 4 ranks in network
# namespaces as two sites (bench/netns/netns.sh --sites; default {0,1} and {2,3}), links inside
# a site at --intra, between the sites at each rate of --inter, the CNN on Fashion-MNIST and a GPT
# on Brown (4 blocks, width 128, context 64), at equal samples (the same steps of the same global batch) for:
#   sync       data parallelism, DDP (every rank --batch B, global 4B)
#   co2        co2, tau --tau (the same)
#   sync-topk  DDP with top-k gradient compression and error feedback, --grad-keep of each bucket
#              (the same batches; not in the default modes)
#   pipe       a pipeline of 4 stages cut by compute alone, ranks in their numbered order
#              (oblivious to the links; global batch 4B, --micro-batches M)
#   fence      --plan fence, no compression (the links measured, the order and cuts chosen)
#   fence-topk --plan fence with top-k compression of the cuts the links make slowest
# It prints, per model and rate: seconds per step, time per epoch, the speed-up over `pipe` (the
# anchor, the same invocation, links and steps), and the final test accuracy (CNN) or validation
# nats/byte (GPT), each from rank 0's metrics; and fence's partition as rank 0 printed it.
#
#   bench/geo/run.sh BUILD_DIR [--models cnn,gpt] [--inter 8mbit,100mbit] [--intra 10gbit]
#       [--sites 0,1/2,3] [--modes sync,co2,pipe,fence,fence-topk] [--cnn-steps 150]
#       [--gpt-steps 100] [--batch 16] [--micro-batches 8] [--tau 8] [--grad-keep 0.01] [--timeout 3600] [--keep DIR]
#       [--report-only]
# Exits 0 with a message where network namespaces are not permitted (netns.sh says why).
set -euo pipefail

BUILD="${1:?usage: run.sh BUILD_DIR [options] (see the header)}"
shift
MODELS=cnn,gpt; INTER=8mbit,100mbit; INTRA=10gbit; SITES=0,1/2,3; MODES=sync,co2,pipe,fence,fence-topk
CNN_STEPS=150; GPT_STEPS=100; BATCH=16; MICRO=8; TAU=8; GRAD_KEEP=0.01; TIMEOUT=3600; KEEP=""; REPORT_ONLY=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --models) MODELS="$2"; shift 2 ;;
    --inter) INTER="$2"; shift 2 ;;
    --intra) INTRA="$2"; shift 2 ;;
    --sites) SITES="$2"; shift 2 ;;
    --modes) MODES="$2"; shift 2 ;;
    --cnn-steps) CNN_STEPS="$2"; shift 2 ;;
    --gpt-steps) GPT_STEPS="$2"; shift 2 ;;
    --batch) BATCH="$2"; shift 2 ;;
    --micro-batches) MICRO="$2"; shift 2 ;;
    --tau) TAU="$2"; shift 2 ;;
    --grad-keep) GRAD_KEEP="$2"; shift 2 ;;
    --timeout) TIMEOUT="$2"; shift 2 ;;
    --keep) KEEP="$2"; shift 2 ;;
    --report-only) REPORT_ONLY=1; shift ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
HERE="$(cd "$(dirname "$0")" && pwd)"
NETNS="$HERE/../netns/netns.sh"
CLI="$(cd "$BUILD" && pwd)/cli/cohort"
COHORT_RUN="$(cd "$BUILD" && pwd)/transport/launcher/cohort-run"
[[ -x "$CLI" && -x "$COHORT_RUN" ]] || { echo "run.sh: $CLI or $COHORT_RUN not built" >&2; exit 2; }
OUT="${KEEP:-$(mktemp -d)}"
mkdir -p "$OUT"
[[ -z "$KEEP" ]] && trap 'rm -rf "$OUT"' EXIT
[[ $REPORT_ONLY == 1 && -z "$KEEP" ]] && { echo "run.sh: --report-only needs --keep DIR" >&2; exit 2; }
# Four ranks share few cores: one thread each, no spinning; TCP so that the shaping applies.
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive OPENBLAS_NUM_THREADS=1 UCX_TLS=tcp
RANKS=4
probe_rc=0
((REPORT_ONLY)) || probe_out=$("$NETNS" run 1 --rate none --timeout 30 --name geo -- true 2>&1) || probe_rc=$?
if ((probe_rc == 77)); then
  echo "run.sh: SKIP: network namespaces are not available here:" >&2
  echo "$probe_out" | grep SKIP >&2 || true
  exit 0
elif ((probe_rc != 0)); then
  echo "$probe_out" >&2; echo "run.sh: netns.sh probe failed with code $probe_rc" >&2; exit 1
fi
IFS=, read -r -a MODEL_LIST <<<"$MODELS"
IFS=, read -r -a INTER_LIST <<<"$INTER"
IFS=, read -r -a MODE_LIST <<<"$MODES"
((REPORT_ONLY)) && MODEL_LIST=()
global=$((BATCH * RANKS))
echo "geo: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc --all) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $RANKS ranks," \
  "sites $SITES, intra $INTRA, global batch $global, $MICRO micro-batches, co2 tau $TAU"
for model in "${MODEL_LIST[@]}"; do
  if [[ "$model" == cnn ]]; then
    steps=$CNN_STEPS; sizes=()
  else
    steps=$GPT_STEPS; sizes=(--layers 4 --width 128 --heads 4 --context 64)
  fi
  for inter in "${INTER_LIST[@]}"; do
    for mode in "${MODE_LIST[@]}"; do
      case "$mode" in
        sync) args=(--parallel sync --batch "$BATCH") ;;
        sync-topk) args=(--parallel sync --grad-keep "$GRAD_KEEP" --batch "$BATCH") ;;
        co2) args=(--parallel co2 --tau "$TAU" --batch "$BATCH") ;;
        pipe) args=(--parallel sync --pipeline "$RANKS" --micro-batches "$MICRO" --batch "$global") ;;
        fence) args=(--parallel sync --plan fence --fence-compression 0 --micro-batches "$MICRO" --batch "$global") ;;
        fence-topk) args=(--parallel sync --plan fence --micro-batches "$MICRO" --batch "$global") ;;
        *) echo "run.sh: unknown mode $mode" >&2; exit 2 ;;
      esac
      name="$model-$inter-$mode"
      rc=0
      rm -f "$OUT/$name.jsonl"
      rm -f "$OUT/$name.eval.jsonl" "$OUT/$name".ckpt*
      "$NETNS" run "$RANKS" --sites "$SITES" --intra "$INTRA" --inter "$inter" --timeout "$TIMEOUT" --name geo -- \
        "$CLI" train --model "$model" --steps "$steps" --threads 1 --seed 1 --no-eval "${sizes[@]}" \
        --log-every 10 --save "$OUT/$name.ckpt" --metrics "$OUT/$name.jsonl" "${args[@]}" >"$OUT/$name.log" 2>&1 || rc=$?
      # The final model evaluated on the whole test / validation split by one process outside the
      # namespaces (checkpoints hold the whole model under any layout): over an 8 Mbit/s pipeline
      # the evaluation alone would take minutes.
      # A pipeline's model is evaluated as it trained: over the same cuts, compressed alike (a model
      # trained through top-k cuts and evaluated whole lost 30-40 points of accuracy), by 4
      # ranks over shared memory.
      if ((rc == 0)) && [[ "$mode" == sync || "$mode" == co2 || "$mode" == sync-topk ]]; then
        "$CLI" train --model "$model" --steps "$steps" --threads 2 "${sizes[@]}" "${args[@]: -2}" \
          --resume "$OUT/$name.ckpt.rank0" --metrics "$OUT/$name.eval.jsonl" >>"$OUT/$name.log" 2>&1 || rc=$?
      elif ((rc == 0)); then
        cuts=$(grep -o "^\[rank 0\] stage [1-9][0-9]*: nodes [0-9]*-[0-9]* '[^']*'" "$OUT/$name.log" | sed "s/.*'\(.*\)'/\1/" |
          tail -n $((RANKS - 1)) | paste -sd, -)
        keep=$(grep -o "^\[rank 0\] fence: cuts [^ ]* keep [^ ]*" "$OUT/$name.log" | tail -1 | sed 's/.* keep //' || true)
        env -u UCX_TLS "$COHORT_RUN" -n "$RANKS" -- "$CLI" train --model "$model" --steps "$steps" --threads 1 "${sizes[@]}" \
          --parallel sync --pipeline "$RANKS" --micro-batches "$MICRO" --batch "$global" --pipeline-cuts "$cuts" \
          ${keep:+--pipeline-keep "$keep"} --resume "$OUT/$name.ckpt" --metrics "$OUT/$name.eval.jsonl" \
          >>"$OUT/$name.log" 2>&1 || rc=$?
      fi
      ((rc == 0)) || { tail -5 "$OUT/$name.log" >&2; echo "run.sh: $name failed with code $rc" >&2; }
      echo "run.sh: $name done (code $rc)" >&2
    done
  done
done

python3 - "$OUT" "$MODELS" "$INTER" "$MODES" <<'PY'
import json, os, re, sys
out, models, inters, modes = sys.argv[1:]
def run(model, inter, mode):
    """(seconds per step, steps per epoch, final metric) of one run, or None."""
    path = os.path.join(out, "%s-%s-%s.jsonl" % (model, inter, mode))
    log = os.path.join(out, "%s-%s-%s.log" % (model, inter, mode))
    if not os.path.exists(path) or not os.path.exists(log):
        return None
    lines = [json.loads(l) for l in open(path) if l.strip()]
    key = "eval_accuracy" if model == "cnn" else "eval_nats_per_byte"
    evaluated = path[:-len(".jsonl")] + ".eval.jsonl"
    if os.path.exists(evaluated):
        lines += [json.loads(l) for l in open(evaluated) if l.strip()]
    final, evals, last = None, 0.0, None
    steps = 0
    for l in lines:
        if "elapsed_s" in l:
            last = l["elapsed_s"] - evals  # a line's elapsed_s comes before its own evaluation
        if key in l:
            final = l[key]
            evals += l.get("eval_s", 0.0)
        if "step" in l:
            steps = max(steps, l["step"])
    m = re.search(r"\((\d+) per epoch\)", open(log).read())
    if last is None or not steps or not m:
        return None
    return last / steps, int(m.group(1)), final
for model in models.split(","):
    unit = "test accuracy" if model == "cnn" else "validation nats/byte"
    for inter in inters.split(","):
        print("\n%s, links between the sites %s:" % (model, inter))
        print("| mode | s / step | time per epoch (s) | speed-up over pipe | final %s |" % unit)
        print("| --- | --- | --- | --- | --- |")
        anchor = run(model, inter, "pipe")
        for mode in modes.split(","):
            r = run(model, inter, mode)
            if r is None:
                print("| %s | failed | - | - | - |" % mode)
                continue
            ratio = "%.2fx" % (anchor[0] / r[0]) if anchor else "-"
            final = "%.2f%%" % (100 * r[2]) if model == "cnn" and r[2] is not None else \
                    ("%.4f" % r[2] if r[2] is not None else "-")
            print("| %s | %.3f | %.0f | %s | %s |" % (mode, r[0], r[0] * r[1], ratio, final))
        for mode in ("fence-topk", "fence"):
            log = os.path.join(out, "%s-%s-%s.log" % (model, inter, mode))
            if os.path.exists(log):
                # Rank 0's lines from the link matrix to the bottleneck.
                part, on = [], False
                for l in open(log):
                    if not l.startswith("[rank 0] "):
                        continue
                    text = l.split("] ", 1)[1].rstrip()
                    on = on or text.startswith("links, Mbit/s")
                    if on:
                        part.append(text)
                    if text.startswith("fence: bottleneck"):
                        break
                if part:
                    print("\n%s's partition (rank 0):\n```\n%s\n```" % (mode, "\n".join(part)))
                break
PY
