// SharedWindow: region layout, setup through UCX and the counters.
#include "transport/coll/shared_window.h"

#include <cstring>

#include "core/base/error.h"
#include "transport/ucx/engine.h"

namespace cohort::transport::coll {

namespace {
constexpr size_t kLine = 64;  // one counter per cache line: owners do not share lines
// Per slot: the three counters, then the slot's places (input alloc, offset; result alloc,
// offset), each on its own line.
constexpr size_t kLinesPerSlot = 4;
constexpr size_t kPlaceLine = 3;
constexpr size_t kPage = 4096;
static_assert(sizeof(std::atomic<uint64_t>) == 8 && std::atomic<uint64_t>::is_always_lock_free,
              "shared counters need lock-free 64-bit atomics");
// Writes `region`'s key into `key` (SharedWindow::kKeyBytes).
bool encode_key(const ucx::LocalRegion& region, uint8_t* key, std::string* why) {
  if (region.key().encode(key, SharedWindow::kKeyBytes)) return true;
  *why = str_cat("the packed UCX key (", region.key().packed.size(), " bytes) exceeds ",
                 SharedWindow::kKeyBytes, " bytes");
  return false;
}

// Maps every peer's region of `bytes` (the window's, or one allocation's) from all ranks' keys
// into `peers` (communicator rank -> mapping; members maps those ranks to world ranks).
bool attach_peers(ucx::Engine& engine, const std::vector<int>& members, int rank, const uint8_t* keys,
                  size_t bytes, std::vector<std::unique_ptr<ucx::PeerRegion>>* peers, std::string* why) {
  for (size_t j = 0; j < members.size(); ++j) {
    if (static_cast<int>(j) == rank) continue;
    ucx::RegionKey key;
    if (!ucx::RegionKey::decode(keys + j * SharedWindow::kKeyBytes, SharedWindow::kKeyBytes, &key)) {
      *why = str_cat("rank ", j, " offers no region");
      return false;
    }
    if (key.bytes != bytes) {
      *why = str_cat("rank ", j, "'s region has ", key.bytes, " bytes, this rank's ", bytes);
      return false;
    }
    std::string reason;
    auto region = ucx::PeerRegion::attach(engine.endpoint(members[j]), key, &reason);
    if (!region) {
      *why = str_cat("rank ", j, "'s region cannot be mapped here: ", reason);
      return false;
    }
    (*peers)[j] = std::move(region);
  }
  return true;
}

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
  return (slots_ * kLinesPerSlot * kLine + kPage - 1) / kPage * kPage;
}

size_t SharedWindow::region_bytes() const { return counters_bytes() + slots_ * slot_bytes_; }

bool SharedWindow::map(ucx::Engine& engine, uint8_t* key, std::string* why) {
  mine_ = ucx::LocalRegion::map(engine.context(), region_bytes(), why);
  if (!mine_) return false;
  uint8_t* base = mine_->data();
  for (size_t i = 0; i < slots_ * kLinesPerSlot; ++i) {
    for (size_t w = 0; w < 4; ++w) new (base + i * kLine + w * 8) std::atomic<uint64_t>(0);
  }
  bases_[static_cast<size_t>(rank_)] = base;
  return encode_key(*mine_, key, why);
}

bool SharedWindow::attach(ucx::Engine& engine, const std::vector<int>& members,
                          const uint8_t* keys, std::string* why) {
  if (!attach_peers(engine, members, rank_, keys, region_bytes(), &peers_, why)) return false;
  for (int j = 0; j < size_; ++j) {
    if (j != rank_) bases_[static_cast<size_t>(j)] = peers_[static_cast<size_t>(j)]->data();
  }
  return true;
}

void SharedWindow::release() {
  ready_.store(false, std::memory_order_release);
  allocations_.clear();
  for (auto& p : peers_) p.reset();
  mine_.reset();
  std::fill(bases_.begin(), bases_.end(), nullptr);
}

std::atomic<uint64_t>& SharedWindow::counter(int rank, size_t slot, Counter c) const {
  uint8_t* p = bases_[static_cast<size_t>(rank)] + (slot * kLinesPerSlot + static_cast<size_t>(c)) * kLine;
  return *reinterpret_cast<std::atomic<uint64_t>*>(p);
}

std::atomic<uint64_t>* SharedWindow::place_words(int rank, size_t slot) const {
  uint8_t* p = bases_[static_cast<size_t>(rank)] + (slot * kLinesPerSlot + kPlaceLine) * kLine;
  return reinterpret_cast<std::atomic<uint64_t>*>(p);
}

bool SharedWindow::add_allocation(ucx::Engine& engine, uint64_t id, size_t bytes, uint8_t* key,
                                  std::string* why) {
  Allocation& a = allocations_[id];
  a.peers.resize(static_cast<size_t>(size_));
  a.mine = ucx::LocalRegion::map(engine.context(), bytes, why);
  if (!a.mine) {
    allocations_.erase(id);
    return false;
  }
  return encode_key(*a.mine, key, why);
}

bool SharedWindow::attach_allocation(ucx::Engine& engine, const std::vector<int>& members,
                                     uint64_t id, const uint8_t* keys, std::string* why) {
  auto it = allocations_.find(id);
  if (it == allocations_.end()) return false;
  return attach_peers(engine, members, rank_, keys, it->second.mine->bytes(), &it->second.peers, why);
}

void SharedWindow::settle_allocation(uint64_t id, bool shared) {
  auto it = allocations_.find(id);
  if (it == allocations_.end()) return;
  it->second.shared = shared;
  if (!shared) {
    for (auto& p : it->second.peers) p.reset();
  }
}

void SharedWindow::free_allocation(uint64_t id) { allocations_.erase(id); }

uint8_t* SharedWindow::allocation_data(uint64_t id) const {
  auto it = allocations_.find(id);
  return it == allocations_.end() || !it->second.mine ? nullptr : it->second.mine->data();
}

SharedWindow::Place SharedWindow::locate(const void* p, size_t bytes) const {
  const auto* q = static_cast<const uint8_t*>(p);
  for (const auto& [id, a] : allocations_) {
    if (!a.shared || !a.mine) continue;
    const uint8_t* base = a.mine->data();
    if (q >= base && q <= base + a.mine->bytes() && bytes <= static_cast<size_t>(base + a.mine->bytes() - q))
      return Place{id, static_cast<uint64_t>(q - base)};
  }
  return Place{};
}

void SharedWindow::publish(size_t slot, Place input, Place result) const {
  std::atomic<uint64_t>* w = place_words(rank_, slot);
  w[0].store(input.alloc, std::memory_order_relaxed);
  w[1].store(input.offset, std::memory_order_relaxed);
  w[2].store(result.alloc, std::memory_order_relaxed);
  w[3].store(result.offset, std::memory_order_relaxed);
  if (!input.in_slot() || !result.in_slot()) registered_chunks_.fetch_add(1, std::memory_order_relaxed);
}

const uint8_t* SharedWindow::placed(int rank, size_t slot, int which, size_t bytes) const {
  std::atomic<uint64_t>* w = place_words(rank, slot);
  const uint64_t id = w[2 * which].load(std::memory_order_relaxed);
  const uint64_t offset = w[2 * which + 1].load(std::memory_order_relaxed);
  if (id == 0) return data(rank, slot);
  auto it = allocations_.find(id);
  const uint8_t* base = nullptr;
  size_t size = 0;
  if (it != allocations_.end() && it->second.shared) {
    if (rank == rank_) {
      base = it->second.mine->data();
      size = it->second.mine->bytes();
    } else if (const auto& peer = it->second.peers[static_cast<size_t>(rank)]) {
      base = peer->data();
      size = peer->bytes();
    }
  }
  COHORT_CHECK(base != nullptr, Status::kInvalidArgument, "rank ", rank, "'s buffer is in allocation ",
               id, ", which this rank freed or never made (allocate and free in the same order on every rank)");
  COHORT_CHECK(offset <= size && bytes <= size - offset, Status::kInternal, "rank ", rank,
               " published ", bytes, " bytes at offset ", offset, " of a ", size, "-byte allocation");
  return base + offset;
}

const uint8_t* SharedWindow::input(int rank, size_t slot, size_t bytes) const {
  return placed(rank, slot, 0, bytes);
}

const uint8_t* SharedWindow::result(int rank, size_t slot, size_t bytes) const {
  return placed(rank, slot, 1, bytes);
}

bool SharedWindow::input_in_slot(int rank, size_t slot) const {
  return place_words(rank, slot)[0].load(std::memory_order_relaxed) == 0;
}

uint8_t* SharedWindow::data(int rank, size_t slot) const {
  return bases_[static_cast<size_t>(rank)] + counters_bytes() + slot * slot_bytes_;
}

}  // namespace cohort::transport::coll
