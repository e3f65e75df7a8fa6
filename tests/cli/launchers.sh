#!/usr/bin/env bash
# `cohort train --parallel co2` started as other launchers start it: two rank processes started
# here, each given the variables that launcher sets (Open MPI and torchrun are not installed).
#   mpirun    OMPI_COMM_WORLD_* and PMIX_NAMESPACE only, as `mpirun -np 2` on one machine sets
#             them: no MASTER_ADDR, no COHORT_JOB_TOKEN (rank 0 is local; the token is derived);
#   torchrun  RANK/WORLD_SIZE/LOCAL_*/MASTER_ADDR/MASTER_PORT and TORCHELASTIC_RUN_ID=none (the
#             static rendezvous' default), while another process listens on MASTER_PORT as
#             torchrun's own store does: cohort's store must not need that port;
#   resume    under cohort-run -n 2, a missing checkpoint of rank 1 is named before any step,
#             exit code 2, at once (not after rank 0 timed out waiting for rank 1).
#   launchers.sh MODE COHORT_CLI COHORT_RUN
set -euo pipefail
mode=$1 cli=$2 run=$3
dir=$(mktemp -d)
holder_pid=
cleanup() {
  [ -n "$holder_pid" ] && kill "$holder_pid" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1
train=(train --model mlp --steps 30 --parallel co2 --tau 4 --threads 1 --seed 3)
# Variables of every launcher cohort reads, cleared so that only the ones set below are seen.
launcher_vars=(COHORT_RANK COHORT_WORLD_SIZE COHORT_LOCAL_RANK COHORT_LOCAL_WORLD_SIZE COHORT_MASTER_ADDR
  COHORT_MASTER_PORT COHORT_JOB_TOKEN RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT
  TORCHELASTIC_RUN_ID OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_LOCAL_RANK
  OMPI_COMM_WORLD_LOCAL_SIZE PMIX_NAMESPACE OMPI_MCA_ess_base_jobid PMI_RANK PMI_SIZE SLURM_PROCID
  SLURM_NTASKS SLURM_JOB_ID SLURM_STEP_ID)
unset "${launcher_vars[@]}"

# A process listening on a port P whose successor is free, as torchrun's agent listens on
# MASTER_PORT; it prints P and holds the port until the test ends.
hold_port() {
  coproc HOLDER {
    exec python3 -c '
import socket, sys, time
for _ in range(200):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    port = s.getsockname()[1]
    probe = socket.socket()
    try:
        if port < 65535:
            probe.bind(("127.0.0.1", port + 1))
            break
    except OSError:
        pass
    finally:
        probe.close()
    s.close()
print(port, flush=True)
time.sleep(300)
'
  }
  holder_pid=$HOLDER_PID
  read -r -t 20 port <&"${HOLDER[0]}" || { echo "FAIL: no port from the holder"; exit 1; }
}

# Starts rank 0 and rank 1 with `vars_r` (an array name per rank), waits for both (each within a
# deadline) and checks that both succeeded and that rank 0 evaluated after 30 steps.
run_two_ranks() {
  local -n v0=$1 v1=$2
  env "${v0[@]}" timeout 120 "$cli" "${train[@]}" >"$dir/r0.out" 2>&1 &
  local p0=$!
  env "${v1[@]}" timeout 120 "$cli" "${train[@]}" >"$dir/r1.out" 2>&1 &
  local p1=$!
  local rc0=0 rc1=0
  wait $p0 || rc0=$?
  wait $p1 || rc1=$?
  if [ $rc0 -ne 0 ] || [ $rc1 -ne 0 ]; then
    echo "--- rank 0 (exit $rc0)"; cat "$dir/r0.out"; echo "--- rank 1 (exit $rc1)"; cat "$dir/r1.out"
    echo "FAIL: $mode-style ranks did not both finish"; exit 1
  fi
  grep -q "batch 32 x 2 rank(s), co2 tau 4" "$dir/r0.out" || { cat "$dir/r0.out"; echo "FAIL: not 2 ranks"; exit 1; }
  grep -q "^eval step 30: loss [0-9.]* | accuracy" "$dir/r0.out" || { cat "$dir/r0.out"; echo "FAIL: no evaluation"; exit 1; }
  grep "^eval step 30" "$dir/r0.out"
}

case "$mode" in
  mpirun)
    hold_port  # a free MASTER_PORT, as a program that also used torch.distributed would set
    r0=(OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=0 OMPI_COMM_WORLD_LOCAL_SIZE=2
      PMIX_NAMESPACE="prterun-test-$$@1" MASTER_PORT="$port")
    r1=(OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=1 OMPI_COMM_WORLD_LOCAL_SIZE=2
      PMIX_NAMESPACE="prterun-test-$$@1" MASTER_PORT="$port")
    run_two_ranks r0 r1
    ;;
  torchrun)
    hold_port
    common=(WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" TORCHELASTIC_RUN_ID=none)
    r0=(RANK=0 LOCAL_RANK=0 "${common[@]}")
    r1=(RANK=1 LOCAL_RANK=1 "${common[@]}")
    run_two_ranks r0 r1
    ;;
  resume)
    "$run" -n 2 -- "$cli" "${train[@]}" --quiet --save "$dir/ck" >"$dir/save.out" 2>&1 ||
      { cat "$dir/save.out"; echo "FAIL: the saving run failed"; exit 1; }
    [ -f "$dir/ck.rank0" ] && [ -f "$dir/ck.rank1" ] || { ls "$dir"; echo "FAIL: no per-rank checkpoints"; exit 1; }
    rm "$dir/ck.rank1"
    rc=0
    # The deadline is below the 60 s that rank 0 would wait for rank 1 in its first collective.
    timeout 40 "$run" -n 2 -- "$cli" "${train[@]}" --steps 60 --resume "$dir/ck" >"$dir/resume.out" 2>&1 || rc=$?
    [ $rc -ne 124 ] || { cat "$dir/resume.out"; echo "FAIL: still running after 40 s"; exit 1; }
    [ $rc -eq 2 ] || { cat "$dir/resume.out"; echo "FAIL: exit code $rc, expected 2"; exit 1; }
    grep -q "error: rank 1: --resume '$dir/ck.rank1': no such file" "$dir/resume.out" ||
      { cat "$dir/resume.out"; echo "FAIL: rank 1's missing checkpoint not named"; exit 1; }
    echo "ok: rank 1's missing checkpoint named, exit code 2"
    ;;
  *) echo "unknown mode $mode"; exit 2 ;;
esac
