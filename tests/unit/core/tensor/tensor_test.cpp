// Tensors: allocation, views (reshape, permute), contiguous copies, dtype conversion, bf16 rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "core/base/error.h"
#include "core/tensor/tensor.h"

namespace cohort {
namespace {

Tensor iota(const Shape& s) {
  Tensor t = Tensor::empty(s, DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i);
  return t;
}

TEST(Tensor, EmptyZerosAndAlignment) {
  Tensor t = Tensor::zeros({3, 5}, DType::kF32);
  EXPECT_EQ(t.numel(), 15);
  EXPECT_EQ(t.nbytes(), 60u);
  EXPECT_EQ(t.strides(), (Shape{5, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u);
  for (int64_t i = 0; i < 15; ++i) EXPECT_EQ(t.data<float>()[i], 0.0f);
  EXPECT_EQ(t.device(), Device::kCpu);
  EXPECT_THROW(Tensor::empty({2, -1}, DType::kF32), Error);
}

// Large buffers are 64-byte aligned and fully writable; with COHORT_HUGE_PAGES=1 (opt-in, read
// once a process: ctest runs this test again with it set, Tensor.HugePagesOptIn) those of a huge
// page or more start on a 2 MiB boundary, so transparent huge pages can back them; smaller ones
// keep 64-byte alignment either way.
TEST(Tensor, LargeBuffersStartOnHugePageBoundaries) {
  const char* opt = std::getenv("COHORT_HUGE_PAGES");
  const bool huge = opt != nullptr && std::string(opt) == "1";
  for (int64_t n : {int64_t{1} << 19, (int64_t{3} << 19) + 5, int64_t{1} << 20}) {
    Tensor t = Tensor::zeros({n}, DType::kF32);  // 2 MiB, ~6 MiB (odd), 4 MiB
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % (huge ? uintptr_t{2} << 20 : 64), 0u) << n;
    t.data<float>()[n - 1] = 1.0f;
    EXPECT_EQ(t.data<float>()[n - 1], 1.0f);
  }
  Tensor small = Tensor::zeros({(int64_t{1} << 19) - 16}, DType::kF32);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.raw()) % 64, 0u);
}

TEST(Tensor, ReshapeSharesStorage) {
  Tensor t = iota({2, 6});
  Tensor r = t.reshaped({3, 4});
  EXPECT_EQ(r.storage(), t.storage());
  EXPECT_EQ(r.data<float>()[5], 5.0f);
  try {
    t.reshaped({5, 5});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kShapeMismatch);
    EXPECT_STREQ(e.what(), "cannot reshape [2, 6] to [5, 5]");
  }
}

TEST(Tensor, PermutedViewAndContiguousCopy) {
  Tensor t = iota({2, 3, 4});
  Tensor p = t.permuted({2, 0, 1});  // [4, 2, 3]
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_FALSE(p.is_contiguous());
  Tensor c = p.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  // c[k, i, j] == t[i, j, k] == i*12 + j*4 + k
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) EXPECT_EQ(c.data<float>()[k * 6 + i * 3 + j], static_cast<float>(i * 12 + j * 4 + k));
  EXPECT_THROW(t.permuted({0, 1}), Error);
}

TEST(Tensor, Bf16RoundTripAndRounding) {
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(-2.5f)), -2.5f);
  // 1 + 2^-8 lies halfway between two bf16 values: ties round to even (1.0).
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 3.0f / 256)), 1.0f + 4.0f / 256);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::infinity()))));
  Tensor f = iota({7});
  Tensor h = Tensor::empty({7}, DType::kBF16);
  h.copy_from(f);
  Tensor back = Tensor::empty({7}, DType::kF32);
  back.copy_from(h);
  for (int i = 0; i < 7; ++i) EXPECT_EQ(back.data<float>()[i], static_cast<float>(i));
}

TEST(Tensor, CopyAndFillErrors) {
  Tensor a = iota({4});
  Tensor b = Tensor::empty({5}, DType::kF32);
  EXPECT_THROW(b.copy_from(a), Error);
  Tensor i = Tensor::empty({4}, DType::kI32);
  try {
    i.copy_from(a);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kUnsupported);
  }
  i.fill(3.0f);
  EXPECT_EQ(i.data<int32_t>()[3], 3);
}

TEST(Tensor, WrapBorrowsCallerMemory) {
  float buf[6] = {1, 2, 3, 4, 5, 6};
  {
    Tensor t = Tensor::wrap(buf, {2, 3}, DType::kF32);
    EXPECT_EQ(t.data<float>(), buf);
    t.fill(0.5f);
  }  // destroying the tensor must not free caller memory
  EXPECT_EQ(buf[5], 0.5f);
}

TEST(Shape, HelpersAndAxis) {
  EXPECT_EQ(shape_numel({}), 1);
  EXPECT_EQ(shape_str({64, 300}), "[64, 300]");
  EXPECT_EQ(normalize_axis(-1, 3, "axis"), 2);
  EXPECT_THROW(normalize_axis(3, 3, "axis"), Error);
  DType t;
  EXPECT_FALSE(dtype_from_int(17, &t));
  EXPECT_TRUE(dtype_from_int(1, &t));
  EXPECT_EQ(t, DType::kBF16);
}

}  // namespace
}  // namespace cohort
