// Libraries loaded with dlopen at first use instead of linked (cuBLAS, NCCL): open one by name and
// resolve its functions, failing with kUnsupported errors that name the library, the symbol and
// dlerror's text. Users link ${CMAKE_DL_LIBS}.
#pragma once

#include <dlfcn.h>

#include <string>

#include "core/base/error.h"

namespace cohort {

// The library `name` (e.g. "libnccl.so.2"), kept loaded for the life of the process; `purpose`
// completes the error ("cannot load <name> for <purpose>: ...").
inline void* open_library(const std::string& name, const char* purpose) {
  void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  COHORT_CHECK(lib != nullptr, Status::kUnsupported, "cannot load ", name, " for ", purpose, ": ", dlerror());
  return lib;
}

// *out = the function `symbol` of `lib` (opened as `lib_name`).
template <typename Fn>
void resolve_symbol(void* lib, const std::string& lib_name, const char* symbol, Fn* out) {
  void* p = dlsym(lib, symbol);
  COHORT_CHECK(p != nullptr, Status::kUnsupported, lib_name, " has no ", symbol, " (", dlerror(), ")");
  *out = reinterpret_cast<Fn>(p);
}

}  // namespace cohort
