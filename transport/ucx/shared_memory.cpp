// Shared regions through UCX: ucp_mem_map / ucp_rkey_pack on the owner, ucp_ep_rkey_unpack /
// ucp_rkey_ptr on the peer.
#include "transport/ucx/shared_memory.h"

#include <cstring>

#include "core/base/error.h"

namespace cohort::transport::ucx {

namespace {
constexpr size_t kHeader = 3 * sizeof(uint64_t);
}

bool RegionKey::encode(uint8_t* out, size_t size) const {
  if (size < kHeader || packed.size() > size - kHeader) return false;
  std::memset(out, 0, size);
  uint64_t header[3] = {address, bytes, packed.size()};
  std::memcpy(out, header, kHeader);
  if (!packed.empty()) std::memcpy(out + kHeader, packed.data(), packed.size());
  return true;
}

bool RegionKey::decode(const uint8_t* in, size_t size, RegionKey* key) {
  if (size < kHeader) return false;
  uint64_t header[3];
  std::memcpy(header, in, kHeader);
  if (header[2] == 0 || header[2] > size - kHeader || header[0] == 0 || header[1] == 0) return false;
  key->address = header[0];
  key->bytes = header[1];
  key->packed.assign(in + kHeader, in + kHeader + header[2]);
  return true;
}

std::unique_ptr<LocalRegion> LocalRegion::map(ucp_context_h context, size_t bytes,
                                              std::string* why) {
  std::unique_ptr<LocalRegion> region(new LocalRegion());
  region->context_ = context;
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  params.address = nullptr;
  params.length = bytes;
  params.flags = UCP_MEM_MAP_ALLOCATE;
  ucs_status_t status = ucp_mem_map(context, &params, &region->memh_);
  if (status != UCS_OK) {
    region->memh_ = nullptr;
    *why = str_cat("ucp_mem_map of ", bytes, " bytes: ", ucs_status_string(status));
    return nullptr;
  }
  ucp_mem_attr_t attr{};
  attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
  status = ucp_mem_query(region->memh_, &attr);
  if (status != UCS_OK || attr.address == nullptr || attr.length < bytes) {
    *why = str_cat("ucp_mem_query: ", ucs_status_string(status));
    return nullptr;
  }
  region->data_ = static_cast<uint8_t*>(attr.address);
  void* packed = nullptr;
  size_t packed_size = 0;
  status = ucp_rkey_pack(context, region->memh_, &packed, &packed_size);
  if (status != UCS_OK) {
    *why = str_cat("ucp_rkey_pack: ", ucs_status_string(status));
    return nullptr;
  }
  auto* p = static_cast<const uint8_t*>(packed);
  region->key_.packed.assign(p, p + packed_size);
  ucp_rkey_buffer_release(packed);
  region->key_.address = reinterpret_cast<uint64_t>(region->data_);
  region->key_.bytes = bytes;
  return region;
}

LocalRegion::~LocalRegion() {
  if (memh_) ucp_mem_unmap(context_, memh_);
}

std::unique_ptr<PeerRegion> PeerRegion::attach(ucp_ep_h ep, const RegionKey& key, std::string* why) {
  if (ep == nullptr) {
    *why = "no endpoint";
    return nullptr;
  }
  std::unique_ptr<PeerRegion> region(new PeerRegion());
  ucs_status_t status = ucp_ep_rkey_unpack(ep, key.packed.data(), &region->rkey_);
  if (status != UCS_OK) {
    region->rkey_ = nullptr;
    *why = str_cat("ucp_ep_rkey_unpack: ", ucs_status_string(status));
    return nullptr;
  }
  void* local = nullptr;
  status = ucp_rkey_ptr(region->rkey_, key.address, &local);
  if (status != UCS_OK || local == nullptr) {
    *why = str_cat("ucp_rkey_ptr: ", ucs_status_string(status));
    return nullptr;
  }
  region->data_ = static_cast<uint8_t*>(local);
  region->bytes_ = key.bytes;
  return region;
}

PeerRegion::~PeerRegion() {
  if (rkey_) ucp_rkey_destroy(rkey_);
}

}  // namespace cohort::transport::ucx
