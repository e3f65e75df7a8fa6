// Where a rank learns who it is: detect_job_env() reads the variables of whichever launcher
// started the process (cohort-run, torchrun, Open MPI, Slurm), and connect_job_store() joins
// the job's rendezvous store (rank 0 hosts it over TCP).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "transport/bootstrap/store.h"

namespace cohort::transport {

struct JobEnv {
  int rank = 0;
  int world = 1;
  int local_rank = 0;       // rank among the processes of this machine
  int local_world = 1;      // processes of this job on this machine
  std::string master_addr;  // host of rank 0's store; empty only when world == 1
  int master_port = 0;      // the port of rank 0's store; 0 when world == 1
  std::string token;         // the job token; empty only when world == 1
  std::string token_source;  // the variable it came from: COHORT_JOB_TOKEN, SLURM_JOB_ID, ...
  std::string source;  // which launcher's variables were used: cohort, torchrun, mpi, slurm, none
};

// PyTorch's default MASTER_PORT (torchrun's --master_port). cohort's store never listens on
// MASTER_PORT itself: see detect_job_env().
constexpr int kTorchDefaultMasterPort = 29500;

// Reads, in order of precedence, COHORT_* (set by cohort-run), torchrun's RANK/WORLD_SIZE/...,
// Open MPI's OMPI_COMM_WORLD_*, MPICH's PMI_*, Slurm's SLURM_PROCID/..., else a single rank of
// world 1. The same rules are told to users in README.md, "Launching":
//  - rank 0's host: COHORT_MASTER_ADDR, else MASTER_ADDR, else 127.0.0.1 when the launcher says
//    every rank runs on this machine (local world == world);
//  - the store's port: COHORT_MASTER_PORT, else MASTER_PORT + 1 (MASTER_PORT is PyTorch's own
//    store, which torchrun hosts itself), else 29501;
//  - the job token: COHORT_JOB_TOKEN, else derived from the job id of the launcher whose ranks
//    were read (TORCHELASTIC_RUN_ID with MASTER_ADDR/PORT; PMIX_NAMESPACE or
//    OMPI_MCA_ess_base_jobid; SLURM_JOB_ID with SLURM_STEP_ID). A derived token keeps jobs apart
//    but is no secret.
// Throws kInvalidArgument naming the variable when a value is malformed or inconsistent, or when
// world > 1 lacks a master address or a job token.
JobEnv detect_job_env();

// CPUs this process may run on (its affinity mask), at least 1: a host whose ranks outnumber
// them is oversubscribed, and the transport then spins less and pipelines in larger chunks.
int usable_cpus();

// Joins the job's store: world 1 gets a MemoryStore; rank 0 hosts a TcpStore bound to
// master_addr:master_port and the others connect to it, retrying until `timeout`.
std::shared_ptr<Store> connect_job_store(const JobEnv& env, std::chrono::milliseconds timeout);

}  // namespace cohort::transport
