// kernels/cuda/gemm_staging.h without a device: the chunks gemm's staging chooses for the GPT-2
// output head's three products (the shapes measured on an H200, bench/cuda/NOTES.md), the
// budget kept, fp32 sums for bf16 K chunks, and the cases that must run unstaged.
#include "kernels/cuda/gemm_staging.h"

#include <gtest/gtest.h>

namespace cohort::kernels::cuda::staging {
namespace {

constexpr size_t kBudget = size_t{64} << 20;
constexpr int64_t kTokens = 8192, kWidth = 768, kVocab = 50257;

Plan plan_for(bool ta, bool tb, bool sa, bool sb, bool sc, int64_t M, int64_t N, int64_t K, size_t es, float beta,
              int64_t ldc, size_t budget = kBudget) {
  Operand ops[3];
  make_operands(ta, tb, sa, sb, sc, ops);
  return plan(M, N, K, es, ops, beta, ldc, budget);
}

// logits = h wte^T: C [8192, 50257] staged (its rows are off 16 bytes in length and start).
// Cut along N, 4096 columns a chunk: every chunk's N aligned but the last.
TEST(GemmStaging, HeadForwardCutsTheVocabulary) {
  const Plan p = plan_for(false, true, false, false, true, kTokens, kVocab, kWidth, 2, 0.0f, kVocab);
  EXPECT_EQ(p.dim, 1);
  EXPECT_EQ(p.len % 16, 0);
  EXPECT_EQ(p.len, 4096);
  EXPECT_EQ(p.chunks, 13);
  EXPECT_FALSE(p.f32_sums);
  EXPECT_LE(p.bytes, kBudget);
}

// dh = dlogits wte: A [8192, 50257] staged; cutting M leaves [656, 768] products (too few tiles),
// so K is cut, the chunks adding up in fp32.
TEST(GemmStaging, HeadInputGradientCutsKAndSumsInFp32) {
  const Plan p = plan_for(false, false, true, false, false, kTokens, kWidth, kVocab, 2, 0.0f, kWidth);
  EXPECT_EQ(p.dim, 2);
  EXPECT_TRUE(p.f32_sums);
  EXPECT_GT(p.chunks, 1);
  EXPECT_EQ(p.len % 16, 0);
  EXPECT_LE(p.bytes, kBudget);
  EXPECT_GE(p.bytes - p.f32_offset, static_cast<size_t>(kTokens * kWidth * 4));  // the fp32 sums
}

// dwte = dlogits^T h: A stored [8192, 50257] (transposed) staged; K chunks would need an fp32
// [50257, 768] buffer past the budget, so M (the vocabulary) is cut.
TEST(GemmStaging, HeadWeightGradientCutsTheVocabulary) {
  const Plan p = plan_for(true, false, true, false, false, kVocab, kWidth, kTokens, 2, 0.0f, kWidth);
  EXPECT_EQ(p.dim, 0);
  EXPECT_EQ(p.len, 4096);
  EXPECT_FALSE(p.f32_sums);
  EXPECT_LE(p.bytes, kBudget);
}

// The same products in fp32: K chunks add into the fp32 C itself.
TEST(GemmStaging, Fp32KChunksNeedNoSeparateSums) {
  const Plan p = plan_for(false, false, true, false, false, kTokens, kWidth, kVocab, 4, 0.0f, kWidth);
  EXPECT_EQ(p.dim, 2);
  EXPECT_FALSE(p.f32_sums);
  EXPECT_LE(p.bytes, kBudget);
}

// Everything fits: one chunk, whole operands, each region after the last.
TEST(GemmStaging, SmallProductsGoWhole) {
  const Plan p = plan_for(false, false, true, true, true, 67, 45, 33, 4, 0.5f, 47, size_t{1} << 20);
  EXPECT_EQ(p.chunks, 1);
  EXPECT_EQ(p.offset[0], 0u);
  EXPECT_GT(p.offset[1], p.offset[0]);
  EXPECT_GT(p.offset[2], p.offset[1]);
  EXPECT_LE(p.bytes, size_t{1} << 20);
  EXPECT_EQ(p.offset[1] % 256, 0u);
}

// A bf16 C that cannot take fp32 sums (beta 0.5) is not cut along K; with M and N too small to
// cut and the whole past the budget, nothing fits: the product runs unstaged.
TEST(GemmStaging, NothingFitsRunsUnstaged) {
  const Plan p = plan_for(false, false, true, true, true, 12, 10, 1400, 2, 0.5f, 12, size_t{32} << 10);
  EXPECT_EQ(p.dim, -1);
  const Plan fp32 = plan_for(false, false, true, true, true, 12, 10, 1400, 4, 0.5f, 12, size_t{32} << 10);
  EXPECT_EQ(fp32.dim, 2);  // fp32 adds its K chunks into C
  EXPECT_LE(fp32.bytes, size_t{32} << 10);
}

TEST(GemmStaging, PaddedRowsAreWholeMultiplesOf128Bytes) {
  EXPECT_EQ(padded_ld(50257, 2), 50304);
  EXPECT_EQ(padded_ld(64, 2), 64);
  EXPECT_EQ(padded_ld(33, 4), 64);
  EXPECT_EQ(round_up_256(257), 512u);
}

}  // namespace
}  // namespace cohort::kernels::cuda::staging
