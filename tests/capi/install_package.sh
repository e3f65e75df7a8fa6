#!/usr/bin/env bash
# Installs the built tree into a temporary prefix, moves the installed tree to another prefix (the
# first one is deleted, so nothing may point back into it), then builds examples/installed against
# the moved tree twice — with find_package(cohort) and with pkg-config — and runs both programs,
# the installed `cohort` command and cohort-run. Every installed program and library must find
# its own libraries through an $ORIGIN-relative rpath and must not need the CUDA runtime at load
# time (issue #25, item 8). A third argument holds compiler flags the consumers need too (the
# sanitizers of a sanitized build, whose runtime must come first in the program, not only inside
# libcohort).
set -euo pipefail
build_dir=$1
source_dir=$2
extra_flags=${3:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "install_package: $*" >&2; exit 1; }

cmake --install "$build_dir" --prefix "$work/first" >/dev/null
cp -a "$work/first" "$work/moved"
rm -rf "$work/first"
prefix=$work/moved
# Relocatable: no installed text file names the prefix it was installed to.
if grep -rIl "$work/first" "$prefix"; then fail "the files above name the original prefix $work/first"; fi

# Every installed ELF file: rpaths only relative to $ORIGIN, no CUDA runtime among the needed
# libraries, and each needed library found (libcohort inside the moved tree).
elf_count=0
while IFS= read -r -d '' f; do
  [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] || continue
  elf_count=$((elf_count + 1))
  dyn=$(readelf -d "$f")
  # An empty entry would search the current folder.
  rpath=$(sed -n 's/.*(R\(UN\)\{0,1\}PATH).*\[\(.*\)\]/\2/p' <<<"$dyn")
  if [ -n "$rpath" ]; then
    IFS=: read -r -a entries <<<"$rpath:"
    for e in "${entries[@]}"; do
      # shellcheck disable=SC2016  # a literal $ORIGIN
      [[ $e == '$ORIGIN'* ]] || fail "${f#"$prefix"/}: rpath '$rpath' has an entry not relative to \$ORIGIN: '$e'"
    done
  fi
  if grep -E 'NEEDED.*\[libcuda(rt)?\.so' <<<"$dyn"; then fail "${f#"$prefix"/} needs the CUDA runtime or driver at load time"; fi
  libs=$(ldd "$f")
  if grep 'not found' <<<"$libs"; then fail "${f#"$prefix"/}: the libraries above are not found"; fi
  if grep 'libcohort\.so' <<<"$libs" | grep -vq "=> $prefix/"; then
    fail "${f#"$prefix"/} loads libcohort from outside the installed tree: $(grep 'libcohort\.so' <<<"$libs")"
  fi
done < <(find "$prefix" -type f -print0)

# The installed programs run from the moved tree without LD_LIBRARY_PATH.
"$prefix/bin/cohort" --version
fashion_mnist=/usr/share/datasets/fashion-mnist
if [ -d "$fashion_mnist" ]; then
  "$prefix/bin/cohort-run" -n 2 -- "$prefix/bin/cohort" train --model mlp --steps 2 --threads 1 \
    --parallel co2 --tau 2 --quiet --data-dir "$fashion_mnist"
fi

cmake -S "$source_dir/examples/installed" -B "$work/example" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_FLAGS="$extra_flags" -DCMAKE_EXE_LINKER_FLAGS="$extra_flags" >/dev/null
cmake --build "$work/example" >/dev/null
"$work/example/hello_cohort"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# shellcheck disable=SC2046,SC2086
cc -std=c11 -Wall -Werror $extra_flags "$source_dir/examples/installed/hello_cohort.c" $(pkg-config --cflags --libs cohort) \
  -o "$work/hello_pc"
LD_LIBRARY_PATH="$prefix/lib" "$work/hello_pc"
# Only the C ABI is exported.
if nm -D --defined-only "$prefix/lib/libcohort.so" | awk '$2 != "A" {print $3}' | grep -v '^cohort_' | grep -q .; then
  echo "libcohort exports symbols outside cohort_*:" >&2
  nm -D --defined-only "$prefix/lib/libcohort.so" | awk '$2 != "A" {print $3}' | grep -v '^cohort_' | head >&2
  exit 1
fi
echo "installed package ($elf_count programs and libraries) works where it was moved: find_package, pkg-config, cohort, cohort-run"
