// Loads NCCL on first use (see nccl_api.h for why it is not linked).
#include "transport/nccl/nccl_api.h"

#include "core/base/dynamic_library.h"
#include "core/base/error.h"

namespace cohort::transport::nccl {

namespace {

NcclApi load() {
  const std::string name = "libnccl.so." + std::to_string(NCCL_MAJOR);
  void* lib = open_library(name, "NCCL communicators");
  NcclApi api{};
#define COHORT_NCCL_RESOLVE(fn) resolve_symbol(lib, name, #fn, &api.fn)
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
