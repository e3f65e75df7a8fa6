// Collective operators: copy_to_axis, all_reduce, all_gather, reduce_scatter, gather_from_axis,
// split_to_axis, all_to_all, pipe_send, pipe_recv (see collective.h for their meaning and
// backward rules), CommAxes, pipe_topk_attrs, and the pipe operators' shared pieces
// (pipe_common.h; pipe_topk.cpp builds the top-k pipe operators from them). The kernels
// only start the collective on the axis communicator (transport/coll) and leave its Work in
// KernelContext::pending; a gather or scatter along a dim other than the outermost moves blocks
// through a scratch buffer, after the gather completes (on_complete) or before the scatter starts.
#include "core/ops/collective.h"

#include <cstring>

#include "core/base/error.h"
#include "core/device/device.h"
#include "core/graph/graph.h"
#include "core/graph/shard.h"
#include "core/ops/pipe_common.h"
#include "transport/coll/communicator.h"

namespace cohort {

namespace coll = transport::coll;

void CommAxes::set(const std::string& axis, std::shared_ptr<coll::Communicator> comm) {
  COHORT_ASSERT(comm != nullptr, "grid axis '", axis, "' without a communicator");
  axes_[axis] = std::move(comm);
}

coll::Communicator* CommAxes::find(const std::string& axis) const {
  auto it = axes_.find(axis);
  return it == axes_.end() ? nullptr : it->second.get();
}

coll::Communicator& CommAxes::at(const std::string& axis, const std::string& where) const {
  coll::Communicator* c = find(axis);
  COHORT_CHECK(c != nullptr, Status::kInvalidState, where, ": no communicator for grid axis '", axis,
               "' (collective operators run only in a trainer made with a parallel plan)");
  return *c;
}

int CommAxes::coordinate(const std::string& axis) const {
  const coll::Communicator* c = find(axis);
  return c ? c->rank() : 0;
}

int CommAxes::size(const std::string& axis) const {
  const coll::Communicator* c = find(axis);
  return c ? c->size() : 1;
}

Attrs all_to_all_attrs(const std::string& axis, int64_t parts, int64_t split_dim, int64_t split_groups,
                       int64_t concat_dim, int64_t concat_groups) {
  Attrs a;
  a.set("axis", axis);
  a.set("parts", parts);
  a.set("split_dim", split_dim);
  a.set("split_groups", split_groups);
  a.set("concat_dim", concat_dim);
  a.set("concat_groups", concat_groups);
  return a;
}

Attrs pipe_attrs(const std::string& axis, const std::string& reverse_axis, int64_t peer) {
  Attrs a;
  a.set("axis", axis);
  a.set("reverse_axis", reverse_axis);
  a.set("peer", peer);
  return a;
}

Attrs pipe_topk_attrs(const std::string& axis, const std::string& reverse_axis, int64_t peer, double keep) {
  Attrs a = pipe_attrs(axis, reverse_axis, peer);
  a.set("keep", keep);
  return a;
}

namespace {

std::vector<AttrSpec> axis_attrs(bool with_dim) {
  std::vector<AttrSpec> a = {{"axis", AttrType::kString, true, std::string()}};
  if (with_dim) {
    a.push_back({"dim", AttrType::kInt, false, int64_t{0}});
    a.push_back({"parts", AttrType::kInt, true, int64_t{1}});
  }
  return a;
}

void check_axis_attr(const ShapeContext& c) {
  if (c.attrs.get_string("axis").empty()) throw Error(Status::kInvalidArgument, "attribute 'axis' is empty");
}

// dim and parts of all_gather / reduce_scatter / split_to_axis, checked against input 0 (a float
// one unless any_dtype: split_to_axis also cuts ids).
std::pair<size_t, int64_t> dim_and_parts(const ShapeContext& c, bool any_dtype = false) {
  check_axis_attr(c);
  if (!any_dtype) expect_float(c, 0);
  const Shape& s = c.inputs[0].shape;
  const int64_t dim = c.attrs.get_int("dim"), parts = c.attrs.get_int("parts");
  if (dim < 0 || dim >= static_cast<int64_t>(s.size()))
    throw Error(Status::kInvalidArgument, str_cat("attribute 'dim' is ", dim, ", out of range for input 0 of shape ",
                                                  shape_str(s)));
  if (parts < 1) throw Error(Status::kInvalidArgument, str_cat("attribute 'parts' is ", parts, ", expected >= 1"));
  return {static_cast<size_t>(dim), parts};
}

}  // namespace

coll::DataType comm_type(const Tensor& t) {
  if (t.dtype() == DType::kF32) return coll::DataType::kF32;
  if (t.dtype() == DType::kBF16) return coll::DataType::kBF16;
  throw Error(Status::kUnsupported, str_cat("collectives take f32 or bf16, not ", dtype_name(t.dtype())));
}

namespace {

// The axis communicator of a kernel, checked to take this node's buffers (host memory).
coll::Communicator& axis_comm(const KernelContext& k, const char* op) {
  COHORT_CHECK(k.axes != nullptr, Status::kInvalidState, op,
               ": the run has no grid axes (collective operators run only in a trainer made with a parallel plan)");
  const std::string& axis = k.attrs.get_string("axis");
  coll::Communicator& c = k.axes->at(axis, op);
  const Device want = c.memory() == coll::BufferMemory::kHost ? Device::kCpu : Device::kCuda;
  for (const Tensor& t : k.inputs)
    COHORT_CHECK(t.device() == want, Status::kUnsupported, op, ": the communicator of axis '", axis, "' takes ",
                 device_name(want), " buffers, the tensor is on ", device_name(t.device()));
  return c;
}

void check_parts(const KernelContext& k, const coll::Communicator& c, const char* op) {
  const int64_t parts = k.attrs.get_int("parts");
  COHORT_CHECK(parts == c.size(), Status::kInvalidState, op, ": attribute 'parts' is ", parts,
               " but grid axis '", k.attrs.get_string("axis"), "' has ", c.size(), " ranks");
}

// Products of the dims before and after `dim`.
std::pair<int64_t, int64_t> outer_inner(const Shape& s, int64_t dim) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= s[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(dim) + 1; d < s.size(); ++d) inner *= s[d];
  return {outer, inner};
}

// Copies `parts` x `outer` runs of `run` bytes between a rank-major layout [parts, outer, run]
// and a dim-major one [outer, parts, run]; to_dim_major chooses the direction.
void permute_blocks(const char* src, char* dst, int64_t parts, int64_t outer, size_t run, bool to_dim_major) {
  for (int64_t p = 0; p < parts; ++p)
    for (int64_t o = 0; o < outer; ++o) {
      const size_t rank_major = static_cast<size_t>(p * outer + o) * run;
      const size_t dim_major = static_cast<size_t>(o * parts + p) * run;
      if (to_dim_major) std::memcpy(dst + dim_major, src + rank_major, run);
      else std::memcpy(dst + rank_major, src + dim_major, run);
    }
}

OpSchema copy_to_axis_op() {
  OpSchema s;
  s.name = "copy_to_axis";
  s.inputs = {"x"};
  s.internal = true;  // inserted by parallel plans, which supply the axes
  s.attrs = axis_attrs(false);
  s.alias_input0 = true;
  s.bf16_kernel = true;
  s.infer = [](const ShapeContext& c) {
    check_axis_attr(c);
    return std::vector<TensorType>{c.inputs[0]};
  };
  s.backward = [](BackwardContext& b) {
    Attrs a;
    a.set("axis", b.attrs().get_string("axis"));
    b.set_grad_input(0, b.add1("all_reduce", {b.grad_output(0)}, a));
  };
  return s;
}

// What the three collectives share: one input, inserted by parallel plans (internal), started by
// the kernel and left in flight (collective), bf16 taken as it is, an 'axis' (and 'dim', 'parts').
OpSchema collective_schema(const char* name, bool with_dim) {
  OpSchema s;
  s.name = name;
  s.inputs = {"x"};
  s.internal = true;
  s.collective = true;
  s.bf16_kernel = true;
  s.attrs = axis_attrs(with_dim);
  return s;
}

// reduce_scatter's and split_to_axis's shape: input 0 with dim cut into the axis's parts.
std::vector<TensorType> block_shape(const ShapeContext& c, bool any_dtype) {
  const auto [dim, parts] = dim_and_parts(c, any_dtype);
  TensorType t = c.inputs[0];
  if (t.shape[dim] % parts != 0)
    shape_error(str_cat("input 0 has shape ", shape_str(t.shape), ": dim ", dim, " (", t.shape[dim],
                        ") is not divisible by the ", parts, " ranks of axis '", c.attrs.get_string("axis"), "'"));
  t.shape[dim] /= parts;
  return {t};
}

OpSchema all_reduce_op() {
  OpSchema s = collective_schema("all_reduce", false);
  s.infer = [](const ShapeContext& c) {
    check_axis_attr(c);
    expect_float(c, 0);
    return std::vector<TensorType>{c.inputs[0]};
  };
  s.kernels[0] = [](KernelContext& k) {
    coll::Communicator& c = axis_comm(k, "all_reduce");
    const Tensor& x = k.inputs[0];
    k.pending = c.all_reduce(x.raw(), k.outputs[0].raw(), static_cast<size_t>(x.numel()), comm_type(x),
                             coll::ReduceOp::kSum);
  };
  s.backward = [](BackwardContext& b) { b.set_grad_input(0, b.grad_output(0)); };
  return s;
}

Attrs dim_attrs(const Attrs& from) {
  Attrs a;
  a.set("axis", from.get_string("axis"));
  a.set("dim", from.get_int("dim"));
  a.set("parts", from.get_int("parts"));
  return a;
}

OpSchema all_gather_op() {
  OpSchema s = collective_schema("all_gather", true);
  s.infer = [](const ShapeContext& c) {
    const auto [dim, parts] = dim_and_parts(c);
    TensorType t = c.inputs[0];
    t.shape[dim] *= parts;
    return std::vector<TensorType>{t};
  };
  s.kernels[0] = [](KernelContext& k) {
    coll::Communicator& c = axis_comm(k, "all_gather");
    check_parts(k, c, "all_gather");
    const Tensor& x = k.inputs[0];
    const int64_t dim = k.attrs.get_int("dim");
    const auto [outer, inner] = outer_inner(x.shape(), dim);
    const size_t count = static_cast<size_t>(x.numel());
    if (outer == 1) {  // the ranks' blocks are contiguous in the output: gathered in place
      k.pending = c.all_gather(x.raw(), k.outputs[0].raw(), count, comm_type(x));
      return;
    }
    Tensor scratch = Tensor::empty({c.size(), x.numel()}, x.dtype());
    k.pending = c.all_gather(x.raw(), scratch.raw(), count, comm_type(x));
    const size_t run = static_cast<size_t>(x.dim(dim) * inner) * dtype_size(x.dtype());
    Tensor out = k.outputs[0];
    const int64_t parts = c.size();
    k.on_complete = [scratch, out, parts, outer = outer, run] {
      permute_blocks(static_cast<const char*>(scratch.raw()), static_cast<char*>(out.raw()), parts, outer, run, true);
    };
  };
  s.backward = [](BackwardContext& b) {
    b.set_grad_input(0, b.add1("reduce_scatter", {b.grad_output(0)}, dim_attrs(b.attrs())));
  };
  return s;
}

OpSchema reduce_scatter_op() {
  OpSchema s = collective_schema("reduce_scatter", true);
  s.infer = [](const ShapeContext& c) { return block_shape(c, false); };
  s.kernels[0] = [](KernelContext& k) {
    coll::Communicator& c = axis_comm(k, "reduce_scatter");
    check_parts(k, c, "reduce_scatter");
    const Tensor& x = k.inputs[0];
    Tensor& out = k.outputs[0];
    const int64_t dim = k.attrs.get_int("dim");
    const auto [outer, inner] = outer_inner(x.shape(), dim);
    const size_t count = static_cast<size_t>(out.numel());
    if (outer == 1) {
      k.pending = c.reduce_scatter(x.raw(), out.raw(), count, comm_type(x), coll::ReduceOp::kSum);
      return;
    }
    // Rank-major first, so that block r of the flat buffer is what rank r keeps.
    Tensor scratch = Tensor::empty({x.numel()}, x.dtype());
    const size_t run = static_cast<size_t>(out.dim(dim) * inner) * dtype_size(x.dtype());
    permute_blocks(static_cast<const char*>(x.raw()), static_cast<char*>(scratch.raw()), c.size(), outer, run, false);
    k.pending = c.reduce_scatter(scratch.raw(), out.raw(), count, comm_type(x), coll::ReduceOp::kSum);
    k.on_complete = [scratch] {};  // keeps the scratch buffer alive while the collective reads it
  };
  s.backward = [](BackwardContext& b) {
    b.set_grad_input(0, b.add1("all_gather", {b.grad_output(0)}, dim_attrs(b.attrs())));
  };
  return s;
}

// all_to_all: block q of x along split_dim (of each of split_groups groups) goes to rank q; the
// blocks received are laid along concat_dim in rank order (in each of concat_groups groups).
// Backward: the same exchange the other way (split and concat swapped). The blocks move through
// packed buffers (take_shard / put_shard, core/graph/shard.h).
OpSchema all_to_all_op() {
  OpSchema s = collective_schema("all_to_all", false);
  s.attrs = {{"axis", AttrType::kString, true, std::string()},
             {"parts", AttrType::kInt, true, int64_t{1}},
             {"split_dim", AttrType::kInt, true, int64_t{0}},
             {"split_groups", AttrType::kInt, false, int64_t{1}},
             {"concat_dim", AttrType::kInt, true, int64_t{0}},
             {"concat_groups", AttrType::kInt, false, int64_t{1}}};
  s.infer = [](const ShapeContext& c) {
    check_axis_attr(c);
    expect_float(c, 0);
    TensorType t = c.inputs[0];
    const int64_t rank = static_cast<int64_t>(t.shape.size()), parts = c.attrs.get_int("parts");
    const int64_t sd = c.attrs.get_int("split_dim"), cd = c.attrs.get_int("concat_dim");
    const int64_t sg = c.attrs.get_int("split_groups"), cg = c.attrs.get_int("concat_groups");
    if (parts < 1 || sg < 1 || cg < 1)
      throw Error(Status::kInvalidArgument, str_cat("attributes 'parts', 'split_groups' and 'concat_groups' must be "
                                                    ">= 1, got ", parts, ", ", sg, ", ", cg));
    if (sd < 0 || sd >= rank || cd < 0 || cd >= rank)
      throw Error(Status::kInvalidArgument, str_cat("split_dim ", sd, " or concat_dim ", cd,
                                                    " is out of range for input 0 of shape ", shape_str(t.shape)));
    if (t.shape[static_cast<size_t>(sd)] % (sg * parts) != 0)
      shape_error(str_cat("input 0 has shape ", shape_str(t.shape), ": dim ", sd, " (", t.shape[static_cast<size_t>(sd)],
                          ") is not divisible by ", sg, " group(s) of the ", parts, " ranks of axis '",
                          c.attrs.get_string("axis"), "'"));
    t.shape[static_cast<size_t>(sd)] /= parts;
    if (t.shape[static_cast<size_t>(cd)] % cg != 0)
      shape_error(str_cat("input 0 has shape ", shape_str(c.inputs[0].shape), ": its blocks' dim ", cd, " (",
                          t.shape[static_cast<size_t>(cd)], ") is not divisible by ", cg, " group(s)"));
    t.shape[static_cast<size_t>(cd)] *= parts;
    return std::vector<TensorType>{t};
  };
  s.kernels[0] = [](KernelContext& k) {
    coll::Communicator& c = axis_comm(k, "all_to_all");
    check_parts(k, c, "all_to_all");
    const Tensor x = k.inputs[0].contiguous();
    const int64_t parts = c.size();
    const ShardCut split{static_cast<int>(k.attrs.get_int("split_dim")), k.attrs.get_int("split_groups"), parts, 0, ""};
    const ShardCut concat{static_cast<int>(k.attrs.get_int("concat_dim")), k.attrs.get_int("concat_groups"), parts, 0,
                          ""};
    Tensor send, recv;
    size_t block_bytes = 0;
    int64_t count = 0;
    Shape block_shape;
    for (int64_t q = 0; q < parts; ++q) {  // rank q's block, packed at [q]
      ShardCut at = split;
      at.index = q;
      const Tensor block = take_shard(x, {at});
      if (q == 0) {
        count = block.numel();
        block_bytes = block.nbytes();
        block_shape = block.shape();
        send = Tensor::empty({parts * count}, x.dtype());
        recv = Tensor::empty({parts * count}, x.dtype());
      }
      std::memcpy(static_cast<char*>(send.raw()) + static_cast<size_t>(q) * block_bytes, block.raw(), block_bytes);
    }
    k.pending = c.all_to_all(send.raw(), recv.raw(), static_cast<size_t>(count), comm_type(x));
    Tensor out = k.outputs[0];
    k.on_complete = [send, recv, out, concat, parts, block_bytes, block_shape]() mutable {
      Tensor part = Tensor::empty(block_shape, recv.dtype());
      for (int64_t q = 0; q < parts; ++q) {  // rank q's block into its place
        std::memcpy(part.raw(), static_cast<const char*>(recv.raw()) + static_cast<size_t>(q) * block_bytes, block_bytes);
        ShardCut at = concat;
        at.index = q;
        put_shard(out, part, {at});
      }
    };
  };
  s.backward = [](BackwardContext& b) {
    const Attrs& a = b.attrs();
    b.set_grad_input(0, b.add1("all_to_all", {b.grad_output(0)},
                               all_to_all_attrs(a.get_string("axis"), a.get_int("parts"), a.get_int("concat_dim"),
                                                a.get_int("concat_groups"), a.get_int("split_dim"),
                                                a.get_int("split_groups"))));
  };
  return s;
}

// gather_from_axis: forward all_gather's, backward this rank's block of dy (split_to_axis).
OpSchema gather_from_axis_op() {
  OpSchema s = all_gather_op();
  s.name = "gather_from_axis";
  s.backward = [](BackwardContext& b) {
    b.set_grad_input(0, b.add1("split_to_axis", {b.grad_output(0)}, dim_attrs(b.attrs())));
  };
  return s;
}

// split_to_axis: this rank's block along dim (no communication); backward gather_from_axis.
OpSchema split_to_axis_op() {
  OpSchema s;
  s.name = "split_to_axis";
  s.inputs = {"x"};
  s.internal = true;
  s.host_only = true;
  s.bf16_kernel = true;
  s.attrs = axis_attrs(true);
  s.infer = [](const ShapeContext& c) { return block_shape(c, true); };  // ids too
  s.kernels[0] = [](KernelContext& k) {
    COHORT_CHECK(k.axes != nullptr, Status::kInvalidState,
                 "split_to_axis: the run has no grid axes (collective operators run only in a trainer made with a "
                 "parallel plan)");
    const std::string& axis = k.attrs.get_string("axis");
    const coll::Communicator& c = k.axes->at(axis, "split_to_axis");
    check_parts(k, c, "split_to_axis");
    const Tensor& x = k.inputs[0];
    Tensor& out = k.outputs[0];
    COHORT_CHECK(x.device() == Device::kCpu, Status::kUnsupported, "split_to_axis: host tensors only, not ",
                 device_name(x.device()));
    const int64_t dim = k.attrs.get_int("dim");
    const auto [outer, inner] = outer_inner(x.shape(), dim);
    const size_t run = static_cast<size_t>(out.dim(dim) * inner) * dtype_size(x.dtype());
    const size_t whole = static_cast<size_t>(x.dim(dim) * inner) * dtype_size(x.dtype());
    const char* src = static_cast<const char*>(x.raw()) + static_cast<size_t>(c.rank()) * run;
    char* dst = static_cast<char*>(out.raw());
    for (int64_t o = 0; o < outer; ++o) std::memcpy(dst + static_cast<size_t>(o) * run, src + static_cast<size_t>(o) * whole, run);
  };
  s.backward = [](BackwardContext& b) {
    b.set_grad_input(0, b.add1("gather_from_axis", {b.grad_output(0)}, dim_attrs(b.attrs())));
  };
  return s;
}

}  // namespace

// pipe_send / pipe_recv: one stage's activation to another stage's rank of axis 'axis' (point to
// point, matched in issue order per pair of ranks: collective.h), and their gradients back over
// 'reverse_axis', a second communicator of the same ranks, so that activations and gradients
// between one pair never share an order. The send's output is a token, a scalar zero: a stage
// that ends in sends takes their tokens' sum as its loss, whose gradient (one) reaches each send,
// whose backward receives the real gradient from the peer.
// What pipe_send and pipe_recv share: inserted by the pipeline (internal), started by the kernel
// and left in flight (collective), on the host only, bf16 taken as it is, axis / reverse_axis / peer.
OpSchema pipe_schema(const char* name) {
  OpSchema s;
  s.name = name;
  s.internal = true;
  s.collective = true;
  s.host_only = true;
  s.bf16_kernel = true;
  s.attrs = {{"axis", AttrType::kString, true, std::string()},
             {"reverse_axis", AttrType::kString, true, std::string()},
             {"peer", AttrType::kInt, true, int64_t{0}}};
  return s;
}

void check_pipe_attrs(const Attrs& a) {
  if (a.get_string("axis").empty() || a.get_string("reverse_axis").empty())
    throw Error(Status::kInvalidArgument, "attributes 'axis' and 'reverse_axis' must name grid axes");
  if (a.get_int("peer") < 0)
    throw Error(Status::kInvalidArgument, str_cat("attribute 'peer' is ", a.get_int("peer"), ", expected >= 0"));
}

coll::Communicator& pipe_comm(const KernelContext& k, const char* op) {
  coll::Communicator& c = axis_comm(k, op);
  const int64_t peer = k.attrs.get_int("peer");
  COHORT_CHECK(peer < c.size() && peer != c.rank(), Status::kInvalidState, op, ": peer ", peer, " on grid axis '",
               k.attrs.get_string("axis"), "' of ", c.size(), " ranks (this one is ", c.rank(), ")");
  return c;
}

namespace {

OpSchema pipe_send_op() {
  OpSchema s = pipe_schema("pipe_send");
  s.inputs = {"x"};
  s.outputs = {"token"};
  s.send = true;
  s.infer = [](const ShapeContext& c) {
    check_pipe_attrs(c.attrs);
    expect_float(c, 0);
    return std::vector<TensorType>{TensorType{DType::kF32, {}}};
  };
  s.kernels[0] = [](KernelContext& k) {
    coll::Communicator& c = pipe_comm(k, "pipe_send");
    const Tensor& x = k.inputs[0];
    k.outputs[0].fill(0.0f);
    k.pending = c.send(x.raw(), static_cast<size_t>(x.numel()), comm_type(x), static_cast<int>(k.attrs.get_int("peer")));
  };
  s.backward = [](BackwardContext& b) {
    const Attrs& f = b.attrs();
    Attrs a = pipe_attrs(f.get_string("reverse_axis"), f.get_string("axis"), f.get_int("peer"));
    a.set("shape", b.input_type(0).shape);
    a.set("dtype", static_cast<int64_t>(b.input_type(0).dtype));
    b.set_grad_input(0, b.add1("pipe_recv", {}, a));
  };
  return s;
}

OpSchema pipe_recv_op() {
  OpSchema s = pipe_schema("pipe_recv");
  s.inputs = {};
  s.source_of_gradient = true;
  s.attrs.push_back({"shape", AttrType::kInts, true, std::vector<int64_t>{}});
  s.attrs.push_back({"dtype", AttrType::kInt, false, static_cast<int64_t>(DType::kF32)});
  s.infer = [](const ShapeContext& c) {
    check_pipe_attrs(c.attrs);
    const auto dtype = static_cast<DType>(c.attrs.get_int("dtype"));
    if (dtype != DType::kF32 && dtype != DType::kBF16)
      throw Error(Status::kInvalidArgument, str_cat("attribute 'dtype' is ", dtype_name(dtype), ", expected f32 or bf16"));
    const std::vector<int64_t>& shape = c.attrs.get_ints("shape");
    for (int64_t d : shape)
      if (d < 0) throw Error(Status::kInvalidArgument, str_cat("attribute 'shape' is ", shape_str(shape)));
    return std::vector<TensorType>{TensorType{dtype, shape}};
  };
  // Dim 0 is the batch (Graph::with_batch).
  s.rebatch = [](Attrs& a, int64_t batch) {
    std::vector<int64_t> shape = a.get_ints("shape");
    if (!shape.empty()) shape[0] = batch;
    a.set("shape", shape);
  };
  s.kernels[0] = [](KernelContext& k) {
    coll::Communicator& c = pipe_comm(k, "pipe_recv");
    Tensor& y = k.outputs[0];
    k.pending = c.recv(y.raw(), static_cast<size_t>(y.numel()), comm_type(y), static_cast<int>(k.attrs.get_int("peer")));
  };
  s.backward = [](BackwardContext& b) {
    if (b.grad_output(0) < 0) return;
    const Attrs& f = b.attrs();
    b.add1("pipe_send", {b.grad_output(0)}, pipe_attrs(f.get_string("reverse_axis"), f.get_string("axis"), f.get_int("peer")));
  };
  return s;
}

}  // namespace

void register_collective_ops(OpRegistry& r) {
  r.add(copy_to_axis_op());
  r.add(all_reduce_op());
  r.add(all_gather_op());
  r.add(reduce_scatter_op());
  r.add(gather_from_axis_op());
  r.add(split_to_axis_op());
  r.add(all_to_all_op());
  r.add(pipe_send_op());
  r.add(pipe_recv_op());
}

}  // namespace cohort
