// Reducing collectives: all-reduce (recursive doubling for small messages, pipelined ring
// reduce-scatter + all-gather for large ones) and ring reduce-scatter. Every rank reduces the
// same pairs in the same order up to commutativity, so all ranks end with identical bits.
#include <algorithm>
#include <cstring>

#include "core/base/error.h"
#include "transport/coll/algorithms.h"
#include "transport/coll/reduce.h"
#include "transport/ucx/tag.h"

namespace cohort::transport::coll {

std::string op_name(const char* what, size_t count, DataType type) {
  return str_cat(what, "(", dtype_name(type), " x ", count, ")");
}

std::string op_name(const char* what, size_t count, DataType type, ReduceOp op) {
  return str_cat(what, "(", dtype_name(type), " x ", count, ", ", reduce_op_name(op), ")");
}

size_t chunk_count(const Plan& plan, size_t bytes) {
  size_t unit = std::max<size_t>(plan.chunk_bytes, 1);
  size_t chunks = (bytes + unit - 1) / unit;
  return std::clamp<size_t>(chunks, 1, ucx::kMaxChunks);
}

size_t single_pass_window(const Plan& plan, size_t chunks) {
  return chunks >= kLongRing ? 2 * plan.window : plan.window;
}

namespace {

uint8_t* at(void* base, size_t elements, size_t elem) {
  return static_cast<uint8_t*>(base) + elements * elem;
}
const uint8_t* at(const void* base, size_t elements, size_t elem) {
  return static_cast<const uint8_t*>(base) + elements * elem;
}

// Recursive doubling; ranks beyond the largest power of two fold into a partner first.
void recursive_doubling(const Plan& plan, Op& op, void* out, size_t count, DataType type,
                        ReduceOp rop) {
  const int n = plan.size, r = plan.rank;
  const size_t bytes = count * dtype_size(type);
  int p2 = 1;
  while (p2 * 2 <= n) p2 *= 2;
  int rounds = 0;
  while ((1 << rounds) < p2) ++rounds;
  const int extra = n - p2;
  Chain chain;
  if (r >= p2) {
    chain.stages.push_back(Stage{{send_to(r - p2, out, bytes, 0)}, nullptr});
    chain.stages.push_back(Stage{{recv_from(r - p2, out, bytes, 1 + rounds)}, nullptr});
    op.chains.push_back(std::move(chain));
    return;
  }
  uint8_t* tmp = op.new_scratch(bytes);
  auto fold = [=] { reduce(out, out, tmp, count, type, rop); };
  if (r < extra) chain.stages.push_back(Stage{{recv_from(r + p2, tmp, bytes, 0)}, fold});
  for (int k = 0; k < rounds; ++k) {
    int partner = r ^ (1 << k);
    Stage stage{{send_to(partner, out, bytes, 1 + k), recv_from(partner, tmp, bytes, 1 + k)}, fold};
    if (k == rounds - 1 && rop == ReduceOp::kAvg) {
      stage.after = [=] {
        reduce(out, out, tmp, count, type, rop);
        scale(out, count, type, 1.0 / n);
      };
    }
    chain.stages.push_back(std::move(stage));
  }
  if (r < extra) chain.stages.push_back(Stage{{send_to(r + p2, out, bytes, 1 + rounds)}, nullptr});
  op.chains.push_back(std::move(chain));
}

// Ring all-reduce on `out` in place: n-1 reduce-scatter steps then n-1 all-gather steps, each
// segment cut into chunks that travel as independent chains.
void ring_all_reduce(const Plan& plan, Op& op, void* out, size_t count, DataType type,
                     ReduceOp rop) {
  const size_t n = static_cast<size_t>(plan.size), r = static_cast<size_t>(plan.rank);
  const size_t es = dtype_size(type);
  const int right = static_cast<int>((r + 1) % n), left = static_cast<int>((r + n - 1) % n);
  const size_t chunks = chunk_count(plan, part_count(count, n, 0) * es);
  const size_t max_chunk = (part_count(count, n, 0) + chunks - 1) / chunks;
  std::vector<uint8_t*> slots;
  for (size_t i = 0; i < std::min(chunks, plan.window); ++i)
    slots.push_back(op.new_scratch(max_chunk * es));
  auto offset = [=](size_t seg, size_t c) {
    size_t seg_count = part_count(count, n, seg);
    return part_offset(count, n, seg) + part_offset(seg_count, chunks, c);
  };
  auto length = [=](size_t seg, size_t c) { return part_count(part_count(count, n, seg), chunks, c); };
  for (size_t c = 0; c < chunks; ++c) {
    Chain chain;
    uint8_t* tmp = slots[c % slots.size()];
    for (size_t s = 0; s + 1 < n; ++s) {  // reduce-scatter
      size_t send_seg = (r + n - s) % n, recv_seg = (r + 2 * n - s - 1) % n;
      size_t len = length(recv_seg, c);
      uint8_t* dst = at(out, offset(recv_seg, c), es);
      Stage stage;
      if (length(send_seg, c)) stage.xfers.push_back(send_to(right, at(out, offset(send_seg, c), es), length(send_seg, c) * es, s));
      if (len) stage.xfers.push_back(recv_from(left, tmp, len * es, s));
      bool last = s + 2 == n;
      stage.after = [=] {
        reduce(dst, dst, tmp, len, type, rop);
        if (last && rop == ReduceOp::kAvg) scale(dst, len, type, 1.0 / n);
      };
      chain.stages.push_back(std::move(stage));
    }
    for (size_t s = 0; s + 1 < n; ++s) {  // all-gather
      size_t send_seg = (r + 1 + n - s) % n, recv_seg = (r + n - s) % n;
      Stage stage;
      uint32_t step = static_cast<uint32_t>(n - 1 + s);
      if (length(send_seg, c)) stage.xfers.push_back(send_to(right, at(out, offset(send_seg, c), es), length(send_seg, c) * es, step));
      if (length(recv_seg, c)) stage.xfers.push_back(recv_from(left, at(out, offset(recv_seg, c), es), length(recv_seg, c) * es, step));
      chain.stages.push_back(std::move(stage));
    }
    op.chains.push_back(std::move(chain));
  }
}

}  // namespace

std::unique_ptr<Op> build_all_reduce(const Plan& plan, const void* in, void* out, size_t count,
                                     DataType type, ReduceOp rop) {
  COHORT_CHECK(plan.size <= static_cast<int>(ucx::kMaxSteps / 2), Status::kUnsupported,
               "all_reduce: at most ", ucx::kMaxSteps / 2, " ranks");
  auto op = std::make_unique<Op>();
  op->name = op_name("all_reduce", count, type, rop);
  op->window = plan.window;
  const size_t bytes = count * dtype_size(type);
  if (in != out && bytes) op->start = [=] { std::memcpy(out, in, bytes); };
  if (plan.size == 1 || count == 0) return op;
  if (bytes <= plan.small_bytes) {
    recursive_doubling(plan, *op, out, count, type, rop);
  } else {
    ring_all_reduce(plan, *op, out, count, type, rop);
  }
  return op;
}

std::unique_ptr<Op> build_reduce_scatter(const Plan& plan, const void* in, void* out,
                                         size_t count, DataType type, ReduceOp rop) {
  COHORT_CHECK(plan.size <= static_cast<int>(ucx::kMaxSteps), Status::kUnsupported,
               "reduce_scatter: at most ", ucx::kMaxSteps, " ranks");
  auto op = std::make_unique<Op>();
  op->name = op_name("reduce_scatter", count, type, rop);
  op->window = plan.window;
  const size_t n = static_cast<size_t>(plan.size), r = static_cast<size_t>(plan.rank);
  const size_t es = dtype_size(type);
  if (count == 0) return op;
  if (n == 1) {
    if (in != out) op->start = [=] { std::memmove(out, in, count * es); };
    return op;
  }
  const int right = static_cast<int>((r + 1) % n), left = static_cast<int>((r + n - 1) % n);
  const size_t chunks = chunk_count(plan, count * es);
  const size_t max_chunk = (count + chunks - 1) / chunks;
  op->window = single_pass_window(plan, chunks);
  std::vector<uint8_t*> slots;
  for (size_t i = 0; i < 2 * std::min(chunks, op->window); ++i)
    slots.push_back(op->new_scratch(max_chunk * es));
  for (size_t c = 0; c < chunks; ++c) {
    const size_t off = part_offset(count, chunks, c), len = part_count(count, chunks, c);
    if (len == 0) continue;
    uint8_t* t[2] = {slots[2 * (c % (slots.size() / 2))], slots[2 * (c % (slots.size() / 2)) + 1]};
    Chain chain;
    for (size_t s = 0; s + 1 < n; ++s) {
      size_t send_seg = (r + n - s - 1) % n, recv_seg = (r + 2 * n - s - 2) % n;
      const void* src = s == 0 ? static_cast<const void*>(at(in, send_seg * count + off, es)) : t[(s - 1) % 2];
      uint8_t* buf = t[s % 2];
      const uint8_t* mine = at(in, recv_seg * count + off, es);
      uint8_t* dst = s + 2 == n ? at(out, off, es) : buf;
      bool last = s + 2 == n;
      Stage stage{{send_to(right, src, len * es, s), recv_from(left, buf, len * es, s)}, nullptr};
      stage.after = [=] {
        reduce(dst, buf, mine, len, type, rop);
        if (last && rop == ReduceOp::kAvg) scale(dst, len, type, 1.0 / n);
      };
      chain.stages.push_back(std::move(stage));
    }
    op->chains.push_back(std::move(chain));
  }
  return op;
}

}  // namespace cohort::transport::coll
