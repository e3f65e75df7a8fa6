// bf16 attention through cuDNN's fused scaled dot-product attention (see attention_cudnn.h).
// cuDNN 9 has no single SDPA node a Hopper engine takes; its runtime-fusion engines recognise the
// attention pattern in a graph of plain operations, which the two builders below spell out as
// cuDNN's own frontend does (the order of the mask and the statistics matters to the matcher):
//   forward:  S = scale Q K^T; causal: S = row >= col ? S : -inf; m = rowmax S;
//             l = rowsum exp(S - m); Stats = m + log l; O = (exp(S - m) / l) V
//   backward: delta = rowsum(dO * O); P = exp(scale Q K^T - Stats) (masked); dV = P^T dO;
//             dS = P * (dO V^T - delta) * scale; dK = dS^T Q; dQ = dS K (accumulated in fp32)
// (Dao et al. 2022, FlashAttention, alg. 1 and 4). Q, K, V are strided views into qkv [B, T, 3C]
// (head h at columns h*D), so nothing is copied or transposed.
#include "kernels/cuda/attention_cudnn.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "core/base/error.h"
#include "core/base/log.h"
#include "kernels/cuda/cudnn_graph.h"

namespace cohort::kernels::cuda {

namespace {

namespace cd = cudnn;

// Tensors bound at execution.
enum Uid : int64_t {
  kUidQ = 1,
  kUidK,
  kUidV,
  kUidO,
  kUidStats,
  kUidScale,
  kUidNegInf,
  kUidOne,
  kUidDO,
  kUidDQ,
  kUidDK,
  kUidDV,
  kUidRowSum,
  kUidDQAccum,
};

// 9.6 is the oldest cuDNN whose engines zero the fp32 dQ accumulator themselves; up to 9.15 the
// backward needs T % 128 == 0 unless a padding mask is added (cuDNN's frontend adds one; cohort
// runs its own kernel for those instead).
constexpr size_t kMinVersion = 90600;
constexpr size_t kBackwardAnyTVersion = 91600;
constexpr int64_t kMaxTokens = int64_t{1} << 20;  // keeps B*H*T*T strides far from int64 overflow
constexpr size_t kMaxPlans = 64;  // distinct shapes cached; beyond: cohort's kernels
constexpr size_t kMaxLoggedReason = 1200;

// ---- The two graphs ----

struct Views {
  cd::Dims bhtd, qkv, qkv_t, bhdt, out, rows, row_strides, scores, score_strides, score_strides_t;
};

Views views_of(const AttentionDims& d) {
  const int64_t B = d.B, H = d.H, T = d.T, D = d.D, C = H * D;
  Views v;
  v.bhtd = {B, H, T, D};
  v.qkv = {T * 3 * C, D, 3 * C, 1};  // q, k or v of qkv [B, T, 3C] as [B, H, T, D]
  v.bhdt = {B, H, D, T};
  v.qkv_t = {T * 3 * C, D, 1, 3 * C};  // the same memory as [B, H, D, T] (K^T, V^T)
  v.out = {T * C, D, C, 1};            // out / dout [B, T, C] as [B, H, T, D]
  v.rows = {B, H, T, 1};
  v.row_strides = {H * T, T, 1, 1};  // lse [B, H, T]
  v.scores = {B, H, T, T};
  v.score_strides = {H * T * T, T * T, T, 1};
  v.score_strides_t = {H * T * T, T * T, 1, T};
  return v;
}

// Keys j > i of query row i replaced by -inf (cuDNN's top-left causal mask).
cd::Descriptor causal_mask(cd::GraphBuilder& g, const Views& v, cd::Descriptor s,
                           cd::Descriptor neg_inf) {
  cd::Descriptor row = g.virtual_tensor(cd::kInt32, v.scores, v.score_strides);
  g.pointwise(cd::kGenIndex, s, nullptr, nullptr, row, cd::kFloat, 2);
  cd::Descriptor col = g.virtual_tensor(cd::kInt32, v.scores, v.score_strides);
  g.pointwise(cd::kGenIndex, s, nullptr, nullptr, col, cd::kFloat, 3);
  cd::Descriptor keep = g.virtual_tensor(cd::kBoolean, v.scores, v.score_strides);
  g.pointwise(cd::kCmpGe, row, col, nullptr, keep, cd::kBoolean);
  cd::Descriptor masked = g.virtual_tensor(cd::kFloat, v.scores, v.score_strides);
  g.pointwise(cd::kBinarySelect, s, neg_inf, keep, masked);
  return masked;
}

// S = scale Q K^T as fp32 scores.
cd::Descriptor scaled_scores(cd::GraphBuilder& g, const Views& v, cd::Descriptor q,
                             cd::Descriptor kt, cd::Descriptor scale) {
  cd::Descriptor s = g.virtual_tensor(cd::kFloat, v.scores, v.score_strides);
  g.matmul(q, kt, s);
  cd::Descriptor scaled = g.virtual_tensor(cd::kFloat, v.scores, v.score_strides);
  g.pointwise(cd::kMul, s, scale, nullptr, scaled);
  return scaled;
}

void build_forward(cd::GraphBuilder& g, const AttentionDims& d, cd::DataType io) {
  const Views v = views_of(d);
  cd::Descriptor q = g.tensor(kUidQ, io, v.bhtd, v.qkv);
  cd::Descriptor kt = g.tensor(kUidK, io, v.bhdt, v.qkv_t);
  cd::Descriptor val = g.tensor(kUidV, io, v.bhtd, v.qkv);
  cd::Descriptor o = g.tensor(kUidO, io, v.bhtd, v.out);
  cd::Descriptor stats = g.tensor(kUidStats, cd::kFloat, v.rows, v.row_strides);
  cd::Descriptor s = scaled_scores(g, v, q, kt, g.scalar(kUidScale));
  if (d.causal) s = causal_mask(g, v, s, g.scalar(kUidNegInf));
  cd::Descriptor m = g.virtual_tensor(cd::kFloat, v.rows, v.row_strides);
  g.reduction(cd::kReduceMax, s, m);
  cd::Descriptor shifted = g.virtual_tensor(cd::kFloat, v.scores, v.score_strides);
  g.pointwise(cd::kSub, s, m, nullptr, shifted);
  cd::Descriptor e = g.virtual_tensor(cd::kFloat, v.scores, v.score_strides);
  g.pointwise(cd::kExp, shifted, nullptr, nullptr, e);
  cd::Descriptor l = g.virtual_tensor(cd::kFloat, v.rows, v.row_strides);
  g.reduction(cd::kReduceAdd, e, l);
  cd::Descriptor log_l = g.virtual_tensor(cd::kFloat, v.rows, v.row_strides);
  g.pointwise(cd::kLog, l, nullptr, nullptr, log_l);
  g.pointwise(cd::kAdd, m, log_l, nullptr, stats);  // natural-log lse of the scaled, masked scores
  cd::Descriptor p = g.virtual_tensor(io, v.scores, v.score_strides);  // probabilities, as bf16
  g.pointwise(cd::kDiv, e, l, nullptr, p);
  g.matmul(p, val, o);
}

void build_backward(cd::GraphBuilder& g, const AttentionDims& d, cd::DataType io) {
  const Views v = views_of(d);
  const int64_t H = d.H, T = d.T, D = d.D;
  cd::Descriptor q = g.tensor(kUidQ, io, v.bhtd, v.qkv);
  cd::Descriptor kt = g.tensor(kUidK, io, v.bhdt, v.qkv_t);
  cd::Descriptor vt = g.tensor(kUidV, io, v.bhdt, v.qkv_t);
  cd::Descriptor o = g.tensor(kUidO, io, v.bhtd, v.out);
  cd::Descriptor dout = g.tensor(kUidDO, io, v.bhtd, v.out);
  cd::Descriptor stats = g.tensor(kUidStats, cd::kFloat, v.rows, v.row_strides);
  cd::Descriptor dq = g.tensor(kUidDQ, io, v.bhtd, v.qkv);
  cd::Descriptor dk = g.tensor(kUidDK, io, v.bhtd, v.qkv);
  cd::Descriptor dv = g.tensor(kUidDV, io, v.bhtd, v.qkv);
  cd::Descriptor rowsum = g.tensor(kUidRowSum, cd::kFloat, v.rows, v.row_strides);
  cd::Descriptor dq_accum = g.tensor(kUidDQAccum, cd::kFloat, v.bhtd, {H * T * D, T * D, D, 1});
  cd::Descriptor scale = g.scalar(kUidScale);
  // delta = rowsum(dO * O) (times 1: the slot cuDNN's pattern keeps for dropout's scale).
  cd::Descriptor prod = g.virtual_tensor(cd::kFloat, v.bhtd, {H * T * D, T * D, D, 1});
  g.pointwise(cd::kMul, dout, o, nullptr, prod);
  cd::Descriptor delta = g.virtual_tensor(cd::kFloat, v.rows, v.row_strides);
  g.reduction(cd::kReduceAdd, prod, delta);
  g.pointwise(cd::kMul, delta, g.scalar(kUidOne), nullptr, rowsum);
  // P = exp(S - Stats), masked.
  cd::Descriptor s = scaled_scores(g, v, q, kt, scale);
  cd::Descriptor centred = g.virtual_tensor(cd::kFloat, v.scores, v.score_strides);
  g.pointwise(cd::kSub, s, stats, nullptr, centred);
  if (d.causal) centred = causal_mask(g, v, centred, g.scalar(kUidNegInf));
  cd::Descriptor p = g.virtual_tensor(cd::kFloat, v.scores, v.score_strides);
  g.pointwise(cd::kExp, centred, nullptr, nullptr, p);
  // dV = P^T dO.
  cd::Descriptor pt = g.virtual_tensor(io, v.scores, v.score_strides_t);
  g.reshape(p, pt);
  g.matmul(pt, dout, dv);
  // dS = P * (dO V^T - delta) * scale.
  cd::Descriptor dp = g.virtual_tensor(cd::kFloat, v.scores, v.score_strides);
  g.matmul(dout, vt, dp);
  cd::Descriptor centred_dp = g.virtual_tensor(cd::kFloat, v.scores, v.score_strides);
  g.pointwise(cd::kSub, dp, rowsum, nullptr, centred_dp);
  cd::Descriptor dsp = g.virtual_tensor(cd::kFloat, v.scores, v.score_strides);
  g.pointwise(cd::kMul, centred_dp, p, nullptr, dsp);
  cd::Descriptor ds = g.virtual_tensor(cd::kFloat, v.scores, v.score_strides);
  g.pointwise(cd::kMul, dsp, scale, nullptr, ds);
  // dK = dS^T Q.
  cd::Descriptor dst = g.virtual_tensor(io, v.scores, v.score_strides_t);
  g.reshape(ds, dst);
  g.matmul(dst, q, dk);
  // dQ = dS K, accumulated in fp32 then converted (K seen again as [B, H, T, D]).
  cd::Descriptor k = g.virtual_tensor(cd::kFloat, v.bhtd, v.qkv);
  g.reshape(kt, k);
  g.matmul(ds, k, dq_accum);
  g.pointwise(cd::kIdentity, dq_accum, nullptr, nullptr, dq);
}

// ---- Plans, handles, counters ----

struct Key {
  int device;
  bool backward;
  int64_t B, H, T, D;
  bool causal;
  bool operator<(const Key& o) const {
    return std::tie(device, backward, B, H, T, D, causal) <
           std::tie(o.device, o.backward, o.B, o.H, o.T, o.D, o.causal);
  }
};

std::string describe_key(const Key& k) {
  return str_cat(k.backward ? "backward" : "forward", " bf16 B", k.B, " H", k.H, " T", k.T, " D",
                 k.D, k.causal ? " causal" : "", " on device ", k.device);
}

struct Entry {
  std::unique_ptr<cd::Plan> plan;  // null: refused (`refusal` says why)
  std::string refusal;
};

struct State {
  std::mutex mu;
  std::map<int, cd::Handle> handles;  // null: cudnnCreate failed on that device
  std::map<Key, Entry> plans;
  std::map<int, DeviceAllocator*> workspaces;
  bool cache_full_logged = false;
  AttentionCudnnStats stats;
};

// Never destroyed: at exit cuDNN and the driver may already be gone.
State& state() {
  static State* s = new State;
  return *s;
}

std::atomic<int> g_mode{static_cast<int>(CudnnAttention::kEnvironment)};

void note_skip(State& st, const std::string& why) { st.stats.last_refusal = why; }

std::string clip(const std::string& s) {
  return s.size() <= kMaxLoggedReason ? s : s.substr(0, kMaxLoggedReason) + " ...";
}

cd::Handle handle_for(State& st, const cd::Api& api, int device) {
  auto it = st.handles.find(device);
  if (it != st.handles.end()) return it->second;
  cd::Handle h = nullptr;
  const cd::Status s = api.create(&h);
  if (s != cd::kSuccess) {
    h = nullptr;
    const std::string why = str_cat("cudnnCreate failed on device ", device, ": ", cd::describe(s));
    log(LogLevel::kWarn, str_cat("cuDNN attention disabled on device ", device, ": ", why));
    note_skip(st, why);
  }
  st.handles[device] = h;
  return h;
}

// The cached plan for `key`, built on first use; null when cuDNN refused it (logged once).
const cd::Plan* plan_for(State& st, const cd::Api& api, cd::Handle handle, const Key& key,
                         const AttentionDims& d) {
  auto it = st.plans.find(key);
  if (it != st.plans.end()) {
    if (!it->second.plan) note_skip(st, it->second.refusal);
    return it->second.plan.get();
  }
  if (st.plans.size() >= kMaxPlans) {
    const std::string why = str_cat("cuDNN attention plan cache full (", kMaxPlans, " shapes)");
    if (!st.cache_full_logged) log(LogLevel::kWarn, why + ": cohort's kernels run further shapes");
    st.cache_full_logged = true;
    note_skip(st, why);
    return nullptr;
  }
  const auto t0 = std::chrono::steady_clock::now();
  Entry e;
  try {
    cd::GraphBuilder g(api);
    if (key.backward)
      build_backward(g, d, cd::kBFloat16);
    else
      build_forward(g, d, cd::kBFloat16);
    cd::Target target;
    target.handle = handle;
    cd::PlanResult r = cd::Plan::build(std::move(g), target);
    e.plan = std::move(r.plan);
    e.refusal = r.refusal;
  } catch (const Error& err) {  // a descriptor cuDNN rejected: report it, run cohort's kernel
    e.plan.reset();
    e.refusal = str_cat("building the graph failed: ", err.what());
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (e.plan) {
    ++st.stats.plans_built;
    log(LogLevel::kInfo, str_cat("cuDNN attention plan for ", describe_key(key), ": engine ",
                                 e.plan->engine(), ", workspace ", e.plan->workspace_bytes(),
                                 " bytes, built in ", static_cast<int64_t>(ms), " ms"));
  } else {
    ++st.stats.refusals;
    e.refusal = str_cat("cuDNN has no plan for ", describe_key(key), ": ", e.refusal);
    log(LogLevel::kWarn, clip(e.refusal) + " -- cohort's kernel runs this shape");
    note_skip(st, e.refusal);
  }
  return st.plans.emplace(key, std::move(e)).first->second.plan.get();
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// What every call checks before touching cuDNN: the table, or null with the reason noted.
const cd::Api* usable(State& st, DType type, const AttentionDims& d, bool backward,
                      std::initializer_list<const void*> pointers) {
  if (!attention_cudnn_enabled() || !attention_cudnn_supports(type, d)) return nullptr;
  std::string why;
  const cd::Api* api = cd::api_or_null(&why);
  if (!api) {
    note_skip(st, why);
    return nullptr;
  }
  if (api->version < kMinVersion) {
    note_skip(st, str_cat("cuDNN ", api->version, " is older than ", kMinVersion));
    return nullptr;
  }
  if (d.T < 2 || d.T > kMaxTokens) {
    note_skip(st,
              str_cat("T = ", d.T, " is outside cuDNN attention's range [2, ", kMaxTokens, "]"));
    return nullptr;
  }
  if (backward && !attention_cudnn_backward_takes_length(api->version, d.T)) {
    note_skip(st, str_cat("cuDNN ", api->version, " backward needs T % 128 == 0 (T = ", d.T, ")"));
    return nullptr;
  }
  for (const void* p : pointers) {
    if (!aligned16(p)) {
      note_skip(st, "a buffer is not 16-byte aligned");
      return nullptr;
    }
  }
  return api;
}

// Runs `plan` on `stream`, with a stream-ordered workspace when the plan asks for one.
void run(State& st, const cd::Api& api, cd::Handle handle, int device, const cd::Plan& plan,
         const int64_t* uids, void* const* pointers, int count, cudaStream_t stream,
         const std::string& what) {
  COHORT_CUDNN_CHECK(api.set_stream(handle, stream));
  void* workspace = nullptr;
  DeviceAllocator* alloc = nullptr;
  if (plan.workspace_bytes() > 0) {
    DeviceAllocator*& a = st.workspaces[device];
    if (!a) a = new DeviceAllocator(device);  // kept for the process, like the handle
    alloc = a;
    workspace = alloc->allocate(static_cast<size_t>(plan.workspace_bytes()), stream);
  }
  try {
    plan.execute(handle, uids, pointers, count, workspace, what.c_str());
  } catch (...) {
    if (workspace) alloc->free(workspace);
    throw;
  }
  if (workspace) alloc->free(workspace);  // reusable at once by later work on the same stream
}

int current_device() {
  int device = 0;
  COHORT_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

}  // namespace

bool attention_cudnn_enabled() {
  switch (static_cast<CudnnAttention>(g_mode.load(std::memory_order_relaxed))) {
    case CudnnAttention::kOn:
      return true;
    case CudnnAttention::kOff:
      return false;
    default: {
      const char* env = std::getenv("COHORT_CUDNN_ATTENTION");
      return !(env && std::strcmp(env, "0") == 0);
    }
  }
}

void attention_cudnn_set_mode(CudnnAttention mode) {
  g_mode.store(static_cast<int>(mode), std::memory_order_relaxed);
}

bool attention_cudnn_supports(DType type, const AttentionDims& d) {
  return type == DType::kBF16 && attention_supports_head_size(d.D) && d.D % 8 == 0;
}

int64_t attention_cudnn_backward_workspace(const AttentionDims& d) {
  if (!attention_cudnn_enabled() || !attention_cudnn_supports(DType::kBF16, d)) return 0;
  const int64_t rows = d.B * d.H * d.T;
  return (rows + 3) / 4 * 4 + rows * d.D;  // rowsum(dO * O), then dQ in fp32 at a 16-byte offset
}

bool attention_cudnn_forward(DType type, const AttentionDims& d, const void* qkv, void* out,
                             float* lse, cudaStream_t stream) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  const cd::Api* api = usable(st, type, d, false, {qkv, out, lse});
  if (!api) return false;
  const int device = current_device();
  cd::Handle handle = handle_for(st, *api, device);
  if (!handle) return false;
  const Key key{device, false, d.B, d.H, d.T, d.D, d.causal};
  const cd::Plan* plan = plan_for(st, *api, handle, key, d);
  if (!plan) return false;
  const int64_t C = d.H * d.D;
  const auto* base = static_cast<const uint16_t*>(qkv);  // bf16 elements
  float scale = d.scale, neg_inf = -INFINITY;
  const int64_t uids[] = {kUidQ, kUidK, kUidV, kUidO, kUidStats, kUidScale, kUidNegInf};
  void* const ptrs[] = {const_cast<uint16_t*>(base),
                        const_cast<uint16_t*>(base + C),
                        const_cast<uint16_t*>(base + 2 * C),
                        out,
                        lse,
                        &scale,
                        &neg_inf};
  run(st, *api, handle, device, *plan, uids, ptrs, d.causal ? 7 : 6, stream,
      "cuda attention_forward through cuDNN, " + describe_key(key));
  ++st.stats.forward_calls;
  return true;
}

bool attention_cudnn_backward(DType type, const AttentionDims& d, const void* qkv, const void* out,
                              const float* lse, const void* dout, void* dqkv, float* workspace,
                              cudaStream_t stream) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  const cd::Api* api = usable(st, type, d, true, {qkv, out, lse, dout, dqkv, workspace});
  if (!api) return false;
  const int device = current_device();
  cd::Handle handle = handle_for(st, *api, device);
  if (!handle) return false;
  const Key key{device, true, d.B, d.H, d.T, d.D, d.causal};
  const cd::Plan* plan = plan_for(st, *api, handle, key, d);
  if (!plan) return false;
  const int64_t C = d.H * d.D, rows = d.B * d.H * d.T;
  const auto* in = static_cast<const uint16_t*>(qkv);
  auto* grad = static_cast<uint16_t*>(dqkv);
  float scale = d.scale, one = 1.0f, neg_inf = -INFINITY;
  auto mut = [](const void* p) { return const_cast<void*>(p); };
  const int64_t uids[] = {kUidQ,       kUidK,     kUidV,   kUidO,     kUidDO,
                          kUidStats,   kUidDQ,    kUidDK,  kUidDV,    kUidRowSum,
                          kUidDQAccum, kUidScale, kUidOne, kUidNegInf};
  void* const ptrs[] = {mut(in),
                        mut(in + C),
                        mut(in + 2 * C),
                        mut(out),
                        mut(dout),
                        mut(lse),
                        grad,
                        grad + C,
                        grad + 2 * C,
                        workspace,
                        workspace + (rows + 3) / 4 * 4,
                        &scale,
                        &one,
                        &neg_inf};
  run(st, *api, handle, device, *plan, uids, ptrs, d.causal ? 14 : 13, stream,
      "cuda attention_backward through cuDNN, " + describe_key(key));
  ++st.stats.backward_calls;
  return true;
}

bool attention_cudnn_backward_takes_length(size_t version, int64_t T) {
  return version >= kBackwardAnyTVersion || T % 128 == 0;
}

AttentionCudnnStats attention_cudnn_stats() {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  return st.stats;
}

AttentionCudnnOfflineReport attention_cudnn_check_offline(const std::string& device_json,
                                                          DType type, const AttentionDims& d,
                                                          bool backward) {
  AttentionCudnnOfflineReport report;
  if (!attention_cudnn_supports(type, d)) {
    report.detail =
        str_cat("not a case cuDNN's path takes (", dtype_name(type), ", D = ", d.D, ")");
    return report;
  }
  const cd::Api& api = cd::api();
  cd::Owned props = cd::device_properties_from_json(api, device_json);
  cd::GraphBuilder g(api);
  if (backward)
    build_backward(g, d, cd::kBFloat16);
  else
    build_forward(g, d, cd::kBFloat16);
  cd::Target target;
  target.device_properties = props.get();
  cd::PlanResult r = cd::Plan::build(std::move(g), target);
  if (r.plan) {
    report.accepted = true;
    report.engine = r.plan->engine();
    report.detail = str_cat("plan finalized, workspace ", r.plan->workspace_bytes(), " bytes");
  } else if (!r.attempts.empty() && r.attempts.back().status == cd::kExecutionFailedCudaDriver) {
    report.accepted = true;
    report.engine = r.attempts.back().engine;
    report.detail = r.refusal;
  } else {
    report.detail = r.refusal;
  }
  return report;
}

}  // namespace cohort::kernels::cuda
