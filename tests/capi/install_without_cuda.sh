#!/usr/bin/env bash
# Installs the built tree into a temporary prefix, builds tests/capi/without_cuda.c against it,
# and runs that program inside a mount namespace where the CUDA toolkit's folder is covered by an
# empty one: a CPU-only user of libcohort must not need the toolkit (issue #25, item 8). Exits 77
# (ctest's skip) when mount namespaces cannot be made here (not root, no unshare).
#   install_without_cuda.sh BUILD_DIR SOURCE_DIR CUDA_TOOLKIT_ROOT [CONSUMER_FLAGS]
set -euo pipefail
build_dir=$1
source_dir=$2
cuda_root=$(readlink -f "$3")
extra_flags=${4:-}

if [ "$(id -u)" -ne 0 ]; then
  echo "skipped: hiding $cuda_root needs a mount namespace, which needs root"
  exit 77
fi
if ! command -v mount >/dev/null; then
  echo "skipped: no mount program (Debian: mount)"
  exit 77
fi
if ! unshare -m true 2>/dev/null; then
  echo "skipped: unshare -m is not allowed here"
  exit 77
fi
[ -d "$cuda_root" ] || { echo "no CUDA toolkit at $cuda_root" >&2; exit 1; }
case $cuda_root in
  / | /usr | /usr/local | /opt) echo "skipped: the toolkit is not in a folder of its own ($cuda_root)"; exit 77 ;;
esac

prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build_dir" --prefix "$prefix" >/dev/null
mkdir "$prefix/empty"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# shellcheck disable=SC2046,SC2086
cc -std=c11 -Wall -Wextra -Werror $extra_flags "$source_dir/tests/capi/without_cuda.c" \
  $(pkg-config --cflags --libs cohort) -Wl,-rpath,"$prefix/lib" -o "$prefix/without_cuda"

# Inside the namespace: cover the toolkit, check that no CUDA runtime can still be found through
# the loader's cache, then run the program (ldd first, so a failure names the missing library);
# where a driver is installed (a GPU machine) the program accepts a usable device.
# shellcheck disable=SC2016
unshare -m --propagation private bash -euo pipefail -c '
  cuda_root=$1 prefix=$2
  mount --bind "$prefix/empty" "$cuda_root"
  [ -z "$(ls -A "$cuda_root")" ] || { echo "could not hide $cuda_root" >&2; exit 1; }
  for lib in $(ldconfig -p | awk "/libcudart\\.so/ {print \$NF}"); do
    if [ -e "$lib" ]; then echo "skipped: a CUDA runtime outside $cuda_root remains visible: $lib"; exit 77; fi
  done
  if ldd "$prefix/without_cuda" | grep "not found"; then
    echo "without $cuda_root, a library the program needs is missing (above)" >&2
    exit 1
  fi
  driver=""
  for lib in $(ldconfig -p | awk "/libcuda\\.so\\.1 / {print \$NF}"); do
    if [ -e "$lib" ]; then driver=--driver-present; fi
  done
  "$prefix/without_cuda" $driver
' hide-cuda "$cuda_root" "$prefix"
echo "installed libcohort loads and trains with $cuda_root hidden"
