// The boundary: every C entry point is one call to guard(), which runs the C++ body and turns
// any exception into a cohort_status plus the thread-local message "<function>: <text>".
// Handles are checked against a table of live objects, so a NULL, destroyed or wrong-type
// handle is reported without ever being dereferenced.
#pragma once

#include <cstring>

#include <mutex>
#include <new>
#include <string>
#include <unordered_map>

#include "capi/include/cohort/cohort.h"
#include "core/base/error.h"

namespace cohort::capi {

// The integer a caller stored in a C enum, read as bytes: a value outside the enumerators (a
// caller's mistake we must report) may not be loaded through the C++ enum type itself.
template <typename E>
int enum_int(const E& value) {
  static_assert(sizeof(E) == sizeof(int), "C enums here are int-sized");
  int v;
  std::memcpy(&v, &value, sizeof v);
  return v;
}

void set_last_error(const std::string& message);
void clear_last_error();

template <typename F>
cohort_status guard(const char* function, F&& body) noexcept {
  try {
    clear_last_error();
    body();
    return COHORT_OK;
  } catch (const Error& e) {
    set_last_error(str_cat(function, ": ", e.what()));
    return static_cast<cohort_status>(e.status());
  } catch (const std::bad_alloc&) {
    set_last_error(str_cat(function, ": out of memory"));
    return COHORT_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_last_error(str_cat(function, ": internal error: ", e.what()));
    return COHORT_ERR_INTERNAL;
  } catch (...) {
    set_last_error(str_cat(function, ": internal error: unknown exception"));
    return COHORT_ERR_INTERNAL;
  }
}

// Live handles by address, each with its type name ("graph", "trainer", ...).
class HandleTable {
 public:
  static HandleTable& get();
  void add(const void* h, const char* type);
  void remove(const void* h);
  // Throws kInvalidHandle: "<arg> is NULL", "<arg> is not a live cohort_<type> (destroyed?)".
  void check(const void* h, const char* type, const char* arg) const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<const void*, const char*> live_;
};

template <typename T>
T* checked(T* h, const char* type, const char* arg) {
  HandleTable::get().check(h, type, arg);
  return h;
}

// Argument checks shared by the entry points.
void check_not_null(const void* p, const char* arg);
std::string checked_name(const char* s, const char* arg);  // non-NULL, 1..256 characters
std::string checked_path(const char* path);                // non-NULL, non-empty
void check_struct_size(size_t given, size_t minimum, const char* arg);

}  // namespace cohort::capi
