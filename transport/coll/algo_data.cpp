// Data-movement collectives: ring all-gather, broadcast (binomial tree when small, pipelined
// chain when large), pairwise all-to-all, dissemination barrier and point-to-point.
#include <cstring>

#include "core/base/error.h"
#include "transport/coll/algorithms.h"
#include "transport/ucx/tag.h"

namespace cohort::transport::coll {

namespace {

uint8_t* at(void* base, size_t bytes) { return static_cast<uint8_t*>(base) + bytes; }
const uint8_t* at(const void* base, size_t bytes) {
  return static_cast<const uint8_t*>(base) + bytes;
}

std::unique_ptr<Op> new_op(const Plan& plan, std::string name) {
  auto op = std::make_unique<Op>();
  op->name = std::move(name);
  op->window = plan.window;
  return op;
}

void binomial_broadcast(const Plan& plan, Op& op, void* buf, size_t bytes, int root) {
  const int n = plan.size, v = (plan.rank - root + n) % n;
  auto real = [=](int x) { return (x + root) % n; };
  int mask = 1;
  Chain chain;
  while (mask < n) {
    if (v & mask) {
      chain.stages.push_back(Stage{{recv_from(real(v - mask), buf, bytes, 0)}, nullptr});
      break;
    }
    mask <<= 1;
  }
  Stage sends;
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (v + mask < n) sends.xfers.push_back(send_to(real(v + mask), buf, bytes, 0));
  if (!sends.xfers.empty()) chain.stages.push_back(std::move(sends));
  op.chains.push_back(std::move(chain));
}

void chain_broadcast(const Plan& plan, Op& op, void* buf, size_t bytes, int root) {
  const int n = plan.size, v = (plan.rank - root + n) % n;
  const int prev = (plan.rank + n - 1) % n, next = (plan.rank + 1) % n;
  const size_t chunks = chunk_count(plan, bytes);
  for (size_t c = 0; c < chunks; ++c) {
    Chain chain;
    uint8_t* p = at(buf, part_offset(bytes, chunks, c));
    size_t len = part_count(bytes, chunks, c);
    if (v > 0) chain.stages.push_back(Stage{{recv_from(prev, p, len, 0)}, nullptr});
    if (v < n - 1) chain.stages.push_back(Stage{{send_to(next, p, len, 0)}, nullptr});
    op.chains.push_back(std::move(chain));
  }
}

}  // namespace

std::unique_ptr<Op> build_all_gather(const Plan& plan, const void* in, void* out, size_t count,
                                     DataType type) {
  COHORT_CHECK(plan.size <= static_cast<int>(ucx::kMaxSteps), Status::kUnsupported,
               "all_gather: at most ", ucx::kMaxSteps, " ranks");
  auto op = new_op(plan, op_name("all_gather", count, type));
  const size_t n = static_cast<size_t>(plan.size), r = static_cast<size_t>(plan.rank);
  const size_t block = count * dtype_size(type);
  if (block == 0) return op;
  if (in != at(out, r * block)) op->start = [=] { std::memmove(at(out, r * block), in, block); };
  if (n == 1) return op;
  const int right = static_cast<int>((r + 1) % n), left = static_cast<int>((r + n - 1) % n);
  const size_t chunks = chunk_count(plan, block);
  op->window = single_pass_window(plan, chunks);
  for (size_t c = 0; c < chunks; ++c) {
    const size_t off = part_offset(block, chunks, c), len = part_count(block, chunks, c);
    Chain chain;
    for (size_t s = 0; s + 1 < n; ++s) {
      size_t send_block = (r + n - s) % n, recv_block = (r + 2 * n - s - 1) % n;
      chain.stages.push_back(Stage{{send_to(right, at(out, send_block * block + off), len, s),
                                    recv_from(left, at(out, recv_block * block + off), len, s)},
                                   nullptr});
    }
    op->chains.push_back(std::move(chain));
  }
  return op;
}

std::unique_ptr<Op> build_broadcast(const Plan& plan, void* buf, size_t count, DataType type,
                                    int root) {
  auto op = new_op(plan, str_cat("broadcast(", dtype_name(type), " x ", count, ", root ", root, ")"));
  const size_t bytes = count * dtype_size(type);
  if (plan.size == 1 || bytes == 0) return op;
  if (bytes <= plan.small_bytes) {
    binomial_broadcast(plan, *op, buf, bytes, root);
  } else {
    chain_broadcast(plan, *op, buf, bytes, root);
  }
  return op;
}

std::unique_ptr<Op> build_all_to_all(const Plan& plan, const void* in, void* out, size_t count,
                                     DataType type) {
  auto op = new_op(plan, op_name("all_to_all", count, type));
  const int n = plan.size, r = plan.rank;
  const size_t block = count * dtype_size(type);
  if (block == 0) return op;
  op->start = [=] { std::memmove(at(out, r * block), at(in, r * block), block); };
  op->window = static_cast<size_t>(n);
  op->chains.emplace_back();  // chain k talks to the ranks at distance k; 0 is the local copy
  for (int k = 1; k < n; ++k) {
    int to = (r + k) % n, from = (r + n - k) % n;
    Chain chain;
    chain.stages.push_back(Stage{{send_to(to, at(in, to * block), block, 0),
                                  recv_from(from, at(out, from * block), block, 0)},
                                 nullptr});
    op->chains.push_back(std::move(chain));
  }
  return op;
}

std::unique_ptr<Op> build_barrier(const Plan& plan) {
  auto op = new_op(plan, "barrier");
  const int n = plan.size, r = plan.rank;
  if (n == 1) return op;
  uint8_t* token = op->new_scratch(2);
  Chain chain;
  uint32_t step = 0;
  for (int d = 1; d < n; d *= 2, ++step) {
    chain.stages.push_back(Stage{{send_to((r + d) % n, token, 1, step),
                                  recv_from((r + n - d) % n, token + 1, 1, step)},
                                 nullptr});
  }
  op->chains.push_back(std::move(chain));
  return op;
}

// Point to point in chunks, so that the no-progress deadline measures chunks, not messages.
std::unique_ptr<Op> build_send(const Plan& plan, const void* buf, size_t bytes, int peer) {
  auto op = new_op(plan, str_cat("send(", bytes, " bytes to rank ", peer, ")"));
  const size_t chunks = bytes ? chunk_count(plan, bytes) : 0;
  for (size_t c = 0; c < chunks; ++c) {
    Chain chain;
    chain.stages.push_back(Stage{{send_to(peer, at(buf, part_offset(bytes, chunks, c)),
                                          part_count(bytes, chunks, c), 0)},
                                 nullptr});
    op->chains.push_back(std::move(chain));
  }
  return op;
}

std::unique_ptr<Op> build_recv(const Plan& plan, void* buf, size_t bytes, int peer) {
  auto op = new_op(plan, str_cat("recv(", bytes, " bytes from rank ", peer, ")"));
  const size_t chunks = bytes ? chunk_count(plan, bytes) : 0;
  for (size_t c = 0; c < chunks; ++c) {
    Chain chain;
    chain.stages.push_back(Stage{{recv_from(peer, at(buf, part_offset(bytes, chunks, c)),
                                            part_count(bytes, chunks, c), 0)},
                                 nullptr});
    op->chains.push_back(std::move(chain));
  }
  return op;
}

}  // namespace cohort::transport::coll
