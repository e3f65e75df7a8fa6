// The device communicator of data parallelism on the GPU: NCCL between the ranks of a host
// communicator, so DDP reduces its gradient buckets where the gradients are (DataParallel::attach's
// device_comm). The plan picks it when every rank can make one, and falls back to host copies
// over the host communicator otherwise — on every rank alike, so the ranks never disagree.
#pragma once

#include <memory>
#include <string>

#include "core/tensor/tensor.h"
#include "transport/bootstrap/store.h"
#include "transport/coll/communicator.h"

namespace cohort::parallel {

// Whether this process can make a device communicator: NCCL in this build, a visible CUDA device,
// libnccl loadable. If not, why (one line).
bool device_communicator_available(std::string* why = nullptr);

// Collective over `host` (every rank calls it at the same point): when every rank can make one
// and no two ranks use the same device of one host (one small all-gather over host decides, so
// all ranks decide alike), the NCCL communicator of host's ranks — same ranks, same order — on
// the CUDA device this process computes on, its unique id exchanged through `store` (the
// rendezvous store host was made with), its operations queued after the work on the compute
// stream. Otherwise nullptr, with the reason in *why ("rank R cannot ...", "ranks A and B share
// one CUDA device ..."). Throws kTimeout / kPeerFailed when a rank does not join.
std::shared_ptr<transport::coll::Communicator> make_device_communicator(transport::coll::Communicator& host,
                                                                        std::shared_ptr<transport::Store> store,
                                                                        std::string* why = nullptr);

// Queued on the compute stream, no host wait: *dst (f32, CUDA memory) becomes NaN when `loss` (a
// CUDA scalar, f32 or bf16) is NaN or Inf. A DDP rank marks a gradient bucket it is about to
// reduce with it, so that every rank sees its non-finite loss. Throws kUnsupported in builds
// without NCCL (where no bucket lives in device memory).
void mark_bucket_if_not_finite(float* dst, const Tensor& loss);

}  // namespace cohort::parallel
