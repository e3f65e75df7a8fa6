#include "core/exec/profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

namespace cohort {

namespace {
struct Entry {
  double seconds = 0;
  long long calls = 0;
};

struct Table {
  std::mutex mutex;
  std::map<std::string, Entry> ops;
  ~Table() {
    if (!OpProfile::enabled()) return;
    std::string text = OpProfile::report();
    if (!text.empty()) std::fputs(text.c_str(), stderr);
  }
};

Table& table() {
  static Table t;  // destroyed at exit, printing the report
  return t;
}
}  // namespace

bool OpProfile::enabled() {
  static const bool on = [] {
    const char* v = std::getenv("COHORT_PROFILE");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return on;
}

void OpProfile::add(const std::string& op, double seconds) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  Entry& e = t.ops[op];
  e.seconds += seconds;
  ++e.calls;
}

void OpProfile::reset() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  t.ops.clear();
}

std::string OpProfile::report() {
  Table& t = table();
  std::vector<std::pair<std::string, Entry>> rows;
  {
    std::lock_guard<std::mutex> lock(t.mutex);
    rows.assign(t.ops.begin(), t.ops.end());
  }
  if (rows.empty()) return "";
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  double total = 0;
  for (const auto& r : rows) total += r.second.seconds;
  std::string out = "cohort profile: time per operator (COHORT_PROFILE)\n";
  char line[256];
  for (const auto& r : rows) {
    std::snprintf(line, sizeof line, "  %-28s %10.3f s %6.1f%% %10lld calls %10.1f us/call\n", r.first.c_str(),
                  r.second.seconds, 100.0 * r.second.seconds / total, r.second.calls,
                  1e6 * r.second.seconds / static_cast<double>(r.second.calls));
    out += line;
  }
  std::snprintf(line, sizeof line, "  %-28s %10.3f s\n", "total", total);
  return out + line;
}

}  // namespace cohort
