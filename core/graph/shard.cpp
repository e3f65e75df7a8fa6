// Sharded parameter layouts: see shard.h. A cut along dim d views a tensor as [outer, E, inner]
// (outer: the dims before d, inner: those after) and copies, per outer index and group, one
// contiguous run of block x inner elements.
#include "core/graph/shard.h"

#include <cstring>

#include "core/base/error.h"

namespace cohort {

namespace {

struct CutGeometry {
  int64_t outer = 1, inner = 1;  // products of the dims before / after the cut's dim
  int64_t block = 0;             // extent of one block along the dim
  int64_t whole_extent = 0;      // extent along the dim before the cut
};

CutGeometry geometry(const Shape& whole, const ShardCut& c) {
  COHORT_CHECK(c.dim >= 0 && static_cast<size_t>(c.dim) < whole.size(), Status::kShapeMismatch, "shard cut dim ",
               c.dim, " is out of range for shape ", shape_str(whole));
  CutGeometry g;
  for (int d = 0; d < c.dim; ++d) g.outer *= whole[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(c.dim) + 1; d < whole.size(); ++d) g.inner *= whole[d];
  g.whole_extent = whole[static_cast<size_t>(c.dim)];
  COHORT_CHECK(g.whole_extent % (c.groups * c.parts) == 0, Status::kShapeMismatch, "extent ", g.whole_extent,
               " of dim ", c.dim, " of shape ", shape_str(whole), " does not divide into ", c.groups, " groups of ",
               c.parts, " parts (axis '", c.axis, "')");
  g.block = g.whole_extent / (c.groups * c.parts);
  return g;
}

Shape cut_shape(const Shape& whole, const ShardCut& c) {
  Shape s = whole;
  s[static_cast<size_t>(c.dim)] = geometry(whole, c).block * c.groups;
  return s;
}

// Copies between one cut's whole layout and its block: to_block = true reads whole.
void copy_cut(const Tensor& whole, const Tensor& block, const ShardCut& c, bool to_block) {
  COHORT_CHECK(whole.device() == Device::kCpu && block.device() == Device::kCpu && whole.is_contiguous() &&
                   block.is_contiguous() && whole.dtype() == block.dtype(),
               Status::kInvalidArgument, "shard: host tensors of one dtype, contiguous, are needed");
  const CutGeometry g = geometry(whole.shape(), c);
  COHORT_CHECK(block.shape() == cut_shape(whole.shape(), c), Status::kShapeMismatch, "shard: block shape ",
               shape_str(block.shape()), " does not fit ", shape_str(whole.shape()), " cut over axis '", c.axis, "'");
  const size_t elem = dtype_size(whole.dtype());
  const size_t run = static_cast<size_t>(g.block * g.inner) * elem;
  char* w = static_cast<char*>(whole.raw());
  char* b = static_cast<char*>(block.raw());
  for (int64_t o = 0; o < g.outer; ++o)
    for (int64_t grp = 0; grp < c.groups; ++grp) {
      const int64_t wpos = (o * g.whole_extent + grp * c.parts * g.block + c.index * g.block) * g.inner;
      const int64_t bpos = (o * c.groups * g.block + grp * g.block) * g.inner;
      char* wp = w + static_cast<size_t>(wpos) * elem;
      char* bp = b + static_cast<size_t>(bpos) * elem;
      if (to_block) std::memcpy(bp, wp, run);
      else std::memcpy(wp, bp, run);
    }
}

}  // namespace

Shape shard_whole_shape(const Shape& block, const std::vector<ShardCut>& cuts) {
  Shape s = block;
  for (const ShardCut& c : cuts) s[static_cast<size_t>(c.dim)] *= c.parts;
  return s;
}

Tensor take_shard(const Tensor& whole, const std::vector<ShardCut>& cuts) {
  Tensor t = whole.contiguous();
  for (const ShardCut& c : cuts) {
    Tensor next = Tensor::empty(cut_shape(t.shape(), c), t.dtype());
    copy_cut(t, next, c, true);
    t = next;
  }
  return t;
}

void put_shard(Tensor& whole, const Tensor& block, const std::vector<ShardCut>& cuts) {
  if (cuts.empty()) {
    whole.copy_from(block);
    return;
  }
  // The intermediate layouts after each cut but the last, then written back from the inside out.
  std::vector<Tensor> levels = {whole};
  for (size_t k = 0; k + 1 < cuts.size(); ++k) levels.push_back(take_shard(levels.back(), {cuts[k]}));
  Tensor inner = block.contiguous();
  for (size_t k = cuts.size(); k-- > 0;) {
    copy_cut(levels[k], inner, cuts[k], false);
    inner = levels[k];
  }
}

}  // namespace cohort
