// oneDNN matmul behind gemm, batched gemm, the broadcasting matmul and linear. Each call
// describes its operands as (dims, strides) so transposes and strided batches cost nothing; the
// primitive for a description is built once and cached here.
#include "kernels/cpu/matmul.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/dnnl_util.h"
#include "kernels/cpu/threads.h"
#include "kernels/cpu/vec_math.h"

namespace cohort::kernels::cpu {

namespace {

using dnnl::memory;
using Dims = std::vector<int64_t>;

struct Operand {
  Dims dims, strides;  // logical [..., rows, cols]
};

std::atomic<bool> g_cache_enabled{true};
std::atomic<bool> g_force_widening{false};

memory::data_type dnnl_type(MatmulType t) {
  return t == MatmulType::kBF16 ? memory::data_type::bf16 : memory::data_type::f32;
}

size_t type_size(MatmulType t) { return t == MatmulType::kBF16 ? 2 : 4; }

Dims contiguous_strides(const Dims& shape) {
  Dims s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * shape[i];
  return s;
}

// Everything that selects a primitive, as one vector: types, ranks, dims, strides, scalars, and
// the thread count, because oneDNN fixes its work split for the thread count at creation.
Dims cache_key(memory::data_type ab, memory::data_type c, const Operand& a, const Operand& b,
               const Operand& d, bool bias, float alpha, float beta) {
  Dims k = {static_cast<int64_t>(ab), static_cast<int64_t>(c), bias ? 1 : 0, omp_get_max_threads()};
  uint32_t bits[2];
  std::memcpy(&bits[0], &alpha, 4);
  std::memcpy(&bits[1], &beta, 4);
  k.push_back(bits[0]);
  k.push_back(bits[1]);
  for (const Operand* o : {&a, &b, &d}) {
    k.push_back(static_cast<int64_t>(o->dims.size()));
    k.insert(k.end(), o->dims.begin(), o->dims.end());
    k.insert(k.end(), o->strides.begin(), o->strides.end());
  }
  return k;
}

// b is repacked into the layout oneDNN picks for it (see Prepared) when the product is one large
// matrix product (at least kPackMacs multiply-adds, no batch) and b is not larger than a (N <= M):
// the reorder reads and writes all of b on every call, and for a b of 4 MiB with a of 1 MiB (the
// GPT's MLP weight gradients) that cost more than the product gained (3.33 -> 3.57 ms).
constexpr int64_t kPackMacs = int64_t{1} << 24;
bool wants_packed_b(const Operand& a, const Operand& b) {
  if (a.dims.size() != 2 || b.dims.size() != 2) return false;
  const int64_t M = a.dims[0], K = a.dims[1], N = b.dims[1];
  return N <= M && M * K * N >= kPackMacs;
}

dnnl::matmul::primitive_desc build(memory::data_type ab, memory::data_type c, const Operand& a,
                                   const Operand& b, const Operand& d, bool bias, float alpha, float beta,
                                   bool pack_b) {
  memory::desc a_md(a.dims, ab, a.strides), d_md(d.dims, c, d.strides);
  memory::desc b_md = pack_b ? memory::desc(b.dims, ab, memory::format_tag::any) : memory::desc(b.dims, ab, b.strides);
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops po;
    po.append_sum(beta);
    attr.set_post_ops(po);
  }
  std::unique_ptr<dnnl::matmul::desc> desc;
  if (bias) {
    Dims bd(d.dims.size(), 1);
    bd.back() = d.dims.back();
    memory::desc bias_md(bd, ab, contiguous_strides(bd));
    desc = std::make_unique<dnnl::matmul::desc>(a_md, b_md, bias_md, d_md);
  } else {
    desc = std::make_unique<dnnl::matmul::desc>(a_md, b_md, d_md);
  }
  return dnnl::matmul::primitive_desc(*desc, attr, dnnl_engine());
}

// A primitive with its argument memory objects, which each call only points at its buffers: building
// the memory objects and the argument map per call cost ~1.5 us, a tenth of a 64 x 64 x 64 product.
//
// Packed b. For one large product, oneDNN's kernels run faster on a b it laid out itself (blocks
// of columns, the layout its kernels read) than on a plain row-major or transposed one, which they
// copy piece by piece during the product: 4-15% on the GPT's products alone (e.g. 1024 x 768 x
// 256, 2.29 -> 2.11 ms, 1 thread), while the one reorder into that layout costs 20-70 us with b in
// cache and 100-160 us in the training step. So such a product first reorders b into a per-thread
// scratch buffer (`pack`), then multiplies that. In the whole GPT step this measured +0.8%
// (`bench_compute --ab`, 12 rounds), inside that harness's A/A spread of 0.994-1.019.
struct Prepared {
  dnnl::matmul primitive;
  memory a, b, d, bias;
  std::unordered_map<int, memory> args;
  std::optional<dnnl::reorder> pack;  // b (plain) -> packed, when packing
  memory packed;                      // the packed b; its handle is the thread's scratch
};

Prepared prepare(memory::data_type ab, memory::data_type c, const Operand& a, const Operand& b, const Operand& d,
                 bool bias, float alpha, float beta) {
  auto& eng = dnnl_engine();
  const memory::desc b_md(b.dims, ab, b.strides);
  dnnl::matmul::primitive_desc pd = build(ab, c, a, b, d, bias, alpha, beta, wants_packed_b(a, b));
  Prepared p{dnnl::matmul(pd), memory(memory::desc(a.dims, ab, a.strides), eng, nullptr), memory(b_md, eng, nullptr),
             memory(memory::desc(d.dims, c, d.strides), eng, nullptr), memory(), {}, std::nullopt, memory()};
  p.args = {{DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.b}, {DNNL_ARG_DST, p.d}};
  if (pd.weights_desc() != b_md) {
    p.packed = memory(pd.weights_desc(), eng, nullptr);
    p.pack.emplace(dnnl::reorder::primitive_desc(eng, b_md, eng, pd.weights_desc()));
    p.args[DNNL_ARG_WEIGHTS] = p.packed;
  }
  if (bias) {
    Dims bd(d.dims.size(), 1);
    bd.back() = d.dims.back();
    p.bias = memory(memory::desc(bd, ab, contiguous_strides(bd)), eng, nullptr);
    p.args[DNNL_ARG_BIAS] = p.bias;
  }
  return p;
}

// The prepared primitive for a description, from a per-thread cache (the memory objects are
// re-pointed on every call, so threads must not share them).
Prepared& get_prepared(memory::data_type ab, memory::data_type c, const Operand& a, const Operand& b,
                       const Operand& d, bool bias, float alpha, float beta) {
  thread_local std::map<Dims, Prepared> cache;
  thread_local Prepared uncached;
  if (!g_cache_enabled.load(std::memory_order_relaxed)) {
    uncached = prepare(ab, c, a, b, d, bias, alpha, beta);
    return uncached;
  }
  Dims key = cache_key(ab, c, a, b, d, bias, alpha, beta);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (cache.size() >= 512) cache.clear();  // shapes churn only in tests; keep memory bounded
  return cache.emplace(std::move(key), prepare(ab, c, a, b, d, bias, alpha, beta)).first->second;
}

// Whether oneDNN builds bf16 matmuls on this CPU. Its bf16 kernels need AVX-512 (emulated on
// avx512_core, native with AVX512_BF16 or AMX); on an AVX2-only CPU every bf16 primitive
// descriptor fails with "unimplemented". Probed once by building one small product.
bool native_bf16() {
  static const bool native = [] {
    try {
      const Operand m{{2, 2}, {2, 1}};
      build(memory::data_type::bf16, memory::data_type::bf16, m, m, m, false, 1.0f, 0.0f, false);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return native;
}

// Calls fn(strided offset, dense offset) for every element of an operand, the dense offsets
// counting up in row-major order of its dims.
template <typename Fn>
void for_each_element(const Operand& o, Fn&& fn) {
  const size_t rank = o.dims.size();
  int64_t total = 1;
  for (int64_t e : o.dims) total *= e;
  if (total == 0) return;
  std::vector<int64_t> index(rank, 0);
  int64_t at = 0;
  for (int64_t dense = 0; dense < total; ++dense) {
    fn(at, dense);
    for (size_t k = rank; k-- > 0;) {  // odometer step over the dims, innermost first
      at += o.strides[k];
      if (++index[k] < o.dims[k]) break;
      at -= o.strides[k] * o.dims[k];
      index[k] = 0;
    }
  }
}

Operand dense_like(const Operand& o) { return Operand{o.dims, contiguous_strides(o.dims)}; }

std::vector<float> widen(const Operand& o, const void* p) {
  const uint16_t* src = static_cast<const uint16_t*>(p);
  int64_t total = 1;
  for (int64_t e : o.dims) total *= e;
  std::vector<float> out(static_cast<size_t>(total));
  for_each_element(o, [&](int64_t at, int64_t dense) { out[dense] = widen_bf16(src[at]); });
  return out;
}

void run(memory::data_type ab, memory::data_type c, const Operand& a, const void* pa, const Operand& b,
         const void* pb, const Operand& d, void* pd, const void* bias, float alpha, float beta);

// bf16 operands on a CPU without oneDNN's bf16 kernels: widen them to fp32, multiply in fp32 and
// round the result once, which is what the bf16 kernels compute (bf16 products, fp32
// accumulation). Slower, and only reached where the native path cannot be built.
void run_bf16_widened(memory::data_type c, const Operand& a, const void* pa, const Operand& b, const void* pb,
                      const Operand& d, void* pd, const void* bias, float alpha, float beta) {
  const std::vector<float> a32 = widen(a, pa), b32 = widen(b, pb);
  std::vector<float> bias32;
  if (bias) bias32 = widen(Operand{{d.dims.back()}, {1}}, bias);
  const float* bias_ptr = bias ? bias32.data() : nullptr;
  const memory::data_type f32 = memory::data_type::f32;
  if (c == f32) {
    run(f32, f32, dense_like(a), a32.data(), dense_like(b), b32.data(), d, pd, bias_ptr, alpha, beta);
    return;
  }
  std::vector<float> d32 = beta != 0.0f ? widen(d, pd) : std::vector<float>();
  if (beta == 0.0f) {
    int64_t total = 1;
    for (int64_t e : d.dims) total *= e;
    d32.resize(static_cast<size_t>(total));
  }
  run(f32, f32, dense_like(a), a32.data(), dense_like(b), b32.data(), dense_like(d), d32.data(), bias_ptr, alpha,
      beta);
  uint16_t* dst = static_cast<uint16_t*>(pd);
  for_each_element(d, [&](int64_t at, int64_t dense) { dst[at] = round_bf16(d32[dense]); });
}

// A weight gradient dW = dy^T x (a transposed) whose operands' rows lie a multiple of 2 KiB apart
// (layers with 512, 1024, 1536, 2048... features: most models' widths) runs oneDNN's gemm at half
// speed on this AVX2 box: read down its columns, a panel's rows all fall into the same few cache
// sets. Measured, 1 thread, [M, 1024]^T x [1024, 256] alone: M = 1024 36 -> 76 GFLOP/s with the
// rows 64 bytes further apart, M = 512 53 -> 74, 2048 36 -> 82, 4096 34 -> 69; M = 768 or 1280
// (not multiples of 2 KiB) ~78 either way. Inside the GPT's step (width 256, MLP 1024, 1024
// tokens) the MLP's two weight gradients took 19.5 and 17.2 ms, and 11.3 and 10.5 ms with both
// operands' rows moved apart (b, x with rows of 1024, did not gain in isolation but did in the
// step, with its cache shared with the step's other data); the whole step at 1 thread gained
// 1.16x (`bench_compute --ab`, median of 10 rounds, 9 of them faster). So in a product with a
// transposed a, large enough to pay for one pass over an operand (kPackMacs, as packing b), each
// operand whose rows lie a multiple of 2 KiB apart is first copied into rows 64 bytes longer.
// Products with a plain a showed no such loss (the forward and input-gradient products). The
// copies are bounded (kPadChunkBytes): a longer contraction (a GPT-2's dW over 8192 tokens of
// 3072 features: 96 MiB) is cut into K-chunks whose products add up in d.
constexpr int64_t kAliasBytes = 2048, kRowPadBytes = 64, kPadChunkBytes = int64_t{8} << 20;
// Storage rows of a 2-D operand: transposed, its columns; `stride` apart, `length` elements each.
struct Rows { int64_t count, length, stride; };
Rows storage_rows(const Operand& o) {
  const bool trans = o.strides[0] == 1;
  return trans ? Rows{o.dims[1], o.dims[0], o.strides[1]} : Rows{o.dims[0], o.dims[1], o.strides[0]};
}
bool aliased(const Operand& o, size_t es) {
  if (o.dims.size() != 2) return false;
  const Rows r = storage_rows(o);
  return r.count > 1 && r.length > 1 && (r.stride * static_cast<int64_t>(es)) % kAliasBytes == 0;
}
// A thread's scratch of at least `bytes`: the old buffer freed before a larger one is taken.
char* scratch_of(std::vector<char>& buffer, size_t bytes) {
  if (buffer.size() < bytes) {
    buffer = std::vector<char>();
    buffer.resize(bytes);
  }
  return buffer.data();
}

// Copies o's storage rows into `buffer` kRowPadBytes further apart; returns the copy's operand.
Operand pad_rows(const Operand& o, const void* p, size_t es, std::vector<char>& buffer, const void** copy) {
  const Rows r = storage_rows(o);
  const int64_t stride = r.stride + kRowPadBytes / static_cast<int64_t>(es);
  const char* src = static_cast<const char*>(p);
  char* dst = scratch_of(buffer, static_cast<size_t>(r.count * stride) * es);
  parallel_for(r.count, r.count * r.length > (1 << 16), [&](int64_t k) {
    std::memcpy(dst + static_cast<size_t>(k * stride) * es, src + static_cast<size_t>(k * r.stride) * es,
                static_cast<size_t>(r.length) * es);
  });
  Operand out = o;
  out.strides[o.strides[0] == 1 ? 1 : 0] = stride;
  *copy = dst;
  return out;
}

// d = alpha * a b (+ bias) + beta * d, where a: [..., M, K], b: [..., K, N], d: [..., M, N].
void run(memory::data_type ab, memory::data_type c, const Operand& a_in, const void* pa_in, const Operand& b_in,
         const void* pb_in, const Operand& d, void* pd, const void* bias, float alpha = 1.0f,
         float beta = 0.0f) {
  if (ab == memory::data_type::bf16 && (g_force_widening.load(std::memory_order_relaxed) || !native_bf16())) {
    run_bf16_widened(c, a_in, pa_in, b_in, pb_in, d, pd, bias, alpha, beta);
    return;
  }
  Operand a = a_in, b = b_in;
  const void *pa = pa_in, *pb = pb_in;
  const size_t es = memory::data_type_size(ab);
  if (a.dims.size() == 2 && a.strides[0] == 1 && a.dims[0] * a.dims[1] * b.dims[1] >= kPackMacs &&
      (aliased(a, es) || aliased(b, es))) {
    // The copies stay within kPadChunkBytes an operand: a longer contraction runs in K-chunks,
    // each adding its product to d (the bias, if any, with the first).
    const int64_t M = a.dims[0], K = a.dims[1], N = b.dims[1];
    const int64_t chunk = std::max<int64_t>(64, kPadChunkBytes / (std::max(M, N) * static_cast<int64_t>(es)));
    if (K > chunk) {
      for (int64_t k0 = 0; k0 < K; k0 += chunk) {
        const int64_t kc = std::min(chunk, K - k0);
        Operand ac{{M, kc}, a.strides}, bc{{kc, N}, b.strides};
        run(ab, c, ac, static_cast<const char*>(pa_in) + static_cast<size_t>(k0 * a.strides[1]) * es, bc,
            static_cast<const char*>(pb_in) + static_cast<size_t>(k0 * b.strides[0]) * es, d, pd,
            k0 == 0 ? bias : nullptr, alpha, k0 == 0 ? beta : 1.0f);
      }
      return;
    }
    thread_local std::vector<char> a_rows, b_rows;
    if (aliased(a, es)) a = pad_rows(a_in, pa_in, es, a_rows, &pa);
    if (aliased(b, es)) b = pad_rows(b_in, pb_in, es, b_rows, &pb);
  }
  dnnl_call("matmul", [&] {
    Prepared& p = get_prepared(ab, c, a, b, d, bias != nullptr, alpha, beta);
    p.a.set_data_handle(const_cast<void*>(pa));
    p.b.set_data_handle(const_cast<void*>(pb));
    p.d.set_data_handle(pd);
    if (bias) p.bias.set_data_handle(const_cast<void*>(bias));
    if (p.pack) {
      thread_local std::vector<char> scratch;
      char* start = scratch_of(scratch, p.packed.get_desc().get_size() + 64);  // + 64: room to align the start
      const uintptr_t at = reinterpret_cast<uintptr_t>(start);
      p.packed.set_data_handle(start + ((64 - at % 64) % 64));
      p.pack->execute(dnnl_stream(), {{DNNL_ARG_FROM, p.b}, {DNNL_ARG_TO, p.packed}});
    }
    p.primitive.execute(dnnl_stream(), p.args);
    dnnl_stream().wait();
  });
}

// Logical [rows, cols] view of a matrix stored row-major with leading dimension ld, transposed
// or not; batch dims (with element strides) go in front.
Operand matrix(int64_t rows, int64_t cols, bool trans, int64_t ld, Dims batch = {}, Dims bstrides = {}) {
  Operand o{std::move(batch), std::move(bstrides)};
  o.dims.push_back(rows);
  o.dims.push_back(cols);
  o.strides.push_back(trans ? 1 : ld);
  o.strides.push_back(trans ? ld : 1);
  return o;
}

void scale_in_place(float* C, int64_t M, int64_t N, int64_t ldc, float beta) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) C[m * ldc + n] = beta == 0.0f ? 0.0f : beta * C[m * ldc + n];
}

// Operand of the N-d matmul: shape padded to `rank` with leading 1s (oneDNN broadcasts those),
// last two dims swapped when transposed.
Operand nd_operand(const Dims& shape, bool trans, size_t rank) {
  Dims padded(rank - shape.size(), 1);
  padded.insert(padded.end(), shape.begin(), shape.end());
  Operand o{padded, contiguous_strides(padded)};
  if (trans) {
    std::swap(o.dims[rank - 1], o.dims[rank - 2]);
    std::swap(o.strides[rank - 1], o.strides[rank - 2]);
  }
  return o;
}

int64_t batch_numel(const Dims& shape) {
  return std::accumulate(shape.begin(), shape.end() - 2, int64_t{1}, std::multiplies<int64_t>());
}

void bf16_from_f32(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = round_bf16(in[i]);
}

}  // namespace

void set_matmul_cache_enabled(bool on) { g_cache_enabled.store(on); }

bool matmul_bf16_native() { return native_bf16(); }

void set_matmul_bf16_widening(bool force) { g_force_widening.store(force); }

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  gemm_batched(trans_a, trans_b, 1, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0);
}

void gemm_batched(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                  float alpha, const float* A, int64_t lda, int64_t stride_a, const float* B,
                  int64_t ldb, int64_t stride_b, float beta, float* C, int64_t ldc, int64_t stride_c) {
  if (batch <= 0 || M <= 0 || N <= 0) return;
  if (K <= 0) {
    for (int64_t i = 0; i < batch; ++i) scale_in_place(C + i * stride_c, M, N, ldc, beta);
    return;
  }
  // A batch dim of extent 1 means "shared" to oneDNN; its stride is then irrelevant.
  auto bdim = [batch](int64_t stride) { return stride == 0 ? int64_t{1} : batch; };
  auto bstride = [](int64_t stride, int64_t extent) { return stride == 0 ? extent : stride; };
  Operand a = matrix(M, K, trans_a, lda, {bdim(stride_a)}, {bstride(stride_a, (trans_a ? K : M) * lda)});
  Operand b = matrix(K, N, trans_b, ldb, {bdim(stride_b)}, {bstride(stride_b, (trans_b ? N : K) * ldb)});
  Operand c = matrix(M, N, false, ldc, {batch}, {batch == 1 ? M * ldc : stride_c});
  run(memory::data_type::f32, memory::data_type::f32, a, A, b, B, c, C, nullptr, alpha, beta);
}

void matmul(MatmulType type, const void* a, const Dims& a_shape, bool trans_a, const void* b,
            const Dims& b_shape, bool trans_b, void* c, const Dims& c_shape) {
  const auto dt = dnnl_type(type);
  const size_t rank = c_shape.size();
  const int64_t M = c_shape[rank - 2], N = c_shape[rank - 1];
  const int64_t K = a_shape[a_shape.size() - (trans_a ? 2 : 1)];
  if (M == 0 || N == 0 || batch_numel(c_shape) == 0) return;
  if (K == 0) {
    std::memset(c, 0, static_cast<size_t>(batch_numel(c_shape) * M * N) * type_size(type));
    return;
  }
  if (!trans_a && batch_numel(b_shape) == 1) {
    // b shared by every batch: one [batch*M, K] x [K, N] product.
    const int64_t rows = batch_numel(a_shape) * M;
    run(dt, dt, matrix(rows, K, false, K), a, matrix(K, N, trans_b, trans_b ? K : N), b,
        matrix(rows, N, false, N), c, nullptr);
    return;
  }
  run(dt, dt, nd_operand(a_shape, trans_a, rank), a, nd_operand(b_shape, trans_b, rank), b,
      nd_operand(c_shape, false, rank), c, nullptr);
}

void matmul_sum_batch(MatmulType type, const void* a, const Dims& a_shape, bool trans_a, const void* b,
                      const Dims& b_shape, bool trans_b, void* c) {
  const auto dt = dnnl_type(type);
  const size_t r = a_shape.size();
  const int64_t ar = a_shape[r - 2], ac = a_shape[r - 1], br = b_shape[r - 2], bc = b_shape[r - 1];
  const int64_t M = trans_a ? ac : ar, K = trans_a ? ar : ac, N = trans_b ? br : bc;
  const int64_t batch = batch_numel(a_shape);
  if (M == 0 || N == 0) return;
  if (K == 0 || batch == 0) {
    std::memset(c, 0, static_cast<size_t>(M * N) * type_size(type));
    return;
  }
  if (trans_a && !trans_b) {
    // Contracting the rows of both: the batch folds into K, e.g. dW = dy^T x over all tokens.
    // One product; b, the narrower operand of a weight gradient, is packed (see Prepared). The
    // former detour for a much wider a, c^T = b^T a and a transpose of the small result, is no
    // faster once b is packed (the step without it: +0.8%, inside `bench_compute --ab`'s noise).
    const int64_t rows = batch * K;
    run(dt, dt, matrix(M, rows, true, M), a, matrix(rows, N, false, N), b, matrix(M, N, false, N), c, nullptr);
    return;
  }
  // Otherwise accumulate batch by batch in fp32 (bf16 accumulation would lose the sum).
  std::vector<float> acc_buf(type == MatmulType::kBF16 ? static_cast<size_t>(M * N) : 0);
  float* acc = type == MatmulType::kBF16 ? acc_buf.data() : static_cast<float*>(c);
  const size_t es = type_size(type);
  for (int64_t i = 0; i < batch; ++i) {
    const char* ai = static_cast<const char*>(a) + static_cast<size_t>(i * ar * ac) * es;
    const char* bi = static_cast<const char*>(b) + static_cast<size_t>(i * br * bc) * es;
    run(dt, memory::data_type::f32, matrix(M, K, trans_a, ac), ai, matrix(K, N, trans_b, bc), bi,
        matrix(M, N, false, N), acc, nullptr, 1.0f, i == 0 ? 0.0f : 1.0f);
  }
  if (type == MatmulType::kBF16) bf16_from_f32(acc, static_cast<uint16_t*>(c), M * N);
}

void linear(MatmulType type, const void* x, const void* weight, const void* bias, void* y, int64_t M,
            int64_t N, int64_t K) {
  const auto dt = dnnl_type(type);
  if (M == 0 || N == 0) return;
  run(dt, dt, matrix(M, K, false, K), x, matrix(K, N, true, K), weight, matrix(M, N, false, N), y, bias);
}

void matmul_mul(const float* a, const float* b, const float* m, float* c, int64_t M, int64_t N, int64_t K) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    std::memset(c, 0, static_cast<size_t>(M * N) * sizeof(float));
    return;
  }
  // A separate pass: oneDNN's binary-mul post-op reading m was slower in the training step (its
  // reads of m are not prefetched: 3.9 against 3.7 ms for 1024 x 256 x 1024 with cold operands).
  run(memory::data_type::f32, memory::data_type::f32, matrix(M, K, false, K), a, matrix(K, N, false, N), b,
      matrix(M, N, false, N), c, nullptr);
  parallel_for_simd(M * N, M * N > (1 << 15), [&](int64_t i) { c[i] *= m[i]; });
}

}  // namespace cohort::kernels::cpu
