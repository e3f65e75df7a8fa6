// cuBLAS, loaded with dlopen on first use instead of linked. Linking libcublas makes every
// process that loads cohort map libcublasLt (540 MB) at start, about 60 ms of mostly kernel time
// on this box, GPU or not; the test suite's hundreds of processes and every CPU-only embedder
// would pay it. Only the functions kernels/cuda calls are resolved.
#pragma once

#include <cublas_v2.h>

namespace cohort::kernels::cuda {

struct CublasApi {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasDestroy_v2) destroy;
  decltype(&cublasSetStream_v2) set_stream;
  decltype(&cublasSetWorkspace_v2) set_workspace;
  // The C functions (in C++ the headers add overloads taking the compute type as cudaDataType).
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  cublasStatus_t (*gemm_strided_batched_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                            const void*, const void*, cudaDataType, int, long long, const void*,
                                            cudaDataType, int, long long, const void*, void*, cudaDataType, int,
                                            long long, int, cublasComputeType_t, cublasGemmAlgo_t);
  decltype(&cublasGetStatusName) status_name;
  decltype(&cublasGetStatusString) status_string;
};

// The table, loaded once from libcublas.so.<major of the headers built against>; throws
// kUnsupported naming the library and dlerror's text when it or a function is missing.
const CublasApi& cublas();

}  // namespace cohort::kernels::cuda
