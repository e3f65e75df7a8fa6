// Header encoding and the checksums of the checkpoint format (format.h). CRC32C is computed
// slicing-by-8 from tables built once; it runs at a few GB/s, well below disk time.
#include "core/checkpoint/format.h"

#include <array>
#include <cstring>

namespace cohort::checkpoint {

namespace {

using Tables = std::array<std::array<uint32_t, 256>, 8>;

Tables make_tables() {
  Tables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i)
    for (size_t s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xffu];
  return t;
}

const Tables& tables() {
  static const Tables t = make_tables();
  return t;
}

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

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
  const Tables& t = tables();
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  while (size >= 8) {
    const uint32_t lo = crc ^ (static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
                               static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24);
    crc = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
          t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]];
    p += 8;
    size -= 8;
  }
  while (size-- > 0) crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xffu];
  return ~crc;
}

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
