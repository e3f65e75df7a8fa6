// Collectives through a SharedWindow (ranks of one host): no messages, every chunk passes
// through shared memory once. All-reduce of chunk s, on rank r of n, in three stages:
//   fill    once every rank has read slot s % slots for chunk s - slots: copy the input chunk
//           into this rank's slot; filled = s + 1.
//   reduce  once every rank has filled: part r of the chunk (parts as part_count) is reduced
//           over all n slots in rank order into this rank's slot and copied to the output;
//           reduced = s + 1.
//   gather  once every rank has reduced: copy part j from rank j's slot to the output for every
//           j != r; read = s + 1.
// Each part is reduced by one rank only, so every rank ends with the same bits. Chunks are
// independent chains, up to `slots` in flight, so filling chunk s+1 overlaps reducing chunk s.
// Memory traffic per rank: the input read once, the output written once, and the slots, which
// stay in cache. A stage waits by gate: the executor polls it and names the rank it waits for.
#include <algorithm>
#include <cstring>

#include "core/base/error.h"
#include "transport/coll/algorithms.h"
#include "transport/coll/reduce.h"
#include "transport/coll/shared_window.h"

namespace cohort::transport::coll {

namespace {

// -1 once `counter` of every rank in [0, n) except `skip` has reached `value`, else the first
// rank that has not.
int first_behind(const SharedWindow& w, size_t slot, SharedWindow::Counter c, uint64_t value,
                 int skip) {
  for (int j = 0; j < w.size(); ++j) {
    if (j == skip) continue;
    if (w.counter(j, slot, c).load(std::memory_order_acquire) < value) return j;
  }
  return -1;
}

}  // namespace

std::unique_ptr<Op> build_shared_all_reduce(const Plan& plan, const SharedWindow& window,
                                            uint64_t first_seq, const void* in, void* out,
                                            size_t count, DataType type, ReduceOp rop) {
  auto op = std::make_unique<Op>();
  op->name = str_cat("all_reduce(", dtype_name(type), " x ", count, ", ", reduce_op_name(rop), ")");
  op->memory = true;
  op->window = window.slots();
  const int n = window.size(), r = window.rank();
  const size_t es = dtype_size(type);
  const size_t per_chunk = window.slot_bytes() / es;
  const size_t chunks = shared_chunk_count(window, count, type);
  const bool stream = count * es >= kStreamBytes && in != out;
  const SharedWindow* w = &window;
  for (size_t c = 0; c < chunks; ++c) {
    const uint64_t seq = first_seq + c;
    const size_t slot = seq % window.slots();
    const size_t off = c * per_chunk, len = std::min(per_chunk, count - off);
    const uint8_t* src = static_cast<const uint8_t*>(in) + off * es;
    uint8_t* dst = static_cast<uint8_t*>(out) + off * es;
    Chain chain;
    Stage fill;
    if (seq >= window.slots()) {
      fill.gate = [=] { return first_behind(*w, slot, SharedWindow::kRead, seq + 1 - w->slots(), -1); };
    }
    fill.after = [=] {
      std::memcpy(w->data(r, slot), src, len * es);
      w->counter(r, slot, SharedWindow::kFilled).store(seq + 1, std::memory_order_release);
    };
    Stage reduce_part;
    reduce_part.gate = [=] { return first_behind(*w, slot, SharedWindow::kFilled, seq + 1, r); };
    reduce_part.after = [=] {
      const size_t po = part_offset(len, static_cast<size_t>(n), static_cast<size_t>(r)) * es;
      const size_t pc = part_count(len, static_cast<size_t>(n), static_cast<size_t>(r));
      const void* srcs[kMaxSharedRanks];
      for (int j = 0; j < n; ++j) srcs[j] = w->data(j, slot) + po;
      uint8_t* mine = w->data(r, slot) + po;
      reduce_many(mine, srcs, n, pc, type, rop);
      stream_copy(dst + po, mine, pc * es, stream);
      w->counter(r, slot, SharedWindow::kReduced).store(seq + 1, std::memory_order_release);
    };
    Stage gather;
    gather.gate = [=] { return first_behind(*w, slot, SharedWindow::kReduced, seq + 1, r); };
    gather.after = [=] {
      for (int k = 1; k < n; ++k) {
        const size_t j = static_cast<size_t>((r + k) % n);
        const size_t po = part_offset(len, static_cast<size_t>(n), j) * es;
        stream_copy(dst + po, w->data(static_cast<int>(j), slot) + po,
                    part_count(len, static_cast<size_t>(n), j) * es, stream);
      }
      w->counter(r, slot, SharedWindow::kRead).store(seq + 1, std::memory_order_release);
    };
    chain.stages.push_back(std::move(fill));
    chain.stages.push_back(std::move(reduce_part));
    chain.stages.push_back(std::move(gather));
    op->chains.push_back(std::move(chain));
  }
  return op;
}

size_t shared_chunk_count(const SharedWindow& window, size_t count, DataType type) {
  const size_t per_chunk = window.slot_bytes() / dtype_size(type);
  return (count + per_chunk - 1) / per_chunk;
}

}  // namespace cohort::transport::coll
