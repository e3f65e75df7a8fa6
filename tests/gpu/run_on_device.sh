#!/usr/bin/env bash
# Everything the GPU backend checks on a lent GPU machine, in one call (device time is scarce):
# builds with nvcc alone, runs the kernel tests with a fixed and a fresh seed, compute-sanitizer
# (memcheck, racecheck) over the tests, the benchmark and the PyTorch anchor. Logs go to
# $OUT (or ./gpu-out); the summary prints last. Usage: tests/gpu/run_on_device.sh [ARCH]
set -uo pipefail
out=${OUT:-$PWD/gpu-out}
arch=${1:-sm_90}
root=$(cd "$(dirname "$0")/../.." && pwd)
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
timeout 200 $b/bench_cuda_kernels 989 > "$out/bench.log" 2>&1
timeout 120 python3 "$root/bench/cuda/torch_anchor.py" > "$out/torch.log" 2>&1
cat "$out/device.txt"
grep -hE "FAIL|checks|rc=" "$out/test.log" "$out/test2.log"
grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|Error" "$out/sanitizer.log"
cat "$out/bench.log" "$out/torch.log"
