// detect_job_env for every launcher flavour (variables set and unset in-process), its error
// messages, and connect_job_store joining ranks through rank 0's TCP store.
#include "transport/bootstrap/env.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <thread>

#include "core/base/error.h"
#include "transport/bootstrap/net.h"

namespace cohort::transport {
namespace {

using namespace std::chrono_literals;

const char* const kAllVars[] = {"COHORT_RANK",
                                "COHORT_WORLD_SIZE",
                                "COHORT_LOCAL_RANK",
                                "COHORT_LOCAL_WORLD_SIZE",
                                "COHORT_MASTER_ADDR",
                                "COHORT_MASTER_PORT",
                                "COHORT_JOB_TOKEN",
                                "RANK",
                                "WORLD_SIZE",
                                "LOCAL_RANK",
                                "LOCAL_WORLD_SIZE",
                                "MASTER_ADDR",
                                "MASTER_PORT",
                                "OMPI_COMM_WORLD_RANK",
                                "OMPI_COMM_WORLD_SIZE",
                                "OMPI_COMM_WORLD_LOCAL_RANK",
                                "OMPI_COMM_WORLD_LOCAL_SIZE",
                                "PMI_RANK",
                                "PMI_SIZE",
                                "MPI_LOCALRANKID",
                                "MPI_LOCALNRANKS",
                                "SLURM_PROCID",
                                "SLURM_NTASKS",
                                "SLURM_LOCALID",
                                "SLURM_NODEID",
                                "SLURM_NTASKS_PER_NODE",
                                "SLURM_STEP_TASKS_PER_NODE",
                                "SLURM_TASKS_PER_NODE",
                                "SLURM_JOB_ID",
                                "SLURM_STEP_ID",
                                "TORCHELASTIC_RUN_ID",
                                "PMIX_NAMESPACE",
                                "OMPI_MCA_ess_base_jobid"};

// Clears every launcher variable for the test and restores the originals afterwards.
class JobEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kAllVars) {
      if (const char* v = std::getenv(name)) saved_[name] = v;
      unsetenv(name);
    }
  }
  void TearDown() override {
    for (const char* name : kAllVars) unsetenv(name);
    for (const auto& [name, value] : saved_) setenv(name.c_str(), value.c_str(), 1);
  }
  static void set(const std::map<std::string, std::string>& vars) {
    for (const auto& [name, value] : vars) setenv(name.c_str(), value.c_str(), 1);
  }
  static std::string error_of_detect() {
    try {
      detect_job_env();
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kInvalidArgument);
      return e.what();
    }
    return "no error";
  }

 private:
  std::map<std::string, std::string> saved_;
};

TEST_F(JobEnvTest, NoVariablesIsOneRank) {
  JobEnv env = detect_job_env();
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.world, 1);
  EXPECT_EQ(env.local_rank, 0);
  EXPECT_EQ(env.local_world, 1);
  EXPECT_EQ(env.source, "none");
  auto store = connect_job_store(env, 1s);
  store->set("k", Bytes{7});
  EXPECT_EQ(store->get("k", 0ms), Bytes{7});
}

TEST_F(JobEnvTest, CohortRun) {
  set({{"COHORT_RANK", "5"},
       {"COHORT_WORLD_SIZE", "8"},
       {"COHORT_LOCAL_RANK", "1"},
       {"COHORT_LOCAL_WORLD_SIZE", "4"},
       {"COHORT_MASTER_ADDR", "10.1.2.3"},
       {"COHORT_MASTER_PORT", "41000"},
       {"COHORT_JOB_TOKEN", "tok"},
       {"RANK", "0"},
       {"WORLD_SIZE", "2"},
       {"MASTER_ADDR", "ignored"}});  // cohort wins
  JobEnv env = detect_job_env();
  EXPECT_EQ(env.source, "cohort");
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.world, 8);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world, 4);
  EXPECT_EQ(env.master_addr, "10.1.2.3");
  EXPECT_EQ(env.master_port, 41000);
  EXPECT_EQ(env.token, "tok");
}

TEST_F(JobEnvTest, Torchrun) {
  set({{"RANK", "3"},
       {"WORLD_SIZE", "4"},
       {"LOCAL_RANK", "1"},
       {"LOCAL_WORLD_SIZE", "2"},
       {"MASTER_ADDR", "node0"},
       {"MASTER_PORT", "29400"},
       {"COHORT_JOB_TOKEN", "tok"}});
  JobEnv env = detect_job_env();
  EXPECT_EQ(env.source, "torchrun");
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world, 4);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world, 2);
  EXPECT_EQ(env.master_addr, "node0");
  EXPECT_EQ(env.master_port, 29401);  // the port after torchrun's own store
}

TEST_F(JobEnvTest, OpenMpiWithDefaultPort) {
  set({{"OMPI_COMM_WORLD_RANK", "2"},
       {"OMPI_COMM_WORLD_SIZE", "6"},
       {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"},
       {"MASTER_ADDR", "head"},
       {"COHORT_JOB_TOKEN", "tok"}});
  JobEnv env = detect_job_env();
  EXPECT_EQ(env.source, "mpi");
  EXPECT_EQ(env.rank, 2);
  EXPECT_EQ(env.world, 6);
  EXPECT_EQ(env.local_rank, 2);
  EXPECT_EQ(env.local_world, 3);
  EXPECT_EQ(env.master_port, kTorchDefaultMasterPort + 1);
}

TEST_F(JobEnvTest, MpichPmi) {
  set({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"COHORT_JOB_TOKEN", "t"}});
  JobEnv env = detect_job_env();
  EXPECT_EQ(env.source, "mpi");
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.local_rank, 0);  // no local variables: one rank per machine
  EXPECT_EQ(env.local_world, 1);
}

TEST_F(JobEnvTest, SlurmTasksPerNode) {
  set({{"SLURM_PROCID", "4"},
       {"SLURM_NTASKS", "5"},
       {"SLURM_LOCALID", "0"},
       {"SLURM_NODEID", "2"},
       {"SLURM_STEP_TASKS_PER_NODE", "2(x2),1"},
       {"COHORT_MASTER_ADDR", "n0"},
       {"COHORT_MASTER_PORT", "5000"},
       {"COHORT_JOB_TOKEN", "t"}});
  JobEnv env = detect_job_env();
  EXPECT_EQ(env.source, "slurm");
  EXPECT_EQ(env.rank, 4);
  EXPECT_EQ(env.world, 5);
  EXPECT_EQ(env.local_rank, 0);
  EXPECT_EQ(env.local_world, 1);
  setenv("SLURM_NODEID", "1", 1);
  setenv("SLURM_LOCALID", "1", 1);
  setenv("SLURM_PROCID", "3", 1);
  env = detect_job_env();
  EXPECT_EQ(env.local_world, 2);
  EXPECT_EQ(env.local_rank, 1);
  setenv("SLURM_NTASKS_PER_NODE", "3", 1);  // the plain form wins when present
  EXPECT_EQ(detect_job_env().local_world, 3);
}

TEST_F(JobEnvTest, ErrorsNameTheVariable) {
  set({{"RANK", "abc"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"COHORT_JOB_TOKEN", "t"}});
  EXPECT_NE(error_of_detect().find("RANK='abc'"), std::string::npos);
  setenv("RANK", "2", 1);  // not below WORLD_SIZE
  EXPECT_NE(error_of_detect().find("RANK='2'"), std::string::npos);
  setenv("RANK", "1", 1);
  setenv("MASTER_PORT", "70000", 1);
  EXPECT_NE(error_of_detect().find("MASTER_PORT"), std::string::npos);
  unsetenv("MASTER_PORT");
  unsetenv("WORLD_SIZE");
  EXPECT_NE(error_of_detect().find("WORLD_SIZE is not"), std::string::npos);
  setenv("WORLD_SIZE", "2", 1);
  setenv("LOCAL_RANK", "0", 1);
  EXPECT_NE(error_of_detect().find("LOCAL_WORLD_SIZE"), std::string::npos);
}

TEST_F(JobEnvTest, WorldAboveOneNeedsMasterAndToken) {
  set({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"COHORT_JOB_TOKEN", "t"}});
  std::string missing_addr = error_of_detect();
  EXPECT_NE(missing_addr.find("MASTER_ADDR"), std::string::npos) << missing_addr;
  unsetenv("COHORT_JOB_TOKEN");
  setenv("MASTER_ADDR", "h", 1);
  std::string missing_token = error_of_detect();
  EXPECT_NE(missing_token.find("COHORT_JOB_TOKEN"), std::string::npos) << missing_token;
}

// torchrun's static rendezvous hosts its own store on MASTER_PORT (so does PyTorch's env://
// init on rank 0): cohort's store takes the next port, unless COHORT_MASTER_PORT names one.
TEST_F(JobEnvTest, StorePortIsNotPytorchsMasterPort) {
  set({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"},
       {"COHORT_JOB_TOKEN", "t"}});
  EXPECT_EQ(detect_job_env().master_port, 29501);
  setenv("COHORT_MASTER_PORT", "41000", 1);
  EXPECT_EQ(detect_job_env().master_port, 41000);
  unsetenv("COHORT_MASTER_PORT");
  unsetenv("MASTER_PORT");
  EXPECT_EQ(detect_job_env().master_port, 29501);  // after PyTorch's default
  setenv("MASTER_PORT", "65535", 1);
  std::string no_next = error_of_detect();
  EXPECT_NE(no_next.find("MASTER_PORT=65535"), std::string::npos) << no_next;
  EXPECT_NE(no_next.find("COHORT_MASTER_PORT"), std::string::npos) << no_next;
}

// Without COHORT_JOB_TOKEN the token comes from the job id of the launcher whose ranks were read:
// equal on every rank of one job, different between jobs, and COHORT_JOB_TOKEN still wins.
TEST_F(JobEnvTest, TokenDerivedFromTheLaunchersJobId) {
  struct Case {
    std::map<std::string, std::string> ranks;  // rank 1 of 2 under this launcher
    const char* id;                            // its job-id variable
  };
  const Case cases[] = {
      {{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"}}, "TORCHELASTIC_RUN_ID"},
      {{{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}, "PMIX_NAMESPACE"},
      {{{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}},
       "OMPI_MCA_ess_base_jobid"},
      {{{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"MASTER_ADDR", "h"}}, "SLURM_JOB_ID"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.id);
    for (const char* name : kAllVars) unsetenv(name);
    set(c.ranks);
    EXPECT_NE(error_of_detect().find(c.id), std::string::npos);  // the message names it
    setenv(c.id, "4711", 1);
    JobEnv job = detect_job_env();
    EXPECT_EQ(job.token_source, c.id);
    EXPECT_NE(job.token.find("4711"), std::string::npos) << job.token;
    setenv(c.id, "4712", 1);
    EXPECT_NE(detect_job_env().token, job.token);
    setenv(c.id, "4711", 1);
    EXPECT_EQ(detect_job_env().token, job.token);
    setenv("COHORT_JOB_TOKEN", "given", 1);
    EXPECT_EQ(detect_job_env().token, "given");
    EXPECT_EQ(detect_job_env().token_source, "COHORT_JOB_TOKEN");
  }
  // Two steps of one Slurm allocation are two jobs.
  for (const char* name : kAllVars) unsetenv(name);
  set({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"MASTER_ADDR", "h"}, {"SLURM_JOB_ID", "9"},
       {"SLURM_STEP_ID", "0"}});
  std::string step0 = detect_job_env().token;
  setenv("SLURM_STEP_ID", "1", 1);
  EXPECT_NE(detect_job_env().token, step0);
  // Another launcher's job id is not read: ranks started by torchrun inside a Slurm allocation
  // may not all see the same SLURM_STEP_ID.
  for (const char* name : kAllVars) unsetenv(name);
  set({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"SLURM_JOB_ID", "9"}});
  EXPECT_NE(error_of_detect().find("COHORT_JOB_TOKEN"), std::string::npos);
}

// mpirun -np 2 on one machine needs no variables at all: the launcher says every rank is local.
TEST_F(JobEnvTest, EveryRankOnThisMachineMeetsOnLoopback) {
  set({{"OMPI_COMM_WORLD_RANK", "1"},
       {"OMPI_COMM_WORLD_SIZE", "2"},
       {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
       {"PMIX_NAMESPACE", "prterun-host-1234@1"}});
  JobEnv env = detect_job_env();
  EXPECT_EQ(env.master_addr, "127.0.0.1");
  EXPECT_EQ(env.master_port, kTorchDefaultMasterPort + 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "1", 1);  // ranks on two machines: rank 0's host is needed
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
  std::string missing = error_of_detect();
  EXPECT_NE(missing.find("MASTER_ADDR"), std::string::npos) << missing;
}

TEST_F(JobEnvTest, ConnectJobStoreJoinsRanksThroughRankZero) {
  int port = 0;
  { net::listen_tcp("127.0.0.1", 0, 1, &port); }
  constexpr int kWorld = 3;
  std::vector<std::thread> ranks;
  std::vector<int64_t> seen(kWorld, 0);
  for (int r = kWorld - 1; r >= 0; --r) {  // others start before rank 0: they must retry
    ranks.emplace_back([&, r] {
      JobEnv env;
      env.rank = r;
      env.world = kWorld;
      env.master_addr = "127.0.0.1";
      env.master_port = port;
      env.token = "job";
      auto store = connect_job_store(env, 10s);
      store->add("joined", 1);
      seen[r] = store->add("joined", 0);
      store->set("done/" + std::to_string(r), Bytes{1});
      if (r == 0) {  // rank 0 hosts the store: it leaves only after everyone is done with it
        for (int other = 0; other < kWorld; ++other) {
          store->get("done/" + std::to_string(other), 10s);
        }
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < kWorld; ++r) EXPECT_GE(seen[r], 1);
}

}  // namespace
}  // namespace cohort::transport
