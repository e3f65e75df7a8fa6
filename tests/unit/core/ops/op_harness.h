// The one operator harness: every public operator has cases here. Each case checks the forward
// pass against a plain double-precision reference, the gradient of every float input against
// central finite differences of that reference, and the bf16 forward against the reference; the
// same on the CUDA device where one is visible (bf16 gradients there against the CPU's).
// An operator registered without cases fails the completeness test, and so does a CUDA kernel
// whose declared dtypes do not take every dtype a case's graph gives it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/graph/attrs.h"
#include "core/tensor/tensor.h"

namespace cohort::test {

using DVec = std::vector<double>;

struct InputSpec {
  Shape shape;
  DType dtype = DType::kF32;  // kF32 (float input) or kI32 (indices/labels)
  double low = -1.0;          // f32: uniform in [low, high); i32: integers in [low, high)
  double high = 1.0;
};

// Reference: inputs (as doubles, flattened, row-major) and their shapes -> every output.
using Reference = std::function<std::vector<DVec>(const std::vector<DVec>& in,
                                                  const std::vector<Shape>& shapes, const Attrs& attrs)>;

struct OpCase {
  std::string op;
  std::string label;                // shows in the test name, e.g. "2x3_bcast"
  Attrs attrs;
  std::vector<InputSpec> inputs;
  Reference reference;
  std::vector<int> checked_outputs = {0};  // outputs compared and differentiated
  double fwd_rtol = 1e-4, fwd_atol = 1e-5;
  double grad_rtol = 2e-3, grad_atol = 2e-4;
  bool check_grad = true;
  bool check_bf16 = true;
  bool training = true;             // evaluation-mode forward when false
  int max_grad_elements = 48;       // finite differences on at most this many elements per input
  std::string cuda_refuses;         // why the CUDA kernel refuses this case (kUnsupported); "": it runs
  // A NaN input may reach more outputs than the reference's (never fewer): e.g. causal attention,
  // whose products span whole key blocks, masked keys weighted by 0 (0 * NaN is NaN).
  bool nan_may_spread = false;
};

// Family case lists, each in tests/unit/core/ops/<family>_test.cpp.
void add_elementwise_cases(std::vector<OpCase>& out);
void add_matmul_cases(std::vector<OpCase>& out);
void add_norm_cases(std::vector<OpCase>& out);
void add_softmax_cases(std::vector<OpCase>& out);
void add_attention_cases(std::vector<OpCase>& out);
void add_embedding_cases(std::vector<OpCase>& out);
void add_conv_cases(std::vector<OpCase>& out);
void add_shape_cases(std::vector<OpCase>& out);
void add_dropout_cases(std::vector<OpCase>& out);

std::vector<OpCase> all_cases();

// Row-major helpers for references.
int64_t numel(const Shape& s);

}  // namespace cohort::test
