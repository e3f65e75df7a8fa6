// Shared oneDNN plumbing: one CPU engine per process, one stream per thread, and the wrapper
// that turns a dnnl::error into a cohort::Error naming the primitive and carrying oneDNN's text.
// oneDNN keeps its own primitive cache, so kernels may create primitives per call.
#pragma once

#include <dnnl.hpp>
#include <string>

#include "core/base/error.h"

namespace cohort::kernels::cpu {

dnnl::engine& dnnl_engine();
dnnl::stream& dnnl_stream();  // thread-local

// Runs f(); a dnnl::error becomes Error(kInternal, "oneDNN <what>: <message> (status N)").
template <typename F>
void dnnl_call(const char* what, F&& f) {
  try {
    f();
  } catch (const dnnl::error& e) {
    throw Error(Status::kInternal, str_cat("oneDNN ", what, ": ", e.what(), " (status ",
                                           static_cast<int>(e.status), ")"));
  }
}

}  // namespace cohort::kernels::cpu
