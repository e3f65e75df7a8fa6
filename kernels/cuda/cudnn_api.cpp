// Loads cuDNN 9 on first use (see cudnn_api.h for why its header is not needed), logs its
// version once, and turns a cudnnStatus_t into a cohort::Error carrying cuDNN's own text.
#include "kernels/cuda/cudnn_api.h"

#include <mutex>

#include "core/base/dynamic_library.h"
#include "core/base/error.h"
#include "core/base/log.h"

// Where the real header is on the include path (the CUDA toolkit of the build machine), every
// value cudnn_api.h declares is checked against it, so a typo cannot reach a GPU.
#if __has_include(<cudnn_graph.h>)
#include <cudnn_graph.h>
namespace cohort::kernels::cuda::cudnn {
static_assert(CUDNN_MAJOR == 9, "cudnn_api.h declares cuDNN 9's backend ABI");
constexpr bool eq(int ours, int theirs) { return ours == theirs; }
static_assert(eq(kSuccess, CUDNN_STATUS_SUCCESS) && eq(kBadParam, CUDNN_STATUS_BAD_PARAM) &&
              eq(kNotSupported, CUDNN_STATUS_NOT_SUPPORTED) &&
              eq(kRuntimePrerequisiteMissing,
                 CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING) &&
              eq(kInternalError, CUDNN_STATUS_INTERNAL_ERROR) &&
              eq(kHostAllocationFailed, CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED) &&
              eq(kDeviceAllocationFailed, CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED) &&
              eq(kExecutionFailed, CUDNN_STATUS_EXECUTION_FAILED) &&
              eq(kExecutionFailedCudaDriver, CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER));
static_assert(eq(kPointwiseDescriptor, CUDNN_BACKEND_POINTWISE_DESCRIPTOR) &&
              eq(kEngineDescriptor, CUDNN_BACKEND_ENGINE_DESCRIPTOR) &&
              eq(kEngineCfgDescriptor, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR) &&
              eq(kEngineHeurDescriptor, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR) &&
              eq(kExecutionPlanDescriptor, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR) &&
              eq(kOperationPointwiseDescriptor, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR) &&
              eq(kOperationGraphDescriptor, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR) &&
              eq(kVariantPackDescriptor, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR) &&
              eq(kTensorDescriptor, CUDNN_BACKEND_TENSOR_DESCRIPTOR) &&
              eq(kMatmulDescriptor, CUDNN_BACKEND_MATMUL_DESCRIPTOR) &&
              eq(kOperationMatmulDescriptor, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR) &&
              eq(kReductionDescriptor, CUDNN_BACKEND_REDUCTION_DESCRIPTOR) &&
              eq(kOperationReductionDescriptor, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR) &&
              eq(kOperationReshapeDescriptor, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR) &&
              eq(kDevicePropDescriptor, CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR));
static_assert(eq(kPointwiseMode, CUDNN_ATTR_POINTWISE_MODE) &&
              eq(kPointwiseMathPrec, CUDNN_ATTR_POINTWISE_MATH_PREC) &&
              eq(kPointwiseAxis, CUDNN_ATTR_POINTWISE_AXIS) &&
              eq(kEngineHeurMode, CUDNN_ATTR_ENGINEHEUR_MODE) &&
              eq(kEngineHeurOperationGraph, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH) &&
              eq(kEngineHeurResults, CUDNN_ATTR_ENGINEHEUR_RESULTS) &&
              eq(kEngineHeurDeviceProp, CUDNN_ATTR_ENGINEHEUR_DEVICEPROP) &&
              eq(kEngineCfgEngine, CUDNN_ATTR_ENGINECFG_ENGINE) &&
              eq(kExecutionPlanHandle, CUDNN_ATTR_EXECUTION_PLAN_HANDLE) &&
              eq(kExecutionPlanEngineConfig, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG) &&
              eq(kExecutionPlanWorkspaceSize, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE) &&
              eq(kExecutionPlanDeviceProp, CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP) &&
              eq(kOperationPointwisePwDescriptor, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR) &&
              eq(kOperationPointwiseXDesc, CUDNN_ATTR_OPERATION_POINTWISE_XDESC) &&
              eq(kOperationPointwiseBDesc, CUDNN_ATTR_OPERATION_POINTWISE_BDESC) &&
              eq(kOperationPointwiseYDesc, CUDNN_ATTR_OPERATION_POINTWISE_YDESC) &&
              eq(kOperationPointwiseTDesc, CUDNN_ATTR_OPERATION_POINTWISE_TDESC) &&
              eq(kOperationGraphHandle, CUDNN_ATTR_OPERATIONGRAPH_HANDLE) &&
              eq(kOperationGraphOps, CUDNN_ATTR_OPERATIONGRAPH_OPS));
static_assert(eq(kTensorByteAlignment, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT) &&
              eq(kTensorDataType, CUDNN_ATTR_TENSOR_DATA_TYPE) &&
              eq(kTensorDimensions, CUDNN_ATTR_TENSOR_DIMENSIONS) &&
              eq(kTensorStrides, CUDNN_ATTR_TENSOR_STRIDES) &&
              eq(kTensorUniqueId, CUDNN_ATTR_TENSOR_UNIQUE_ID) &&
              eq(kTensorIsVirtual, CUDNN_ATTR_TENSOR_IS_VIRTUAL) &&
              eq(kTensorIsByValue, CUDNN_ATTR_TENSOR_IS_BY_VALUE) &&
              eq(kVariantPackUniqueIds, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS) &&
              eq(kVariantPackDataPointers, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS) &&
              eq(kVariantPackWorkspace, CUDNN_ATTR_VARIANT_PACK_WORKSPACE) &&
              eq(kEngineGlobalIndex, CUDNN_ATTR_ENGINE_GLOBAL_INDEX) &&
              eq(kMatmulCompType, CUDNN_ATTR_MATMUL_COMP_TYPE) &&
              eq(kOperationMatmulADesc, CUDNN_ATTR_OPERATION_MATMUL_ADESC) &&
              eq(kOperationMatmulBDesc, CUDNN_ATTR_OPERATION_MATMUL_BDESC) &&
              eq(kOperationMatmulCDesc, CUDNN_ATTR_OPERATION_MATMUL_CDESC) &&
              eq(kOperationMatmulDesc, CUDNN_ATTR_OPERATION_MATMUL_DESC) &&
              eq(kReductionOperator, CUDNN_ATTR_REDUCTION_OPERATOR) &&
              eq(kReductionCompType, CUDNN_ATTR_REDUCTION_COMP_TYPE) &&
              eq(kOperationReductionXDesc, CUDNN_ATTR_OPERATION_REDUCTION_XDESC) &&
              eq(kOperationReductionYDesc, CUDNN_ATTR_OPERATION_REDUCTION_YDESC) &&
              eq(kOperationReductionDesc, CUDNN_ATTR_OPERATION_REDUCTION_DESC) &&
              eq(kOperationReshapeXDesc, CUDNN_ATTR_OPERATION_RESHAPE_XDESC) &&
              eq(kOperationReshapeYDesc, CUDNN_ATTR_OPERATION_RESHAPE_YDESC) &&
              eq(kDevicePropJsonRepresentation, CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION));
static_assert(eq(kTypeHandle, CUDNN_TYPE_HANDLE) && eq(kTypeDataType, CUDNN_TYPE_DATA_TYPE) &&
              eq(kTypeBoolean, CUDNN_TYPE_BOOLEAN) && eq(kTypeInt64, CUDNN_TYPE_INT64) &&
              eq(kTypeVoidPtr, CUDNN_TYPE_VOID_PTR) && eq(kTypeHeurMode, CUDNN_TYPE_HEUR_MODE) &&
              eq(kTypePointwiseMode, CUDNN_TYPE_POINTWISE_MODE) &&
              eq(kTypeBackendDescriptor, CUDNN_TYPE_BACKEND_DESCRIPTOR) &&
              eq(kTypeReductionOperator, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE) &&
              eq(kTypeChar, CUDNN_TYPE_CHAR));
static_assert(eq(kFloat, CUDNN_DATA_FLOAT) && eq(kHalf, CUDNN_DATA_HALF) &&
              eq(kInt32, CUDNN_DATA_INT32) && eq(kBFloat16, CUDNN_DATA_BFLOAT16) &&
              eq(kBoolean, CUDNN_DATA_BOOLEAN));
static_assert(eq(kAdd, CUDNN_POINTWISE_ADD) && eq(kMul, CUDNN_POINTWISE_MUL) &&
              eq(kDiv, CUDNN_POINTWISE_DIV) && eq(kSub, CUDNN_POINTWISE_SUB) &&
              eq(kExp, CUDNN_POINTWISE_EXP) && eq(kLog, CUDNN_POINTWISE_LOG) &&
              eq(kIdentity, CUDNN_POINTWISE_IDENTITY) && eq(kCmpGe, CUDNN_POINTWISE_CMP_GE) &&
              eq(kGenIndex, CUDNN_POINTWISE_GEN_INDEX) &&
              eq(kBinarySelect, CUDNN_POINTWISE_BINARY_SELECT));
static_assert(eq(kReduceAdd, CUDNN_REDUCE_TENSOR_ADD) && eq(kReduceMax, CUDNN_REDUCE_TENSOR_MAX) &&
              eq(kHeurFallback, CUDNN_HEUR_MODE_FALLBACK) && eq(kHeurA, CUDNN_HEUR_MODE_A));
static_assert(sizeof(DescriptorType) == sizeof(cudnnBackendDescriptorType_t) &&
              sizeof(Attribute) == sizeof(cudnnBackendAttributeName_t) &&
              sizeof(Status) == sizeof(cudnnStatus_t) && sizeof(Handle) == sizeof(cudnnHandle_t));
}  // namespace cohort::kernels::cuda::cudnn
#endif

namespace cohort::kernels::cuda::cudnn {

namespace {

constexpr const char* kLibrary = "libcudnn.so.9";

struct Loaded {
  Api api{};
  bool ok = false;
  std::string why;  // when !ok
};

Loaded load() {
  Loaded r;
  try {
    void* lib = open_library(kLibrary, "fused attention (cuDNN's scaled dot-product attention)");
    Api& a = r.api;
    resolve_symbol(lib, kLibrary, "cudnnGetVersion", &a.get_version);
    resolve_symbol(lib, kLibrary, "cudnnGetErrorString", &a.get_error_string);
    resolve_symbol(lib, kLibrary, "cudnnCreate", &a.create);
    resolve_symbol(lib, kLibrary, "cudnnDestroy", &a.destroy);
    resolve_symbol(lib, kLibrary, "cudnnSetStream", &a.set_stream);
    resolve_symbol(lib, kLibrary, "cudnnBackendCreateDescriptor", &a.create_descriptor);
    resolve_symbol(lib, kLibrary, "cudnnBackendDestroyDescriptor", &a.destroy_descriptor);
    resolve_symbol(lib, kLibrary, "cudnnBackendFinalize", &a.finalize);
    resolve_symbol(lib, kLibrary, "cudnnBackendSetAttribute", &a.set_attribute);
    resolve_symbol(lib, kLibrary, "cudnnBackendGetAttribute", &a.get_attribute);
    resolve_symbol(lib, kLibrary, "cudnnBackendExecute", &a.execute);
    // Optional: a missing cudnnGetLastErrorString only shortens error messages.
    a.get_last_error_string =
        reinterpret_cast<void (*)(char*, size_t)>(dlsym(lib, "cudnnGetLastErrorString"));
    a.version = a.get_version();
    COHORT_CHECK(a.version / 10000 == 9, cohort::Status::kUnsupported, kLibrary,
                 " reports version ", a.version, " (cohort speaks cuDNN 9's backend API)");
    r.ok = true;
    log(LogLevel::kInfo,
        str_cat("cuDNN ", a.version / 10000, ".", a.version / 100 % 100, ".", a.version % 100,
                " loaded (", kLibrary, "): bf16 attention runs through its fused SDPA graph"));
  } catch (const Error& e) {
    r.why = e.what();
    log(LogLevel::kInfo, str_cat("cuDNN not used: ", r.why));
  }
  return r;
}

const Loaded& loaded() {
  static const Loaded r = load();  // load() never throws; the outcome is kept for the process
  return r;
}

}  // namespace

const Api* api_or_null(std::string* why) {
  const Loaded& r = loaded();
  if (!r.ok && why) *why = r.why;
  return r.ok ? &r.api : nullptr;
}

const Api& api() {
  const Loaded& r = loaded();
  COHORT_CHECK(r.ok, cohort::Status::kUnsupported, r.why);
  return r.api;
}

std::string last_error_text() {
  const Loaded& r = loaded();
  if (!r.ok || !r.api.get_last_error_string) return "";
  char buf[2048] = {0};
  r.api.get_last_error_string(buf, sizeof buf);
  return buf;
}

std::string describe(Status status) {
  const Loaded& r = loaded();
  if (!r.ok) return str_cat("cuDNN status ", status);
  std::string text = str_cat(r.api.get_error_string(status), " (", status, ")");
  const std::string last = last_error_text();
  if (!last.empty()) text += str_cat(": ", last);
  return text;
}

cohort::Status to_status(Status status) {
  if (status / 1000 * 1000 == kNotSupported) return cohort::Status::kUnsupported;
  if (status == kHostAllocationFailed || status == kDeviceAllocationFailed)
    return cohort::Status::kOutOfMemory;
  return cohort::Status::kInternal;
}

void check(Status status, const char* call, const char* file, int line) {
  if (status == kSuccess) return;
  throw_error(to_status(status),
              str_cat(call, " failed: ", describe(status), " at ", file, ":", line));
}

}  // namespace cohort::kernels::cuda::cudnn
