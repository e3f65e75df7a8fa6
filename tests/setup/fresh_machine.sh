#!/usr/bin/env bash
# Runs the README's two commands (./dev.sh train, ./dev.sh test) on a fresh Debian root, so that a
# missing install step shows up here instead of on a new user's machine (issue #25: a build once
# needed a package that only the developers' machine had). Opt-in and slow (20 to 60 minutes on
# 2 cores: every package is downloaded and everything is built from cold); not part of any test run.
#
# What it does: mmdebstrap builds a minimal Debian root (variant "apt": the essential packages
# and apt, nothing else) from the mirrors this machine uses; a clean clone of the commit under
# test (HEAD by default, never the working tree) goes to /root/cohort inside it; each command runs
# there as root through chroot (the root bind-mounted onto itself, so that tests can make mount
# and network namespaces inside; /proc, /sys, /run, /dev/shm and /dev/pts mounted), under a time
# limit; the script prints pass/fail and the wall time of each, then deletes the root. All mounts
# live in a private mount namespace and every process in a private PID namespace, so an
# interrupted run (Ctrl-C, a time limit, a failure) leaves no mount and no process behind; a trap
# removes the root in every case (--keep leaves it).
#
# The machine kind this project runs on has the CUDA toolkit at /usr/local/cuda, which is not a
# Debian package. By default it is bind-mounted read-only at the same place (with the loader
# configuration that points into it), as on that machine; --no-cuda leaves it out, as on a
# machine without CUDA (the build then has no CUDA backend). Also copied from this machine, as
# part of what the machine kind provides: DNS (/etc/resolv.conf), the CA certificates its network
# needs (/usr/local/share/ca-certificates) and its npm configuration (/etc/npmrc).
#
# Usage: tests/setup/fresh_machine.sh [--no-cuda] [--rev REV] [--keep] [--out DIR]
#            [--train-minutes N] [--test-minutes N]
# Needs root (mmdebstrap, chroot, mounts); installs mmdebstrap with apt when it is missing.
# Logs: DIR (default /var/tmp/cohort-fresh-<time>) holds bootstrap.log, train.log, test.log and
# summary.txt. Exit status 0 when both commands passed.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(git -C "$here" rev-parse --show-toplevel)
cuda=/usr/local/cuda
rev=HEAD
keep=0
out=/var/tmp/cohort-fresh-$(date +%Y%m%d-%H%M%S)
train_minutes=150
test_minutes=60
bootstrap_minutes=20
suite=bookworm

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit "$1"; }
while [ $# -gt 0 ]; do
  case $1 in
    --no-cuda) cuda= ;;
    --rev) rev=$2; shift ;;
    --keep) keep=1 ;;
    --out) out=$2; shift ;;
    --train-minutes) train_minutes=$2; shift ;;
    --test-minutes) test_minutes=$2; shift ;;
    -h | --help) usage 0 ;;
    *) echo "fresh_machine: unknown argument '$1'" >&2; usage 2 ;;
  esac
  shift
done

# Messages go to fd 3, this script's stderr, also from a trap that runs while a job's output is
# redirected to a log.
exec 3>&2
log() { printf '[fresh_machine] %s\n' "$*" >&3; }
die() { log "error: $*"; exit 1; }

[ "$(id -u)" -eq 0 ] || die "needs root (mmdebstrap, chroot and mounts); run it with sudo"
commit=$(git -C "$repo" rev-parse --verify "$rev^{commit}") || die "no commit '$rev' in $repo"
if [ -n "$cuda" ]; then
  [ -d "$cuda" ] || die "no CUDA toolkit at $cuda (use --no-cuda)"
  cuda_real=$(readlink -f "$cuda")
fi
if ! command -v mmdebstrap >/dev/null; then
  log "installing mmdebstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null || die "could not install mmdebstrap"
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
root=$out/root
[ ! -e "$root" ] || die "$root exists already: pick another --out"
job=

# run_job CMD...: runs CMD in the background and waits for it, so that Ctrl-C reaches the traps at
# once (bash runs a trap only after the foreground command ends) and cleanup can end the job.
run_job() {
  "$@" &
  job=$!
  local rc=0
  wait "$job" || rc=$?
  job=
  return "$rc"
}

# Whatever happens, no process of the run survives and the root is removed. The mounts need no
# undoing here: they exist only in the run's mount namespace, which ends with its processes.
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  if [ -n "$job" ] && kill -0 "$job" 2>/dev/null; then
    # timeout passes TERM on to its command; unshare --kill-child then ends the PID namespace.
    kill -TERM "$job" 2>/dev/null || true
    wait "$job" 2>/dev/null || true
  fi
  if [ -d "$root" ]; then
    if findmnt -rn -o TARGET | grep "^$root\(/\|$\)" >/dev/null; then
      log "mounts remain under $root (listed below): not deleting it"
      findmnt -rn -o TARGET | grep "^$root\(/\|$\)" >&3
    elif [ "$keep" = 1 ]; then
      log "kept the root at $root"
    else
      rm -rf --one-file-system "$root"
    fi
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

# ---- 1. the root ----------------------------------------------------------------------------
# This machine's Debian mirrors (deb822 .sources and one-line .list files that are in use).
sources=()
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] && grep -q 'debian' "$f" && grep -qv '^\s*\(#\|$\)' "$f" && sources+=("$f")
done
[ ${#sources[@]} -gt 0 ] || die "no Debian apt sources found under /etc/apt"
log "commit $commit; root $root; CUDA ${cuda_real:-not mounted}; mirrors from ${sources[*]}"
t0=$(date +%s)
# In a mount namespace of its own, so an interrupted bootstrap leaves no mount behind.
if ! run_job timeout --kill-after=30 "$((bootstrap_minutes * 60))" unshare --mount --propagation private \
    mmdebstrap --variant=apt --quiet "$suite" "$root" "${sources[@]}" >"$out/bootstrap.log" 2>&1; then
  tail -20 "$out/bootstrap.log" >&2
  die "mmdebstrap failed (log: $out/bootstrap.log)"
fi
log "root made in $(( $(date +%s) - t0 )) s"

# What the machine kind provides beyond Debian: name resolution, the CA certificates its network
# needs (dev.sh's apt installs ca-certificates, which then adds them to the bundle), npm's settings.
cp /etc/resolv.conf "$root/etc/resolv.conf"
if [ -d /usr/local/share/ca-certificates ]; then
  cp -a /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
fi
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  mkdir -p "$root/etc/ssl/certs"
  cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
fi
if [ -f /etc/npmrc ]; then cp /etc/npmrc "$root/etc/npmrc"; fi
if [ -n "$cuda" ]; then
  mkdir -p "$root$cuda_real"
  if [ -L "$cuda" ]; then ln -sfn "$(readlink "$cuda")" "$root$cuda"; fi
  # The loader configuration that points into the toolkit, as the machine kind has it.
  for f in /etc/ld.so.conf.d/*.conf; do
    if grep -q "^\($cuda_real\|$cuda\)" "$f"; then cp "$f" "$root/etc/ld.so.conf.d/"; fi
  done
fi

# A clean clone of the commit under test: committed files only, as a new user gets them.
git clone --quiet --no-hardlinks --no-checkout "$repo" "$root/root/cohort"
git -C "$root/root/cohort" -c advice.detachedHead=false checkout --quiet "$commit"

# ---- 2. the two commands, in their own mount and PID namespaces ---------------------------------
# The inner script mounts what the commands need, runs each under its time limit in the chroot
# with a clean environment, and writes one summary line per command.
inner=$(cat <<'EOF'
set -uo pipefail
root=$1 cuda_real=$2 out=$3 train_s=$4 test_s=$5
# The root onto itself first: a chroot whose / is no mount point cannot make mount namespaces
# (unshare -m, ip netns exec: "mount --make-rslave /" fails), so tests that need them would skip.
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
mount -t sysfs sysfs "$root/sys" 2>/dev/null || mount --rbind /sys "$root/sys"
mount -t tmpfs -o mode=1777,nosuid,nodev shm "$root/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$root/dev/pts"
mount -t tmpfs -o mode=0755,nosuid,nodev run "$root/run"
if [ -n "$cuda_real" ]; then
  mount --bind -o ro "$cuda_real" "$root$cuda_real"
  chroot "$root" ldconfig
fi
status=0
for cmd in train test; do
  limit=$train_s
  [ "$cmd" = test ] && limit=$test_s
  start=$(date +%s%N)
  SECONDS=0
  # Each line of the log starts with the seconds since the command began (phases: apt, build, run).
  timeout --kill-after=30 "$limit" chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    /bin/bash -c "cd /root/cohort && ./dev.sh $cmd" </dev/null 2>&1 |
    while IFS= read -r line; do printf '%5ds %s\n' "$SECONDS" "$line"; done | tee "$out/$cmd.log"
  rc=${PIPESTATUS[0]}
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  verdict=PASS
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then verdict="FAIL (time limit ${limit} s)";
  elif [ "$rc" -ne 0 ]; then verdict=FAIL; fi
  printf './dev.sh %-5s %-24s exit %3d  wall %6d.%d s\n' "$cmd" "$verdict" "$rc" $((ms / 1000)) \
    $((ms % 1000 / 100)) >>"$out/summary.txt"
  [ "$rc" -eq 0 ] || status=1
done
exit $status
EOF
)
: >"$out/summary.txt"
timeout_total=$(( (train_minutes + test_minutes) * 60 + 120 ))
status=0
run_job timeout --kill-after=30 "$timeout_total" unshare --mount --propagation private --pid --fork --kill-child \
  bash -c "$inner" fresh-machine-inner "$root" "${cuda_real:-}" "$out" \
  "$((train_minutes * 60))" "$((test_minutes * 60))" || status=$?

# ---- 3. the figures -------------------------------------------------------------------------
# A log without the seconds that start each line.
plain() { sed -E 's/^ *[0-9]+s //' "$out/$1.log" 2>/dev/null; }
# The seconds at which the first line matching a pattern was logged.
seconds_at() { grep -m1 -E "^ *[0-9]+s $2" "$out/$1.log" 2>/dev/null | awk '{print $1 + 0}'; }
figures() {
  echo "fresh Debian $suite root (mmdebstrap --variant=apt), commit $commit, CUDA toolkit: ${cuda_real:-not mounted}"
  cat "$out/summary.txt"
  local built ready
  built=$(seconds_at train '\[1/[0-9]+\] ')
  if [ -n "$built" ]; then
    ready=$(grep -E '^ *[0-9]+s \[[0-9]+/[0-9]+\] ' "$out/train.log" | tail -1 | awk '{print $1 + 0}')
    echo "  train: packages and data until ${built} s, build until ${ready} s, then the training run"
  fi
  plain train | grep -E 'accuracy' | tail -1 | sed 's/^/  train: /'
  plain test | grep -E '^[0-9]+% tests passed' | sed 's/^/  test: /'
  echo "  test: $(plain test | grep -cE '^\s+[0-9]+ - .*\(Skipped\)') skipped"
  # grep without -q: under pipefail, a grep that stops early fails the pipeline through SIGPIPE.
  if plain test | grep 'The following tests FAILED' >/dev/null; then
    echo "  failed tests:"
    plain test | sed -n '/The following tests FAILED/,/^Errors while running/p' | grep -E '^\s+[0-9]+ - ' |
      sed -E 's/  # GetParam.*//; s/^\s+/    /'
  fi
}
figures | tee "$out/summary.tmp" >&3
mv "$out/summary.tmp" "$out/summary.txt"
log "logs in $out"
exit "$status"
