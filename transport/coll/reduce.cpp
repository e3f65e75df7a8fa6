// Reduction kernels. Plain loops the compiler vectorizes for f32 and integers; half types go
// through fp32 per element.
#include "transport/coll/reduce.h"

#include <unistd.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#include <xmmintrin.h>
#endif

#include <algorithm>
#include <cstring>

namespace cohort::transport::coll {

const char* dtype_name(DataType t) {
  switch (t) {
    case DataType::kF32: return "f32";
    case DataType::kBF16: return "bf16";
    case DataType::kF16: return "f16";
    case DataType::kI32: return "i32";
    case DataType::kI64: return "i64";
    case DataType::kU8: return "u8";
  }
  return "?";
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
  }
  return "?";
}

bool reduce_supported(DataType t, ReduceOp op) {
  if (t == DataType::kU8) return false;
  if (op == ReduceOp::kAvg) return t == DataType::kF32 || t == DataType::kBF16 || t == DataType::kF16;
  return true;
}

float bf16_to_float(uint16_t v) {
  uint32_t bits = uint32_t{v} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float f16_to_float(uint16_t v) {
  _Float16 h;
  std::memcpy(&h, &v, 2);
  return static_cast<float>(h);
}

uint16_t float_to_f16(float f) {
  _Float16 h = static_cast<_Float16>(f);
  uint16_t v;
  std::memcpy(&v, &h, 2);
  return v;
}

namespace {

template <typename T, typename Fn>
void apply(void* out, const void* a, const void* b, size_t n, Fn fn) {
  auto* o = static_cast<T*>(out);
  auto* x = static_cast<const T*>(a);
  auto* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = fn(x[i], y[i]);
}

template <typename T>
void reduce_native(void* out, const void* a, const void* b, size_t n, ReduceOp op) {
  if (op == ReduceOp::kMax) {
    apply<T>(out, a, b, n, [](T x, T y) { return x < y ? y : x; });
  } else {
    apply<T>(out, a, b, n, [](T x, T y) { return static_cast<T>(x + y); });
  }
}

template <float (*Load)(uint16_t), uint16_t (*Store)(float)>
void reduce_half(void* out, const void* a, const void* b, size_t n, ReduceOp op) {
  if (op == ReduceOp::kMax) {
    apply<uint16_t>(out, a, b, n, [](uint16_t x, uint16_t y) {
      float fx = Load(x), fy = Load(y);
      return fx < fy ? y : x;
    });
  } else {
    apply<uint16_t>(out, a, b, n,
                    [](uint16_t x, uint16_t y) { return Store(Load(x) + Load(y)); });
  }
}

}  // namespace

void reduce(void* out, const void* a, const void* b, size_t count, DataType type, ReduceOp op) {
  switch (type) {
    case DataType::kF32: return reduce_native<float>(out, a, b, count, op);
    case DataType::kI32: return reduce_native<int32_t>(out, a, b, count, op);
    case DataType::kI64: return reduce_native<int64_t>(out, a, b, count, op);
    case DataType::kBF16: return reduce_half<bf16_to_float, float_to_bf16>(out, a, b, count, op);
    case DataType::kF16: return reduce_half<f16_to_float, float_to_f16>(out, a, b, count, op);
    case DataType::kU8: return;
  }
}

void scale(void* buf, size_t count, DataType type, double factor) {
  const float f = static_cast<float>(factor);
  if (type == DataType::kF32) {
    auto* p = static_cast<float*>(buf);
    for (size_t i = 0; i < count; ++i) p[i] *= f;
  } else if (type == DataType::kBF16 || type == DataType::kF16) {
    auto* p = static_cast<uint16_t*>(buf);
    bool bf = type == DataType::kBF16;
    for (size_t i = 0; i < count; ++i)
      p[i] = bf ? float_to_bf16(bf16_to_float(p[i]) * f) : float_to_f16(f16_to_float(p[i]) * f);
  }
}

void reduce_many(void* dst, const void* const* srcs, int n, size_t count, DataType type,
                 ReduceOp op) {
  if (n <= 0 || count == 0) return;
  if (type == DataType::kF32 && op != ReduceOp::kMax) {
    // One pass over every source, in blocks that stay in L1 (up to 8 sources at a time).
    auto* d = static_cast<float*>(dst);
    const float factor = op == ReduceOp::kAvg ? 1.0f / static_cast<float>(n) : 1.0f;
    constexpr size_t kBlock = 1024;
    for (size_t b = 0; b < count; b += kBlock) {
      const size_t m = std::min(kBlock, count - b);
      float acc[kBlock];
      const auto* s0 = static_cast<const float*>(srcs[0]) + b;
      for (size_t i = 0; i < m; ++i) acc[i] = s0[i];
      for (int j = 1; j < n; ++j) {
        const auto* sj = static_cast<const float*>(srcs[j]) + b;
        for (size_t i = 0; i < m; ++i) acc[i] += sj[i];
      }
      if (op == ReduceOp::kAvg) {
        for (size_t i = 0; i < m; ++i) d[b + i] = acc[i] * factor;
      } else {
        std::memcpy(d + b, acc, m * sizeof(float));
      }
    }
    return;
  }
  // Pair by pair into dst: first the sources dst does not alias, in order, folded onto the one
  // it does (or onto a copy of the first).
  const size_t es = dtype_size(type);
  int base = -1;
  for (int j = 0; j < n && base < 0; ++j)
    if (srcs[j] == dst) base = j;
  if (base < 0) {
    std::memmove(dst, srcs[0], count * es);
    base = 0;
  }
  for (int j = 0; j < n; ++j)
    if (j != base) reduce(dst, dst, srcs[j], count, type, op == ReduceOp::kAvg ? ReduceOp::kSum : op);
  if (op == ReduceOp::kAvg) scale(dst, count, type, 1.0 / n);
}

void stream_copy(void* dst, const void* src, size_t bytes, bool stream) {
#if !defined(__SSE2__)
  stream = false;
#endif
  if (!stream || bytes < 256) {
    std::memcpy(dst, src, bytes);
    return;
  }
#if defined(__SSE2__)
  auto* d = static_cast<uint8_t*>(dst);
  auto* s = static_cast<const uint8_t*>(src);
  size_t head = (16 - reinterpret_cast<uintptr_t>(d) % 16) % 16;
  std::memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  size_t i = 0;
  for (; i + 64 <= bytes; i += 64) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
  std::memcpy(d + i, s + i, bytes - i);
  _mm_sfence();  // non-temporal stores are weakly ordered: visible before anything published later
#endif
}

bool outgrows_cache(size_t bytes) {
  static const size_t half_llc = [] {
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    long llc = l3 > 0 ? l3 : l2 > 0 ? l2 : (32L << 20);
    return static_cast<size_t>(llc) / 2;
  }();
  return bytes >= half_llc;
}

}  // namespace cohort::transport::coll
