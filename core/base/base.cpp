// Status names and the log sink.
#include <atomic>
#include <cstdio>
#include <mutex>

#include "core/base/log.h"
#include "core/base/status.h"

namespace cohort {

const char* status_name(Status s) {
  switch (s) {
    case Status::kOk: return "ok";
    case Status::kInvalidArgument: return "invalid argument";
    case Status::kInvalidHandle: return "invalid handle";
    case Status::kShapeMismatch: return "shape mismatch";
    case Status::kNotFound: return "not found";
    case Status::kIo: return "i/o error";
    case Status::kCorrupt: return "corrupt data";
    case Status::kOutOfMemory: return "out of memory";
    case Status::kUnsupported: return "unsupported";
    case Status::kInternal: return "internal error";
    case Status::kPeerFailed: return "peer failed";
    case Status::kTimeout: return "timeout";
    case Status::kInvalidPlan: return "invalid plan";
    case Status::kInvalidState: return "invalid state";
    case Status::kNonFinite: return "non-finite values";
  }
  return "unknown status";
}

namespace {
std::mutex g_log_mu;
LogSink g_sink = nullptr;
void* g_sink_user = nullptr;
std::atomic<int> g_level{static_cast<int>(LogLevel::kWarn)};
std::atomic<int> g_rank{-1};
const char* level_name(int level) {
  static const char* names[] = {"error", "warn", "info", "debug"};
  return level >= 0 && level <= 3 ? names[level] : "log";
}
}  // namespace

void set_log_sink(LogSink sink, void* user) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  g_sink = sink;
  g_sink_user = user;
}
void set_log_level(LogLevel level) { g_level = static_cast<int>(level); }
void set_log_rank(int rank) { g_rank = rank; }

void log(LogLevel level, const std::string& message) {
  int lv = static_cast<int>(level);
  if (lv > g_level.load()) return;
  std::string line;
  int rank = g_rank.load();
  if (rank >= 0) line = "[rank " + std::to_string(rank) + "] ";
  line += message;
  std::lock_guard<std::mutex> lock(g_log_mu);
  if (g_sink) {
    g_sink(lv, line.c_str(), g_sink_user);
  } else {
    std::fprintf(stderr, "cohort %s: %s\n", level_name(lv), line.c_str());
  }
}

}  // namespace cohort
