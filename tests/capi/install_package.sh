#!/usr/bin/env bash
# Installs the built tree into a temporary prefix, then builds examples/installed against it
# twice — with find_package(cohort) and with pkg-config — and runs both programs. A third
# argument holds compiler flags the consumers need too (the sanitizers of a sanitized build, whose
# runtime must come first in the program, not only inside libcohort).
set -euo pipefail
build_dir=$1
source_dir=$2
extra_flags=${3:-}
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build_dir" --prefix "$prefix" >/dev/null
cmake -S "$source_dir/examples/installed" -B "$prefix/example" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_FLAGS="$extra_flags" -DCMAKE_EXE_LINKER_FLAGS="$extra_flags" >/dev/null
cmake --build "$prefix/example" >/dev/null
LD_LIBRARY_PATH="$prefix/lib" "$prefix/example/hello_cohort"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# shellcheck disable=SC2086
cc -std=c11 -Wall -Werror $extra_flags "$source_dir/examples/installed/hello_cohort.c" $(pkg-config --cflags --libs cohort) \
  -o "$prefix/hello_pc"
LD_LIBRARY_PATH="$prefix/lib" "$prefix/hello_pc"
# Only the C ABI is exported.
if nm -D --defined-only "$prefix/lib/libcohort.so" | awk '$2 != "A" {print $3}' | grep -v '^cohort_' | grep -q .; then
  echo "libcohort exports symbols outside cohort_*:" >&2
  nm -D --defined-only "$prefix/lib/libcohort.so" | awk '$2 != "A" {print $3}' | grep -v '^cohort_' | head >&2
  exit 1
fi
echo "installed package: find_package and pkg-config both work"
