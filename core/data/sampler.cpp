// Shuffled, sharded, resumable sampling; see sampler.h.
#include "core/data/sampler.h"

#include <utility>

#include "core/base/error.h"

namespace cohort::data {

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

namespace {

// A counter-based stream of 64-bit values and unbiased draws below a bound (rejection).
class Stream {
 public:
  explicit Stream(uint64_t key) : key_(key) {}
  uint64_t next() { return mix64(key_ ^ mix64(counter_++)); }
  uint64_t below(uint64_t bound) {
    const uint64_t limit = ~uint64_t{0} - (~uint64_t{0} % bound);  // a multiple of bound
    uint64_t r = next();
    while (r >= limit) r = next();
    return r % bound;
  }

 private:
  uint64_t key_;
  uint64_t counter_ = 0;
};

}  // namespace

Sampler::Sampler(int64_t size, const SamplerOptions& options) : size_(size), options_(options) {
  COHORT_CHECK(options.world >= 1, Status::kInvalidArgument, "sampler: world (", options.world, ") must be >= 1");
  COHORT_CHECK(options.rank >= 0 && options.rank < options.world, Status::kInvalidArgument, "sampler: rank (",
               options.rank, ") must be in 0..", options.world - 1);
  COHORT_CHECK(size >= options.world, Status::kInvalidArgument, "sampler: ", size,
               " examples cannot give each of ", options.world, " ranks at least one");
}

std::vector<int64_t> Sampler::epoch_order(int64_t epoch) const {
  std::vector<int64_t> order(static_cast<size_t>(size_));
  for (int64_t i = 0; i < size_; ++i) order[static_cast<size_t>(i)] = i;
  if (!options_.shuffle) return order;
  Stream s(mix64(options_.seed) ^ mix64(0x5eed0000ULL + static_cast<uint64_t>(epoch)));
  for (int64_t i = size_ - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(s.below(static_cast<uint64_t>(i) + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

void Sampler::load_epoch(int64_t epoch) {
  if (share_epoch_ == epoch) return;
  std::vector<int64_t> order = epoch_order(epoch);
  share_.resize(static_cast<size_t>(per_epoch()));
  for (int64_t k = 0; k < per_epoch(); ++k)
    share_[static_cast<size_t>(k)] = order[static_cast<size_t>(options_.rank + k * options_.world)];
  share_epoch_ = epoch;
}

SampleId Sampler::next() {
  load_epoch(position_.epoch);
  SampleId id{share_[static_cast<size_t>(position_.index)], position_.epoch};
  if (++position_.index == per_epoch()) {
    position_.index = 0;
    ++position_.epoch;
  }
  return id;
}

std::vector<SampleId> Sampler::next_batch(int64_t count) {
  COHORT_CHECK(count >= 0, Status::kInvalidArgument, "sampler: batch size (", count, ") must be >= 0");
  std::vector<SampleId> ids;
  ids.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) ids.push_back(next());
  return ids;
}

void Sampler::set_position(const SamplerPosition& p) {
  COHORT_CHECK(p.epoch >= 0, Status::kInvalidArgument, "sampler: epoch (", p.epoch, ") must be >= 0");
  COHORT_CHECK(p.index >= 0 && p.index < per_epoch(), Status::kInvalidArgument, "sampler: index (", p.index,
               ") must be in 0..", per_epoch() - 1, " (this rank's share of an epoch)");
  position_ = p;
}

}  // namespace cohort::data
