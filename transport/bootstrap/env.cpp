// Launcher detection: maps the environment variables of cohort-run, torchrun, Open MPI, MPICH
// (PMI) and Slurm onto one JobEnv, validates it, and joins the job's rendezvous store.
#include "transport/bootstrap/env.h"

#include <sched.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <string>
#include <thread>

#include "core/base/error.h"
#include "transport/bootstrap/tcp_store.h"

namespace cohort::transport {
namespace {

// The variables one launcher sets; a null name means the launcher has no such variable.
struct LauncherVars {
  const char* source;
  const char* rank;
  const char* world;
  const char* local_rank;
  const char* local_world;
};

constexpr LauncherVars kLaunchers[] = {
    {"cohort", "COHORT_RANK", "COHORT_WORLD_SIZE", "COHORT_LOCAL_RANK", "COHORT_LOCAL_WORLD_SIZE"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"mpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"mpi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},
};

// The value of a variable, or nullptr when it is unset or empty.
const char* env_value(const char* name) {
  if (!name) return nullptr;
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

int parse_int(const char* name, const char* text, long min, long max) {
  errno = 0;
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  bool ok = errno == 0 && end != text && *end == '\0' && v >= min && v <= max;
  COHORT_CHECK(ok, Status::kInvalidArgument, "detect_job_env: environment variable ", name, "='",
               text, "' is not an integer in [", min, ", ", max, "]");
  return static_cast<int>(v);
}

int required_int(const char* name, long min, long max, const char* because) {
  const char* text = env_value(name);
  COHORT_CHECK(text, Status::kInvalidArgument, "detect_job_env: ", because, " is set but ", name,
               " is not");
  return parse_int(name, text, min, max);
}

// Slurm writes tasks per node as "2(x3),1": two tasks on each of three nodes, then one.
// Returns the count of node `node`, or 0 when the text does not cover it.
int slurm_tasks_on_node(const char* name, const std::string& text, int node) {
  size_t pos = 0;
  int first = 0;
  while (pos < text.size()) {
    size_t comma = text.find(',', pos);
    std::string group = text.substr(pos, comma == std::string::npos ? comma : comma - pos);
    size_t paren = group.find("(x");
    int count = parse_int(name, group.substr(0, paren).c_str(), 1, INT_MAX);
    int repeat = 1;
    if (paren != std::string::npos) {
      COHORT_CHECK(group.back() == ')', Status::kInvalidArgument, "detect_job_env: ", name, "='",
                   text, "' is malformed");
      std::string times = group.substr(paren + 2, group.size() - paren - 3);
      repeat = parse_int(name, times.c_str(), 1, INT_MAX);
    }
    if (node < first + repeat) return count;
    first += repeat;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return 0;
}

int slurm_local_world() {
  const char* per_node = env_value("SLURM_NTASKS_PER_NODE");
  if (per_node && std::string(per_node).find_first_of("(,") == std::string::npos) {
    return parse_int("SLURM_NTASKS_PER_NODE", per_node, 1, INT_MAX);
  }
  for (const char* name : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    const char* text = env_value(name);
    if (!text) continue;
    int node = required_int("SLURM_NODEID", 0, INT_MAX, name);
    int count = slurm_tasks_on_node(name, text, node);
    COHORT_CHECK(count > 0, Status::kInvalidArgument, "detect_job_env: ", name, "='", text,
                 "' does not cover SLURM_NODEID=", node);
    return count;
  }
  COHORT_CHECK(false, Status::kInvalidArgument, "detect_job_env: SLURM_LOCALID is set but none ",
               "of SLURM_NTASKS_PER_NODE, SLURM_STEP_TASKS_PER_NODE, SLURM_TASKS_PER_NODE is");
  return 1;
}

// Fills rank, world, local_rank and local_world from one launcher's variables.
void read_ranks(const LauncherVars& l, JobEnv* env) {
  env->source = l.source;
  env->world = required_int(l.world, 1, INT_MAX, l.rank);
  env->rank = parse_int(l.rank, env_value(l.rank), 0, env->world - 1);
  const char* local_rank = env_value(l.local_rank);
  if (!local_rank) return;  // no local information: assume one rank per machine
  if (l.local_world) {
    env->local_world = required_int(l.local_world, 1, env->world, l.local_rank);
  } else {
    env->local_world = slurm_local_world();
  }
  env->local_rank = parse_int(l.local_rank, local_rank, 0, env->local_world - 1);
}

const char* first_set(const char* a, const char* b, const char** which) {
  if (const char* v = env_value(a)) return *which = a, v;
  if (const char* v = env_value(b)) return *which = b, v;
  return nullptr;
}

// The variable holding a job id that a launcher gives every rank of one job alike, and the
// variables that qualify it; the job token is derived from them when COHORT_JOB_TOKEN is unset.
// Only the launcher whose rank variables were read is asked, so every rank reads the same ones.
struct JobId {
  const char* source;
  const char* id;
  const char* qualifiers[2];
};

constexpr JobId kJobIds[] = {
    // torchrun's run id is "none" unless --rdzv_id (or --standalone) names one; the address of
    // its own store, which one job holds at a time, tells such jobs apart.
    {"torchrun", "TORCHELASTIC_RUN_ID", {"MASTER_ADDR", "MASTER_PORT"}},
    {"mpi", "PMIX_NAMESPACE", {nullptr, nullptr}},           // Open MPI 4 and 5, PMIx launchers
    {"mpi", "OMPI_MCA_ess_base_jobid", {nullptr, nullptr}},  // Open MPI 3 and 4
    {"slurm", "SLURM_JOB_ID", {"SLURM_STEP_ID", nullptr}},    // steps of one allocation differ
};

// COHORT_JOB_TOKEN, else a token derived from the launcher's job id, else none.
void read_token(JobEnv* env) {
  if (const char* token = env_value("COHORT_JOB_TOKEN")) {
    env->token = token;
    env->token_source = "COHORT_JOB_TOKEN";
    return;
  }
  for (const JobId& j : kJobIds) {
    const char* id = env_value(j.id);
    if (env->source != j.source || !id) continue;
    env->token = std::string(j.id) + "=" + id;
    for (const char* q : j.qualifiers) {
      if (const char* v = env_value(q)) env->token += std::string(",") + q + "=" + v;
    }
    env->token_source = j.id;
    return;
  }
}

// The job-id variables of this launcher, for the message when no token can be had.
std::string job_id_variables(const std::string& source) {
  std::string names;
  for (const JobId& j : kJobIds) {
    if (source == j.source) names += std::string(names.empty() ? "" : " or ") + j.id;
  }
  return names.empty() ? "" : " (or have the launcher set " + names + ", from which it is derived)";
}

// cohort's store port: COHORT_MASTER_PORT as given; else the port after MASTER_PORT, which
// belongs to PyTorch — torchrun's static rendezvous hosts its own store there and a program's
// init_process_group binds it on rank 0 — else the port after PyTorch's default.
int store_port() {
  if (const char* port = env_value("COHORT_MASTER_PORT")) return parse_int("COHORT_MASTER_PORT", port, 1, 65535);
  const char* port = env_value("MASTER_PORT");
  if (!port) return kTorchDefaultMasterPort + 1;
  const int torch_port = parse_int("MASTER_PORT", port, 1, 65535);
  COHORT_CHECK(torch_port < 65535, Status::kInvalidArgument, "detect_job_env: MASTER_PORT=65535 ",
               "leaves no port after it for cohort's store (MASTER_PORT is PyTorch's own store): set ",
               "COHORT_MASTER_PORT");
  return torch_port + 1;
}

void read_master(JobEnv* env) {
  const char* which = nullptr;
  if (const char* addr = first_set("COHORT_MASTER_ADDR", "MASTER_ADDR", &which)) {
    env->master_addr = addr;
  }
  read_token(env);
  if (env->world == 1) return;  // no store to reach: a MemoryStore
  env->master_port = store_port();
  // Every rank on this machine, by the launcher's own count: rank 0 is here too.
  if (env->master_addr.empty() && env->local_world == env->world) env->master_addr = "127.0.0.1";
  COHORT_CHECK(!env->master_addr.empty(), Status::kInvalidArgument, "detect_job_env: world size ",
               env->world, " (from ", env->source, " variables) on several machines needs the ",
               "address of rank 0's host: set MASTER_ADDR (or COHORT_MASTER_ADDR) on every rank");
  COHORT_CHECK(!env->token.empty(), Status::kInvalidArgument, "detect_job_env: world size ",
               env->world, " (from ", env->source, " variables) needs a job token: set ",
               "COHORT_JOB_TOKEN to the same value on every rank", job_id_variables(env->source),
               "; cohort-run sets it itself");
}

}  // namespace

JobEnv detect_job_env() {
  JobEnv env;
  env.source = "none";
  for (const LauncherVars& l : kLaunchers) {
    if (env_value(l.rank)) {
      read_ranks(l, &env);
      break;
    }
  }
  read_master(&env);
  return env;
}

std::shared_ptr<Store> connect_job_store(const JobEnv& env, std::chrono::milliseconds timeout) {
  COHORT_CHECK(env.world >= 1 && env.rank >= 0 && env.rank < env.world, Status::kInvalidArgument,
               "connect_job_store: rank ", env.rank, " is not in a world of ", env.world);
  if (env.world == 1) return make_memory_store();
  COHORT_CHECK(!env.master_addr.empty() && !env.token.empty(), Status::kInvalidArgument,
               "connect_job_store: rank ", env.rank, " of ", env.world,
               " needs a master address and a job token");
  TcpStoreOptions options;
  options.host = env.master_addr;
  options.port = env.master_port;
  options.token = env.token;
  options.connect_timeout = timeout;
  options.reply_timeout = timeout;
  if (env.rank == 0) return host_tcp_store(options);
  return connect_tcp_store(options);
}

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  int cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
  if (cpus <= 0) cpus = static_cast<int>(std::thread::hardware_concurrency());
  return cpus > 0 ? cpus : 1;
}

}  // namespace cohort::transport
