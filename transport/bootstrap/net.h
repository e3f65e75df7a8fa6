// Internal TCP helpers for the rendezvous store and the launcher: an owning file descriptor,
// listen/connect with deadlines, blocking-with-deadline send/recv, and the length-prefixed
// frame used on the wire. Every wait takes a deadline; errors name the address.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "transport/bootstrap/store.h"

namespace cohort::transport::net {

// Owns one file descriptor; closes it on destruction. Move-only.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// Milliseconds from now until deadline for poll(): 0 when past, at most one minute.
int poll_ms_until(Clock::time_point deadline);

// "host:port", with brackets around IPv6 literals.
std::string address_name(const std::string& host, int port);
// The numeric address of the socket's peer ("10.0.0.2:41234"), or "unknown peer".
std::string peer_name(int fd);

void set_nonblocking(int fd);

// Binds a listening socket to host:port (port 0 picks a free one; *port_out gets the bound
// port). Throws kInvalidArgument for an unresolvable host, kIo when bind or listen fails.
Fd listen_tcp(const std::string& host, int port, int backlog, int* port_out);

// Connects to host:port. With retry, refused or unreachable attempts are repeated until the
// deadline (the server may not be up yet) and end in kTimeout; without retry they throw
// kPeerFailed at once. The returned socket is blocking with TCP_NODELAY.
Fd connect_tcp(const std::string& host, int port, Clock::time_point deadline, bool retry);

// Sends all bytes. Throws kPeerFailed naming `what` when the peer is gone, kTimeout at deadline.
void send_all(int fd, const void* data, size_t size, Clock::time_point deadline,
              const std::string& what);
// Receives exactly size bytes, with the same errors as send_all.
void recv_all(int fd, void* data, size_t size, Clock::time_point deadline, const std::string& what);

// Frames are a 4-byte little-endian length followed by that many bytes.
constexpr size_t kFrameHeaderBytes = 4;
void put_le32(uint8_t* out, uint32_t value);
uint32_t get_le32(const uint8_t* in);

}  // namespace cohort::transport::net
