#!/usr/bin/env bash
# cohort train --parallel sync --tensor 2 under cohort-run -n 2 (Megatron 1D tensor parallelism,
# one model replica over both ranks): trains the mlp like one process on the same batches —
# the same evaluations as printed, the last step's loss and gradient norm within 1e-5 relative
# (fp32 sums in another order) — while each rank holds about half the parameters, gradients,
# optimizer state and activations of a replicated run (printed at the end); plans that do
# not fit the world or the model fail on one line naming the numbers, with a non-zero exit; a
# resume under the same grid is bit-identical, and one process resumes from a rank's checkpoint.
# AxoNN's grids (--grid 2x2x1, 1x1x2) train like one process and like DDP.
#   parallel_tensor.sh COHORT_RUN COHORT_CLI
set -euo pipefail
run=$1 cli=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(train --model mlp --steps 40 --eval-every 20 --eval-examples 500 --log-every 20 --threads 1)
"$cli" "${common[@]}" --metrics "$dir/one.jsonl" >"$dir/one.out" 2>&1 ||
  { cat "$dir/one.out"; echo "FAIL: the single-process run exited non-zero"; exit 1; }
"$run" -n 2 -- "$cli" "${common[@]}" --parallel sync --tensor 2 --metrics "$dir/tp.jsonl" >"$dir/tp.out" 2>&1 ||
  { cat "$dir/tp.out"; echo "FAIL: --tensor 2 exited non-zero"; exit 1; }
evals() { grep -o 'eval step [0-9]*: loss [0-9.]* | accuracy [0-9.]*%' "$1"; }
[ "$(evals "$dir/one.out" | wc -l)" -eq 2 ] || { cat "$dir/one.out"; echo "FAIL: expected 2 evaluations"; exit 1; }
if [ "$(evals "$dir/one.out")" != "$(evals "$dir/tp.out")" ]; then
  paste <(evals "$dir/one.out") <(evals "$dir/tp.out"); echo "FAIL: --tensor 2 evaluates differently"; exit 1
fi
field() { grep -o "\"$2\":[0-9.e+-]*" "$1" | tail -1 | cut -d: -f2; }
for f in loss grad_norm; do
  a=$(field "$dir/one.jsonl" $f) b=$(field "$dir/tp.jsonl" $f)
  awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 1e-5 * a) }' ||
    { echo "FAIL: $f differs: one process $a, --tensor 2 $b"; exit 1; }
done
grep -q "sync tensor 2" "$dir/tp.out" || { cat "$dir/tp.out"; echo "FAIL: the banner does not name the grid"; exit 1; }
# AxoNN's grids: 2x2x1 at 4 ranks (the MLP's fc1 cut over X along its in-features and Y along its
# out-features, fc2 the other way round) trains like one process too; 1x1x2 at 2 ranks (the
# weights cut over Z, gathered before use; the two Z ranks read their own rows) like DDP over 2.
same_run() {  # same_run <name a> <name b> <fields>: the same evaluations, the fields within 1e-5
  if [ "$(evals "$dir/$1.out")" != "$(evals "$dir/$2.out")" ]; then
    paste <(evals "$dir/$1.out") <(evals "$dir/$2.out"); echo "FAIL: $2 evaluates differently from $1"; exit 1
  fi
  for f in $3; do
    a=$(field "$dir/$1.jsonl" $f) b=$(field "$dir/$2.jsonl" $f)
    awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 1e-5 * a) }' ||
      { echo "FAIL: $f differs: $1 $a, $2 $b"; exit 1; }
  done
}
"$run" -n 4 -- "$cli" "${common[@]}" --parallel sync --grid 2x2x1 --metrics "$dir/xy.jsonl" >"$dir/xy.out" 2>&1 ||
  { cat "$dir/xy.out"; echo "FAIL: --grid 2x2x1 exited non-zero"; exit 1; }
same_run one xy "loss grad_norm"
grep -q "sync grid 2x2x1" "$dir/xy.out" || { cat "$dir/xy.out"; echo "FAIL: the banner does not name the grid"; exit 1; }
"$run" -n 2 -- "$cli" "${common[@]}" --parallel sync --metrics "$dir/ddp.jsonl" >"$dir/ddp.out" 2>&1 &&
  "$run" -n 2 -- "$cli" "${common[@]}" --parallel sync --grid 1x1x2 --metrics "$dir/z.jsonl" >"$dir/z.out" 2>&1 ||
  { cat "$dir/ddp.out" "$dir/z.out"; echo "FAIL: DDP or --grid 1x1x2 exited non-zero"; exit 1; }
same_run ddp z grad_norm  # the loss: DDP's rank 0 logs its own rows', the Z ranks their mean
# The model state and activations per rank against the replicated run (DDP over the same 2
# ranks): fc1 and fc2 are split (fc2's bias, 10 floats, is whole on both), and so are the hidden
# activations and the weight gradients a step holds: about half of each, and a bit.
"$run" -n 2 -- "$cli" "${common[@]}" --parallel sync --no-eval --metrics "$dir/replicated.jsonl" >"$dir/replicated.out" 2>&1 ||
  { cat "$dir/replicated.out"; echo "FAIL: the replicated run exited non-zero"; exit 1; }
sizes=""
for f in parameter_bytes gradient_bytes optimizer_state_bytes peak_activation_bytes; do
  whole=$(field "$dir/replicated.jsonl" $f) per_rank=$(field "$dir/tp.jsonl" $f)
  awk -v w="$whole" -v p="$per_rank" 'BEGIN { exit !(p > 0 && p <= 0.55 * w) }' ||
    { echo "FAIL: --tensor 2 holds $f $per_rank per rank, the replicated run $whole"; exit 1; }
  sizes="$sizes $f $per_rank/$whole"
done
grep -q "model state per rank: parameters .* activations [0-9.]* MiB" "$dir/tp.out" ||
  { cat "$dir/tp.out"; echo "FAIL: the summary does not print the activations"; exit 1; }
# A run stopped at step 20 and resumed from its per-rank checkpoints ends with the uninterrupted
# run's loss, bit for bit. The files hold the whole model (a rank's blocks gathered): one process
# resumes from one too, and ends within fp32 rounding of the tensor-parallel run.
"$run" -n 2 -- "$cli" "${common[@]}" --parallel sync --tensor 2 --no-eval --save "$dir/ck" --stop-after 20 \
  >"$dir/stop.out" 2>&1 || { cat "$dir/stop.out"; echo "FAIL: the stopped run exited non-zero"; exit 1; }
"$run" -n 2 -- "$cli" "${common[@]}" --parallel sync --tensor 2 --resume "$dir/ck" --metrics "$dir/resumed.jsonl" \
  >"$dir/resumed.out" 2>&1 || { cat "$dir/resumed.out"; echo "FAIL: the resumed run exited non-zero"; exit 1; }
[ "$(field "$dir/tp.jsonl" loss)" = "$(field "$dir/resumed.jsonl" loss)" ] ||
  { echo "FAIL: resumed loss $(field "$dir/resumed.jsonl" loss), uninterrupted $(field "$dir/tp.jsonl" loss)"; exit 1; }
"$cli" "${common[@]}" --resume "$dir/ck.rank1" --metrics "$dir/one_resumed.jsonl" >"$dir/one_resume.out" 2>&1 ||
  { cat "$dir/one_resume.out"; echo "FAIL: one process did not resume from a tensor-parallel rank's checkpoint"; exit 1; }
a=$(field "$dir/tp.jsonl" loss) b=$(field "$dir/one_resumed.jsonl" loss)
awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 1e-5 * a) }' ||
  { echo "FAIL: resumed on one process: loss $b, the tensor-parallel run $a"; exit 1; }
# co2 over the data axis of a tensor-parallel model, end to end at 4 ranks (data 2 x tensor 2;
# its numbers are checked against replicated co2 in tensor_parallel_test.cpp): trains, evaluates,
# and the data shards are the 2 replicas (937 steps per epoch of the 60000 examples at batch 32).
"$run" -n 4 -- "$cli" train --model mlp --steps 8 --eval-every 4 --eval-examples 200 --threads 1 --parallel co2 \
  --tau 2 --tensor 2 >"$dir/co2.out" 2>&1 || { cat "$dir/co2.out"; echo "FAIL: co2 --tensor 2 exited non-zero"; exit 1; }
grep -q "co2 tau 2 tensor 2, 8 steps (937 per epoch)" "$dir/co2.out" && [ "$(evals "$dir/co2.out" | wc -l)" -eq 2 ] ||
  { cat "$dir/co2.out"; echo "FAIL: co2 --tensor 2 did not train and evaluate as expected"; exit 1; }
# Both evaluations read the two data replicas' average (each rank's blocks averaged with its
# peer's in the other replica), not rank 0's own parameters.
[ "$(grep -c "s, the replicas' average)" "$dir/co2.out")" -eq 2 ] ||
  { cat "$dir/co2.out"; echo "FAIL: co2 --tensor 2 did not evaluate the replicas' average"; exit 1; }
# co2's outer state: stopped mid-round (step 5, a reduction in flight) and resumed under the same
# grid, it ends bit-identical to the uninterrupted run.
co2=(train --model mlp --steps 12 --threads 1 --no-eval --parallel co2 --tau 2 --tensor 2)
"$run" -n 4 -- "$cli" "${co2[@]}" --metrics "$dir/co2_full.jsonl" >"$dir/co2_full.out" 2>&1 &&
  "$run" -n 4 -- "$cli" "${co2[@]}" --save "$dir/co2ck" --stop-after 5 >"$dir/co2_stop.out" 2>&1 &&
  "$run" -n 4 -- "$cli" "${co2[@]}" --resume "$dir/co2ck" --metrics "$dir/co2_res.jsonl" >"$dir/co2_res.out" 2>&1 ||
  { cat "$dir"/co2_*.out; echo "FAIL: the co2 --tensor 2 resume runs exited non-zero"; exit 1; }
[ "$(field "$dir/co2_full.jsonl" loss)" = "$(field "$dir/co2_res.jsonl" loss)" ] ||
  { echo "FAIL: co2 resumed $(field "$dir/co2_res.jsonl" loss), uninterrupted $(field "$dir/co2_full.jsonl" loss)"; exit 1; }
# ZeRO 2 over the data axis of data 2 x tensor 2 updates like DDP there (the gradient norm summed
# over the tensor axis, each replicated parameter once): the same evaluations, loss and norm.
"$run" -n 4 -- "$cli" "${common[@]}" --parallel sync --tensor 2 --metrics "$dir/d2t2.jsonl" >"$dir/d2t2.out" 2>&1 &&
  "$run" -n 4 -- "$cli" "${common[@]}" --parallel sync --tensor 2 --zero 2 --metrics "$dir/d2t2z.jsonl" \
    >"$dir/d2t2z.out" 2>&1 || { cat "$dir/d2t2.out" "$dir/d2t2z.out"; echo "FAIL: --tensor 2 (--zero 2) at 4 ranks"; exit 1; }
same_run d2t2 d2t2z "loss grad_norm"
# Megatron's sequence parallelism on the gpt (Brown): the same loss and gradient norm as --tensor 2
# without it within 1e-5 (sums in another order), fewer activation bytes at the peak.
gpt=(train --model gpt --layers 2 --width 64 --heads 4 --context 64 --batch 4 --steps 4 --threads 1 --no-eval
     --log-every 2 --parallel sync --tensor 2)
"$run" -n 2 -- "$cli" "${gpt[@]}" --metrics "$dir/gpt.jsonl" >"$dir/gpt.out" 2>&1 &&
  "$run" -n 2 -- "$cli" "${gpt[@]}" --sequence-parallel megatron --metrics "$dir/sp.jsonl" >"$dir/sp.out" 2>&1 &&
  "$run" -n 2 -- "$cli" "${gpt[@]}" --sequence-parallel all-to-all --metrics "$dir/a2a.jsonl" >"$dir/a2a.out" 2>&1 ||
  { cat "$dir/gpt.out" "$dir/sp.out" "$dir/a2a.out"; echo "FAIL: the gpt --tensor 2 runs exited non-zero"; exit 1; }
grep -q "sync tensor 2 sequence megatron" "$dir/sp.out" || { cat "$dir/sp.out"; echo "FAIL: the banner does not say it"; exit 1; }
same_run gpt sp "loss grad_norm"
same_run gpt a2a "loss grad_norm"  # all-to-all: Y a sequence axis, the same training
a=$(field "$dir/gpt.jsonl" peak_activation_bytes) b=$(field "$dir/sp.jsonl" peak_activation_bytes)
[ "$b" -lt "$a" ] || { echo "FAIL: sequence parallelism holds $b activation bytes, without it $a"; exit 1; }
sizes="$sizes; gpt activations with sequence parallelism $b/$a (all-to-all $(field "$dir/a2a.jsonl" peak_activation_bytes))"
# All-to-all with Z (--grid 1x2x2: the weights also cut over Z): trains like the same grid without it.
gpt_z=("${gpt[@]:0:$((${#gpt[@]} - 2))}" --grid 1x2x2)  # the gpt runs' flags, --tensor 2 replaced
"$run" -n 4 -- "$cli" "${gpt_z[@]}" --metrics "$dir/gptz.jsonl" >"$dir/gptz.out" 2>&1 &&
  "$run" -n 4 -- "$cli" "${gpt_z[@]}" --sequence-parallel all-to-all --metrics "$dir/a2az.jsonl" >"$dir/a2az.out" 2>&1 ||
  { cat "$dir/gptz.out" "$dir/a2az.out"; echo "FAIL: the gpt --grid 1x2x2 runs exited non-zero"; exit 1; }
grep -q "grid 1x2x2 sequence all-to-all" "$dir/a2az.out" || { cat "$dir/a2az.out"; echo "FAIL: the banner does not say it"; exit 1; }
same_run gptz a2az "loss grad_norm"
refused() {  # refused <expected text> <args...>
  local want=$1; shift
  if "$run" -n 2 -- "$cli" train --steps 2 --threads 1 --parallel sync "$@" >"$dir/bad.out" 2>&1; then
    echo "FAIL: accepted: $*"; exit 1
  fi
  grep -q -- "$want" "$dir/bad.out" || { cat "$dir/bad.out"; echo "FAIL: '$*' without '$want'"; exit 1; }
}
refused "error: creating the trainer: .*tensor_y 3 x tensor_z 1 = 3 ranks does not divide the world size 2" \
  --model mlp --tensor 3
refused "error: creating the trainer: .*tensor_y = 2 does not divide the 15 out-features of linear 'fc1'" \
  --model mlp --hidden 15 --tensor 2
refused "error: creating the trainer: .*tensor_y = 2 but the model has no pair of linear layers" --model cnn --tensor 2
refused "error: creating the trainer: .*tensor_z = 2 does not divide the 15 rows of the weight block of linear 'fc1'" \
  --model mlp --hidden 15 --grid 1x1x2
refused "--grid expects X x Y x Z written XxYxZ (e.g. 2x2x1), got '2x2'" --model mlp --grid 2x2
refused "give one of --tensor and --grid" --model mlp --tensor 2 --grid 1x2x1
echo "ok: --tensor 2 and --grid 2x2x1 train like one process, --grid 1x1x2 like DDP; bytes per rank of the replicated run:$sizes"
# co2 over the data axis resumes under another layout: stopped at step 20 under 2 replicated
# ranks, resumed with each replica over 2 tensor ranks (each rank reading its replica's file),
# it ends at step 40 within fp32 rounding of the uninterrupted replicated run. fp32 messages: a
# 4-bit message's blocks of 256 values follow each rank's own parameters, so another layout
# rounds them differently.
moved=(--parallel co2 --tau 4 --outer-bits 32 --no-eval)
"$run" -n 2 -- "$cli" "${common[@]}" "${moved[@]}" --metrics "$dir/moved_full.jsonl" >"$dir/moved_full.out" 2>&1 &&
  "$run" -n 2 -- "$cli" "${common[@]}" "${moved[@]}" --save "$dir/movedck" --stop-after 20 >"$dir/moved_stop.out" 2>&1 &&
  "$run" -n 4 -- "$cli" "${common[@]}" "${moved[@]}" --tensor 2 --resume "$dir/movedck" \
    --metrics "$dir/moved_res.jsonl" >"$dir/moved_res.out" 2>&1 ||
  { cat "$dir"/moved_*.out; echo "FAIL: a co2 run stopped and resumed under another layout exited non-zero"; exit 1; }
a=$(field "$dir/moved_full.jsonl" loss) b=$(field "$dir/moved_res.jsonl" loss)
awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 1e-5 * a) }' ||
  { echo "FAIL: co2 resumed under --tensor 2: loss $b, the uninterrupted replicated run $a"; exit 1; }
[ "$(field "$dir/moved_res.jsonl" step)" = 40 ] ||
  { cat "$dir/moved_res.jsonl"; echo "FAIL: the resumed co2 run did not end at step 40"; exit 1; }
echo "co2 resumed under --tensor 2 from 2 replicated ranks' files: loss $b, uninterrupted $a"
