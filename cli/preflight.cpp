// The checks `cohort train` makes before its first step; see preflight.h. Writability is probed
// by opening or creating files rather than asked of access(): root passes every permission check
// that access() makes, yet cannot create files on a read-only mount or in /proc.
#include "cli/preflight.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace cohort_cli {

namespace {

std::string directory_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// "--save '/runs/ck'"
std::string named(const char* flag, const std::string& path) { return std::string(flag) + " '" + path + "'"; }

// Opens (and closes) a file with `flags`; returns errno, or 0 when the open succeeded.
int try_open(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC | O_NOCTTY, 0644);
  if (fd < 0) return errno;
  ::close(fd);
  return 0;
}

// `replaced`: the file is written beside its path and renamed over it (checkpoints), so its
// directory must take new files even when the file exists.
void check_output(const char* flag, const std::string& path, bool replaced) {
  if (path.empty()) return;
  const std::string what = named(flag, path);
  if (path.back() == '/') throw UsageError(what + " names a directory, not a file");
  const std::string dir = directory_of(path);
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0)
    throw UsageError(what + ": directory '" + dir + "' " +
                     (errno == ENOENT ? std::string("does not exist") : std::strerror(errno)));
  if (!S_ISDIR(st.st_mode)) throw UsageError(what + ": '" + dir + "' is not a directory");
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) throw UsageError(what + " is a directory, not a file");
  if (exists && !S_ISREG(st.st_mode)) return;  // a device or pipe (/dev/stdout): opened as it comes
  if (exists && !replaced) {  // appended to or rewritten in place
    if (const int err = try_open(path, O_WRONLY | O_APPEND))
      throw UsageError(what + ": cannot write to it (" + std::strerror(err) + ")");
    return;
  }
  // A missing output is created exclusively and removed again; an existing checkpoint gets a
  // probe beside it, as its writer's temporary file will be.
  const std::string probe = exists ? path + ".probe." + std::to_string(::getpid()) : path;
  const int err = try_open(probe, O_WRONLY | O_CREAT | O_EXCL);
  if (err == EEXIST) return;  // another rank of this job probed the same name just now
  if (err != 0)  // ENOENT from an existing directory: one that takes no new files (/proc)
    throw UsageError(what + ": cannot create files in directory '" + dir + "' (" +
                     (err == ENOENT ? "it takes no new files" : std::strerror(err)) + ")");
  ::unlink(probe.c_str());
}

void check_input(const char* flag, const std::string& path) {
  if (path.empty()) return;
  const std::string what = named(flag, path);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    throw UsageError(what + ": " + (errno == ENOENT ? std::string("no such file") : std::strerror(errno)));
  if (S_ISDIR(st.st_mode)) throw UsageError(what + " is a directory, not a file");
  if (const int err = try_open(path, O_RDONLY))
    throw UsageError(what + ": cannot read it (" + std::strerror(err) + ")");
}

// The launchers whose rank variable detect_job_env() reads first (transport/bootstrap/env.cpp),
// in its order of precedence, and how each is told to start more ranks.
struct Launcher {
  const char* rank_variable;
  const char* started;
};
constexpr Launcher kLaunchers[] = {
    {"COHORT_RANK", "cohort-run started one rank (give it -n N)"},
    {"RANK", "torchrun started one rank (give it --nproc_per_node N, or more nodes)"},
    {"OMPI_COMM_WORLD_RANK", "mpirun started one rank (give it -np N)"},
    {"PMI_RANK", "mpirun started one rank (give it -np N)"},
    {"SLURM_PROCID", "srun started one task (give it -n N)"},
};

std::string world_of_one_warning(const std::string& parallel) {
  const std::string head = "--parallel " + parallel + " runs in a world of one process, as plain training: ";
  for (const Launcher& l : kLaunchers) {
    const char* v = std::getenv(l.rank_variable);
    if (v && *v) return head + l.started;
  }
  return head +
         "no launcher started it; start it as 'cohort-run -n N -- cohort train ...', or under mpirun, srun "
         "or torchrun (README.md, 'Launching')";
}

}  // namespace

void check_paths(const Options& o, int world) {
  try {
    check_output("--save", o.save, true);
    check_input("--resume", o.resume);
  } catch (const UsageError& e) {
    if (world == 1) throw;
    throw UsageError(std::string(e.what()) + " (each of the " + std::to_string(world) +
                     " ranks writes and reads its own PATH.rank<r>)");
  }
  check_output("--metrics", o.metrics, false);
  check_output("--loss-log", o.loss_log, false);
  check_output("--dump-batches", o.dump_batches, false);
}

void check_job_paths(const Options& o, Task& task) {
  std::string problem;
  try {
    check_paths(o, task.world());
  } catch (const UsageError& e) {
    problem = e.what();
  }
  problem = task.agree_on_problem(problem);
  if (!problem.empty()) throw UsageError(problem);
}

void print_warnings(std::vector<std::string> warnings, const Options& o, int world) {
  if (!o.parallel.empty() && world == 1) warnings.push_back(world_of_one_warning(o.parallel));
  std::fflush(stdout);
  for (const std::string& w : warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
}

}  // namespace cohort_cli
