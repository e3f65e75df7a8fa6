// Layout of the 64-bit UCX tag. Tagged receives match on the worker, not on the endpoint, so a
// tag must say who sent it, on which communicator, for which operation and which message of it:
//   [63..54] communicator id (10 bits; kControlComm is reserved for engine control messages)
//   [53..40] source world rank (14 bits)
//   [39]     1 for user point-to-point messages, 0 for collectives
//   [38..24] operation sequence number (15 bits, wraps)
//   [23..0]  message index inside the operation (chunk << 10 | step)
#pragma once

#include <cstdint>

namespace cohort::transport::ucx {

constexpr int kMaxWorldSize = 1 << 14;
constexpr uint32_t kMaxCommId = (1u << 10) - 2;  // 1023 is reserved
constexpr uint32_t kControlComm = (1u << 10) - 1;
constexpr uint32_t kSeqMask = (1u << 15) - 1;
constexpr uint32_t kMaxChunks = 1u << 14;  // chunk index bits of the message index
constexpr uint32_t kMaxSteps = 1u << 10;   // step bits of the message index

constexpr uint64_t make_tag(uint32_t comm, uint32_t src, bool p2p, uint32_t seq, uint32_t sub) {
  return (uint64_t{comm} << 54) | (uint64_t{src & (kMaxWorldSize - 1)} << 40) |
         (uint64_t{p2p ? 1u : 0u} << 39) | (uint64_t{seq & kSeqMask} << 24) |
         uint64_t{sub & 0xFFFFFFu};
}
constexpr uint32_t tag_comm(uint64_t tag) { return static_cast<uint32_t>(tag >> 54); }
constexpr uint32_t tag_src(uint64_t tag) {
  return static_cast<uint32_t>((tag >> 40) & (kMaxWorldSize - 1));
}
constexpr uint32_t message_index(uint32_t chunk, uint32_t step) { return (chunk << 10) | step; }
constexpr uint64_t kMatchAll = ~uint64_t{0};
constexpr uint64_t kMatchComm = uint64_t{0x3FF} << 54;

}  // namespace cohort::transport::ucx
