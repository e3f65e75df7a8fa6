// Errors inside cohort are C++ exceptions of type cohort::Error carrying a Status; the C ABI
// turns them into a status and a thread-local message. COHORT_CHECK is for what a caller can get
// wrong, COHORT_ASSERT for cohort's own invariants. Neither aborts.
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/base/status.h"

namespace cohort {

class Error : public std::runtime_error {
 public:
  Error(Status status, const std::string& message) : std::runtime_error(message), status_(status) {}
  Status status() const { return status_; }

 private:
  Status status_;
};

namespace detail {
inline void append(std::ostringstream&) {}
template <typename T>
void append_one(std::ostringstream& os, const T& v) { os << v; }
template <typename T>
void append_one(std::ostringstream& os, const std::vector<T>& v) {
  os << '[';
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << ']';
}
template <typename T, typename... Rest>
void append(std::ostringstream& os, const T& first, const Rest&... rest) {
  append_one(os, first);
  append(os, rest...);
}
}  // namespace detail

// Concatenates any streamable values; vectors print as [a, b, c].
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  detail::append(os, args...);
  return os.str();
}

[[noreturn]] inline void throw_error(Status s, const std::string& msg) { throw Error(s, msg); }

}  // namespace cohort

// A caller-visible check: COHORT_CHECK(cond, Status::kX, "message parts", ...).
#define COHORT_CHECK(cond, status, ...)                                 \
  do {                                                                  \
    if (!(cond)) ::cohort::throw_error((status), ::cohort::str_cat(__VA_ARGS__)); \
  } while (0)

// An internal invariant: reports file and line, never aborts.
#define COHORT_ASSERT(cond, ...)                                                            \
  do {                                                                                      \
    if (!(cond))                                                                            \
      ::cohort::throw_error(::cohort::Status::kInternal,                                    \
                            ::cohort::str_cat("internal error at ", __FILE__, ":", __LINE__, \
                                              ": " #cond " ", ##__VA_ARGS__));              \
  } while (0)
