#!/usr/bin/env bash
# The ten-line programs of README.md's "Bindings" section, extracted from the README itself and
# run on two ranks under cohort-run, so the README never shows code that does not work.
#
#   readme_examples.sh SOURCE_DIR BUILD_DIR LANGUAGE...   (python, java, rust)
set -euo pipefail
src=$1
build=$2
shift 2
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run=("$build/transport/launcher/cohort-run" -n 2 --)

# The first fenced block of a language in the README.
extract() {
  awk -v lang="$1" '$0 == "```" lang {inside = 1; next} inside && $0 == "```" {exit} inside {print}' \
    "$src/README.md"
}

check() {  # language, output: both ranks must print a finite loss
  local lang=$1 out=$2
  if [ "$(echo "$out" | grep -cE '^\[rank [01]\] rank [01]: loss [0-9]+\.[0-9]+$')" -ne 2 ]; then
    echo "FAIL: the README's $lang example did not print a loss on both ranks:"
    echo "$out" | tail -20
    return 1
  fi
  echo "$lang: ok"
}

status=0
for lang in "$@"; do
  case $lang in
    python)
      extract python > "$work/ex.py"
      out=$(PYTHONPATH="$build/bindings/python" timeout 120 "${run[@]}" /usr/bin/python3 "$work/ex.py" 2>&1) || true
      ;;
    java)
      extract java > "$work/Ex.java"
      javac -cp "$build/bindings/java/cohort.jar" -d "$work" "$work/Ex.java"
      out=$(timeout 120 "${run[@]}" java -Xmx256m -XX:+UseSerialGC -Dcohort.library.path="$build/bindings/java" \
        -cp "$build/bindings/java/cohort.jar:$work" Ex 2>&1) || true
      ;;
    rust)
      extract rust > "$work/ex.rs"
      release="$build/bindings/rust/target/release"
      /usr/bin/rustc --edition 2021 -O "$work/ex.rs" -o "$work/ex" --extern cohort="$release/libcohort.rlib" \
        -L "$release/deps" -L "$build/capi" -C link-arg=-Wl,-rpath,"$build/capi" -l cohort
      out=$(timeout 120 "${run[@]}" "$work/ex" 2>&1) || true
      ;;
    *) echo "unknown language $lang"; exit 2 ;;
  esac
  check "$lang" "$out" || status=1
done
exit $status
