// Shape operators: reshape (a view, no kernel), transpose, concat and split, plus the internal
// split_grad. They move elements without arithmetic, so their kernels copy any dtype as raw
// elements (bf16 included: bf16_kernel) — no widening to fp32 and back.
// Limit: concat takes 2 to kMaxParts inputs and split makes at most kMaxParts outputs, because
// a schema has a fixed input list (split_grad receives one input per part).
#include "kernels/cpu/shape_ops.h"

#include <algorithm>

#include "core/base/error.h"
#include "core/graph/graph.h"
#include "core/ops/op_checks.h"
#include "core/ops/schema.h"

namespace cohort {

namespace kc = kernels::cpu;

namespace {

constexpr int kMaxParts = 16;

std::vector<std::string> part_names(const char* prefix) {
  std::vector<std::string> names;
  for (int i = 0; i < kMaxParts; ++i) names.push_back(str_cat(prefix, i));
  return names;
}

// ---- reshape ----

Shape resolve_reshape(const Shape& in, const std::vector<int64_t>& want) {
  Shape out = want;
  int infer_at = -1;
  int64_t known = 1;
  for (size_t k = 0; k < want.size(); ++k) {
    if (want[k] == -1) {
      if (infer_at >= 0)
        throw Error(Status::kInvalidArgument,
                    str_cat("attribute shape ", want, " has more than one -1"));
      infer_at = static_cast<int>(k);
    } else if (want[k] < 0) {
      throw Error(Status::kInvalidArgument,
                  str_cat("attribute shape ", want, " has a negative extent"));
    } else {
      known *= want[k];
    }
  }
  const int64_t n = shape_numel(in);
  if (infer_at >= 0) {
    if (known == 0 || n % known != 0)
      shape_error(str_cat("input 0 has shape ", shape_str(in), " (", n,
                          " elements), which cannot be reshaped to ", want));
    out[static_cast<size_t>(infer_at)] = n / known;
  } else if (known != n) {
    shape_error(str_cat("input 0 has shape ", shape_str(in), " (", n,
                        " elements), which cannot be reshaped to ", want, " (", known,
                        " elements)"));
  }
  return out;
}

OpSchema reshape_op() {
  OpSchema s;
  s.name = "reshape";
  s.inputs = {"x"};
  s.attrs = {{"shape", AttrType::kInts, true, std::vector<int64_t>{}}};
  s.alias_input0 = true;
  s.infer = [](const ShapeContext& c) {
    return std::vector<TensorType>{
        {c.inputs[0].dtype, resolve_reshape(c.inputs[0].shape, c.attrs.get_ints("shape"))}};
  };
  s.backward = [](BackwardContext& b) {
    Attrs a;
    a.set("shape", b.input_type(0).shape);
    b.set_grad_input(0, b.add1("reshape", {b.grad_output(0)}, a));
  };
  return s;
}

// ---- transpose ----

void check_perm(const std::vector<int64_t>& perm, size_t rank) {
  std::vector<bool> seen(rank, false);
  bool ok = perm.size() == rank;
  for (int64_t p : perm) {
    if (!ok) break;
    ok = p >= 0 && static_cast<size_t>(p) < rank && !seen[static_cast<size_t>(p)];
    if (ok) seen[static_cast<size_t>(p)] = true;
  }
  if (!ok)
    throw Error(Status::kInvalidArgument,
                str_cat("attribute perm ", perm, " is not a permutation of the ", rank,
                        " dimensions 0..", static_cast<int64_t>(rank) - 1));
}

OpSchema transpose_op() {
  OpSchema s;
  s.name = "transpose";
  s.inputs = {"x"};
  s.attrs = {{"perm", AttrType::kInts, true, std::vector<int64_t>{}}};
  s.bf16_kernel = true;
  s.infer = [](const ShapeContext& c) {
    const Shape& in = c.inputs[0].shape;
    const auto& perm = c.attrs.get_ints("perm");
    check_perm(perm, in.size());
    Shape out;
    for (int64_t p : perm) out.push_back(in[static_cast<size_t>(p)]);
    return std::vector<TensorType>{{c.inputs[0].dtype, out}};
  };
  s.kernels[0] = [](KernelContext& k) {
    kc::transpose(k.inputs[0].raw(), k.inputs[0].shape(), k.attrs.get_ints("perm"),
                  dtype_size(k.inputs[0].dtype()), k.outputs[0].raw());
  };
  s.backward = [](BackwardContext& b) {
    const auto& perm = b.attrs().get_ints("perm");
    std::vector<int64_t> inverse(perm.size());
    for (size_t k = 0; k < perm.size(); ++k)
      inverse[static_cast<size_t>(perm[k])] = static_cast<int64_t>(k);
    Attrs a;
    a.set("perm", inverse);
    b.set_grad_input(0, b.add1("transpose", {b.grad_output(0)}, a));
  };
  return s;
}

// ---- concat and split ----

// Output type of joining `parts` along attrs.axis; every part must match part 0 except there.
TensorType joined_type(const std::vector<TensorType>& parts, int64_t axis_attr, const char* what) {
  const TensorType& first = parts[0];
  const int64_t rank = static_cast<int64_t>(first.shape.size());
  if (rank == 0) shape_error(str_cat(what, " 0 has shape [], expected rank >= 1"));
  const int64_t axis = normalize_axis(axis_attr, rank, "attribute axis");
  TensorType out = first;
  out.shape[static_cast<size_t>(axis)] = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const TensorType& t = parts[i];
    if (t.dtype != first.dtype)
      shape_error(str_cat(what, " ", i, " has dtype ", dtype_name(t.dtype), ", expected ",
                          dtype_name(first.dtype), " like ", what, " 0"));
    Shape expect = first.shape;
    bool ok = t.shape.size() == first.shape.size();
    if (ok) expect[static_cast<size_t>(axis)] = t.shape[static_cast<size_t>(axis)];
    if (!ok || t.shape != expect) {
      std::string want = "[";
      for (int64_t d = 0; d < rank; ++d)
        want += str_cat(d ? ", " : "", d == axis ? std::string("*")
                                                 : str_cat(first.shape[static_cast<size_t>(d)]));
      shape_error(
          str_cat(what, " ", i, " has shape ", shape_str(t.shape), ", expected ", want, "]"));
    }
    out.shape[static_cast<size_t>(axis)] += t.shape[static_cast<size_t>(axis)];
  }
  return out;
}

}  // namespace

// Declared in core/ops/op_checks.h (shared with the CUDA kernels).
ConcatParts concat_parts(const KernelContext& k) {
  const int64_t axis = normalize_axis(k.attrs.get_int("axis"), k.inputs[0].rank(), "axis");
  ConcatParts p;
  for (const Tensor& t : k.inputs) {
    p.parts.push_back(t.raw());
    p.extents.push_back(t.dim(axis));
  }
  return p;
}

ConcatParts split_grad_parts(const KernelContext& k) {
  const auto& present = k.attrs.get_ints("present");
  ConcatParts p;
  for (size_t i = 0, j = 0; i < present.size(); ++i)
    p.parts.push_back(present[i] ? k.inputs[j++].raw() : nullptr);
  p.extents = k.attrs.get_ints("sizes");
  return p;
}

namespace {

// Runs the concat kernel; parts[i] null means zeros of extent extents[i].
void run_concat(KernelContext& k, const std::vector<const void*>& parts,
                const std::vector<int64_t>& extents) {
  const Shape& out = k.outputs[0].shape();
  const int64_t axis =
      normalize_axis(k.attrs.get_int("axis"), static_cast<int64_t>(out.size()), "axis");
  kc::concat(parts, extents, outer_numel(out, axis), inner_numel(out, axis),
             dtype_size(k.outputs[0].dtype()), k.outputs[0].raw());
}

OpSchema concat_op() {
  OpSchema s;
  s.name = "concat";
  s.inputs = part_names("x");
  s.optional_inputs = kMaxParts - 2;
  s.attrs = {{"axis", AttrType::kInt, false, int64_t{0}}};
  s.bf16_kernel = true;
  s.infer = [](const ShapeContext& c) {
    return std::vector<TensorType>{joined_type(c.inputs, c.attrs.get_int("axis"), "input")};
  };
  s.kernels[0] = [](KernelContext& k) {
    ConcatParts p = concat_parts(k);
    run_concat(k, p.parts, p.extents);
  };
  s.backward = [](BackwardContext& b) {
    const int64_t axis = normalize_axis(b.attrs().get_int("axis"),
                                        static_cast<int64_t>(b.input_type(0).shape.size()), "axis");
    std::vector<int64_t> sizes;
    for (size_t i = 0; i < b.node().inputs.size(); ++i)
      sizes.push_back(b.input_type(i).shape[static_cast<size_t>(axis)]);
    Attrs a;
    a.set("axis", axis);
    a.set("sizes", sizes);
    std::vector<ValueId> parts = b.add("split", {b.grad_output(0)}, a);
    for (size_t i = 0; i < parts.size(); ++i)
      if (b.needs_grad_input(i)) b.set_grad_input(i, parts[i]);
  };
  return s;
}

// One output per entry of attrs.sizes, which must be positive and sum to the split dimension.
std::vector<TensorType> split_shape(const ShapeContext& c) {
  const Shape& in = c.inputs[0].shape;
  if (in.empty()) shape_error("input 0 has shape [], expected rank >= 1");
  const int64_t axis =
      normalize_axis(c.attrs.get_int("axis"), static_cast<int64_t>(in.size()), "attribute axis");
  const auto& sizes = c.attrs.get_ints("sizes");
  if (sizes.empty() || static_cast<int>(sizes.size()) > kMaxParts)
    throw Error(Status::kInvalidArgument, str_cat("attribute sizes has ", sizes.size(),
                                                  " entries, expected 1 to ", kMaxParts));
  int64_t total = 0;
  std::vector<TensorType> out;
  for (int64_t n : sizes) {
    if (n <= 0)
      throw Error(Status::kInvalidArgument,
                  str_cat("attribute sizes ", sizes, " has an entry <= 0"));
    total += n;
    out.push_back(c.inputs[0]);
    out.back().shape[static_cast<size_t>(axis)] = n;
  }
  if (total != in[static_cast<size_t>(axis)])
    shape_error(str_cat("input 0 has shape ", shape_str(in), ", but attribute sizes ", sizes,
                        " sum to ", total, ", expected ", in[static_cast<size_t>(axis)],
                        " (dimension ", axis, ")"));
  return out;
}

OpSchema split_op() {
  OpSchema s;
  s.name = "split";
  s.inputs = {"x"};
  s.outputs = {"part"};
  s.outputs_from = "sizes";
  s.attrs = {{"axis", AttrType::kInt, false, int64_t{0}},
             {"sizes", AttrType::kInts, true, std::vector<int64_t>{}}};
  s.bf16_kernel = true;
  s.infer = split_shape;
  s.kernels[0] = [](KernelContext& k) {
    const Shape& in = k.inputs[0].shape();
    const int64_t axis =
        normalize_axis(k.attrs.get_int("axis"), static_cast<int64_t>(in.size()), "axis");
    std::vector<void*> parts;
    for (Tensor& t : k.outputs) parts.push_back(t.raw());
    kc::split(k.inputs[0].raw(), k.attrs.get_ints("sizes"), outer_numel(in, axis), inner_numel(in, axis),
              dtype_size(k.inputs[0].dtype()), parts);
  };
  s.backward = [](BackwardContext& b) {
    std::vector<ValueId> present;
    std::vector<int64_t> mask;
    for (size_t i = 0; i < b.node().outputs.size(); ++i) {
      mask.push_back(b.grad_output(i) >= 0 ? 1 : 0);
      if (b.grad_output(i) >= 0) present.push_back(b.grad_output(i));
    }
    Attrs a;
    a.set("axis", b.attrs().get_int("axis"));
    if (present.size() == mask.size() && present.size() >= 2) {
      b.set_grad_input(0, b.add1("concat", present, a));
      return;
    }
    a.set("sizes", b.attrs().get_ints("sizes"));
    a.set("present", mask);
    b.set_grad_input(0, b.add1("split_grad", present, a));
  };
  return s;
}

// Gradient of split: the output gradients that exist, concatenated, with zeros in the gaps
// (present[i] == 0 means output i had no gradient and received no input here).
OpSchema split_grad_op() {
  OpSchema s;
  s.name = "split_grad";
  s.inputs = part_names("g");
  s.optional_inputs = kMaxParts - 1;
  s.internal = true;
  s.bf16_kernel = true;
  s.attrs = {{"axis", AttrType::kInt, false, int64_t{0}},
             {"sizes", AttrType::kInts, true, std::vector<int64_t>{}},
             {"present", AttrType::kInts, true, std::vector<int64_t>{}}};
  s.infer = [](const ShapeContext& c) {
    const auto& sizes = c.attrs.get_ints("sizes");
    const auto& present = c.attrs.get_ints("present");
    size_t count = 0;
    for (int64_t p : present) count += p ? 1 : 0;
    if (present.size() != sizes.size() || count != c.inputs.size())
      throw Error(Status::kInvalidArgument,
                  str_cat("attributes sizes ", sizes, " and present ", present, " do not match ",
                          c.inputs.size(), " inputs"));
    TensorType out = joined_type(c.inputs, c.attrs.get_int("axis"), "input");
    const int64_t axis =
        normalize_axis(c.attrs.get_int("axis"), static_cast<int64_t>(out.shape.size()), "axis");
    int64_t total = 0;
    for (size_t i = 0, j = 0; i < sizes.size(); ++i) {
      total += sizes[i];
      if (!present[i]) continue;
      if (c.inputs[j].shape[static_cast<size_t>(axis)] != sizes[i])
        shape_error(str_cat("input ", j, " has shape ", shape_str(c.inputs[j].shape),
                            ", expected extent ", sizes[i], " in dimension ", axis));
      ++j;
    }
    out.shape[static_cast<size_t>(axis)] = total;
    return std::vector<TensorType>{out};
  };
  s.kernels[0] = [](KernelContext& k) {
    ConcatParts p = split_grad_parts(k);
    run_concat(k, p.parts, p.extents);
  };
  return s;
}

}  // namespace

void register_shape_ops(OpRegistry& r) {
  r.add(reshape_op());
  r.add(transpose_op());
  r.add(concat_op());
  r.add(split_op());
  r.add(split_grad_op());
}

}  // namespace cohort
