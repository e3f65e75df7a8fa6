#!/usr/bin/env bash
# Everything the GPU backend checks on a lent GPU machine, in one call (device time is scarce):
# builds with nvcc alone, runs the kernel tests with a fixed and a fresh seed, compute-sanitizer
# (memcheck, racecheck) over the tests, the benchmark and the PyTorch anchor. Logs go to
# $OUT (or ./gpu-out); the summary prints last. Usage: tests/gpu/run_on_device.sh [ARCH]
# The NCCL communicator's tests need GoogleTest, which the GPU machine lacks: here, once,
#   echo /.gpu-deps/ >> .git/info/exclude; mkdir -p .gpu-deps && (cd .gpu-deps &&
#   apt-get download libgtest-dev && dpkg -x libgtest-dev_*.deb root)
# then carry .gpu-deps; GTEST_ROOT below finds it (without it those tests are not built).
# tests/gpu/pack_for_device.sh adds the executor, operator and trainer tests, cohort-run with
# dp_rank, and the GPT benchmark built here (with their libraries) to it.
set -uo pipefail
out=${OUT:-$PWD/gpu-out}
arch=${1:-sm_90}
root=$(cd "$(dirname "$0")/../.." && pwd)
[[ -d "$root/.gpu-deps/root/usr/include/gtest" ]] && export GTEST_ROOT=$root/.gpu-deps/root/usr
export PATH=/usr/local/cuda/bin:$PATH
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv \
  > "$out/device.txt" 2>&1
nvcc --version | tail -1 >> "$out/device.txt"
"$root/tests/gpu/build_standalone.sh" /tmp/cohort-gpu "$arch" > "$out/build.log" 2>&1 || {
  tail -40 "$out/build.log"; exit 1; }
b=/tmp/cohort-gpu
$b/gpu_kernels_test 12345 > "$out/test.log" 2>&1; echo "rc=$?" >> "$out/test.log"
$b/gpu_kernels_test > "$out/test2.log" 2>&1; echo "rc=$?" >> "$out/test2.log"
{ timeout 240 compute-sanitizer --tool memcheck $b/gpu_kernels_test 7 | tail -4
  timeout 240 compute-sanitizer --tool racecheck $b/gpu_kernels_test 7 | tail -4; } > "$out/sanitizer.log" 2>&1
if [[ -x $b/nccl_communicator_test ]]; then
  timeout 120 $b/nccl_communicator_test > "$out/nccl.log" 2>&1; echo "rc=$?" >> "$out/nccl.log"
else
  echo "nccl_communicator_test not built (see build.log)" > "$out/nccl.log"
fi
# The executor and the trainer against the CPU, and the GPT benchmark, from programs built here
# (tests/gpu/pack_for_device.sh).
# libnccl is loaded at run time: from the CUDA toolkit, or the nvidia-nccl Python package.
nccl_lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__) + "/lib")' 2>/dev/null)
export LD_LIBRARY_PATH=$root/.gpu-deps/lib:/usr/local/cuda/lib64${nccl_lib:+:$nccl_lib}:${LD_LIBRARY_PATH:-}
packed() {  # name timeout log args...
  local name=$1 limit=$2 log=$3; shift 3
  if [[ -x $root/.gpu-deps/bin/$name ]]; then
    timeout "$limit" "$root/.gpu-deps/bin/$name" "$@" > "$out/$log" 2>&1; echo "rc=$?" >> "$out/$log"
  else
    echo "$name not packed (tests/gpu/pack_for_device.sh)" > "$out/$log"
  fi
}
packed gpu_executor_test 300 executor.log
packed gpu_ops_test 300 ops.log
packed gpu_trainer_test 300 trainer.log
# Two ranks on the GPU (sharing it when there is one: DDP then goes through host copies).
for mode in ddp co2; do
  UCX_TLS=self,sm OMP_NUM_THREADS=1 packed cohort-run 120 "dp-$mode.log" -n 2 -- "$root/.gpu-deps/bin/dp_rank" "$mode-cuda"
done
packed bench_gpu_gpt 400 gpt_bench.log ${COHORT_GPU_BENCH_ARGS:-}
timeout 200 $b/bench_cuda_kernels 989 > "$out/bench.log" 2>&1
timeout 120 python3 "$root/bench/cuda/torch_anchor.py" > "$out/torch.log" 2>&1
cat "$out/device.txt"
grep -hE "FAIL|checks|rc=" "$out/test.log" "$out/test2.log"
grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|Error" "$out/sanitizer.log"
grep -hE "PASSED|FAILED|SKIPPED|not built|rc=" "$out/nccl.log"
grep -hE "PASSED|FAILED|SKIPPED|not packed|rc=|error" "$out/executor.log" "$out/ops.log" "$out/trainer.log"
grep -hE "max \||reduced|skipped|rc=" "$out"/dp-*.log
tail -12 "$out/gpt_bench.log"
cat "$out/bench.log" "$out/torch.log"
