// Internal helpers shared by the store implementations (memory and TCP): the counter encoding
// used by Store::add and the limits every store enforces. Not part of the public interface.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "transport/bootstrap/store.h"

namespace cohort::transport::detail {

// Limits shared by all stores, so a program that works on MemoryStore works over TCP.
constexpr size_t kMaxKeyBytes = 1024;
constexpr size_t kMaxValueBytes = size_t{64} << 20;
// Waits longer than this are clamped (a day): keeps deadline arithmetic far from overflow.
constexpr std::chrono::milliseconds kMaxWait{24LL * 3600 * 1000};

// Throws kInvalidArgument naming `who` when the key is empty or too long.
void check_key(const char* who, const std::string& key);
// Throws kInvalidArgument naming `who` and the key when the value is too large.
void check_value(const char* who, const std::string& key, size_t value_bytes);
// Clamps a caller's timeout to [0, kMaxWait].
std::chrono::milliseconds clamp_wait(std::chrono::milliseconds timeout);

// Counters are stored as decimal ASCII text (so get() of a counter reads "42"). Adds delta to
// the counter in `slot` (empty = 0) and returns the new value; throws kInvalidArgument naming
// the key when the slot holds something else or the sum overflows.
int64_t add_to_counter(const std::string& key, Bytes& slot, int64_t delta);

}  // namespace cohort::transport::detail
