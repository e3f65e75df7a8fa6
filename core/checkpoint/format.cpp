// Header encoding and the model hash of the checkpoint format (format.h). The CRC32C lives in
// core/base/checksum.cpp, shared with graph files.
#include "core/checkpoint/format.h"

#include <cstring>

namespace cohort::checkpoint {

namespace {

void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

constexpr size_t kHeaderCrcAt = kHeaderSize - 4;

}  // namespace

uint64_t hash64(const void* data, size_t size, uint64_t h) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < size; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

void encode_header(const Header& h, uint8_t* out) {
  std::memset(out, 0, kHeaderSize);
  std::memcpy(out, kMagic, sizeof(kMagic));
  put32(out + 8, h.version);
  put32(out + 12, h.manifest_length);
  put64(out + 16, h.data_offset);
  put64(out + 24, h.data_length);
  put32(out + 32, h.manifest_crc);
  put32(out + kHeaderCrcAt, crc32c(out, kHeaderCrcAt));
}

bool decode_header(const uint8_t* in, Header* h, std::string* reason) {
  if (std::memcmp(in, kMagic, sizeof(kMagic)) != 0) {
    *reason = "not a cohort checkpoint (bad magic)";
    return false;
  }
  if (get32(in + kHeaderCrcAt) != crc32c(in, kHeaderCrcAt)) {
    *reason = "the header checksum does not match (corrupted header)";
    return false;
  }
  h->version = get32(in + 8);
  h->manifest_length = get32(in + 12);
  h->data_offset = get64(in + 16);
  h->data_length = get64(in + 24);
  h->manifest_crc = get32(in + 32);
  return true;
}

}  // namespace cohort::checkpoint
