// Loads cuBLAS on first use (see cublas_api.h for why it is not linked).
#include "kernels/cuda/cublas_api.h"

#include <string>

#include "core/base/dynamic_library.h"

namespace cohort::kernels::cuda {

namespace {

CublasApi load() {
  const std::string name = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  void* lib = open_library(name, "GPU products");
  CublasApi api{};
  resolve_symbol(lib, name, "cublasCreate_v2", &api.create);
  resolve_symbol(lib, name, "cublasDestroy_v2", &api.destroy);
  resolve_symbol(lib, name, "cublasSetStream_v2", &api.set_stream);
  resolve_symbol(lib, name, "cublasSetWorkspace_v2", &api.set_workspace);
  resolve_symbol(lib, name, "cublasGemmEx", &api.gemm_ex);
  resolve_symbol(lib, name, "cublasGemmStridedBatchedEx", &api.gemm_strided_batched_ex);
  resolve_symbol(lib, name, "cublasGetStatusName", &api.status_name);
  resolve_symbol(lib, name, "cublasGetStatusString", &api.status_string);
  return api;
}

}  // namespace

const CublasApi& cublas() {
  static const CublasApi api = load();  // a failed load throws and is retried on the next call
  return api;
}

}  // namespace cohort::kernels::cuda
