// Host memory that the ranks on one host read and write directly, mapped by UCX: a rank
// allocates a region with ucp_mem_map (ALLOCATE: a sysv or posix shared segment where those
// transports are enabled) and packs its key; a peer unpacks the key on its endpoint and, when
// the transport can map it (ucp_rkey_ptr), gets a pointer into the same pages. Over transports
// that cannot (tcp alone, or a peer on another host) attaching fails with the reason and the
// caller keeps to messages. Progress thread only: keys live on the worker's endpoints.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ucp/api/ucp.h>

namespace cohort::transport::ucx {

// What a peer needs to map a region: its address in the owner and the packed UCX key.
struct RegionKey {
  uint64_t address = 0;
  uint64_t bytes = 0;
  std::vector<uint8_t> packed;

  // Fixed-size encoding for collectives that exchange equal-length blocks: {address, bytes,
  // key length, key}, zero-padded to `size`. encode() returns false when the key does not fit;
  // decode() rejects lengths beyond the block.
  bool encode(uint8_t* out, size_t size) const;
  static bool decode(const uint8_t* in, size_t size, RegionKey* key);
};

// A region this rank owns; unmapped (and its key released) on destruction.
class LocalRegion {
 public:
  // nullptr and `why` when UCX cannot allocate or pack it.
  static std::unique_ptr<LocalRegion> map(ucp_context_h context, size_t bytes, std::string* why);
  ~LocalRegion();
  LocalRegion(const LocalRegion&) = delete;
  LocalRegion& operator=(const LocalRegion&) = delete;

  uint8_t* data() const { return data_; }
  size_t bytes() const { return key_.bytes; }
  const RegionKey& key() const { return key_; }

 private:
  LocalRegion() = default;
  ucp_context_h context_ = nullptr;
  ucp_mem_h memh_ = nullptr;
  uint8_t* data_ = nullptr;
  RegionKey key_;
};

// A peer's region mapped into this process; the mapping stays valid (the pages live) until
// destruction, even after the owner unmaps its side or exits.
class PeerRegion {
 public:
  // nullptr and `why` when the endpoint's transports cannot map the key into this process.
  static std::unique_ptr<PeerRegion> attach(ucp_ep_h ep, const RegionKey& key, std::string* why);
  ~PeerRegion();
  PeerRegion(const PeerRegion&) = delete;
  PeerRegion& operator=(const PeerRegion&) = delete;

  uint8_t* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  PeerRegion() = default;
  ucp_rkey_h rkey_ = nullptr;
  uint8_t* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace cohort::transport::ucx
