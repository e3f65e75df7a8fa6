// kernel_dtype_mismatch: the declared dtypes of a device kernel (core/ops/kernel_dtypes.h)
// against a call's, each letter, variadic and optional slots, and malformed signatures.
#include "core/ops/kernel_dtypes.h"

#include <gtest/gtest.h>

namespace cohort {
namespace {

constexpr DType F32 = DType::kF32, BF16 = DType::kBF16, I32 = DType::kI32, I64 = DType::kI64;

TEST(KernelDtypes, FloatTypeIsOneTypeForTheWholeCall) {
  EXPECT_EQ(kernel_dtype_mismatch("TTFFTT>TTT", {BF16, BF16, F32, F32, BF16, BF16}, {BF16, BF16, BF16}), "");
  EXPECT_EQ(kernel_dtype_mismatch("TTFFTT>TTT", {F32, F32, F32, F32, F32}, {F32, F32, F32}), "");
  EXPECT_EQ(kernel_dtype_mismatch("TTFFTT>TTT", {BF16, F32, F32, F32, BF16}, {BF16, BF16, BF16}),
            "input 1 has dtype f32, expected bf16 like input 0");
  EXPECT_EQ(kernel_dtype_mismatch("TT>T", {BF16, BF16}, {F32}), "output 0 has dtype f32, expected bf16 like input 0");
  EXPECT_EQ(kernel_dtype_mismatch("T>T", {I32}, {I32}), "input 0 has dtype i32, expected f32 or bf16");
}

TEST(KernelDtypes, FixedLettersAndAnyType) {
  EXPECT_EQ(kernel_dtype_mismatch("TI>TF", {BF16, I32}, {BF16, F32}), "");
  EXPECT_EQ(kernel_dtype_mismatch("TI>TF", {BF16, I64}, {BF16, F32}), "input 1 has dtype i64, expected i32");
  EXPECT_EQ(kernel_dtype_mismatch("TI>TF", {BF16, I32}, {BF16, BF16}), "output 1 has dtype bf16, expected f32");
  EXPECT_EQ(kernel_dtype_mismatch("A>A", {I64}, {I64}), "");
  EXPECT_EQ(kernel_dtype_mismatch("A>A", {I32}, {F32}), "output 0 has dtype f32, expected i32 like input 0");
}

TEST(KernelDtypes, VariadicAndOptionalSlots) {
  EXPECT_EQ(kernel_dtype_mismatch("A*>A", {BF16, BF16, BF16}, {BF16}), "");
  EXPECT_EQ(kernel_dtype_mismatch("A>A*", {I32}, {I32, I32, I32, I32}), "");
  EXPECT_EQ(kernel_dtype_mismatch("A>A*", {I32}, {I32, F32}), "output 1 has dtype f32, expected i32 like input 0");
  EXPECT_EQ(kernel_dtype_mismatch("TTT>T", {F32, F32}, {F32}), "");  // an optional input left out
  EXPECT_EQ(kernel_dtype_mismatch("TT>T", {F32, F32, F32}, {F32}), "3 inputs, the kernel takes at most 2");
  EXPECT_EQ(kernel_dtype_mismatch("T>TF", {F32}, {F32}), "1 outputs, the kernel takes 2");
  EXPECT_EQ(kernel_dtype_mismatch("T>TF*", {F32}, {F32}), "");
}

TEST(KernelDtypes, MalformedSignaturesAreNamed) {
  for (const char* bad : {"TT", "T>", "T>>T", "*>T", "T*T>T"})
    EXPECT_NE(kernel_dtype_mismatch(bad, {F32}, {F32}).find("is malformed"), std::string::npos) << bad;
  EXPECT_EQ(kernel_dtype_mismatch("TX>T", {F32, F32}, {F32}), "signature 'TX>T': unknown letter 'X'");
}

}  // namespace
}  // namespace cohort
