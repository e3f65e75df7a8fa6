// Logging goes through one replaceable sink so embedders decide where text goes; library code
// never prints directly. Lines carry a level and, once known, the rank.
#pragma once

#include <string>

namespace cohort {

enum class LogLevel : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

using LogSink = void (*)(int level, const char* message, void* user);

// Replaces the sink (nullptr restores the default, which writes to stderr at kWarn and above).
void set_log_sink(LogSink sink, void* user);
void set_log_level(LogLevel level);
void set_log_rank(int rank);
void log(LogLevel level, const std::string& message);

}  // namespace cohort
