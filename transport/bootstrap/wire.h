// Internal: encoding and verification of the store's wire messages (store_msg.fbs). Lengths are
// checked before the FlatBuffers Verifier runs, because the verifier only asserts its size limit.
#pragma once

#include <cstdint>
#include <string>

#include "core/base/status.h"
#include "transport/bootstrap/store.h"
#include "transport/bootstrap/store_msg_generated.h"
#include "transport/bootstrap/store_util.h"

namespace cohort::transport::wire {

// A connection that has not presented the token may send at most this much.
constexpr size_t kMaxHelloFrameBytes = 4096;
// Any frame: the largest value and key plus room for the FlatBuffer tables.
constexpr size_t kMaxFrameBytes = detail::kMaxValueBytes + detail::kMaxKeyBytes + 4096;

// The length-prefixed bytes of a finished builder.
Bytes encode_frame(const flatbuffers::FlatBufferBuilder& fbb);

// Verifies a received Request (structure and the limits on key and value lengths). Returns
// nullptr and sets *why when it is malformed.
const Request* verify_request(const uint8_t* data, size_t size, std::string* why);
// Verifies a received Response; nullptr when malformed.
const Response* verify_response(const uint8_t* data, size_t size);

Bytes make_response_frame(Status status, const std::string& message, const Bytes* value = nullptr,
                          int64_t number = 0);

}  // namespace cohort::transport::wire
