// make_device_communicator: every rank says whether it can make an NCCL communicator, and all
// make one only when all can (see device_comm.h).
#include "core/parallel/device_comm.h"

#include <unistd.h>

#include <cstring>
#include <functional>
#include <vector>

#include "core/base/error.h"
#include "core/device/device.h"

#if defined(COHORT_HAVE_NCCL)
#include <cuda_runtime_api.h>

#include "core/device/cuda_context.h"
#include "kernels/cuda/finite.h"
#include "transport/nccl/nccl_communicator.h"
#endif

namespace cohort::parallel {

namespace coll = transport::coll;

bool device_communicator_available(std::string* why) {
#if defined(COHORT_HAVE_NCCL)
  std::string reason = device_unavailable_reason(Device::kCuda);
  if (reason.empty() && transport::nccl::available(&reason)) return true;
  if (why) *why = reason;
  return false;
#else
  if (why) *why = "this build has no NCCL communicator (CUDA or NCCL's header was not found when it was configured)";
  return false;
#endif
}

namespace {

// What each rank tells the others before NCCL is tried: whether it can make one, and which
// device on which host it would use (NCCL takes one device per rank).
struct DeviceSlot {
  uint8_t can = 0;
  uint8_t pad[7] = {};
  uint64_t host = 0;     // hash of the host name
  uint8_t uuid[16] = {};  // the CUDA device's UUID
};

DeviceSlot this_slot(bool can) {
  DeviceSlot s;
  s.can = can ? 1 : 0;
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) == 0) s.host = std::hash<std::string>()(name);
#if defined(COHORT_HAVE_NCCL)
  if (can) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, cuda_context().device) == cudaSuccess)
      std::memcpy(s.uuid, &prop.uuid, sizeof s.uuid);
    else
      (void)cudaGetLastError();
  }
#endif
  return s;
}

}  // namespace

std::shared_ptr<coll::Communicator> make_device_communicator(coll::Communicator& host,
                                                             std::shared_ptr<transport::Store> store,
                                                             std::string* why) {
  COHORT_CHECK(store != nullptr, Status::kInvalidArgument, "make_device_communicator: no rendezvous store");
  std::string reason;
  const bool here = device_communicator_available(&reason);
  // Every rank sees every slot and so decides alike.
  const int n = host.size();
  std::vector<DeviceSlot> slots(static_cast<size_t>(n));
  const DeviceSlot mine = this_slot(here);
  host.all_gather(&mine, slots.data(), sizeof(DeviceSlot), coll::DataType::kU8)->wait();
  auto refuse = [&](std::string text) -> std::shared_ptr<coll::Communicator> {
    if (why) *why = std::move(text);
    return nullptr;
  };
  for (int r = 0; r < n; ++r)
    if (!slots[static_cast<size_t>(r)].can)
      return refuse(r == host.rank() ? reason : str_cat("rank ", r, " cannot make an NCCL communicator"));
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b) {
      const DeviceSlot &x = slots[static_cast<size_t>(a)], &y = slots[static_cast<size_t>(b)];
      if (x.host == y.host && std::memcmp(x.uuid, y.uuid, sizeof x.uuid) == 0)
        return refuse(str_cat("ranks ", a, " and ", b, " share one CUDA device (NCCL needs a device per rank)"));
    }
#if defined(COHORT_HAVE_NCCL)
  coll::CommOptions options;
  options.name = host.name() + ".device";
  options.timeout = host.timeout();
  CudaContext& cuda = cuda_context();
  auto comm = transport::nccl::NcclCommunicator::create(std::move(store), host.rank(), host.size(), cuda.device,
                                                        options);
  // Gradients are copied into the buckets on the compute stream: every reduction waits for that.
  comm->set_compute_stream(cuda.compute());
  return comm;
#else
  return refuse(reason);  // not reached: no rank can
#endif
}

void mark_bucket_if_not_finite(float* dst, const Tensor& loss) {
  COHORT_CHECK(loss.defined() && loss.numel() == 1 && loss.device() == Device::kCuda &&
                   (loss.dtype() == DType::kF32 || loss.dtype() == DType::kBF16),
               Status::kInvalidArgument, "data parallel: the loss is not an f32 or bf16 scalar on the CUDA device");
#if defined(COHORT_HAVE_NCCL)
  namespace kcu = kernels::cuda;
  kcu::poison_if_not_finite(dst, loss.raw(), loss.dtype() == DType::kBF16 ? kcu::DType::kBF16 : kcu::DType::kF32,
                            cuda_context().compute());
#else
  (void)dst;
  throw Error(Status::kUnsupported, "data parallel: this build has no NCCL, so no gradient bucket in device memory");
#endif
}

}  // namespace cohort::parallel
