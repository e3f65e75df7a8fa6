// Collectives through a SharedWindow (ranks of one host): no messages, every chunk passes
// through shared memory once. All-reduce of chunk s, on rank r of n, in three stages:
//   fill    once every rank has read slot s % slots for chunk s - slots: copy the input chunk
//           into this rank's slot and publish where input and result are; filled = s + 1.
//   reduce  once every rank has filled: part r of the chunk (parts as part_count) is reduced
//           over all n inputs in rank order into this rank's result; reduced = s + 1.
//   gather  once every rank has reduced: copy part j from rank j's result to the output for
//           every j != r; read = s + 1.
// Each part is reduced by one rank only, so every rank ends with the same bits. Chunks are
// independent chains, up to `slots` in flight, so filling chunk s+1 overlaps reducing chunk s.
// Memory traffic per rank: the input read once, the output written once, and the slots, which
// stay in cache. A stage waits by gate: the executor polls it and names the rank it waits for.
//
// Registered memory (SharedWindow::locate): an input that lies in it is not copied (peers read
// it where it is), and a result is reduced straight into an output that lies in it (peers
// gather from there). A rank whose peers read its buffers finishes a chunk only once every
// peer has marked it read, so that the caller may reuse them when the Work completes.
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

// An operation whose chains run through the window, named and flagged for the executor.
std::unique_ptr<Op> shared_op(std::string name, const SharedWindow& w) {
  auto op = std::make_unique<Op>();
  op->name = std::move(name);
  op->memory = true;
  op->window = w.slots();
  return op;
}

// Elements of one rank's buffer (all-reduce, all-gather) or block (reduce-scatter) per chunk:
// a reduce-scatter chunk holds that many elements of every rank's block.
size_t chunk_elements(const SharedWindow& w, DataType type, SharedPattern pattern) {
  size_t elements = w.slot_bytes() / dtype_size(type);
  if (pattern == SharedPattern::kReduceScatter) elements /= static_cast<size_t>(w.size());
  return elements;
}

// Calls fn(seq, slot, off, len) for every chunk of `count` elements, sequence numbers from
// first_seq, and collects the chains it returns into `op`.
template <typename Fn>
void add_chunks(Op& op, const SharedWindow& w, SharedPattern pattern, DataType type,
                uint64_t first_seq, size_t count, Fn fn) {
  const size_t per_chunk = chunk_elements(w, type, pattern);
  const size_t chunks = shared_chunk_count(w, count, type, pattern);
  for (size_t c = 0; c < chunks; ++c) {
    const uint64_t seq = first_seq + c;
    const size_t off = c * per_chunk;
    op.chains.push_back(fn(seq, static_cast<size_t>(seq % w.slots()), off, std::min(per_chunk, count - off)));
  }
}

// Where [p, p + bytes) of registered memory is, for an operation moving `message` bytes (the
// whole buffer of every rank): read and written in place only from kRegisteredInPlaceBytes
// (types.h) on. Smaller messages copy through the slots: the wait for the peers' reads before
// a chunk may finish costs more than the copy saves (64 KiB all-reduce at 2 ranks, three runs
// each: 4.7-5.1 GB/s copied against 1.5-4.0 in place; from 256 KiB both alike, 1 MiB and up in
// place wins).
SharedWindow::Place place_of(const SharedWindow& w, const void* p, size_t bytes, size_t message) {
  return message >= kRegisteredInPlaceBytes ? w.locate(p, bytes) : SharedWindow::Place{};
}

// A chunk `bytes` into a buffer placed at `whole` (a slot stays a slot).
SharedWindow::Place advanced(SharedWindow::Place whole, size_t bytes) {
  if (!whole.in_slot()) whole.offset += bytes;
  return whole;
}

// The first stage of every chunk: once every rank has read slot `slot` for the chunk that used
// it last (seq - slots), copy this chunk's input in (`copy`, unless it is registered), publish
// where the input and the result are, and mark the slot filled.
Stage fill_stage(const SharedWindow* w, uint64_t seq, size_t slot, SharedWindow::Place input,
                 SharedWindow::Place result, std::function<void()> copy) {
  Stage fill;
  if (seq >= w->slots()) {
    fill.gate = [=] { return first_behind(*w, slot, SharedWindow::kRead, seq + 1 - w->slots(), -1); };
  }
  fill.after = [=, copy = std::move(copy)] {
    if (input.in_slot()) copy();
    w->publish(slot, input, result);
    w->counter(w->rank(), slot, SharedWindow::kFilled).store(seq + 1, std::memory_order_release);
  };
  return fill;
}

// The last stage of a chunk whose registered buffers peers read: once every peer has marked
// the chunk read.
Stage release_stage(const SharedWindow* w, uint64_t seq, size_t slot) {
  Stage release;
  release.gate = [=] { return first_behind(*w, slot, SharedWindow::kRead, seq + 1, w->rank()); };
  return release;
}

// Once every rank has filled: `elements` of every rank's input reduced in rank order into this
// rank's slot (where its own elements are) and copied to `dst`, or straight into `dst`
// (`into_dst`); then `done` = seq + 1. Rank j's elements are at byte
// at + block * stride(j) of its input, stride(j) being `slot_stride` for an input in its slot
// and `stride` for a registered one (reduce-scatter's blocks; 0 for all-reduce).
Stage reduce_stage(const SharedWindow* w, uint64_t seq, size_t slot, size_t at, size_t elements,
                   DataType type, ReduceOp rop, uint8_t* dst, bool stream,
                   SharedWindow::Counter done, bool into_dst = false, size_t block = 0,
                   size_t slot_stride = 0, size_t stride = 0) {
  Stage reduce;
  const int r = w->rank();
  reduce.gate = [=] { return first_behind(*w, slot, SharedWindow::kFilled, seq + 1, r); };
  reduce.after = [=] {
    const size_t bytes = elements * dtype_size(type);
    const void* srcs[kMaxSharedRanks];
    for (int j = 0; j < w->size(); ++j) {
      const size_t from = at + block * (w->input_in_slot(j, slot) ? slot_stride : stride);
      srcs[j] = w->input(j, slot, from + bytes) + from;
    }
    uint8_t* into = into_dst ? dst : w->data(r, slot) + at + block * slot_stride;
    reduce_many(into, srcs, w->size(), elements, type, rop);
    if (!into_dst) stream_copy(dst, into, bytes, stream);
    w->counter(r, slot, done).store(seq + 1, std::memory_order_release);
  };
  return reduce;
}

}  // namespace

std::unique_ptr<Op> build_shared_all_reduce(const SharedWindow& window, uint64_t first_seq,
                                            const void* in, void* out, size_t count,
                                            DataType type, ReduceOp rop) {
  auto op = shared_op(op_name("all_reduce", count, type, rop), window);
  const size_t n = static_cast<size_t>(window.size()), r = static_cast<size_t>(window.rank());
  const size_t es = dtype_size(type);
  const bool stream = count * es >= kStreamBytes && in != out;
  const SharedWindow* w = &window;
  const SharedWindow::Place in_place = place_of(*w, in, count * es, count * es);
  const SharedWindow::Place out_place = place_of(*w, out, count * es, count * es);
  // In place with a registered input, no fill copy brought the output's lines into cache.
  const bool gather_stream = stream || (!in_place.in_slot() && outgrows_cache(n * count * es));
  add_chunks(*op, window, SharedPattern::kAllReduce, type, first_seq, count,
             [&](uint64_t seq, size_t slot, size_t off, size_t len) {
    const uint8_t* src = static_cast<const uint8_t*>(in) + off * es;
    uint8_t* dst = static_cast<uint8_t*>(out) + off * es;
    const size_t at = part_offset(len, n, r) * es;
    const SharedWindow::Place input = advanced(in_place, off * es), result = advanced(out_place, off * es);
    Chain chain;
    chain.stages.push_back(fill_stage(w, seq, slot, input, result,
                                      [=] { std::memcpy(w->data(w->rank(), slot), src, len * es); }));
    chain.stages.push_back(reduce_stage(w, seq, slot, at, part_count(len, n, r), type, rop, dst + at,
                                        stream, SharedWindow::kReduced, !result.in_slot()));
    Stage gather;
    gather.gate = [=] { return first_behind(*w, slot, SharedWindow::kReduced, seq + 1, static_cast<int>(r)); };
    gather.after = [=] {
      for (size_t k = 1; k < n; ++k) {
        const int j = static_cast<int>((r + k) % n);
        const size_t po = part_offset(len, n, static_cast<size_t>(j)) * es;
        const size_t bytes = part_count(len, n, static_cast<size_t>(j)) * es;
        stream_copy(dst + po, w->result(j, slot, po + bytes) + po, bytes, gather_stream);
      }
      w->counter(static_cast<int>(r), slot, SharedWindow::kRead).store(seq + 1, std::memory_order_release);
    };
    chain.stages.push_back(std::move(gather));
    // Peers read this rank's input before they mark it reduced (which gather waited for), its
    // registered result while they gather.
    if (!result.in_slot()) chain.stages.push_back(release_stage(w, seq, slot));
    return chain;
  });
  return op;
}

// Reduce-scatter of chunk s (elements [off, off + len) of every rank's block): fill copies the
// chunk of all n blocks into this rank's slot; reduce, once every rank has filled, reduces
// block r's chunk over all n slots into the output and marks the slot read (this rank needs
// nothing more from any slot, and its peers have what they need from it once they reduced).
// All-gather of chunk s (elements [off, off + len) of this rank's input): fill copies it into
// the slot; gather, once every rank has filled, copies each rank's chunk to its block of the
// output.
std::unique_ptr<Op> build_shared_reduce_scatter(const SharedWindow& window, uint64_t first_seq,
                                                const void* in, void* out, size_t count,
                                                DataType type, ReduceOp rop) {
  auto op = shared_op(op_name("reduce_scatter", count, type, rop), window);
  const int n = window.size(), r = window.rank();
  const size_t es = dtype_size(type);
  // In place (out is this rank's block of in) the output lines were just read: no streaming.
  const bool in_place = static_cast<const uint8_t*>(out) ==
                        static_cast<const uint8_t*>(in) + static_cast<size_t>(r) * count * es;
  const bool stream = count * es >= kStreamBytes && !in_place;
  const SharedWindow* w = &window;
  // A registered input is read where it is: chunk s of block j at (j * count + off) elements.
  const size_t message = static_cast<size_t>(n) * count * es;
  const SharedWindow::Place whole = place_of(*w, in, message, message);
  add_chunks(*op, window, SharedPattern::kReduceScatter, type, first_seq, count,
             [&](uint64_t seq, size_t slot, size_t off, size_t len) {
    const uint8_t* src = static_cast<const uint8_t*>(in);
    const SharedWindow::Place input = advanced(whole, off * es);
    Chain chain;
    chain.stages.push_back(fill_stage(w, seq, slot, input, SharedWindow::Place{}, [=] {
      for (int j = 0; j < n; ++j)
        std::memcpy(w->data(r, slot) + static_cast<size_t>(j) * len * es,
                    src + (static_cast<size_t>(j) * count + off) * es, len * es);
    }));
    chain.stages.push_back(reduce_stage(w, seq, slot, 0, len, type, rop,
                                        static_cast<uint8_t*>(out) + off * es, stream,
                                        SharedWindow::kRead, !stream, static_cast<size_t>(r),
                                        len * es, count * es));
    if (!input.in_slot()) chain.stages.push_back(release_stage(w, seq, slot));
    return chain;
  });
  return op;
}

std::unique_ptr<Op> build_shared_all_gather(const SharedWindow& window, uint64_t first_seq,
                                            const void* in, void* out, size_t count,
                                            DataType type) {
  auto op = shared_op(op_name("all_gather", count, type), window);
  const int n = window.size(), r = window.rank();
  const size_t es = dtype_size(type);
  const bool stream = count * es * static_cast<size_t>(n) >= kStreamBytes;
  const SharedWindow* w = &window;
  const SharedWindow::Place in_place = place_of(*w, in, count * es, static_cast<size_t>(n) * count * es);
  add_chunks(*op, window, SharedPattern::kAllGather, type, first_seq, count,
             [&](uint64_t seq, size_t slot, size_t off, size_t len) {
    const uint8_t* src = static_cast<const uint8_t*>(in) + off * es;
    uint8_t* base = static_cast<uint8_t*>(out);
    const SharedWindow::Place input = advanced(in_place, off * es);
    Chain chain;
    chain.stages.push_back(fill_stage(w, seq, slot, input, SharedWindow::Place{},
                                      [=] { std::memcpy(w->data(r, slot), src, len * es); }));
    Stage gather;
    gather.gate = [=] { return first_behind(*w, slot, SharedWindow::kFilled, seq + 1, r); };
    gather.after = [=] {
      for (int k = 0; k < n; ++k) {
        const int j = (r + k) % n;
        uint8_t* to = base + (static_cast<size_t>(j) * count + off) * es;
        const uint8_t* from = j == r ? src : w->input(j, slot, len * es);
        if (to != from) stream_copy(to, from, len * es, stream);
      }
      w->counter(r, slot, SharedWindow::kRead).store(seq + 1, std::memory_order_release);
    };
    chain.stages.push_back(std::move(gather));
    if (!input.in_slot()) chain.stages.push_back(release_stage(w, seq, slot));
    return chain;
  });
  return op;
}

size_t shared_chunk_count(const SharedWindow& window, size_t count, DataType type,
                          SharedPattern pattern) {
  const size_t per_chunk = chunk_elements(window, type, pattern);
  return (count + per_chunk - 1) / per_chunk;
}

}  // namespace cohort::transport::coll
