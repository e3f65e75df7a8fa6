// TcpStoreServer: one thread runs a poll() loop over the listening socket, a wake-up pipe (for
// stop()) and every client connection; all store state is owned by that thread, so it needs no
// lock. Nothing a connection sends is trusted: frame lengths are bounded before allocation
// (4 KiB until the job token was shown), every FlatBuffer is verified, and any violation closes
// the connection. A get() on a missing key parks the connection until a set/add of that key
// or the get's deadline.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "core/base/error.h"
#include "core/base/log.h"
#include "transport/bootstrap/net.h"
#include "transport/bootstrap/tcp_store.h"
#include "transport/bootstrap/wire.h"

namespace cohort::transport {
namespace {

constexpr auto kHelloTimeout = std::chrono::seconds(10);
constexpr size_t kMaxConnections = 4096;
constexpr size_t kMaxReadPerWakeup = size_t{4} << 20;  // fairness between connections

struct Conn {
  net::Fd fd;
  std::string peer;
  bool authed = false;
  bool dead = false;
  Clock::time_point hello_deadline;
  uint8_t header[net::kFrameHeaderBytes] = {};
  size_t header_got = 0;
  bool in_body = false;
  Bytes body;
  size_t body_got = 0;
  Bytes out;  // the reply still to send
  size_t out_sent = 0;
  bool close_after_flush = false;
  bool waiting = false;  // parked in a get()
  std::string wait_key;
  Clock::time_point wait_deadline;
  std::chrono::milliseconds wait_ms{0};
};

// Compares the token without an early exit, so timing does not reveal a matching prefix.
bool token_matches(const std::string& expected, const flatbuffers::String* given) {
  size_t given_size = given->size();
  size_t n = std::max(expected.size(), given_size);
  unsigned diff = expected.size() != given_size;
  for (size_t i = 0; i < n; ++i) {
    unsigned char a = i < expected.size() ? static_cast<unsigned char>(expected[i]) : 0;
    unsigned char b = i < given_size ? static_cast<unsigned char>(given->c_str()[i]) : 0;
    diff |= a ^ b;
  }
  return diff == 0;
}

}  // namespace

class TcpStoreServer::Impl {
 public:
  Impl(const std::string& host, int port, const std::string& token);
  ~Impl() { stop(); }
  void stop();
  int port() const { return port_; }

 private:
  void run() noexcept;
  bool poll_once();
  int poll_timeout_ms() const;
  void accept_all();
  void on_readable(uint64_t id, Conn& c);
  bool read_some(Conn& c, size_t* budget);
  void on_frame(uint64_t id, Conn& c);
  void on_hello(Conn& c);
  void on_request(uint64_t id, Conn& c, const wire::Request* req);
  void reply(Conn& c, Bytes frame);
  void flush(Conn& c);
  void drop(Conn& c, const std::string& why, LogLevel level);
  void wake_waiters(const std::string& key);
  void expire(Clock::time_point now);
  void sweep();

  int port_ = 0;
  std::string name_;
  std::string token_;
  net::Fd listen_;
  net::Fd wake_read_;
  net::Fd wake_write_;
  std::thread thread_;
  std::mutex stop_mu_;
  bool stopped_ = false;
  bool accept_paused_ = false;
  Clock::time_point accept_resume_{};
  uint64_t next_id_ = 1;
  std::map<uint64_t, Conn> conns_;
  std::map<std::string, Bytes> values_;
  std::multimap<std::string, uint64_t> waiters_;
};

TcpStoreServer::Impl::Impl(const std::string& host, int port, const std::string& token)
    : token_(token) {
  listen_ = net::listen_tcp(host, port, 1024, &port_);
  net::set_nonblocking(listen_.get());
  name_ = net::address_name(host, port_);
  int fds[2];
  COHORT_CHECK(pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0, Status::kIo, "TcpStore server ", name_,
               ": pipe2 failed: ", std::strerror(errno));
  wake_read_.reset(fds[0]);
  wake_write_.reset(fds[1]);
  thread_ = std::thread([this] { run(); });
}

void TcpStoreServer::Impl::stop() {
  std::lock_guard<std::mutex> lock(stop_mu_);
  if (stopped_) return;
  stopped_ = true;
  char byte = 1;
  while (write(wake_write_.get(), &byte, 1) < 0 && errno == EINTR) {
  }
  if (thread_.joinable()) thread_.join();
  conns_.clear();  // closes every client connection: their calls fail with kPeerFailed
  listen_.reset();
}

void TcpStoreServer::Impl::run() noexcept {
  try {
    while (poll_once()) {
    }
  } catch (const std::exception& e) {
    log(LogLevel::kError, str_cat("TcpStore server ", name_, ": stopped serving: ", e.what()));
  }
  conns_.clear();
  listen_.reset();
}

int TcpStoreServer::Impl::poll_timeout_ms() const {
  Clock::time_point next = Clock::now() + std::chrono::seconds(60);
  for (const auto& [id, c] : conns_) {
    if (!c.authed) next = std::min(next, c.hello_deadline);
    if (c.waiting) next = std::min(next, c.wait_deadline);
  }
  if (accept_paused_) next = std::min(next, accept_resume_);
  return net::poll_ms_until(next);
}

// One round of the loop; returns false when stop() asked the thread to end.
bool TcpStoreServer::Impl::poll_once() {
  std::vector<pollfd> fds{{wake_read_.get(), POLLIN, 0}, {listen_.get(), POLLIN, 0}};
  if (accept_paused_) fds[1].fd = -1;
  std::vector<uint64_t> ids;
  for (auto& [id, c] : conns_) {
    fds.push_back({c.fd.get(), static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
    ids.push_back(id);
  }
  int rc = poll(fds.data(), fds.size(), poll_timeout_ms());
  COHORT_CHECK(rc >= 0 || errno == EINTR, Status::kIo, "poll failed: ", std::strerror(errno));
  if (fds[0].revents) return false;
  if (accept_paused_ && Clock::now() >= accept_resume_) accept_paused_ = false;
  if (fds[1].revents & POLLIN) accept_all();
  for (size_t i = 0; i < ids.size(); ++i) {
    short ev = fds[i + 2].revents;
    Conn& c = conns_.at(ids[i]);
    if (!c.dead && (ev & POLLOUT)) flush(c);
    if (!c.dead && (ev & (POLLIN | POLLHUP | POLLERR))) on_readable(ids[i], c);
  }
  expire(Clock::now());
  sweep();
  return true;
}

void TcpStoreServer::Impl::accept_all() {
  for (;;) {
    int fd = accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        log(LogLevel::kWarn, str_cat("TcpStore server ", name_, ": cannot accept more ",
                                     "connections: ", std::strerror(errno)));
        accept_paused_ = true;  // retry later instead of spinning on a full descriptor table
        accept_resume_ = Clock::now() + std::chrono::milliseconds(200);
      }
      return;  // EAGAIN, or a connection that went away before accept
    }
    net::Fd sock(fd);
    std::string peer = net::peer_name(fd);
    if (conns_.size() >= kMaxConnections) {
      log(LogLevel::kWarn, str_cat("TcpStore server ", name_, ": refused connection from ", peer,
                                   ": too many connections (", kMaxConnections, ")"));
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    Conn& c = conns_[next_id_++];
    c.fd = std::move(sock);
    c.peer = peer;
    c.hello_deadline = Clock::now() + kHelloTimeout;
  }
}

void TcpStoreServer::Impl::on_readable(uint64_t id, Conn& c) {
  size_t budget = kMaxReadPerWakeup;
  while (!c.dead && budget > 0 && read_some(c, &budget)) {
    if (c.in_body && c.body_got == c.body.size()) {
      c.in_body = false;
      c.header_got = 0;
      on_frame(id, c);
      c.body = Bytes();
    }
  }
}

// Reads what is available of the current header or body; false when nothing more is there.
bool TcpStoreServer::Impl::read_some(Conn& c, size_t* budget) {
  uint8_t* dst = c.in_body ? c.body.data() + c.body_got : c.header + c.header_got;
  size_t want = c.in_body ? c.body.size() - c.body_got : net::kFrameHeaderBytes - c.header_got;
  ssize_t n = recv(c.fd.get(), dst, std::min(want, *budget), 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
  if (n <= 0) {
    bool clean = n == 0 && !c.in_body && c.header_got == 0;
    drop(c,
         n == 0 ? (clean ? "closed" : "closed in the middle of a message")
                : std::string("recv failed: ") + std::strerror(errno),
         clean ? LogLevel::kDebug : LogLevel::kWarn);
    return false;
  }
  *budget -= static_cast<size_t>(n);
  if (c.in_body) {
    c.body_got += static_cast<size_t>(n);
    return true;
  }
  c.header_got += static_cast<size_t>(n);
  if (c.header_got < net::kFrameHeaderBytes) return true;
  size_t len = net::get_le32(c.header);
  size_t limit = c.authed ? wire::kMaxFrameBytes : wire::kMaxHelloFrameBytes;
  if (len == 0 || len > limit) {
    drop(c, str_cat("frame of ", len, " bytes (limit ", limit, ")"), LogLevel::kWarn);
    return false;
  }
  c.body.assign(len, 0);
  c.body_got = 0;
  c.in_body = true;
  return true;
}

void TcpStoreServer::Impl::on_frame(uint64_t id, Conn& c) {
  if (!c.authed) return on_hello(c);
  if (c.waiting || !c.out.empty()) {
    return drop(c, "sent a request while the previous one was pending", LogLevel::kWarn);
  }
  std::string why;
  const wire::Request* req = wire::verify_request(c.body.data(), c.body.size(), &why);
  if (!req) return drop(c, "malformed request: " + why, LogLevel::kWarn);
  if (req->op() == wire::Op::Hello) return drop(c, "second hello", LogLevel::kWarn);
  on_request(id, c, req);
}

void TcpStoreServer::Impl::on_hello(Conn& c) {
  std::string why;
  const wire::Request* req = wire::verify_request(c.body.data(), c.body.size(), &why);
  if (req && req->op() != wire::Op::Hello) why = "first message is not a hello";
  if (why.empty() && !token_matches(token_, req->token())) why = "wrong job token";
  if (!why.empty()) {
    log(LogLevel::kWarn,
        str_cat("TcpStore server ", name_, ": refused connection from ", c.peer, ": ", why));
    c.close_after_flush = true;
    return reply(c, wire::make_response_frame(Status::kInvalidArgument,
                                              "connection refused: job token missing or wrong"));
  }
  c.authed = true;
  reply(c, wire::make_response_frame(Status::kOk, ""));
}

void TcpStoreServer::Impl::on_request(uint64_t id, Conn& c, const wire::Request* req) {
  std::string key = req->key()->str();
  if (req->op() == wire::Op::Set) {
    Bytes& slot = values_[key];
    slot.clear();
    if (req->value()) slot.assign(req->value()->begin(), req->value()->end());
    reply(c, wire::make_response_frame(Status::kOk, ""));
    return wake_waiters(key);
  }
  if (req->op() == wire::Op::Add) {
    Bytes& slot = values_[key];
    try {
      int64_t sum = detail::add_to_counter(key, slot, req->delta());
      reply(c, wire::make_response_frame(Status::kOk, "", nullptr, sum));
    } catch (const Error& e) {
      reply(c, wire::make_response_frame(e.status(), e.what()));
    }
    return wake_waiters(key);
  }
  auto it = values_.find(key);  // Get
  if (it != values_.end()) return reply(c, wire::make_response_frame(Status::kOk, "", &it->second));
  c.waiting = true;
  c.wait_key = key;
  c.wait_ms = detail::clamp_wait(std::chrono::milliseconds(req->timeout_ms()));
  c.wait_deadline = Clock::now() + c.wait_ms;
  waiters_.emplace(key, id);
}

void TcpStoreServer::Impl::reply(Conn& c, Bytes frame) {
  c.out = std::move(frame);
  c.out_sent = 0;
  flush(c);
}

void TcpStoreServer::Impl::flush(Conn& c) {
  while (c.out_sent < c.out.size()) {
    ssize_t n = send(c.fd.get(), c.out.data() + c.out_sent, c.out.size() - c.out_sent,
                     MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (n <= 0) return drop(c, str_cat("send failed: ", std::strerror(errno)), LogLevel::kWarn);
    c.out_sent += static_cast<size_t>(n);
  }
  c.out = Bytes();
  c.out_sent = 0;
  if (c.close_after_flush) drop(c, "refused", LogLevel::kDebug);
}

void TcpStoreServer::Impl::drop(Conn& c, const std::string& why, LogLevel level) {
  if (c.dead) return;
  c.dead = true;
  log(level, str_cat("TcpStore server ", name_, ": closing connection from ", c.peer, ": ", why));
}

void TcpStoreServer::Impl::wake_waiters(const std::string& key) {
  auto range = waiters_.equal_range(key);
  auto found = values_.find(key);
  for (auto it = range.first; it != range.second; ++it) {
    Conn& c = conns_.at(it->second);
    c.waiting = false;
    if (!c.dead) reply(c, wire::make_response_frame(Status::kOk, "", &found->second));
  }
  waiters_.erase(range.first, range.second);
}

void TcpStoreServer::Impl::expire(Clock::time_point now) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    Conn& c = conns_.at(it->second);
    if (c.dead || c.wait_deadline > now) {
      ++it;
      continue;
    }
    c.waiting = false;
    reply(c, wire::make_response_frame(
                 Status::kTimeout,
                 str_cat("key '", c.wait_key, "' was not set within ", c.wait_ms.count(), " ms")));
    it = waiters_.erase(it);
  }
  for (auto& [id, c] : conns_) {
    if (!c.authed && !c.dead && c.hello_deadline <= now) {
      log(LogLevel::kWarn, str_cat("TcpStore server ", name_, ": refused connection from ", c.peer,
                                   ": no job token within ", kHelloTimeout.count(), " s"));
      drop(c, "hello timeout", LogLevel::kDebug);
    }
  }
}

void TcpStoreServer::Impl::sweep() {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    it = conns_.at(it->second).dead ? waiters_.erase(it) : std::next(it);
  }
  for (auto it = conns_.begin(); it != conns_.end();) {
    it = it->second.dead ? conns_.erase(it) : std::next(it);
  }
}

TcpStoreServer::TcpStoreServer(const std::string& host, int port, const std::string& token)
    : impl_(std::make_unique<Impl>(host, port, token)) {}
TcpStoreServer::~TcpStoreServer() = default;
int TcpStoreServer::port() const { return impl_->port(); }
void TcpStoreServer::stop() { impl_->stop(); }

}  // namespace cohort::transport
