// The ResNet-style CNN builder; see cnn.h.
#include "core/models/cnn.h"

#include "core/base/error.h"
#include "core/models/layers.h"

namespace cohort::models {

namespace {
constexpr int64_t kMaxExtent = int64_t{1} << 20;

void check_extent(const char* field, int64_t v) {
  COHORT_CHECK(v >= 1 && v <= kMaxExtent, Status::kInvalidArgument, "cnn: ", field, " (", v,
               ") must be in 1..2^20");
}

struct Block {
  std::string prefix;
  int64_t in = 0, out = 0, stride = 1;
};

// conv - gn - relu - conv - gn, plus the shortcut, then relu.
ValueId add_block(Graph& g, const CnnConfig& c, const Block& b, ValueId x) {
  const std::string& p = b.prefix;
  ValueId h = add_conv(g, p + ".conv1", x, b.in, b.out, 3, b.stride, 1);
  h = add_groupnorm(g, p + ".norm1", h, b.out, c.groups, c.eps);
  h = add_unary(g, "relu", p + ".relu1", h);
  h = add_conv(g, p + ".conv2", h, b.out, b.out, 3, 1, 1);
  h = add_groupnorm(g, p + ".norm2", h, b.out, c.groups, c.eps);
  ValueId shortcut = x;
  if (b.stride != 1 || b.in != b.out) {
    shortcut = add_conv(g, p + ".shortcut.conv", x, b.in, b.out, 1, b.stride, 0);
    shortcut = add_groupnorm(g, p + ".shortcut.norm", shortcut, b.out, c.groups, c.eps);
  }
  h = add_binary(g, "add", p + ".residual", h, shortcut);
  return add_unary(g, "relu", p + ".relu2", h);
}
}  // namespace

void validate(const CnnConfig& c) {
  check_extent("batch", c.batch);
  check_extent("channels", c.channels);
  check_extent("height", c.height);
  check_extent("width", c.width);
  check_extent("classes", c.classes);
  check_extent("groups", c.groups);
  COHORT_CHECK(!c.widths.empty() && c.widths.size() <= 8, Status::kInvalidArgument, "cnn: widths has ",
               c.widths.size(), " stages, expected 1..8");
  COHORT_CHECK(c.blocks_per_stage >= 1 && c.blocks_per_stage <= 64, Status::kInvalidArgument,
               "cnn: blocks_per_stage (", c.blocks_per_stage, ") must be in 1..64");
  COHORT_CHECK(c.eps > 0.0, Status::kInvalidArgument, "cnn: eps (", c.eps, ") must be > 0");
  for (size_t i = 0; i < c.widths.size(); ++i) {
    COHORT_CHECK(c.widths[i] >= 1 && c.widths[i] <= 65536, Status::kInvalidArgument, "cnn: widths[", i, "] (",
                 c.widths[i], ") must be in 1..65536");
    COHORT_CHECK(c.widths[i] % c.groups == 0, Status::kInvalidArgument, "cnn: groups (", c.groups,
                 ") must divide widths[", i, "] (", c.widths[i], ")");
  }
}

Graph build_cnn(const CnnConfig& c) {
  validate(c);
  Graph g;
  ValueId x = g.add_input("x", DType::kF32, {c.batch, c.channels, c.height, c.width});
  ValueId y = g.add_input("y", DType::kI32, {c.batch});
  // x: (B, C, H, W) -> (B, widths[0], H, W)
  ValueId h = add_conv(g, "stem.conv", x, c.channels, c.widths[0], 3, 1, 1);
  h = add_groupnorm(g, "stem.norm", h, c.widths[0], c.groups, c.eps);
  h = add_unary(g, "relu", "stem.relu", h);
  int64_t in = c.widths[0];
  for (size_t s = 0; s < c.widths.size(); ++s) {
    for (int64_t k = 0; k < c.blocks_per_stage; ++k) {
      Block b{"layer" + std::to_string(s + 1) + "." + std::to_string(k), in, c.widths[s],
              (s > 0 && k == 0) ? 2 : 1};
      h = add_block(g, c, b, h);
      in = c.widths[s];
    }
  }
  // Global average pool: (B, W, h, w) -> (B, W, 1, 1) -> (B, W).
  const Shape& hs = g.value(h).type.shape;
  Attrs pool;
  pool.set("kernel", std::vector<int64_t>{hs[2], hs[3]});
  h = g.add_op("avg_pool2d", "pool", {h}, pool).at(0);
  Attrs flat;
  flat.set("shape", std::vector<int64_t>{-1, in});
  h = g.add_op("reshape", "flatten", {h}, flat).at(0);
  ValueId logits = add_linear(g, "head", h, in, c.classes, true);
  Attrs a;
  a.set("shape", std::vector<int64_t>{-1, c.classes});
  logits = g.add_op("reshape", "logits", {logits}, a).at(0);
  add_classification_loss(g, logits, y);
  return g;
}

}  // namespace cohort::models
