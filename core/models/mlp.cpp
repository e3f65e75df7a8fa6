// The MLP builder; see mlp.h.
#include "core/models/mlp.h"

#include "core/base/error.h"
#include "core/models/layers.h"

namespace cohort::models {

namespace {
constexpr int64_t kMaxExtent = int64_t{1} << 30;

void check_extent(const char* field, int64_t v) {
  COHORT_CHECK(v >= 1 && v <= kMaxExtent, Status::kInvalidArgument, "mlp: ", field, " (", v,
               ") must be in 1..2^30");
}
}  // namespace

void validate(const MlpConfig& c) {
  check_extent("batch", c.batch);
  check_extent("in_features", c.in_features);
  check_extent("classes", c.classes);
  COHORT_CHECK(c.hidden.size() <= 64, Status::kInvalidArgument, "mlp: hidden has ", c.hidden.size(),
               " layers, at most 64 are allowed");
  for (size_t i = 0; i < c.hidden.size(); ++i)
    COHORT_CHECK(c.hidden[i] >= 1 && c.hidden[i] <= kMaxExtent, Status::kInvalidArgument, "mlp: hidden[", i,
                 "] (", c.hidden[i], ") must be in 1..2^30");
  COHORT_CHECK(c.activation == "relu" || c.activation == "gelu" || c.activation == "tanh",
               Status::kInvalidArgument, "mlp: activation '", c.activation, "' must be relu, gelu or tanh");
}

Graph build_mlp(const MlpConfig& c) {
  validate(c);
  Graph g;
  ValueId h = g.add_input("x", DType::kF32, {c.batch, c.in_features});
  ValueId y = g.add_input("y", DType::kI32, {c.batch});
  int64_t width = c.in_features;
  for (size_t i = 0; i < c.hidden.size(); ++i) {
    const std::string n = std::to_string(i + 1);
    h = add_linear(g, "fc" + n, h, width, c.hidden[i], true);
    h = add_unary(g, c.activation, c.activation + n, h);
    width = c.hidden[i];
  }
  ValueId fc = add_linear(g, "fc" + std::to_string(c.hidden.size() + 1), h, width, c.classes, true);
  // The logits under a stable name whatever the depth: a zero-cost alias through reshape.
  Attrs a;
  a.set("shape", std::vector<int64_t>{-1, c.classes});
  ValueId logits = g.add_op("reshape", "logits", {fc}, a).at(0);
  add_classification_loss(g, logits, y);
  return g;
}

}  // namespace cohort::models
