// A tiny rank program for the launcher tests. Modes:
//   env              print what detect_job_env() found, on stdout and stderr
//   store            join the job's store, exchange one key per rank, print the count
//   fail R CODE      rank R exits with CODE once every rank is up; the others wait (at most
//                    30 s) to be stopped
//   lines N          print N lines, each in two writes split mid-line
//   trap             report SIGTERM when it arrives; print "ready" and wait (at most 30 s)
//   cpus             print the CPUs the rank may run on and its OMP_WAIT_POLICY
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/base/error.h"
#include "transport/bootstrap/env.h"

using namespace cohort::transport;

namespace {

int g_rank = -1;

void on_term(int) {
  char line[64];
  int n = std::snprintf(line, sizeof(line), "got SIGTERM rank=%d\n", g_rank);
  ssize_t ignored = write(1, line, static_cast<size_t>(n));
  (void)ignored;
  _exit(0);
}

// Waits to be stopped by the launcher; gives up after 30 s so a broken launcher cannot leave it.
int wait_to_be_stopped() {
  for (int i = 0; i < 300; ++i) usleep(100 * 1000);
  std::printf("never stopped\n");
  return 9;
}

int run_store(const JobEnv& env) {
  auto store = connect_job_store(env, std::chrono::seconds(10));
  store->set("rank/" + std::to_string(env.rank), Bytes{static_cast<uint8_t>(env.rank)});
  for (int r = 0; r < env.world; ++r) {
    Bytes v = store->get("rank/" + std::to_string(r), std::chrono::seconds(10));
    if (v != Bytes{static_cast<uint8_t>(r)}) return 1;
  }
  int64_t count = store->add("done", 1);
  if (count == env.world) store->set("all-done", {});
  if (env.rank == 0) store->get("all-done", std::chrono::seconds(10));  // the host leaves last
  std::printf("store ok rank=%d\n", env.rank);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "env";
  try {
    JobEnv env = detect_job_env();
    g_rank = env.rank;
    if (mode == "env") {
      std::printf("rank=%d world=%d local_rank=%d local_world=%d master=%s:%d token_len=%zu\n",
                  env.rank, env.world, env.local_rank, env.local_world, env.master_addr.c_str(),
                  env.master_port, env.token.size());
      std::fflush(stdout);
      std::fprintf(stderr, "stderr line of rank %d\n", env.rank);
      return 0;
    }
    if (mode == "store") return run_store(env);
    if (mode == "fail" && argc == 4) {
      // Every rank reports its pid before the failing one fails, so the test can check them all.
      auto store = connect_job_store(env, std::chrono::seconds(10));
      std::printf("pid=%d\n", static_cast<int>(getpid()));
      std::fflush(stdout);
      store->set("ready-" + std::to_string(env.rank), {});
      if (env.rank != std::atoi(argv[2])) return wait_to_be_stopped();
      for (int r = 0; r < env.world; ++r) {
        store->get("ready-" + std::to_string(r), std::chrono::seconds(10));
      }
      return std::atoi(argv[3]);
    }
    if (mode == "lines" && argc == 3) {
      for (int i = 0; i < std::atoi(argv[2]); ++i) {
        std::string text = "line " + std::to_string(i) + " of rank " + std::to_string(env.rank);
        std::string head = text.substr(0, text.size() / 2), tail = text.substr(text.size() / 2);
        tail += '\n';
        if (write(1, head.data(), head.size()) < 0 || write(1, tail.data(), tail.size()) < 0) {
          return 1;
        }
      }
      return 0;
    }
    if (mode == "cpus") {
      cpu_set_t set;
      CPU_ZERO(&set);
      if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
      std::string list;
      for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &set)) list += (list.empty() ? "" : ",") + std::to_string(c);
      const char* wait = std::getenv("OMP_WAIT_POLICY");
      std::printf("cpus=%s wait=%s\n", list.c_str(), wait ? wait : "unset");
      return 0;
    }
    if (mode == "trap") {
      signal(SIGTERM, on_term);
      std::printf("ready pid=%d\n", static_cast<int>(getpid()));
      std::fflush(stdout);
      return wait_to_be_stopped();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank_probe: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "rank_probe: unknown mode '%s'\n", mode.c_str());
  return 2;
}
