// Encoding and verification of the rendezvous store's FlatBuffers messages.
#include "transport/bootstrap/wire.h"

#include <cstring>

#include "transport/bootstrap/net.h"

namespace cohort::transport::wire {
namespace {

// Depth and table counts far above what one Request or Response needs.
constexpr int kMaxDepth = 8;
constexpr int kMaxTables = 16;

}  // namespace

Bytes encode_frame(const flatbuffers::FlatBufferBuilder& fbb) {
  Bytes frame(net::kFrameHeaderBytes + fbb.GetSize());
  net::put_le32(frame.data(), static_cast<uint32_t>(fbb.GetSize()));
  std::memcpy(frame.data() + net::kFrameHeaderBytes, fbb.GetBufferPointer(), fbb.GetSize());
  return frame;
}

const Request* verify_request(const uint8_t* data, size_t size, std::string* why) {
  flatbuffers::Verifier verifier(data, size, kMaxDepth, kMaxTables);
  if (!verifier.VerifyBuffer<Request>(nullptr)) {
    *why = "not a valid Request FlatBuffer";
    return nullptr;
  }
  const Request* req = flatbuffers::GetRoot<Request>(data);
  if (req->op() < Op::MIN || req->op() > Op::MAX) {
    *why = "unknown operation " + std::to_string(static_cast<int>(req->op()));
    return nullptr;
  }
  if (req->op() == Op::Hello) {
    if (!req->token()) *why = "hello without a token";
  } else if (!req->key() || req->key()->size() == 0) {
    *why = std::string(EnumNameOp(req->op())) + " without a key";
  } else if (req->key()->size() > detail::kMaxKeyBytes) {
    *why = "key of " + std::to_string(req->key()->size()) + " bytes is over the limit";
  } else if (req->value() && req->value()->size() > detail::kMaxValueBytes) {
    *why = "value of " + std::to_string(req->value()->size()) + " bytes is over the limit";
  }
  return why->empty() ? req : nullptr;
}

const Response* verify_response(const uint8_t* data, size_t size) {
  flatbuffers::Verifier verifier(data, size, kMaxDepth, kMaxTables);
  if (!verifier.VerifyBuffer<Response>(nullptr)) return nullptr;
  return flatbuffers::GetRoot<Response>(data);
}

Bytes make_response_frame(Status status, const std::string& message, const Bytes* value,
                          int64_t number) {
  flatbuffers::FlatBufferBuilder fbb(256 + (value ? value->size() : 0));
  flatbuffers::Offset<flatbuffers::Vector<uint8_t>> value_off;
  if (value) value_off = fbb.CreateVector(*value);
  flatbuffers::Offset<flatbuffers::String> message_off;
  if (!message.empty()) message_off = fbb.CreateString(message);
  fbb.Finish(CreateResponse(fbb, static_cast<int32_t>(status), value_off, number, message_off));
  return encode_frame(fbb);
}

}  // namespace cohort::transport::wire
