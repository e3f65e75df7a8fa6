// The one wrapper between UCX status codes and cohort::Error: it names the UCX call and carries
// ucs_status_string. Peer-loss statuses map to Status::kPeerFailed, timeouts to kTimeout.
#pragma once

#include <string>

#include <ucs/type/status.h>

#include "core/base/error.h"

namespace cohort::transport::ucx {

// The cohort status a UCX status stands for (kInternal for anything unexpected).
Status status_from_ucs(ucs_status_t status);

// "ucp_ep_create: Connection reset by remote peer (context)".
std::string ucs_message(const char* call, ucs_status_t status, const std::string& context = "");

// Throws cohort::Error naming `call` unless status is UCS_OK (or UCS_INPROGRESS).
void ucs_check(ucs_status_t status, const char* call, const std::string& context = "");

}  // namespace cohort::transport::ucx
