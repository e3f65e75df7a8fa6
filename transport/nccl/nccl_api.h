// NCCL, loaded with dlopen on first use instead of linked, so that libcohort (which holds the
// NCCL communicator) loads on machines without libnccl and only a process that makes an NCCL
// communicator needs it. Members carry NCCL's own names and types; only the functions
// nccl_communicator.cpp calls are resolved. Private to transport/nccl.
#pragma once

#include <nccl.h>

#include <string>

namespace cohort::transport::nccl {

struct NcclApi {
  decltype(&::ncclGetUniqueId) ncclGetUniqueId;
  decltype(&::ncclCommInitRankConfig) ncclCommInitRankConfig;
  decltype(&::ncclCommSplit) ncclCommSplit;
  decltype(&::ncclCommFinalize) ncclCommFinalize;
  decltype(&::ncclCommDestroy) ncclCommDestroy;
  decltype(&::ncclCommAbort) ncclCommAbort;
  decltype(&::ncclCommGetAsyncError) ncclCommGetAsyncError;
  decltype(&::ncclCommCount) ncclCommCount;
  decltype(&::ncclCommUserRank) ncclCommUserRank;
  decltype(&::ncclGetErrorString) ncclGetErrorString;
  decltype(&::ncclGetLastError) ncclGetLastError;
  decltype(&::ncclGroupStart) ncclGroupStart;
  decltype(&::ncclGroupEnd) ncclGroupEnd;
  decltype(&::ncclAllReduce) ncclAllReduce;
  decltype(&::ncclReduceScatter) ncclReduceScatter;
  decltype(&::ncclAllGather) ncclAllGather;
  decltype(&::ncclBroadcast) ncclBroadcast;
  decltype(&::ncclSend) ncclSend;
  decltype(&::ncclRecv) ncclRecv;
};

// The table, loaded once from libnccl.so.<major of the headers built against>; throws
// kUnsupported naming the library and dlerror's text when it or a function is missing (and
// tries again on the next call).
const NcclApi& nccl_api();

// Whether NCCL can be loaded; if not, why (one line).
bool nccl_loadable(std::string* why);

}  // namespace cohort::transport::nccl
