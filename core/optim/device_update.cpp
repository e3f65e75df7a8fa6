// DeviceUpdate: the parameter list turned into kernels/cuda/optim.h's table, the norm and the
// update queued on the compute stream, the norm read back once.
#include "core/optim/device_update.h"

#include <cmath>

#include "core/base/error.h"
#include "core/device/device.h"

#ifdef COHORT_HAVE_CUDA
#include "core/device/cuda_context.h"
#include "kernels/cuda/optim.h"
#endif

namespace cohort::optim {

#ifdef COHORT_HAVE_CUDA

namespace kcu = kernels::cuda;

struct DeviceUpdate::Impl {
  CudaContext& ctx = cuda_context();
  kcu::OptimTable table{ctx.allocator, ctx.compute()};
  CudaScratch sum_sq{sizeof(double)};
};

DeviceUpdate::DeviceUpdate() : impl_(std::make_unique<Impl>()) {}
DeviceUpdate::~DeviceUpdate() = default;

namespace {
float* f32_or_null(const Tensor* t) { return t && t->defined() ? t->data<float>() : nullptr; }
}  // namespace

double DeviceUpdate::apply(const std::vector<DeviceParamRefs>& params, const kernels::cpu::SgdArgs* sgd,
                           const kernels::cpu::AdamWArgs* adamw, double clip_norm,
                           std::optional<double> given_norm) {
  COHORT_CHECK((sgd != nullptr) != (adamw != nullptr), Status::kInvalidArgument,
               "cuda optimizer: exactly one of sgd and adamw arguments");
  std::vector<kcu::OptimParam> list(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const DeviceParamRefs& r = params[i];
    kcu::OptimParam& q = list[i];
    const bool bf16 = r.param->dtype() == DType::kBF16;
    q.param = bf16 ? f32_or_null(r.master) : r.param->data<float>();
    q.param_bf16 = bf16 ? r.param->data<uint16_t>() : nullptr;
    q.grad = r.grad->raw();
    q.grad_type = r.grad->dtype() == DType::kBF16 ? kcu::DType::kBF16 : kcu::DType::kF32;
    q.state0 = f32_or_null(r.state0);
    q.state1 = f32_or_null(r.state1);
    q.n = r.param->numel();
  }
  Impl& s = *impl_;
  s.table.set(list);
  double* sum_sq = s.sum_sq.as<double>();
  kcu::DeviceClip clip;
  if (!given_norm) {
    kcu::grad_sum_of_squares(s.table, sum_sq);
    clip.sum_sq = sum_sq;  // a non-finite sum skips the update on the device
    clip.clip_norm = clip_norm;
  }
  if (sgd) kcu::sgd_update(s.table, *sgd, clip);
  else kcu::adamw_update(s.table, *adamw, clip);
  if (given_norm) return *given_norm;
  double measured = 0.0;
  device_copy(&measured, Device::kCpu, sum_sq, Device::kCuda, sizeof(double));
  return std::sqrt(measured);
}

#else  // no CUDA backend in this build

struct DeviceUpdate::Impl {};

DeviceUpdate::DeviceUpdate() {
  throw Error(Status::kUnsupported, str_cat("optimizer on the CUDA device: ", device_unavailable_reason(Device::kCuda)));
}
DeviceUpdate::~DeviceUpdate() = default;

double DeviceUpdate::apply(const std::vector<DeviceParamRefs>&, const kernels::cpu::SgdArgs*,
                           const kernels::cpu::AdamWArgs*, double, std::optional<double>) {
  throw Error(Status::kUnsupported, "optimizer on the CUDA device: no CUDA backend");
}

#endif

}  // namespace cohort::optim
