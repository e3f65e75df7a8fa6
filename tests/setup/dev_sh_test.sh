#!/usr/bin/env bash
# dev.sh must stop, saying so, when installing its packages fails, instead of going on to a build
# that then fails far from the cause ("cmake: command not found"), as a fresh machine showed
# (tests/setup/fresh_machine.sh). Runs dev.sh with stand-ins for dpkg-query (nothing installed),
# apt-get (install fails), npm and cmake (each records that it ran) first on PATH.
#   dev_sh_test.sh SOURCE_DIR
set -euo pipefail
source_dir=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/bin"
stub() { printf '#!/bin/sh\n%s\n' "$2" >"$work/bin/$1"; chmod +x "$work/bin/$1"; }
stub dpkg-query 'exit 1'
stub apt-get 'case " $* " in *" install "*) echo "E: stand-in apt-get cannot install $*" >&2; exit 100 ;; esac'
stub npm "touch '$work/npm-ran'"
stub cmake "touch '$work/cmake-ran'"
stub sudo 'exec "$@"'

rc=0
PATH="$work/bin:$PATH" COHORT_BUILD_DIR="$work/build" "$source_dir/dev.sh" build >"$work/out" 2>&1 || rc=$?
cat "$work/out"
[ "$rc" -ne 0 ] || { echo "FAIL: dev.sh build exited 0 although apt-get install failed" >&2; exit 1; }
for step in npm cmake; do
  if [ -e "$work/$step-ran" ]; then echo "FAIL: dev.sh went on to run $step after apt-get install failed" >&2; exit 1; fi
done
grep -q 'apt-get install' "$work/out" || { echo "FAIL: dev.sh did not say that apt-get install failed" >&2; exit 1; }
echo "dev.sh stops at a failed package install (exit $rc)"
