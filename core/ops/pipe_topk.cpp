// Top-k compressed pipeline edges: pipe_send_topk, pipe_recv_topk and their gradients' pair
// pipe_send_at, pipe_recv_at (collective.h says what each does; pipe_topk.h how the messages are
// laid out), built from pipe_schema like pipe_send / pipe_recv. The one thing to know: idx, the
// chosen positions, is an output on both sides and the backward rules read it, so both stages
// hold the same k indices from forward to backward and the gradient travels as k bare values.
#include "core/ops/pipe_topk.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "core/base/error.h"
#include "core/ops/collective.h"
#include "core/ops/pipe_common.h"
#include "kernels/cpu/pipe_topk.h"
#include "transport/coll/communicator.h"

namespace cohort {

namespace coll = transport::coll;
namespace cpu = kernels::cpu;

namespace {
constexpr int64_t kMaxElements = std::numeric_limits<int32_t>::max();  // the indices are int32

void check_message_dtype(DType dtype) {
  COHORT_CHECK(dtype == DType::kF32 || dtype == DType::kBF16, Status::kInvalidArgument, "top-k: dtype ",
               dtype_name(dtype), ", expected f32 or bf16");
}

// Refuses indices that are not strictly ascending within the dense tensor before any is used.
void check_indices(const int32_t* idx, int64_t k, int64_t numel, Status status, const std::string& what) {
  const int64_t bad = cpu::first_bad_index(idx, k, numel);
  COHORT_CHECK(bad < 0, status, what, ": index ", bad, " is ", bad < 0 ? 0 : idx[bad],
               ", expected strictly ascending indices below ", numel);
}
}  // namespace

int64_t topk_count(int64_t numel, double keep) {
  COHORT_CHECK(keep > 0 && keep <= 1, Status::kInvalidArgument, "top-k: keep is ", keep,
               ", expected a fraction in (0, 1]");
  COHORT_CHECK(numel >= 1 && numel <= kMaxElements, Status::kInvalidArgument, "top-k: ", numel,
               " elements, expected 1 to ", kMaxElements, " (the indices are int32)");
  const double product = keep * static_cast<double>(numel);
  const double nearest = std::round(product);
  const double k = std::fabs(product - nearest) <= 1e-12 * product ? nearest : std::ceil(product);
  return std::min(numel, std::max<int64_t>(1, static_cast<int64_t>(k)));
}

bool topk_bitmap(int64_t numel, int64_t k) { return (numel + 31) / 32 < k; }

size_t topk_index_bytes(int64_t numel, int64_t k) {
  return static_cast<size_t>(topk_bitmap(numel, k) ? (numel + 31) / 32 : k) * sizeof(int32_t);
}

double topk_index_bytes_per_entry(double keep) { return std::min(4.0 * keep, 1.0 / 8.0); }

size_t topk_message_bytes(int64_t numel, double keep, DType dtype) {
  check_message_dtype(dtype);
  const int64_t k = topk_count(numel, keep);
  return topk_index_bytes(numel, k) + static_cast<size_t>(k) * dtype_size(dtype);
}

size_t topk_gradient_bytes(int64_t numel, double keep, DType dtype) {
  check_message_dtype(dtype);
  return static_cast<size_t>(topk_count(numel, keep)) * dtype_size(dtype);
}

void topk_write_message(const void* x, size_t elem_bytes, int64_t numel, int64_t k, int32_t* idx, void* message) {
  char* packed = static_cast<char*>(message);
  const size_t index_bytes = topk_index_bytes(numel, k);
  cpu::topk_select(x, elem_bytes, numel, k, idx, packed + index_bytes);
  if (topk_bitmap(numel, k)) cpu::indices_to_bitmap(idx, k, numel, reinterpret_cast<uint32_t*>(packed));
  else std::memcpy(packed, idx, index_bytes);
}

void topk_read_indices(const void* message, int64_t numel, int64_t k, int32_t* idx, const std::string& what) {
  if (topk_bitmap(numel, k)) {
    const int64_t marked = cpu::bitmap_to_indices(static_cast<const uint32_t*>(message), numel, idx, k);
    COHORT_CHECK(marked == k, Status::kCorrupt, what, ": its bitmap marks ", marked < 0 ? "an entry" : "",
                 marked < 0 ? str_cat(" at or past ", numel) : str_cat(marked, " entries"), ", expected ", k, " of ",
                 numel);
    return;
  }
  std::memcpy(idx, message, topk_index_bytes(numel, k));
  check_indices(idx, k, numel, Status::kCorrupt, what);
}

namespace {

// ---- shape rules ----

double keep_attr(const Attrs& a) {
  const double keep = a.get_float("keep");
  if (!(keep > 0 && keep <= 1))
    throw Error(Status::kInvalidArgument, str_cat("attribute 'keep' is ", keep, ", expected a fraction in (0, 1]"));
  return keep;
}

// The elements of a top-k edge's activation (`what`: "input 0" — a shape mismatch —, or
// "attribute 'shape'" — an invalid argument): 1 to kMaxElements, no negative dim.
int64_t edge_numel(const Shape& shape, const std::string& what) {
  const Status status = what.rfind("input", 0) == 0 ? Status::kShapeMismatch : Status::kInvalidArgument;
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw Error(status, str_cat(what, " is ", shape_str(shape), ": a negative dim"));
    n = d != 0 && n > kMaxElements / d ? kMaxElements + 1 : n * d;  // saturated: only the bound matters
  }
  if (n < 1 || n > kMaxElements)
    throw Error(status, str_cat(what, " is ", shape_str(shape), ": a top-k edge carries 1 to ", kMaxElements,
                                " elements (int32 indices)"));
  return n;
}

void expect_message_dtype(DType dtype, const std::string& what) {
  if (dtype != DType::kF32 && dtype != DType::kBF16)
    shape_error(str_cat(what, " has dtype ", dtype_name(dtype), ", expected f32 or bf16"));
}

// 'shape' and 'dtype' of the receiving operators, checked.
TensorType received_type(const Attrs& a) {
  const auto dtype = static_cast<DType>(a.get_int("dtype"));
  if (dtype != DType::kF32 && dtype != DType::kBF16)
    throw Error(Status::kInvalidArgument,
                str_cat("attribute 'dtype' is ", dtype_name(dtype), ", expected f32 or bf16"));
  const std::vector<int64_t>& shape = a.get_ints("shape");
  edge_numel(shape, "attribute 'shape'");
  return TensorType{dtype, shape};
}

// The length k of the index input `input` (i32 [k], 1 <= k <= numel).
int64_t index_count(const ShapeContext& c, size_t input, int64_t numel) {
  const TensorType& t = c.inputs[input];
  if (t.dtype != DType::kI32 || t.shape.size() != 1)
    shape_error(
        str_cat("input ", input, " (idx) is ", shape_str(t.shape), " ", dtype_name(t.dtype), ", expected i32 [k]"));
  if (t.shape[0] < 1 || t.shape[0] > numel)
    shape_error(str_cat("input ", input, " (idx) holds ", t.shape[0], " indices, expected 1 to ", numel,
                        " (the elements of the dense tensor)"));
  return t.shape[0];
}

// idx [k] and the packed forward message (i32 words holding topk_message_bytes) of an edge.
std::vector<TensorType> index_and_message(int64_t numel, double keep, DType dtype) {
  const int64_t k = topk_count(numel, keep);
  const int64_t words = static_cast<int64_t>((topk_message_bytes(numel, keep, dtype) + 3) / 4);
  return {TensorType{DType::kI32, {k}}, TensorType{DType::kI32, {words}}};
}

// The attributes of the gradient's operator: the same peer, the axes swapped.
Attrs reversed(const Attrs& f) {
  return pipe_attrs(f.get_string("reverse_axis"), f.get_string("axis"), f.get_int("peer"));
}

// The backward of a send at `idx` (pipe_send_topk, pipe_send_at): the peer's gradient values at
// idx arrive over the reverse axis and are scattered into input 0's shape.
void receive_gradient_at(BackwardContext& b, ValueId idx) {
  Attrs a = reversed(b.attrs());
  a.set("shape", b.input_type(0).shape);
  a.set("dtype", static_cast<int64_t>(b.input_type(0).dtype));
  b.set_grad_input(0, b.add1("pipe_recv_at", {idx}, a));
}

// Dim 0 is the batch (Graph::with_batch); idx and the message follow from the new shape.
void rebatch_shape(Attrs& a, int64_t batch) {
  std::vector<int64_t> shape = a.get_ints("shape");
  if (!shape.empty()) shape[0] = batch;
  a.set("shape", shape);
}

// ---- kernels ----

int peer_of(const KernelContext& k) { return static_cast<int>(k.attrs.get_int("peer")); }

OpSchema pipe_send_topk_op() {
  OpSchema s = pipe_schema("pipe_send_topk");
  s.inputs = {"x"};
  s.outputs = {"token", "idx", "message"};
  s.send = true;
  s.attrs.push_back({"keep", AttrType::kFloat, true, 1.0});
  s.infer = [](const ShapeContext& c) {
    check_pipe_attrs(c.attrs);
    const double keep = keep_attr(c.attrs);
    expect_message_dtype(c.inputs[0].dtype, "input 0");
    const int64_t n = edge_numel(c.inputs[0].shape, "input 0");
    std::vector<TensorType> out = {TensorType{DType::kF32, {}}};
    for (const TensorType& t : index_and_message(n, keep, c.inputs[0].dtype)) out.push_back(t);
    return out;
  };
  s.kernels[0] = [](KernelContext& k) {
    coll::Communicator& c = pipe_comm(k, "pipe_send_topk");
    const Tensor& x = k.inputs[0];
    Tensor& idx = k.outputs[1];
    Tensor& message = k.outputs[2];  // the send buffer (an output: alive while the send is in flight)
    const int64_t count = idx.numel(), n = x.numel();
    const size_t elem = dtype_size(x.dtype()), index_bytes = topk_index_bytes(n, count);
    char* packed = static_cast<char*>(message.raw());
    topk_write_message(x.raw(), elem, n, count, idx.data<int32_t>(), packed);
    k.outputs[0].fill(0.0f);
    k.pending = c.send(packed, index_bytes + static_cast<size_t>(count) * elem, coll::DataType::kU8, peer_of(k));
  };
  s.backward = [](BackwardContext& b) { receive_gradient_at(b, b.output(1)); };
  return s;
}

OpSchema pipe_recv_topk_op() {
  OpSchema s = pipe_schema("pipe_recv_topk");
  s.inputs = {};
  s.outputs = {"y", "idx", "message"};
  s.source_of_gradient = true;
  s.attrs.push_back({"keep", AttrType::kFloat, true, 1.0});
  s.attrs.push_back({"shape", AttrType::kInts, true, std::vector<int64_t>{}});
  s.attrs.push_back({"dtype", AttrType::kInt, false, static_cast<int64_t>(DType::kF32)});
  s.infer = [](const ShapeContext& c) {
    check_pipe_attrs(c.attrs);
    const double keep = keep_attr(c.attrs);
    const TensorType y = received_type(c.attrs);
    std::vector<TensorType> out = {y};
    for (const TensorType& t : index_and_message(shape_numel(y.shape), keep, y.dtype)) out.push_back(t);
    return out;
  };
  s.rebatch = rebatch_shape;
  s.kernels[0] = [](KernelContext& k) {
    coll::Communicator& c = pipe_comm(k, "pipe_recv_topk");
    Tensor y = k.outputs[0], idx = k.outputs[1], message = k.outputs[2];
    const int64_t count = idx.numel();
    const size_t elem = dtype_size(y.dtype()), index_bytes = topk_index_bytes(y.numel(), count);
    const int peer = peer_of(k);
    k.pending = c.recv(message.raw(), index_bytes + static_cast<size_t>(count) * elem, coll::DataType::kU8, peer);
    const std::string axis = k.attrs.get_string("axis");
    k.on_complete = [y, idx, message, count, elem, index_bytes, peer, axis]() mutable {
      const char* packed = static_cast<const char*>(message.raw());
      const std::string what = str_cat("pipe_recv_topk: the message from peer ", peer, " of grid axis '", axis, "'");
      const int64_t n = y.numel();
      topk_read_indices(packed, n, count, idx.data<int32_t>(), what);
      cpu::scatter_at(packed + index_bytes, elem, idx.data<int32_t>(), count, y.raw(), n);
    };
  };
  s.backward = [](BackwardContext& b) {
    if (b.grad_output(0) < 0) return;
    b.add1("pipe_send_at", {b.grad_output(0), b.output(1)}, reversed(b.attrs()));
  };
  return s;
}

OpSchema pipe_send_at_op() {
  OpSchema s = pipe_schema("pipe_send_at");
  s.inputs = {"g", "idx"};
  s.outputs = {"token", "message"};
  s.nondiff_inputs = {1};
  s.send = true;
  s.infer = [](const ShapeContext& c) {
    check_pipe_attrs(c.attrs);
    expect_message_dtype(c.inputs[0].dtype, "input 0");
    const int64_t k = index_count(c, 1, edge_numel(c.inputs[0].shape, "input 0"));
    return std::vector<TensorType>{TensorType{DType::kF32, {}}, TensorType{c.inputs[0].dtype, {k}}};
  };
  s.kernels[0] = [](KernelContext& k) {
    coll::Communicator& c = pipe_comm(k, "pipe_send_at");
    const Tensor& g = k.inputs[0];
    const Tensor& idx = k.inputs[1];
    Tensor& message = k.outputs[1];  // the send buffer (see pipe_send_topk)
    const int64_t count = idx.numel();
    check_indices(idx.data<int32_t>(), count, g.numel(), Status::kInvalidArgument, "pipe_send_at: idx");
    cpu::gather_at(g.raw(), dtype_size(g.dtype()), idx.data<int32_t>(), count, message.raw());
    k.outputs[0].fill(0.0f);
    k.pending = c.send(message.raw(), static_cast<size_t>(count), comm_type(g), peer_of(k));
  };
  s.backward = [](BackwardContext& b) { receive_gradient_at(b, b.input(1)); };
  return s;
}

OpSchema pipe_recv_at_op() {
  OpSchema s = pipe_schema("pipe_recv_at");
  s.inputs = {"idx"};
  s.nondiff_inputs = {0};
  s.source_of_gradient = true;
  s.attrs.push_back({"shape", AttrType::kInts, true, std::vector<int64_t>{}});
  s.attrs.push_back({"dtype", AttrType::kInt, false, static_cast<int64_t>(DType::kF32)});
  s.infer = [](const ShapeContext& c) {
    check_pipe_attrs(c.attrs);
    const TensorType y = received_type(c.attrs);
    index_count(c, 0, shape_numel(y.shape));
    return std::vector<TensorType>{y};
  };
  s.rebatch = rebatch_shape;
  s.kernels[0] = [](KernelContext& k) {
    coll::Communicator& c = pipe_comm(k, "pipe_recv_at");
    const Tensor idx = k.inputs[0];
    Tensor y = k.outputs[0];
    const int64_t count = idx.numel(), n = y.numel();
    const size_t elem = dtype_size(y.dtype());
    check_indices(idx.data<int32_t>(), count, n, Status::kInvalidArgument, "pipe_recv_at: idx");
    // The k values land in y's last k elements and move to their places from there, in place.
    void* tail = static_cast<char*>(y.raw()) + static_cast<size_t>(n - count) * elem;
    k.pending = c.recv(tail, static_cast<size_t>(count), comm_type(y), peer_of(k));
    k.on_complete = [y, idx, count, n, elem]() mutable {
      cpu::scatter_from_tail(y.raw(), elem, idx.data<int32_t>(), count, n);
    };
  };
  s.backward = [](BackwardContext& b) {
    if (b.grad_output(0) < 0) return;
    b.add1("pipe_send_at", {b.grad_output(0), b.input(0)}, reversed(b.attrs()));
  };
  return s;
}

}  // namespace

void register_pipe_topk_ops(OpRegistry& r) {
  r.add(pipe_send_topk_op());
  r.add(pipe_recv_topk_op());
  r.add(pipe_send_at_op());
  r.add(pipe_recv_at_op());
}

}  // namespace cohort
