// Loads NCCL on first use (see nccl_api.h for why it is not linked).
#include "transport/nccl/nccl_api.h"

#include <dlfcn.h>

#include "core/base/error.h"

namespace cohort::transport::nccl {

namespace {

template <typename Fn>
void resolve(void* lib, const std::string& lib_name, const char* symbol, Fn* out) {
  void* p = dlsym(lib, symbol);
  COHORT_CHECK(p != nullptr, Status::kUnsupported, lib_name, " has no ", symbol, " (", dlerror(), ")");
  *out = reinterpret_cast<Fn>(p);
}

NcclApi load() {
  const std::string name = "libnccl.so." + std::to_string(NCCL_MAJOR);
  void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  COHORT_CHECK(lib != nullptr, Status::kUnsupported, "cannot load ", name, " for NCCL communicators: ", dlerror());
  // Kept loaded for the life of the process: communicators and their threads may outlive callers.
  NcclApi api{};
#define COHORT_NCCL_RESOLVE(fn) resolve(lib, name, #fn, &api.fn)
  COHORT_NCCL_RESOLVE(ncclGetUniqueId);
  COHORT_NCCL_RESOLVE(ncclCommInitRankConfig);
  COHORT_NCCL_RESOLVE(ncclCommSplit);
  COHORT_NCCL_RESOLVE(ncclCommFinalize);
  COHORT_NCCL_RESOLVE(ncclCommDestroy);
  COHORT_NCCL_RESOLVE(ncclCommAbort);
  COHORT_NCCL_RESOLVE(ncclCommGetAsyncError);
  COHORT_NCCL_RESOLVE(ncclCommCount);
  COHORT_NCCL_RESOLVE(ncclCommUserRank);
  COHORT_NCCL_RESOLVE(ncclGetErrorString);
  COHORT_NCCL_RESOLVE(ncclGetLastError);
  COHORT_NCCL_RESOLVE(ncclGroupStart);
  COHORT_NCCL_RESOLVE(ncclGroupEnd);
  COHORT_NCCL_RESOLVE(ncclAllReduce);
  COHORT_NCCL_RESOLVE(ncclReduceScatter);
  COHORT_NCCL_RESOLVE(ncclAllGather);
  COHORT_NCCL_RESOLVE(ncclBroadcast);
  COHORT_NCCL_RESOLVE(ncclSend);
  COHORT_NCCL_RESOLVE(ncclRecv);
#undef COHORT_NCCL_RESOLVE
  return api;
}

}  // namespace

const NcclApi& nccl_api() {
  static const NcclApi api = load();  // a failed load throws and is retried on the next call
  return api;
}

bool nccl_loadable(std::string* why) {
  try {
    (void)nccl_api();
    return true;
  } catch (const Error& e) {
    if (why) *why = e.what();
    return false;
  }
}

}  // namespace cohort::transport::nccl
