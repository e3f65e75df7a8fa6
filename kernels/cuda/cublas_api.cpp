// Loads cuBLAS on first use (see cublas_api.h for why it is not linked).
#include "kernels/cuda/cublas_api.h"

#include <dlfcn.h>

#include <string>

#include "core/base/error.h"

namespace cohort::kernels::cuda {

namespace {

template <typename Fn>
void resolve(void* lib, const std::string& lib_name, const char* symbol, Fn* out) {
  void* p = dlsym(lib, symbol);
  COHORT_CHECK(p != nullptr, Status::kUnsupported, lib_name, " has no ", symbol, " (", dlerror(), ")");
  *out = reinterpret_cast<Fn>(p);
}

CublasApi load() {
  const std::string name = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  COHORT_CHECK(lib != nullptr, Status::kUnsupported, "cannot load ", name, " for GPU products: ", dlerror());
  // Kept loaded for the life of the process.
  CublasApi api{};
  resolve(lib, name, "cublasCreate_v2", &api.create);
  resolve(lib, name, "cublasDestroy_v2", &api.destroy);
  resolve(lib, name, "cublasSetStream_v2", &api.set_stream);
  resolve(lib, name, "cublasSetWorkspace_v2", &api.set_workspace);
  resolve(lib, name, "cublasGemmEx", &api.gemm_ex);
  resolve(lib, name, "cublasGemmStridedBatchedEx", &api.gemm_strided_batched_ex);
  resolve(lib, name, "cublasGetStatusName", &api.status_name);
  resolve(lib, name, "cublasGetStatusString", &api.status_string);
  return api;
}

}  // namespace

const CublasApi& cublas() {
  static const CublasApi api = load();  // a failed load throws and is retried on the next call
  return api;
}

}  // namespace cohort::kernels::cuda
