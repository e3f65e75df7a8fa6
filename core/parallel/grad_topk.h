// Top-k compression of synchronous data parallelism's gradients, with error feedback
// (plan.grad_keep < 1). After Stich, Cordonnier and Jaggi, "Sparsified SGD with Memory"
// (NeurIPS 2018) and Lin et al., "Deep Gradient Compression" (ICLR 2018); the rule below is ours.
//
// The rule, per gradient bucket of n elements, k = topk_count(n, keep) of them sent a step.
// Rank i keeps a residual e_i of n floats, zero at the start. At a step, with g_i its gradient:
//     a_i  = g_i + e_i                     what rank i owes the group
//     S_i  = the k indices of a_i of largest magnitude
//     ghat = (1/W) sum_i a_i restricted to S_i    (every rank gathers every rank's message and
//                                                  sums them in rank order: the same bits on all)
// and the optimizer steps with ghat. After a step that was applied, e_i <- a_i with S_i zeroed;
// after a step every rank skipped (ghat not finite), e_i stays as it was: the step's gradients
// are dropped as plain DDP drops them. So sum_i a_i = W ghat + sum_i e_i: nothing is lost, what is
// not sent yet waits in the residual until it is among the largest.
//
// Non-finite values. topk_select ranks NaN above every number and Inf above every finite one, so
// a rank whose a_i is not finite (a NaN loss marks element 0, as in DDP) sends some of it, ghat is
// not finite on every rank, and every optimizer skips the step alike; the residual, kept as it
// was, never holds a non-finite value.
//
// Wire: rank i's message is a pipeline top-k edge's forward message (core/ops/pipe_topk.h: the
// kept indices as int32 or a bitmap, whichever is smaller, then k fp32 values). Its size is fixed
// by n and k, so a bucket's messages travel in one all-gather. A rank receives W messages of
// ~(4 + 4) k bytes (or n / 8 + 4 k with the bitmap) against a ring all-reduce's ~8 n (W - 1) / W:
// the exchange carries fewer bytes when keep is below about 1 / W (index form) or, with the
// bitmap, when 4 keep + 1/8 < 8 / W.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cohort::parallel {

class GradTopk {
 public:
  // A bucket of n (1..INT32_MAX) elements keeping keep in (0, 1] of them (kInvalidArgument).
  GradTopk(int64_t n, double keep);

  int64_t size() const { return n_; }
  int64_t kept() const { return k_; }
  size_t message_bytes() const { return message_bytes_; }

  // a[n]: this step's gradient on entry, a = g + residual on return (kept for settle); the
  // message of a's k largest entries to message[message_bytes()].
  void encode(float* a, void* message);

  // out[n] = (1/world) times the sum, in rank order, of the world messages laid message_bytes()
  // apart. Throws kCorrupt naming `what` and the rank when a message's indices are not k strictly
  // ascending ones below n.
  void average(const void* messages, int world, float* out, const std::string& what);

  // After the step of the last encode: applied, the residual becomes a (as encode left it) with
  // the sent entries zeroed; not applied, it stays as before that encode.
  void settle(const float* a, bool applied);

  // The residual, for checkpoints (n floats).
  std::vector<float>& residual() { return residual_; }
  const std::vector<float>& residual() const { return residual_; }

 private:
  int64_t n_, k_;
  size_t message_bytes_;
  std::vector<float> residual_;
  std::vector<int32_t> sent_;  // indices of this rank's last message
  std::vector<int32_t> idx_;   // scratch: a received message's indices
  std::vector<float> values_;  // scratch: its values, aligned
};

}  // namespace cohort::parallel
