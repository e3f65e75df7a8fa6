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
  int master_port = 0;
  std::string token;   // the job token; empty only when world == 1
  std::string source;  // which launcher's variables were used: cohort, torchrun, mpi, slurm, none
};

// The default master port when a launcher gives an address but no port (as torchrun's default).
constexpr int kDefaultMasterPort = 29500;

// Reads, in order of precedence, COHORT_* (set by cohort-run), torchrun's RANK/WORLD_SIZE/...,
// Open MPI's OMPI_COMM_WORLD_*, Slurm's SLURM_PROCID/..., else a single rank of world 1. The
// master address and port come from COHORT_MASTER_ADDR/PORT, else MASTER_ADDR/PORT; the token
// from COHORT_JOB_TOKEN. Throws kInvalidArgument naming the variable when a value is malformed
// or inconsistent, or when world > 1 lacks a master address or a job token.
JobEnv detect_job_env();

// CPUs this process may run on (its affinity mask), at least 1: a host whose ranks outnumber
// them is oversubscribed, and the transport then spins less and pipelines in larger chunks.
int usable_cpus();

// Joins the job's store: world 1 gets a MemoryStore; rank 0 hosts a TcpStore bound to
// master_addr:master_port and the others connect to it, retrying until `timeout`.
std::shared_ptr<Store> connect_job_store(const JobEnv& env, std::chrono::milliseconds timeout);

}  // namespace cohort::transport
