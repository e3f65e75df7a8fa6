// CRC32C, the one checksum of cohort's files: checkpoints (core/checkpoint) and graph files
// (core/graph) both verify every byte with it before they load anything.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cohort {

// CRC32C (Castagnoli, reflected polynomial 0x82F63B78), chainable: crc32c(b, crc32c(a)) equals
// the CRC of a followed by b. crc32c("123456789") == 0xE3069283. It detects every error burst of
// up to 32 bits, so every changed byte of a file.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

}  // namespace cohort
