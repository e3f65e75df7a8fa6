// SharedWindow: region layout, setup through UCX and the counters.
#include "transport/coll/shared_window.h"

#include <cstring>

#include "core/base/error.h"
#include "transport/ucx/engine.h"

namespace cohort::transport::coll {

namespace {
constexpr size_t kLine = 64;  // one counter per cache line: owners do not share lines
constexpr size_t kPage = 4096;
static_assert(sizeof(std::atomic<uint64_t>) == 8 && std::atomic<uint64_t>::is_always_lock_free,
              "shared counters need lock-free 64-bit atomics");
}  // namespace

SharedWindow::SharedWindow(int rank, int size, size_t slots, size_t slot_bytes)
    : rank_(rank),
      size_(size),
      slots_(slots),
      slot_bytes_(slot_bytes),
      peers_(static_cast<size_t>(size)),
      bases_(static_cast<size_t>(size), nullptr) {}

SharedWindow::~SharedWindow() = default;

size_t SharedWindow::counters_bytes() const {
  return (slots_ * 3 * kLine + kPage - 1) / kPage * kPage;
}

size_t SharedWindow::region_bytes() const { return counters_bytes() + slots_ * slot_bytes_; }

bool SharedWindow::map(ucx::Engine& engine, uint8_t* key, std::string* why) {
  mine_ = ucx::LocalRegion::map(engine.context(), region_bytes(), why);
  if (!mine_) return false;
  uint8_t* base = mine_->data();
  for (size_t i = 0; i < slots_ * 3; ++i) new (base + i * kLine) std::atomic<uint64_t>(0);
  bases_[static_cast<size_t>(rank_)] = base;
  if (!mine_->key().encode(key, kKeyBytes)) {
    *why = str_cat("the packed UCX key (", mine_->key().packed.size(), " bytes) exceeds ",
                   kKeyBytes, " bytes");
    return false;
  }
  return true;
}

bool SharedWindow::attach(ucx::Engine& engine, const std::vector<int>& members,
                          const uint8_t* keys, std::string* why) {
  for (int j = 0; j < size_; ++j) {
    if (j == rank_) continue;
    ucx::RegionKey key;
    if (!ucx::RegionKey::decode(keys + static_cast<size_t>(j) * kKeyBytes, kKeyBytes, &key)) {
      *why = str_cat("rank ", j, " offers no shared region");
      return false;
    }
    if (key.bytes != region_bytes()) {
      *why = str_cat("rank ", j, "'s region has ", key.bytes, " bytes, expected ", region_bytes());
      return false;
    }
    std::string reason;
    auto region = ucx::PeerRegion::attach(engine.endpoint(members[static_cast<size_t>(j)]), key, &reason);
    if (!region) {
      *why = str_cat("rank ", j, "'s region cannot be mapped here: ", reason);
      return false;
    }
    bases_[static_cast<size_t>(j)] = region->data();
    peers_[static_cast<size_t>(j)] = std::move(region);
  }
  return true;
}

void SharedWindow::release() {
  ready_.store(false, std::memory_order_release);
  for (auto& p : peers_) p.reset();
  mine_.reset();
  std::fill(bases_.begin(), bases_.end(), nullptr);
}

std::atomic<uint64_t>& SharedWindow::counter(int rank, size_t slot, Counter c) const {
  uint8_t* p = bases_[static_cast<size_t>(rank)] + (slot * 3 + static_cast<size_t>(c)) * kLine;
  return *reinterpret_cast<std::atomic<uint64_t>*>(p);
}

uint8_t* SharedWindow::data(int rank, size_t slot) const {
  return bases_[static_cast<size_t>(rank)] + counters_bytes() + slot * slot_bytes_;
}

}  // namespace cohort::transport::coll
