// Communicator: the argument checks every backend shares, and the grid helper.
#include "transport/coll/communicator.h"

namespace cohort::transport::coll {

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::kUcx: return "ucx";
    case Backend::kNccl: return "nccl";
  }
  return "unknown";
}

Communicator::Communicator(int rank, int size, std::string name)
    : rank_(rank), size_(size), name_(std::move(name)) {}

void Communicator::check_buffer(const char* call, const void* p, size_t count, DataType type) const {
  int t = static_cast<int>(type);
  COHORT_CHECK(t >= 0 && t <= static_cast<int>(DataType::kU8), Status::kInvalidArgument, call,
               ": unknown data type ", t);
  COHORT_CHECK(p != nullptr || count == 0, Status::kInvalidArgument, call,
               ": null buffer for ", count, " elements");
}

void Communicator::check_reduce(const char* call, DataType type, ReduceOp op) const {
  COHORT_CHECK(reduce_supported(type, op), Status::kUnsupported, call, ": ", reduce_op_name(op),
               " is not defined for ", dtype_name(type));
}

void Communicator::check_peer(const char* call, int peer) const {
  COHORT_CHECK(peer >= 0 && peer < size() && peer != rank_, Status::kInvalidArgument, call, ": peer ",
               peer, " is not another rank of [0, ", size(), ")");
}

WorkPtr Communicator::all_reduce(const void* in, void* out, size_t count, DataType type, ReduceOp op) {
  check_buffer("all_reduce", in, count, type);
  check_buffer("all_reduce", out, count, type);
  check_reduce("all_reduce", type, op);
  return start_all_reduce(in, out, count, type, op);
}

WorkPtr Communicator::all_reduce(void* buf, size_t count, DataType type, ReduceOp op) {
  return all_reduce(buf, buf, count, type, op);
}

WorkPtr Communicator::reduce_scatter(const void* in, void* out, size_t count, DataType type, ReduceOp op) {
  check_buffer("reduce_scatter", in, count, type);
  check_buffer("reduce_scatter", out, count, type);
  check_reduce("reduce_scatter", type, op);
  return start_reduce_scatter(in, out, count, type, op);
}

WorkPtr Communicator::all_gather(const void* in, void* out, size_t count, DataType type) {
  check_buffer("all_gather", in, count, type);
  check_buffer("all_gather", out, count, type);
  return start_all_gather(in, out, count, type);
}

WorkPtr Communicator::broadcast(void* buf, size_t count, DataType type, int root) {
  check_buffer("broadcast", buf, count, type);
  COHORT_CHECK(root >= 0 && root < size(), Status::kInvalidArgument, "broadcast: root ", root,
               " outside [0, ", size(), ")");
  return start_broadcast(buf, count, type, root);
}

WorkPtr Communicator::all_to_all(const void* in, void* out, size_t count, DataType type) {
  check_buffer("all_to_all", in, count, type);
  check_buffer("all_to_all", out, count, type);
  COHORT_CHECK(in != out || count == 0 || size() == 1, Status::kInvalidArgument,
               "all_to_all: in and out must be distinct buffers");
  return start_all_to_all(in, out, count, type);
}

WorkPtr Communicator::barrier() { return start_barrier(); }

WorkPtr Communicator::send(const void* buf, size_t count, DataType type, int peer) {
  check_buffer("send", buf, count, type);
  check_peer("send", peer);
  return start_send(buf, count, type, peer);
}

WorkPtr Communicator::recv(void* buf, size_t count, DataType type, int peer) {
  check_buffer("recv", buf, count, type);
  check_peer("recv", peer);
  return start_recv(buf, count, type, peer);
}

void* Communicator::allocate(size_t) {
  throw Error(Status::kUnsupported, str_cat("allocate: ", backend_name(backend()),
                                            " communicators do not allocate memory"));
}

void Communicator::deallocate(void*) {
  throw Error(Status::kUnsupported, str_cat("deallocate: ", backend_name(backend()),
                                            " communicators do not allocate memory"));
}

void Communicator::set_timeout(std::chrono::milliseconds timeout) {
  COHORT_CHECK(timeout.count() > 0, Status::kInvalidArgument, "set_timeout: must be positive");
  apply_timeout(timeout);
}

std::vector<int> grid_coordinates(int rank, const std::vector<int>& dims) {
  std::vector<int> coords(dims.size());
  for (size_t a = dims.size(); a-- > 0;) {
    coords[a] = rank % dims[a];
    rank /= dims[a];
  }
  return coords;
}

std::vector<std::shared_ptr<Communicator>> make_grid_axes(Communicator& comm,
                                                          const std::vector<int>& dims) {
  int64_t product = 1;
  for (int d : dims) {
    COHORT_CHECK(d > 0, Status::kInvalidArgument, "make_grid_axes: dims ", dims,
                 " must be positive");
    product *= d;
  }
  COHORT_CHECK(product == comm.size(), Status::kInvalidArgument, "make_grid_axes: dims ", dims,
               " multiply to ", product, ", communicator has ", comm.size(), " ranks");
  std::vector<int> coords = grid_coordinates(comm.rank(), dims);
  std::vector<std::shared_ptr<Communicator>> axes;
  for (size_t a = 0; a < dims.size(); ++a) {
    int color = 0;
    for (size_t b = 0; b < dims.size(); ++b) color = color * dims[b] + (b == a ? 0 : coords[b]);
    axes.push_back(comm.split(color, coords[a], str_cat(comm.name(), "/axis", a)));
  }
  return axes;
}

}  // namespace cohort::transport::coll
