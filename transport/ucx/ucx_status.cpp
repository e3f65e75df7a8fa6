// Mapping of ucs_status_t to cohort statuses and messages.
#include "transport/ucx/ucx_status.h"

namespace cohort::transport::ucx {

Status status_from_ucs(ucs_status_t status) {
  switch (status) {
    case UCS_OK:
    case UCS_INPROGRESS:
      return Status::kOk;
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_ENDPOINT_TIMEOUT:
      return Status::kTimeout;
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_IO_ERROR:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_CANCELED:
    case UCS_ERR_SHMEM_SEGMENT:  // a dead peer's shared memory segment is gone
      return Status::kPeerFailed;
    case UCS_ERR_NO_MEMORY:
      return Status::kOutOfMemory;
    case UCS_ERR_INVALID_PARAM:
      return Status::kInvalidArgument;
    case UCS_ERR_UNSUPPORTED:
    case UCS_ERR_NO_DEVICE:
      return Status::kUnsupported;
    default:
      return Status::kInternal;
  }
}

std::string ucs_message(const char* call, ucs_status_t status, const std::string& context) {
  std::string msg = str_cat(call, ": ", ucs_status_string(status));
  if (!context.empty()) msg += str_cat(" (", context, ")");
  return msg;
}

void ucs_check(ucs_status_t status, const char* call, const std::string& context) {
  if (status == UCS_OK || status == UCS_INPROGRESS) return;
  throw Error(status_from_ucs(status), ucs_message(call, status, context));
}

}  // namespace cohort::transport::ucx
