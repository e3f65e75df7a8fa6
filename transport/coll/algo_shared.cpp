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
#include <functional>
#include <string>

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

// An operation of `chunks` chains through the window, named and flagged for the executor.
std::unique_ptr<Op> shared_op(std::string name, const SharedWindow& w) {
  auto op = std::make_unique<Op>();
  op->name = std::move(name);
  op->memory = true;
  op->window = w.slots();
  return op;
}

// The first stage of every chunk: once every rank has read slot `slot` for the chunk that used
// it last (seq - slots), copy this chunk's input in (`copy`) and mark the slot filled.
Stage fill_stage(const SharedWindow* w, uint64_t seq, size_t slot, std::function<void()> copy) {
  Stage fill;
  if (seq >= w->slots()) {
    fill.gate = [=] { return first_behind(*w, slot, SharedWindow::kRead, seq + 1 - w->slots(), -1); };
  }
  fill.after = [=, copy = std::move(copy)] {
    copy();
    w->counter(w->rank(), slot, SharedWindow::kFilled).store(seq + 1, std::memory_order_release);
  };
  return fill;
}

}  // namespace

std::unique_ptr<Op> build_shared_all_reduce(const Plan& plan, const SharedWindow& window,
                                            uint64_t first_seq, const void* in, void* out,
                                            size_t count, DataType type, ReduceOp rop) {
  auto op = shared_op(str_cat("all_reduce(", dtype_name(type), " x ", count, ", ", reduce_op_name(rop), ")"), window);
  const int n = window.size(), r = window.rank();
  const size_t es = dtype_size(type);
  const size_t per_chunk = window.slot_bytes() / es;
  const size_t chunks = shared_chunk_count(window, count, type, SharedPattern::kAllReduce);
  const bool stream = count * es >= kStreamBytes && in != out;
  const SharedWindow* w = &window;
  for (size_t c = 0; c < chunks; ++c) {
    const uint64_t seq = first_seq + c;
    const size_t slot = seq % window.slots();
    const size_t off = c * per_chunk, len = std::min(per_chunk, count - off);
    const uint8_t* src = static_cast<const uint8_t*>(in) + off * es;
    uint8_t* dst = static_cast<uint8_t*>(out) + off * es;
    Chain chain;
    Stage fill = fill_stage(w, seq, slot, [=] { std::memcpy(w->data(r, slot), src, len * es); });
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

// Reduce-scatter of chunk s (elements [off, off + len) of every rank's block): fill copies the
// chunk of all n blocks into this rank's slot; reduce, once every rank has filled, reduces
// block r's chunk over all n slots into the output and marks the slot read. All-gather of
// chunk s (elements [off, off + len) of this rank's input): fill copies it into the slot;
// gather, once every rank has filled, copies each rank's chunk to its block of the output.
std::unique_ptr<Op> build_shared_reduce_scatter(const Plan& plan, const SharedWindow& window,
                                                uint64_t first_seq, const void* in, void* out,
                                                size_t count, DataType type, ReduceOp rop) {
  auto op = shared_op(str_cat("reduce_scatter(", dtype_name(type), " x ", count, ", ", reduce_op_name(rop), ")"), window);
  const int n = window.size(), r = window.rank();
  const size_t es = dtype_size(type);
  const size_t per_chunk = window.slot_bytes() / (es * static_cast<size_t>(n));
  const size_t chunks = shared_chunk_count(window, count, type, SharedPattern::kReduceScatter);
  // In place (out is this rank's block of in) the output lines were just read: no streaming.
  const bool in_place = static_cast<const uint8_t*>(out) ==
                        static_cast<const uint8_t*>(in) + static_cast<size_t>(r) * count * es;
  const bool stream = count * es >= kStreamBytes && !in_place;
  const SharedWindow* w = &window;
  for (size_t c = 0; c < chunks; ++c) {
    const uint64_t seq = first_seq + c;
    const size_t slot = seq % window.slots();
    const size_t off = c * per_chunk, len = std::min(per_chunk, count - off);
    const uint8_t* src = static_cast<const uint8_t*>(in);
    uint8_t* dst = static_cast<uint8_t*>(out) + off * es;
    Chain chain;
    Stage fill = fill_stage(w, seq, slot, [=] {
      for (int j = 0; j < n; ++j)
        std::memcpy(w->data(r, slot) + static_cast<size_t>(j) * len * es,
                    src + (static_cast<size_t>(j) * count + off) * es, len * es);
    });
    Stage reduce_block;
    reduce_block.gate = [=] { return first_behind(*w, slot, SharedWindow::kFilled, seq + 1, r); };
    reduce_block.after = [=] {
      const size_t at = static_cast<size_t>(r) * len * es;
      const void* srcs[kMaxSharedRanks];
      for (int j = 0; j < n; ++j) srcs[j] = w->data(j, slot) + at;
      uint8_t* mine = w->data(r, slot) + at;
      reduce_many(mine, srcs, n, len, type, rop);
      stream_copy(dst, mine, len * es, stream);
      // Read: peers no longer need this slot from this rank, and this rank needs no other.
      w->counter(r, slot, SharedWindow::kRead).store(seq + 1, std::memory_order_release);
    };
    chain.stages.push_back(std::move(fill));
    chain.stages.push_back(std::move(reduce_block));
    op->chains.push_back(std::move(chain));
  }
  return op;
}

std::unique_ptr<Op> build_shared_all_gather(const Plan& plan, const SharedWindow& window,
                                            uint64_t first_seq, const void* in, void* out,
                                            size_t count, DataType type) {
  auto op = shared_op(str_cat("all_gather(", dtype_name(type), " x ", count, ")"), window);
  const int n = window.size(), r = window.rank();
  const size_t es = dtype_size(type);
  const size_t per_chunk = window.slot_bytes() / es;
  const size_t chunks = shared_chunk_count(window, count, type, SharedPattern::kAllGather);
  const bool stream = count * es * static_cast<size_t>(n) >= kStreamBytes;
  const SharedWindow* w = &window;
  for (size_t c = 0; c < chunks; ++c) {
    const uint64_t seq = first_seq + c;
    const size_t slot = seq % window.slots();
    const size_t off = c * per_chunk, len = std::min(per_chunk, count - off);
    const uint8_t* src = static_cast<const uint8_t*>(in) + off * es;
    uint8_t* base = static_cast<uint8_t*>(out);
    Chain chain;
    Stage fill = fill_stage(w, seq, slot, [=] { std::memcpy(w->data(r, slot), src, len * es); });
    Stage gather;
    gather.gate = [=] { return first_behind(*w, slot, SharedWindow::kFilled, seq + 1, r); };
    gather.after = [=] {
      for (int k = 0; k < n; ++k) {
        const int j = (r + k) % n;
        uint8_t* to = base + (static_cast<size_t>(j) * count + off) * es;
        const uint8_t* from = j == r ? src : w->data(j, slot);
        if (to != from) stream_copy(to, from, len * es, stream);
      }
      w->counter(r, slot, SharedWindow::kRead).store(seq + 1, std::memory_order_release);
    };
    chain.stages.push_back(std::move(fill));
    chain.stages.push_back(std::move(gather));
    op->chains.push_back(std::move(chain));
  }
  return op;
}

size_t shared_chunk_count(const SharedWindow& window, size_t count, DataType type,
                          SharedPattern pattern) {
  size_t per_chunk = window.slot_bytes() / dtype_size(type);
  if (pattern == SharedPattern::kReduceScatter) per_chunk /= static_cast<size_t>(window.size());
  return (count + per_chunk - 1) / per_chunk;
}

}  // namespace cohort::transport::coll
