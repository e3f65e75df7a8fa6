// cohort-run's command-line parsing: strict numbers, HOST:PORT with IPv6 brackets, and the
// consistency rules between --nnodes, --node-rank, --master and --token.
#include "transport/launcher/run_options.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace cohort::transport::launcher {

const char* const kUsage =
    "usage: cohort-run -n N [--nnodes M --node-rank K --master HOST:PORT] [--token T] "
    "[--grace SECONDS] [--bind cores|none] -- PROGRAM [ARGS...]";

namespace {

long parse_long(const std::string& flag, const std::string& text, long min, long max) {
  errno = 0;
  char* end = nullptr;
  long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || errno != 0 || *end != '\0' || v < min || v > max) {
    throw UsageError(flag + " needs an integer in [" + std::to_string(min) + ", " +
                     std::to_string(max) + "], got '" + text + "'");
  }
  return v;
}

void parse_master(const std::string& text, RunOptions* o) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    throw UsageError("--master needs HOST:PORT, got '" + text + "'");
  }
  std::string host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  o->master_host = host;
  o->master_port = static_cast<int>(parse_long("--master port", text.substr(colon + 1), 0, 65535));
}

void check_consistency(RunOptions* o) {
  if (o->nproc <= 0) throw UsageError("-n N (ranks on this node) is required");
  if (o->command.empty()) throw UsageError("no program given after --");
  if (o->node_rank >= o->nnodes) {
    throw UsageError("--node-rank " + std::to_string(o->node_rank) + " is not below --nnodes " +
                     std::to_string(o->nnodes));
  }
  if (o->nnodes > 1 && (o->master_host.empty() || o->master_port == 0)) {
    throw UsageError("--nnodes > 1 needs --master HOST:PORT with a fixed port");
  }
  if (o->nnodes > 1 && o->token.empty()) {
    throw UsageError("--nnodes > 1 needs --token T (or COHORT_JOB_TOKEN), the same on every node");
  }
}

}  // namespace

RunOptions parse_run_options(int argc, char** argv) {
  RunOptions o;
  if (const char* env_token = std::getenv("COHORT_JOB_TOKEN")) o.token = env_token;
  int i = 1;
  auto value = [&](const std::string& flag) -> std::string {
    if (i + 1 >= argc) throw UsageError(flag + " needs a value");
    return argv[++i];
  };
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a == "-h" || a == "--help") {
      o.help = true;
      return o;
    } else if (a == "-n" || a == "--nproc-per-node") {
      o.nproc = static_cast<int>(parse_long(a, value(a), 1, 4096));
    } else if (a == "--nnodes") {
      o.nnodes = static_cast<int>(parse_long(a, value(a), 1, 1 << 20));
    } else if (a == "--node-rank") {
      o.node_rank = static_cast<int>(parse_long(a, value(a), 0, (1 << 20) - 1));
    } else if (a == "--master") {
      parse_master(value(a), &o);
    } else if (a == "--token") {
      o.token = value(a);
      if (o.token.empty() || o.token.size() > 1024) {
        throw UsageError("--token needs 1 to 1024 characters");
      }
    } else if (a == "--grace") {
      std::string text = value(a);
      char* end = nullptr;
      o.grace_s = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0' || !(o.grace_s > 0 && o.grace_s <= 3600)) {
        throw UsageError("--grace needs seconds in (0, 3600], got '" + text + "'");
      }
    } else if (a == "--bind") {
      const std::string how = value(a);
      if (how != "cores" && how != "none") throw UsageError("--bind needs cores or none, got '" + how + "'");
      o.bind_cores = how == "cores";
    } else if (!a.empty() && a[0] == '-') {
      throw UsageError("unknown option '" + a + "'");
    } else {
      break;  // the program, without a --
    }
  }
  for (; i < argc; ++i) o.command.emplace_back(argv[i]);
  check_consistency(&o);
  return o;
}

}  // namespace cohort::transport::launcher
