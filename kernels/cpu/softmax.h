// Softmax-family loops on contiguous fp32 buffers viewed as [outer, n, inner] (softmax over n),
// and the fused cross entropy over rows of [rows, V] logits with int32 labels.
#pragma once

#include <cstdint>

namespace cohort::kernels::cpu {

// y = softmax(x) (or log_softmax when log is true) over the middle dim of [outer, n, inner].
void softmax_forward(const float* x, float* y, int64_t outer, int64_t n, int64_t inner, bool log);
// Given the forward output y: softmax dx = y * (dy - sum(dy * y));
// log_softmax dx = dy - exp(y) * sum(dy).
void softmax_backward(const float* y, const float* dy, float* dx, int64_t outer, int64_t n, int64_t inner,
                      bool log);

// Returns the index of the first label outside [0, V) that is not ignore_index, or -1.
int64_t find_bad_label(const int32_t* labels, int64_t rows, int64_t V, int64_t ignore_index);
// lse[r] = logsumexp(logits[r, :]); returns sum over non-ignored rows of lse[r] - logits[r, label]
// and stores their count. Labels must have passed find_bad_label.
double cross_entropy_forward(const float* logits, const int32_t* labels, float* lse, int64_t rows, int64_t V,
                             int64_t ignore_index, int64_t* count);
// dlogits[r, :] = (softmax(logits[r]) - onehot(label)) * scale; zero rows for ignored labels.
void cross_entropy_backward(const float* logits, const int32_t* labels, const float* lse, float scale,
                            float* dlogits, int64_t rows, int64_t V, int64_t ignore_index);

}  // namespace cohort::kernels::cpu
