// The checkpoint file layout shared by the writer and the reader, and its two hash functions
// (crc32c from core/base/checksum.h, shared with graph files; hash64).
//
// One file, little-endian:
//   [0, 64)            header: magic "COHORTCK", u32 format version, u32 manifest length,
//                      u64 data offset, u64 data length, u32 manifest CRC32C, zeros, and at
//                      60 a u32 CRC32C of bytes [0, 60)
//   [64, 64 + M)       manifest: a FlatBuffer (checkpoint.fbs, identifier "CHCK") of M bytes
//   [data offset, end) data: every tensor and blob, each starting at a multiple of 64 relative
//                      to the data offset (= 64 + M rounded up to 64); all padding is zero
// Every byte is covered: header and manifest by their CRCs, tensors and blobs by theirs, and
// padding must be zero — so any flipped bit is detected before anything is loaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/base/checksum.h"

namespace cohort::checkpoint {

// The format version written by this build; files with a larger version are rejected.
constexpr uint32_t kCheckpointFormatVersion = 1;
constexpr char kMagic[8] = {'C', 'O', 'H', 'O', 'R', 'T', 'C', 'K'};
constexpr size_t kHeaderSize = 64;
constexpr uint64_t kAlignment = 64;

struct Header {
  uint32_t version = 0;
  uint32_t manifest_length = 0;
  uint64_t data_offset = 0;
  uint64_t data_length = 0;
  uint32_t manifest_crc = 0;
};

inline uint64_t align_up(uint64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

// Encodes header into out[kHeaderSize] (magic, fields, zero padding and the header CRC).
void encode_header(const Header& header, uint8_t* out);
// Decodes in[kHeaderSize]; returns false with a reason when the magic or the CRC is wrong.
bool decode_header(const uint8_t* in, Header* header, std::string* reason);

using cohort::crc32c;  // core/base/checksum.h

// FNV-1a, 64 bit, chainable like crc32c; identifies models (not a defence against forgery).
uint64_t hash64(const void* data, size_t size, uint64_t h = 0xcbf29ce484222325ull);

}  // namespace cohort::checkpoint
