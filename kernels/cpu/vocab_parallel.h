// Vocabulary-parallel embedding and cross-entropy loops (Megatron-LM's, Shoeybi et al. 2019,
// section 3): a rank holds rows [offset, offset + v_local) of a [V, C] table, and the logits of
// those vocabulary entries. Buffers are contiguous fp32 (ids and labels int32); ids and labels
// have been checked against the whole vocabulary already.
#pragma once

#include <cstdint>

namespace cohort::kernels::cpu {

// out[i, :] = w[ids[i] - offset, :] for ids in this rank's rows, else zeros (another rank's row).
void vocab_embedding_forward(const float* w, const int32_t* ids, float* out, int64_t n, int64_t v_local,
                             int64_t offset, int64_t C);
// dw = 0, then dw[ids[i] - offset, :] += dy[i, :] for ids in this rank's rows, in order of i.
void vocab_embedding_backward(const int32_t* ids, const float* dy, float* dw, int64_t n, int64_t v_local,
                              int64_t offset, int64_t C);

// Per row r of logits [rows, v_local]: stats[r] = {max, sum exp(logit - max), the label's logit
// when this rank holds it, else 0}. Rows whose label is ignore_index get {0, 0, 0}.
void vocab_cross_entropy_partials(const float* logits, const int32_t* labels, float* stats, int64_t rows,
                                  int64_t v_local, int64_t offset, int64_t ignore_index);
// Combines every rank's partials [parts, rows, 3] into lse[r] = logsumexp over the whole
// vocabulary (every row, as cross_entropy); returns the sum over the rows whose label is not
// ignore_index of lse[r] - logit[label] and stores their count.
double vocab_cross_entropy_combine(const float* partials, const int32_t* labels, float* lse, int64_t parts,
                                   int64_t rows, int64_t ignore_index, int64_t* count);
// dlogits[r, :] = (exp(logits[r, :] - lse[r]) - onehot(label - offset)) * scale; zero rows for
// ignored labels.
void vocab_cross_entropy_backward(const float* logits, const int32_t* labels, const float* lse, float scale,
                                  float* dlogits, int64_t rows, int64_t v_local, int64_t offset,
                                  int64_t ignore_index);

}  // namespace cohort::kernels::cpu
