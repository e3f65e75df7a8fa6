// Key/value limits and the decimal counter encoding shared by MemoryStore and TcpStore.
#include "transport/bootstrap/store_util.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "core/base/error.h"

namespace cohort::transport::detail {

void check_key(const char* who, const std::string& key) {
  COHORT_CHECK(!key.empty(), Status::kInvalidArgument, who, ": empty key");
  COHORT_CHECK(key.size() <= kMaxKeyBytes, Status::kInvalidArgument, who, ": key of ", key.size(),
               " bytes exceeds the limit of ", kMaxKeyBytes, " bytes");
}

void check_value(const char* who, const std::string& key, size_t value_bytes) {
  COHORT_CHECK(value_bytes <= kMaxValueBytes, Status::kInvalidArgument, who, ": value of key '",
               key, "' has ", value_bytes, " bytes, more than the limit of ", kMaxValueBytes);
}

std::chrono::milliseconds clamp_wait(std::chrono::milliseconds timeout) {
  return std::clamp(timeout, std::chrono::milliseconds(0), kMaxWait);
}

int64_t add_to_counter(const std::string& key, Bytes& slot, int64_t delta) {
  int64_t current = 0;
  if (!slot.empty()) {
    std::string text(slot.begin(), slot.end());
    char* end = nullptr;
    errno = 0;
    long long parsed = std::strtoll(text.c_str(), &end, 10);
    bool ok = errno == 0 && end == text.c_str() + text.size() && text.size() <= 20 &&
              (std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '-');
    COHORT_CHECK(ok, Status::kInvalidArgument, "Store::add: key '", key,
                 "' holds a value that is not a decimal integer counter");
    current = parsed;
  }
  int64_t sum = 0;
  COHORT_CHECK(!__builtin_add_overflow(current, delta, &sum), Status::kInvalidArgument,
               "Store::add: key '", key, "': ", current, " + ", delta, " overflows int64");
  std::string text = std::to_string(sum);
  slot.assign(text.begin(), text.end());
  return sum;
}

}  // namespace cohort::transport::detail
