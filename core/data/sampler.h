// Deterministic shuffled sampling over N examples, sharded across ranks and resumable.
// Epoch e's order is a Fisher-Yates permutation drawn from a generator seeded by (seed, e) with
// cohort's own integer arithmetic, so it is the same on every rank, compiler and platform. Rank
// r of world w takes positions r, r + w, r + 2w, ... of that order, floor(N / w) of them, so the
// ranks' shares are disjoint and equally long (the last N mod w of each epoch's order are left
// out). A batch may run over the end of an epoch into the next one.
#pragma once

#include <cstdint>
#include <vector>

namespace cohort::data {

// Where a sampler stands: the next example it returns is the index-th of this rank's share of
// epoch `epoch`. Saved in a checkpoint, it resumes the sequence exactly.
struct SamplerPosition {
  int64_t epoch = 0;
  int64_t index = 0;
  bool operator==(const SamplerPosition& o) const { return epoch == o.epoch && index == o.index; }
};

// One drawn example and the epoch it belongs to (datasets may vary an example by epoch).
struct SampleId {
  int64_t example = 0;
  int64_t epoch = 0;
};

struct SamplerOptions {
  uint64_t seed = 0;
  int64_t rank = 0;
  int64_t world = 1;
  bool shuffle = true;  // false: epoch order 0, 1, ..., N - 1 (still sharded)
};

class Sampler {
 public:
  // Throws kInvalidArgument when size < world, world < 1 or rank outside 0..world-1.
  Sampler(int64_t size, const SamplerOptions& options);

  SampleId next();
  std::vector<SampleId> next_batch(int64_t count);

  SamplerPosition position() const { return position_; }
  // Throws kInvalidArgument for a negative epoch or an index outside 0..per_epoch()-1.
  void set_position(const SamplerPosition& position);

  int64_t size() const { return size_; }
  int64_t per_epoch() const { return size_ / options_.world; }  // this rank's share
  const SamplerOptions& options() const { return options_; }

  // The whole order of epoch `epoch` (all ranks), for tests and inspection.
  std::vector<int64_t> epoch_order(int64_t epoch) const;

 private:
  void load_epoch(int64_t epoch);

  int64_t size_;
  SamplerOptions options_;
  SamplerPosition position_;
  std::vector<int64_t> share_;  // this rank's part of the order of share_epoch_
  int64_t share_epoch_ = -1;
};

// SplitMix64 (Steele et al., 2014): the mixing step of the generator above, also used by
// datasets to derive per-epoch values.
uint64_t mix64(uint64_t x);

}  // namespace cohort::data
