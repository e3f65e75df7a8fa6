#!/usr/bin/env bash
# Builds the GPU test driver and the kernel benchmark with nothing but the CUDA toolkit (nvcc +
# cuBLAS): no CMake cache, oneDNN, FlatBuffers or GoogleTest. For a GPU machine that lacks the
# project's Debian packages. Usage: tests/gpu/build_standalone.sh OUT_DIR [ARCH] (ARCH: sm_90).
set -euo pipefail
out=${1:?usage: build_standalone.sh OUT_DIR [ARCH]}
arch=${2:-sm_90}
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out/obj"
flags=(-std=c++17 -O3 -arch="$arch" -I"$root" --expt-relaxed-constexpr -Xcompiler=-Wall)
srcs=("$root"/core/base/base.cpp "$root"/kernels/cuda/*.cpp "$root"/kernels/cuda/*.cu
      "$root"/tests/gpu/{main,runtime_test,gemm_test,fused_test,attention_test,embedding_test}.cpp
      "$root"/bench/cuda/kernels_bench.cpp)
pids=()
for s in "${srcs[@]}"; do
  nvcc "${flags[@]}" -c "$s" -o "$out/obj/$(basename "$s").o" & pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
lib=("$out"/obj/base.cpp.o "$out"/obj/runtime.cpp.o "$out"/obj/gemm.cpp.o "$out"/obj/*.cu.o)
nvcc -arch="$arch" -o "$out/gpu_kernels_test" "${lib[@]}" "$out"/obj/{main,runtime_test,gemm_test,fused_test,attention_test,embedding_test}.cpp.o -lcublas
nvcc -arch="$arch" -o "$out/bench_cuda_kernels" "${lib[@]}" "$out"/obj/kernels_bench.cpp.o -lcublas
echo "built $out/gpu_kernels_test and $out/bench_cuda_kernels ($arch)"
