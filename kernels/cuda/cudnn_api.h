// cuDNN 9, loaded with dlopen at first use and reached through its backend (graph) API only.
// The one thing to know: this header declares the few cuDNN types and enum values cohort uses
// itself instead of including cudnn_graph.h, because cuDNN is not part of the CUDA toolkit (the
// GPU machine has only PyTorch's libcudnn.so.9, no headers): cohort builds everywhere nvcc does,
// and cuDNN is used wherever libcudnn.so.9 loads. The values are cuDNN's stable C ABI; where the
// real header is present, cudnn_api.cpp checks every one of them against it at compile time.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/base/status.h"

namespace cohort::kernels::cuda::cudnn {

using Status = int;                   // cudnnStatus_t
using Handle = struct HandleOpaque*;  // cudnnHandle_t
using Descriptor = void*;             // cudnnBackendDescriptor_t

constexpr Status kSuccess = 0;
// Status categories (status / 1000 * 1000) and the specific codes cohort tells apart.
constexpr Status kBadParam = 2000;
constexpr Status kNotSupported = 3000;
constexpr Status kRuntimePrerequisiteMissing =
    3008;  // e.g. no libcuda for a runtime-compiled engine
constexpr Status kInternalError = 4000;
constexpr Status kHostAllocationFailed = 4003;
constexpr Status kDeviceAllocationFailed = 4004;
constexpr Status kExecutionFailed = 5000;
constexpr Status kExecutionFailedCudaDriver =
    5001;  // e.g. a compiled module the driver could not load

enum DescriptorType : int {
  kPointwiseDescriptor = 0,
  kEngineDescriptor = 2,
  kEngineCfgDescriptor = 3,
  kEngineHeurDescriptor = 4,
  kExecutionPlanDescriptor = 5,
  kOperationPointwiseDescriptor = 13,
  kOperationGraphDescriptor = 15,
  kVariantPackDescriptor = 16,
  kTensorDescriptor = 17,
  kMatmulDescriptor = 18,
  kOperationMatmulDescriptor = 19,
  kReductionDescriptor = 21,
  kOperationReductionDescriptor = 22,
  kOperationReshapeDescriptor = 31,
  kDevicePropDescriptor = 38,
};

enum Attribute : int {
  kPointwiseMode = 0,
  kPointwiseMathPrec = 1,
  kPointwiseAxis = 9,
  kEngineHeurMode = 200,
  kEngineHeurOperationGraph = 201,
  kEngineHeurResults = 202,
  kEngineHeurDeviceProp = 204,
  kEngineCfgEngine = 300,
  kExecutionPlanHandle = 400,
  kExecutionPlanEngineConfig = 401,
  kExecutionPlanWorkspaceSize = 402,
  kExecutionPlanDeviceProp = 407,
  kOperationPointwisePwDescriptor = 750,
  kOperationPointwiseXDesc = 751,
  kOperationPointwiseBDesc = 752,
  kOperationPointwiseYDesc = 753,
  kOperationPointwiseTDesc = 758,
  kOperationGraphHandle = 800,
  kOperationGraphOps = 801,
  kTensorByteAlignment = 900,
  kTensorDataType = 901,
  kTensorDimensions = 902,
  kTensorStrides = 903,
  kTensorUniqueId = 906,
  kTensorIsVirtual = 907,
  kTensorIsByValue = 908,
  kVariantPackUniqueIds = 1000,
  kVariantPackDataPointers = 1001,
  kVariantPackWorkspace = 1003,
  kEngineGlobalIndex = 1301,
  kMatmulCompType = 1500,
  kOperationMatmulADesc = 1520,
  kOperationMatmulBDesc = 1521,
  kOperationMatmulCDesc = 1522,
  kOperationMatmulDesc = 1523,
  kReductionOperator = 1600,
  kReductionCompType = 1601,
  kOperationReductionXDesc = 1610,
  kOperationReductionYDesc = 1611,
  kOperationReductionDesc = 1612,
  kOperationReshapeXDesc = 2200,
  kOperationReshapeYDesc = 2201,
  kDevicePropJsonRepresentation = 2702,
};

enum AttributeType : int {
  kTypeHandle = 0,
  kTypeDataType = 1,
  kTypeBoolean = 2,
  kTypeInt64 = 3,
  kTypeVoidPtr = 6,
  kTypeHeurMode = 8,
  kTypePointwiseMode = 14,
  kTypeBackendDescriptor = 15,
  kTypeReductionOperator = 18,
  kTypeChar = 24,
};

enum DataType : int { kFloat = 0, kHalf = 2, kInt32 = 4, kBFloat16 = 9, kBoolean = 11 };

enum PointwiseMode : int {
  kAdd = 0,
  kMul = 1,
  kDiv = 6,
  kSub = 9,
  kExp = 13,
  kLog = 15,
  kIdentity = 21,
  kCmpGe = 303,
  kGenIndex = 501,
  kBinarySelect = 601,
};

enum ReduceOp : int { kReduceAdd = 0, kReduceMax = 3 };
enum HeurMode : int { kHeurFallback = 2, kHeurA = 3 };

// The functions cohort calls, resolved from libcudnn.so.9.
struct Api {
  size_t (*get_version)();
  const char* (*get_error_string)(Status);
  void (*get_last_error_string)(char* message, size_t max_size);  // null before cuDNN 9.0
  Status (*create)(Handle*);
  Status (*destroy)(Handle);
  Status (*set_stream)(Handle, cudaStream_t);
  Status (*create_descriptor)(DescriptorType, Descriptor*);
  Status (*destroy_descriptor)(Descriptor);
  Status (*finalize)(Descriptor);
  Status (*set_attribute)(Descriptor, Attribute, AttributeType, int64_t count, const void* values);
  Status (*get_attribute)(Descriptor, Attribute, AttributeType, int64_t requested, int64_t* count,
                          void* values);
  Status (*execute)(Handle, Descriptor plan, Descriptor variant_pack);
  size_t version = 0;  // get_version(): 91900 for 9.19.0
};

// The table, loaded once (the first call logs the library and its version); nullptr when
// libcudnn.so.9 or one of its functions is missing, with the reason in *why. Thread-safe; never
// throws.
const Api* api_or_null(std::string* why = nullptr);
// The table, or Error(kUnsupported) carrying the reason.
const Api& api();

// "CUDNN_STATUS_NOT_SUPPORTED_SHAPE (3002): <cuDNN's last error text>" for a failed call.
std::string describe(Status status);
// cuDNN's text about the last failure on this thread ("" when none or not available).
std::string last_error_text();
// The cohort status for a failed cuDNN status: kUnsupported for the not-supported category,
// kOutOfMemory for allocation failures, kInternal otherwise.
cohort::Status to_status(Status status);

// Throws cohort::Error(to_status(status)) when status is not kSuccess; the message names `call`
// and carries cuDNN's status name and its last error text.
void check(Status status, const char* call, const char* file, int line);

}  // namespace cohort::kernels::cuda::cudnn

#define COHORT_CUDNN_CHECK(call) \
  ::cohort::kernels::cuda::cudnn::check((call), #call, __FILE__, __LINE__)
