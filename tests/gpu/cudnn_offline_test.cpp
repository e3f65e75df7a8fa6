// The cuDNN attention path where no GPU is needed: the loader and its error wrapper, graph
// construction, and -- through cuDNN's device-less plan building for a described H100 -- that
// cuDNN's fused-attention engines take the forward and backward graphs cohort builds, while a
// Volta (no such engine) is refused with cuDNN's reason. ctest runs it with the CUDA toolkit's
// libcuda stub on LD_LIBRARY_PATH: cuDNN compiles the kernels, and only loading them needs a
// driver (the stub refuses), which is exactly where an accepted graph stops. Label gpu; skips
// when libcudnn.so.9 is absent.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <ostream>
#include <string>

#include "core/base/error.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/cudnn_api.h"
#include "kernels/cuda/cudnn_graph.h"

namespace cohort {
namespace {

namespace kc = kernels::cuda;
namespace cd = kernels::cuda::cudnn;

// cuDNN's device-properties JSON for an H100 SXM 80GB (sm_90, 132 SMs), and for a V100 (sm_70).
const char* const kH100 = R"({"deviceVer":900,"driverVer":13000,"cudaDeviceId":0,
  "deviceName":"NVIDIA H100 80GB HBM3","multiProcessorCount":132,"warpSize":32,
  "maxSharedMemoryPerBlock":49152,"maxSharedMemoryPerBlockOptin":232448,
  "reservedSharedMemoryPerBlock":1024,"maxRegistersPerSM":65536,"regsPerBlock":65536,
  "maxCtasPerSM":32,"maxThreadsPerBlock":1024,"maxThreadsPerSM":2048,
  "totalGlobalMem":84929347584,"smClockRateKHz":1980000,"memClockRateKHz":2619000,
  "l2CacheSize":52428800,"maxBlockSize":[1024,1024,64],"maxGridSize":[2147483647,65535,65535],
  "supportCoopLaunch":1,"pciDeviceId":0,"isTccDriver":0})";
const char* const kV100 = R"({"deviceVer":700,"driverVer":13000,"cudaDeviceId":0,
  "deviceName":"Tesla V100-SXM2-32GB","multiProcessorCount":80,"warpSize":32,
  "maxSharedMemoryPerBlock":49152,"maxSharedMemoryPerBlockOptin":98304,
  "reservedSharedMemoryPerBlock":0,"maxRegistersPerSM":65536,"regsPerBlock":65536,
  "maxCtasPerSM":32,"maxThreadsPerBlock":1024,"maxThreadsPerSM":2048,
  "totalGlobalMem":34089730048,"smClockRateKHz":1530000,"memClockRateKHz":877000,
  "l2CacheSize":6291456,"maxBlockSize":[1024,1024,64],"maxGridSize":[2147483647,65535,65535],
  "supportCoopLaunch":1,"pciDeviceId":0,"isTccDriver":0})";

#define SKIP_WITHOUT_CUDNN()                                              \
  do {                                                                    \
    std::string why;                                                      \
    if (!cd::api_or_null(&why)) GTEST_SKIP() << "no cuDNN here: " << why; \
  } while (0)

// Plan building compiles kernels and then needs libcuda.so.1 to load them (the stub will do).
#define SKIP_WITHOUT_LIBCUDA()                                                             \
  do {                                                                                     \
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);                               \
    if (!h) GTEST_SKIP() << "no libcuda.so.1 (ctest puts the toolkit's stub on the path)"; \
  } while (0)

kc::AttentionDims dims(int64_t B, int64_t T, int64_t H, int64_t D, bool causal) {
  kc::AttentionDims d;
  d.B = B;
  d.T = T;
  d.H = H;
  d.D = D;
  d.causal = causal;
  d.scale = 1.0f / std::sqrt(static_cast<float>(D));
  return d;
}

// Restores the environment-driven mode after a test forces one.
struct ModeGuard {
  explicit ModeGuard(kc::CudnnAttention m) { kc::attention_cudnn_set_mode(m); }
  ~ModeGuard() { kc::attention_cudnn_set_mode(kc::CudnnAttention::kEnvironment); }
};

TEST(CudnnApi, LoadsVersion9AndDescribesStatuses) {
  SKIP_WITHOUT_CUDNN();
  const cd::Api& api = cd::api();
  EXPECT_EQ(api.version / 10000, 9u) << api.version;
  EXPECT_EQ(api.get_version(), api.version);
  EXPECT_NE(cd::describe(cd::kNotSupported).find("CUDNN_STATUS_NOT_SUPPORTED"), std::string::npos)
      << cd::describe(cd::kNotSupported);
}

TEST(CudnnApi, CheckNamesTheCallAndMapsTheStatus) {
  SKIP_WITHOUT_CUDNN();
  EXPECT_NO_THROW(cd::check(cd::kSuccess, "cudnnNothing()", __FILE__, __LINE__));
  struct Case {
    cd::Status in;
    Status out;
  };
  for (const Case c :
       {Case{3002, Status::kUnsupported}, Case{cd::kDeviceAllocationFailed, Status::kOutOfMemory},
        Case{cd::kExecutionFailed, Status::kInternal}, Case{cd::kBadParam, Status::kInternal}}) {
    try {
      cd::check(c.in, "cudnnSomething(desc)", "file.cpp", 7);
      ADD_FAILURE() << "status " << c.in << " did not throw";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), c.out) << c.in;
      const std::string msg = e.what();
      EXPECT_NE(msg.find("cudnnSomething(desc) failed: CUDNN_STATUS_"), std::string::npos) << msg;
      EXPECT_NE(msg.find("file.cpp:7"), std::string::npos) << msg;
    }
  }
}

TEST(CudnnGraph, AMalformedOperationThrowsNamingTheStep) {
  SKIP_WITHOUT_CUDNN();
  cd::GraphBuilder g(cd::api());
  // [4 x 8] times [4 x 8]: the inner dimensions disagree.
  cd::Descriptor a = g.tensor(1, cd::kBFloat16, {1, 1, 4, 8}, {32, 32, 8, 1});
  cd::Descriptor b = g.tensor(2, cd::kBFloat16, {1, 1, 4, 8}, {32, 32, 8, 1});
  cd::Descriptor c = g.tensor(3, cd::kFloat, {1, 1, 4, 8}, {32, 32, 8, 1});
  try {
    g.matmul(a, b, c);
    FAIL() << "cuDNN finalized a matmul with mismatched inner dimensions";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("finalize a matmul operation failed"), std::string::npos)
        << e.what();
  }
}

TEST(CudnnGraph, DevicePropertiesRejectMalformedJson) {
  SKIP_WITHOUT_CUDNN();
  EXPECT_THROW(cd::device_properties_from_json(cd::api(), "{\"deviceVer\":"), Error);
}

struct OfflineCase {
  bool backward;
  int64_t B, T, H, D;
  bool causal;
};

// Printed in test names: without this GoogleTest prints the struct's bytes, padding included.
void PrintTo(const OfflineCase& c, std::ostream* os) {
  *os << (c.backward ? "backward" : "forward") << " B" << c.B << " T" << c.T << " H" << c.H << " D"
      << c.D << (c.causal ? " causal" : "");
}

class AttentionCudnnOffline : public ::testing::TestWithParam<OfflineCase> {};

TEST_P(AttentionCudnnOffline, AnH100EngineTakesTheGraph) {
  SKIP_WITHOUT_CUDNN();
  SKIP_WITHOUT_LIBCUDA();
  const OfflineCase c = GetParam();
  const auto r = kc::attention_cudnn_check_offline(kH100, kc::DType::kBF16,
                                                   dims(c.B, c.T, c.H, c.D, c.causal), c.backward);
  EXPECT_TRUE(r.accepted) << r.detail;
  EXPECT_GE(r.engine, 0) << r.detail;
  std::printf("%s B%lld T%lld H%lld D%lld%s: engine %lld; %s\n",
              c.backward ? "backward" : "forward", static_cast<long long>(c.B),
              static_cast<long long>(c.T), static_cast<long long>(c.H), static_cast<long long>(c.D),
              c.causal ? " causal" : "", static_cast<long long>(r.engine),
              r.detail.substr(0, 300).c_str());
}

// T not a multiple of the tiles; causal and not; D 64 and 128.
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionCudnnOffline,
                         ::testing::Values(OfflineCase{false, 2, 77, 3, 64, true},
                                           OfflineCase{true, 2, 77, 3, 64, true},
                                           OfflineCase{false, 1, 130, 2, 128, false},
                                           OfflineCase{true, 1, 130, 2, 128, false}),
                         [](const ::testing::TestParamInfo<OfflineCase>& param) {
                           const OfflineCase& c = param.param;
                           return std::string(c.backward ? "Backward" : "Forward") + "_B" +
                                  std::to_string(c.B) + "_T" + std::to_string(c.T) + "_H" +
                                  std::to_string(c.H) + "_D" + std::to_string(c.D) +
                                  (c.causal ? "_Causal" : "_Full");
                         });

TEST(AttentionCudnnOfflineRefusal, AVoltaHasNoEngineAndSaysWhy) {
  SKIP_WITHOUT_CUDNN();
  SKIP_WITHOUT_LIBCUDA();
  const auto r =
      kc::attention_cudnn_check_offline(kV100, kc::DType::kBF16, dims(2, 77, 3, 64, true), false);
  EXPECT_FALSE(r.accepted) << r.detail;
  EXPECT_NE(r.detail.find("no engine took the graph"), std::string::npos) << r.detail;
}

TEST(AttentionCudnn, TakesBf16WithHeadSizesTheKernelsSupport) {
  EXPECT_TRUE(kc::attention_cudnn_supports(kc::DType::kBF16, dims(1, 8, 1, 64, true)));
  EXPECT_TRUE(kc::attention_cudnn_supports(kc::DType::kBF16, dims(1, 8, 1, 128, true)));
  EXPECT_FALSE(kc::attention_cudnn_supports(kc::DType::kF32, dims(1, 8, 1, 64, true)));
  EXPECT_FALSE(kc::attention_cudnn_supports(kc::DType::kBF16, dims(1, 8, 1, 48, true)));
  EXPECT_FALSE(kc::attention_cudnn_supports(kc::DType::kBF16, dims(1, 8, 1, 256, true)));
}

TEST(AttentionCudnn, BackwardWorkspaceHoldsRowSumsAndAnFp32DqWhenCudnnMayRun) {
  const kc::AttentionDims d = dims(2, 77, 3, 64, true);
  const int64_t rows = 2 * 3 * 77;  // 462, padded to 464 so dQ starts 16-byte aligned
  {
    ModeGuard on(kc::CudnnAttention::kOn);
    EXPECT_EQ(kc::attention_cudnn_backward_workspace(d), 464 + rows * 64);
    EXPECT_EQ(kc::attention_backward_workspace(d), 464 + rows * 64);
  }
  {
    ModeGuard off(kc::CudnnAttention::kOff);
    EXPECT_EQ(kc::attention_cudnn_backward_workspace(d), 0);
    EXPECT_EQ(kc::attention_backward_workspace(d), rows);  // cohort's kernels: delta only
  }
}

TEST(AttentionCudnn, TheEnvironmentVariableTurnsItOff) {
  ModeGuard env(kc::CudnnAttention::kEnvironment);
  const char* old = std::getenv("COHORT_CUDNN_ATTENTION");
  const std::string saved = old ? old : "";
  setenv("COHORT_CUDNN_ATTENTION", "0", 1);
  EXPECT_FALSE(kc::attention_cudnn_enabled());
  setenv("COHORT_CUDNN_ATTENTION", "1", 1);
  EXPECT_TRUE(kc::attention_cudnn_enabled());
  unsetenv("COHORT_CUDNN_ATTENTION");
  EXPECT_TRUE(kc::attention_cudnn_enabled());
  kc::attention_cudnn_set_mode(kc::CudnnAttention::kOff);
  EXPECT_FALSE(kc::attention_cudnn_enabled());
  if (old) setenv("COHORT_CUDNN_ATTENTION", saved.c_str(), 1);
}

// Cases cuDNN does not take return false before any device call, so they run without a GPU.
TEST(AttentionCudnn, DeclinesWithoutTouchingTheDevice) {
  const kc::AttentionDims d = dims(2, 77, 3, 64, true);
  const auto before = kc::attention_cudnn_stats();
  {
    ModeGuard off(kc::CudnnAttention::kOff);
    EXPECT_FALSE(
        kc::attention_cudnn_forward(kc::DType::kBF16, d, nullptr, nullptr, nullptr, nullptr));
  }
  ModeGuard on(kc::CudnnAttention::kOn);
  EXPECT_FALSE(kc::attention_cudnn_forward(kc::DType::kF32, d, nullptr, nullptr, nullptr, nullptr));
  float ws[4];
  EXPECT_FALSE(kc::attention_cudnn_backward(kc::DType::kBF16, dims(2, 77, 3, 48, true), nullptr,
                                            nullptr, nullptr, nullptr, nullptr, ws, nullptr));
  std::string why;
  if (cd::api_or_null(&why)) {  // these reach cuDNN's own checks
    alignas(16) uint16_t buf[16];
    EXPECT_FALSE(kc::attention_cudnn_forward(kc::DType::kBF16, d, buf + 1, buf, nullptr, nullptr));
    EXPECT_NE(kc::attention_cudnn_stats().last_refusal.find("16-byte aligned"), std::string::npos)
        << kc::attention_cudnn_stats().last_refusal;
    EXPECT_FALSE(kc::attention_cudnn_forward(kc::DType::kBF16, dims(2, 1, 3, 64, true), buf, buf,
                                             nullptr, nullptr));
    EXPECT_NE(kc::attention_cudnn_stats().last_refusal.find("T = 1"), std::string::npos)
        << kc::attention_cudnn_stats().last_refusal;
  }
  const auto after = kc::attention_cudnn_stats();
  EXPECT_EQ(after.forward_calls, before.forward_calls);
  EXPECT_EQ(after.backward_calls, before.backward_calls);
  EXPECT_EQ(after.plans_built, before.plans_built);
}

}  // namespace
}  // namespace cohort
