#!/usr/bin/env bash
# Copies test and benchmark programs built here (with the whole project: oneDNN, UCX, FlatBuffers...) and the
# shared libraries they need that a GPU machine's CUDA image lacks into .gpu-deps/{bin,lib}, so
# run_on_device.sh can run them there without building the project (about 45 MB: carry
# .gpu-deps). The C library and the driver come from that machine; the CUDA runtime is linked into
# the programs statically; cuBLAS, cuDNN and NCCL are loaded at run time by soname from its system. Usage: tests/gpu/pack_for_device.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
dest=$root/.gpu-deps
grep -qx '/.gpu-deps/' "$root/.git/info/exclude" 2>/dev/null || echo '/.gpu-deps/' >> "$root/.git/info/exclude"
mkdir -p "$dest/bin" "$dest/lib"
for t in tests/gpu/gpu_executor_test tests/gpu/gpu_ops_test tests/gpu/gpu_trainer_test bench/gpu/bench_gpu_gpt \
         transport/launcher/cohort-run tests/multirank/dp_rank; do
  [[ -x $build/$t ]] || { echo "pack_for_device: $build/$t is not built" >&2; exit 1; }
  cp "$build/$t" "$dest/bin/"
  # Libraries outside glibc and CUDA (resolved here by ldd).
  ldd "$build/$t" | awk '$3 ~ /^\// {print $3}' |
    grep -vE '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libcuda|libcudart)\.so' |
    while read -r lib; do cp -L "$lib" "$dest/lib/"; done
done
du -sh "$dest"
