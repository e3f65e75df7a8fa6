// Last-error storage, handle table, version, status names, global settings.
#include "capi/src/guard.h"
#include "core/base/log.h"
#include "core/tensor/dtype.h"
#include "kernels/cpu/threads.h"

namespace cohort::capi {

namespace {
thread_local std::string t_last_error;
}

void set_last_error(const std::string& message) { t_last_error = message; }
void clear_last_error() { t_last_error.clear(); }

HandleTable& HandleTable::get() {
  static HandleTable* table = new HandleTable();  // never destroyed: handles may outlive statics
  return *table;
}

void HandleTable::add(const void* h, const char* type) {
  std::lock_guard<std::mutex> lock(mu_);
  live_[h] = type;
}

void HandleTable::remove(const void* h) {
  std::lock_guard<std::mutex> lock(mu_);
  live_.erase(h);
}

void HandleTable::check(const void* h, const char* type, const char* arg) const {
  COHORT_CHECK(h != nullptr, Status::kInvalidHandle, arg, " is NULL");
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(h);
  COHORT_CHECK(it != live_.end(), Status::kInvalidHandle, arg, " is not a live cohort_", type,
               " (already destroyed, or never created)");
  COHORT_CHECK(std::string(it->second) == type, Status::kInvalidHandle, arg, " is a cohort_", it->second,
               ", expected a cohort_", type);
}

void check_not_null(const void* p, const char* arg) {
  COHORT_CHECK(p != nullptr, Status::kInvalidArgument, arg, " is NULL");
}

std::string checked_name(const char* s, const char* arg) {
  COHORT_CHECK(s != nullptr, Status::kInvalidArgument, arg, " is NULL");
  std::string r(s);
  COHORT_CHECK(!r.empty() && r.size() <= 256, Status::kInvalidArgument, arg, " must be 1 to 256 characters");
  return r;
}

std::string checked_path(const char* path) {
  check_not_null(path, "path");
  COHORT_CHECK(path[0] != '\0', Status::kInvalidArgument, "path is empty");
  return path;
}

void check_struct_size(size_t given, size_t minimum, const char* arg) {
  COHORT_CHECK(given >= minimum, Status::kInvalidArgument, arg, "->size is ", given,
               "; set it with the matching *_default() function (at least ", minimum, ")");
}

}  // namespace cohort::capi

using namespace cohort;
using cohort::capi::guard;

extern "C" {

COHORT_API int cohort_abi_version(void) { return COHORT_ABI_VERSION; }

COHORT_API const char* cohort_version_string(void) { return "0.2.0"; }

COHORT_API const char* cohort_last_error(void) { return cohort::capi::t_last_error.c_str(); }

COHORT_API const char* cohort_status_name(cohort_status status) {
  const int s = cohort::capi::enum_int(status);
  if (s < COHORT_OK || s > COHORT_ERR_NON_FINITE) return "unknown status";
  return status_name(static_cast<Status>(s));
}

COHORT_API cohort_status cohort_set_log_callback(cohort_log_fn fn, void* user) {
  return guard("cohort_set_log_callback", [&] { set_log_sink(fn, user); });
}

COHORT_API cohort_status cohort_set_log_level(int level) {
  return guard("cohort_set_log_level", [&] {
    COHORT_CHECK(level >= 0 && level <= 3, Status::kInvalidArgument, "level must be 0..3, got ", level);
    set_log_level(static_cast<LogLevel>(level));
  });
}

COHORT_API cohort_status cohort_set_num_threads(int n) {
  return guard("cohort_set_num_threads", [&] {
    COHORT_CHECK(n >= 1, Status::kInvalidArgument, "n must be >= 1, got ", n);
    kernels::cpu::set_num_threads(n);
  });
}

COHORT_API size_t cohort_dtype_size(cohort_dtype dtype) {
  DType t;
  return dtype_from_int(cohort::capi::enum_int(dtype), &t) ? dtype_size(t) : 0;
}

}  // extern "C"
