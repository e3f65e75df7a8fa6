#!/usr/bin/env bash
# Builds the GPU test driver and the kernel benchmark with nothing but the CUDA toolkit (nvcc +
# cuBLAS): no CMake cache, oneDNN, FlatBuffers or GoogleTest. For a GPU machine that lacks the
# project's Debian packages. Usage: tests/gpu/build_standalone.sh OUT_DIR [ARCH] (ARCH: sm_90).
# Also builds the NCCL communicator's test when NCCL and GoogleTest are found: NCCL in
# $NCCL_HOME, /usr/local/cuda or the nvidia-nccl Python package; GoogleTest in $GTEST_ROOT (a
# libgtest-dev .deb unpacked with dpkg -x, for a machine without it) or /usr.
set -euo pipefail
out=${1:?usage: build_standalone.sh OUT_DIR [ARCH]}
arch=${2:-sm_90}
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out/obj"
flags=(-std=c++17 -O3 -arch="$arch" -I"$root" --expt-relaxed-constexpr -Xcompiler=-Wall)
srcs=("$root"/core/base/base.cpp "$root"/kernels/cuda/*.cpp "$root"/kernels/cuda/*.cu
      "$root"/tests/gpu/{main,runtime_test,gemm_test,fused_test,attention_test,attention_cudnn_test,embedding_test}.cpp
      "$root"/bench/cuda/kernels_bench.cpp)
pids=()
for s in "${srcs[@]}"; do
  nvcc "${flags[@]}" -c "$s" -o "$out/obj/$(basename "$s").o" & pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
# cuDNN (attention_cudnn, cudnn_*) is loaded with dlopen: nothing to link, no header needed.
lib=("$out"/obj/base.cpp.o "$out"/obj/runtime.cpp.o "$out"/obj/gemm.cpp.o "$out"/obj/cublas_api.cpp.o
     "$out"/obj/cudnn_api.cpp.o "$out"/obj/cudnn_graph.cpp.o "$out"/obj/attention_cudnn.cpp.o "$out"/obj/*.cu.o)
nvcc -arch="$arch" -o "$out/gpu_kernels_test" "${lib[@]}" "$out"/obj/{main,runtime_test,gemm_test,fused_test,attention_test,attention_cudnn_test,embedding_test}.cpp.o -lcublas -ldl
nvcc -arch="$arch" -o "$out/bench_cuda_kernels" "${lib[@]}" "$out"/obj/kernels_bench.cpp.o -lcublas -ldl
echo "built $out/gpu_kernels_test and $out/bench_cuda_kernels ($arch)"

# The NCCL communicator and its GoogleTest suite: only transport/coll's interface, the
# in-process store and core/base, so no UCX or FlatBuffers.
nccl=${NCCL_HOME:-}
if [[ -z "$nccl" ]]; then
  if [[ -f /usr/local/cuda/include/nccl.h ]]; then nccl=/usr/local/cuda
  else nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null || true)
  fi
fi
gtest=${GTEST_ROOT:-/usr}
if [[ -z "$nccl" || ! -f "$nccl/include/nccl.h" || ! -f "$gtest/include/gtest/gtest.h" ]]; then
  echo "no NCCL (or no GoogleTest): nccl_communicator_test not built"
  exit 0
fi
ncclso=$(ls "$nccl"/lib*/libnccl.so* | head -1)
ncclib=$(dirname "$ncclso")
gtestlib=$(dirname "$(find "$gtest" -name libgtest.a | head -1)")
comm=("$root"/core/base/base.cpp "$root"/transport/bootstrap/{memory_store,store_util}.cpp
      "$root"/transport/coll/{communicator,work,reduce}.cpp "$root"/transport/nccl/{nccl_communicator,nccl_api}.cpp
      "$root"/tests/gpu/nccl_communicator_test.cpp)
g++ -std=c++17 -O2 -pthread -I"$root" -I/usr/local/cuda/include -I"$nccl/include" -I"$gtest/include" \
  "${comm[@]}" -o "$out/nccl_communicator_test" -L"$gtestlib" -lgtest -lgtest_main \
  -L/usr/local/cuda/lib64 -lcudart -ldl -Wl,-rpath,"$ncclib":/usr/local/cuda/lib64
echo "built $out/nccl_communicator_test (NCCL from $nccl)"
