// TCP helpers: resolve, listen, connect with retry until a deadline, and send/recv loops that
// poll() against a deadline so no call can block forever.
#include "transport/bootstrap/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>

#include "core/base/error.h"

namespace cohort::transport::net {
namespace {

using AddrList = std::unique_ptr<addrinfo, void (*)(addrinfo*)>;

AddrList resolve(const std::string& host, int port, bool passive) {
  COHORT_CHECK(port >= 0 && port <= 65535, Status::kInvalidArgument, "port ", port,
               " is out of range [0, 65535] for host '", host, "'");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* list = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &list);
  COHORT_CHECK(rc == 0, Status::kInvalidArgument, "cannot resolve host '", host,
               "': ", gai_strerror(rc));
  return AddrList(list, freeaddrinfo);
}

std::string sockaddr_name(const sockaddr* sa) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (sa->sa_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    port = ntohs(in->sin_port);
  } else if (sa->sa_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    port = ntohs(in6->sin6_port);
  }
  return address_name(host, port);
}

// One non-blocking connect to one address, bounded by deadline; returns errno (0 = connected).
int try_connect(const addrinfo* ai, Clock::time_point deadline, Fd* out) {
  Fd fd(socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
  if (!fd.valid()) return errno;
  if (connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) return errno;
    pollfd p{fd.get(), POLLOUT, 0};
    int rc = poll(&p, 1, poll_ms_until(deadline));
    if (rc == 0) return ETIMEDOUT;
    if (rc < 0) return errno;
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return err;
  }
  int flags = fcntl(fd.get(), F_GETFL);
  fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  int one = 1;
  setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd.get(), SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  *out = std::move(fd);
  return 0;
}

}  // namespace

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

int poll_ms_until(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  // Round up so a wait does not spin at the last sub-millisecond.
  return static_cast<int>(std::clamp<int64_t>(left.count() + 1, 0, 60000));
}

std::string address_name(const std::string& host, int port) {
  bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string peer_name(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "unknown peer";
  return sockaddr_name(reinterpret_cast<sockaddr*>(&ss));
}

void set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  COHORT_CHECK(flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0, Status::kIo,
               "fcntl(O_NONBLOCK) failed: ", std::strerror(errno));
}

Fd listen_tcp(const std::string& host, int port, int backlog, int* port_out) {
  AddrList list = resolve(host, port, true);
  std::string last_error = "no address";
  for (addrinfo* ai = list.get(); ai; ai = ai->ai_next) {
    Fd fd(socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd.valid()) {
      last_error = std::strerror(errno);
      continue;
    }
    int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd.get(), backlog) != 0) {
      last_error = std::strerror(errno);
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len);
    int bound = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                         : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    if (port_out) *port_out = bound;
    return fd;
  }
  throw_error(Status::kIo,
              str_cat("cannot listen on ", address_name(host, port), ": ", last_error));
}

Fd connect_tcp(const std::string& host, int port, Clock::time_point deadline, bool retry) {
  AddrList list = resolve(host, port, false);
  auto backoff = std::chrono::milliseconds(10);
  for (;;) {
    int err = 0;
    for (addrinfo* ai = list.get(); ai; ai = ai->ai_next) {
      Fd fd;
      err = try_connect(ai, deadline, &fd);
      if (err == 0) return fd;
    }
    std::string why =
        str_cat("cannot connect to ", address_name(host, port), ": ", std::strerror(err));
    COHORT_CHECK(retry, Status::kPeerFailed, why);
    COHORT_CHECK(Clock::now() < deadline, Status::kTimeout, why, " (gave up at the deadline)");
    // The server may not be listening yet: back off, never past the deadline.
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    std::this_thread::sleep_for(std::max(std::chrono::milliseconds(0), std::min(backoff, left)));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
}

void send_all(int fd, const void* data, size_t size, Clock::time_point deadline,
              const std::string& what) {
  auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    COHORT_CHECK(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR),
                 Status::kPeerFailed, what, ": connection lost (",
                 n < 0 ? std::strerror(errno) : "closed", ")");
    pollfd pfd{fd, POLLOUT, 0};
    int rc = poll(&pfd, 1, poll_ms_until(deadline));
    COHORT_CHECK(rc != 0 || Clock::now() < deadline, Status::kTimeout, what,
                 ": send did not complete before the deadline");
  }
}

void recv_all(int fd, void* data, size_t size, Clock::time_point deadline,
              const std::string& what) {
  auto* p = static_cast<uint8_t*>(data);
  while (size > 0) {
    pollfd pfd{fd, POLLIN, 0};
    int rc = poll(&pfd, 1, poll_ms_until(deadline));
    if (rc == 0) {
      COHORT_CHECK(Clock::now() < deadline, Status::kTimeout, what,
                   ": no reply before the deadline");
      continue;
    }
    if (rc < 0) continue;  // EINTR
    ssize_t n = ::recv(fd, p, size, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    COHORT_CHECK(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR),
                 Status::kPeerFailed, what, ": connection lost (",
                 n < 0 ? std::strerror(errno) : "closed by the peer", ")");
  }
}

void put_le32(uint8_t* out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(value >> (8 * i));
}

uint32_t get_le32(const uint8_t* in) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(in[i]) << (8 * i);
  return v;
}

}  // namespace cohort::transport::net
