// TcpStoreServer against clients that do not follow the protocol: no or wrong job token,
// oversized, empty and malformed frames before and after the token. Each must close only that
// connection (and log the refusal) while the server keeps serving good clients.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <mutex>
#include <vector>

#include "core/base/error.h"
#include "core/base/log.h"
#include "transport/bootstrap/net.h"
#include "transport/bootstrap/store_msg_generated.h"
#include "transport/bootstrap/tcp_store.h"

namespace cohort::transport {
namespace {

using namespace std::chrono_literals;

struct LogCapture {
  std::mutex mu;
  std::vector<std::string> lines;
  static void sink(int, const char* message, void* user) {
    auto* self = static_cast<LogCapture*>(user);
    std::lock_guard<std::mutex> lock(self->mu);
    self->lines.emplace_back(message);
  }
  bool contains(const std::string& text) {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& l : lines) {
      if (l.find(text) != std::string::npos) return true;
    }
    return false;
  }
};

class HostileClients : public ::testing::Test {
 protected:
  void SetUp() override {
    set_log_sink(&LogCapture::sink, &log_);
    server_ = std::make_unique<TcpStoreServer>("127.0.0.1", 0, "secret");
  }
  void TearDown() override {
    server_.reset();
    set_log_sink(nullptr, nullptr);
  }

  net::Fd raw() { return net::connect_tcp("127.0.0.1", server_->port(), deadline(), false); }
  static Clock::time_point deadline() { return Clock::now() + 5s; }

  static void send_frame(const net::Fd& fd, uint32_t length, const Bytes& body) {
    uint8_t header[4];
    net::put_le32(header, length);
    net::send_all(fd.get(), header, 4, deadline(), "test");
    if (!body.empty()) net::send_all(fd.get(), body.data(), body.size(), deadline(), "test");
  }
  static Bytes request(wire::Op op, const std::string& token, const std::string& key) {
    flatbuffers::FlatBufferBuilder fbb;
    auto t = token.empty() ? 0 : fbb.CreateString(token).o;
    auto k = key.empty() ? 0 : fbb.CreateString(key).o;
    fbb.Finish(wire::CreateRequest(fbb, op, t, k));
    return Bytes(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  }
  static void send_request(const net::Fd& fd, const Bytes& body) {
    send_frame(fd, static_cast<uint32_t>(body.size()), body);
  }
  // Reads one reply frame; returns its status.
  static int read_status(const net::Fd& fd) {
    uint8_t header[4];
    net::recv_all(fd.get(), header, 4, deadline(), "test");
    Bytes body(net::get_le32(header));
    net::recv_all(fd.get(), body.data(), body.size(), deadline(), "test");
    flatbuffers::Verifier v(body.data(), body.size());
    EXPECT_TRUE(v.VerifyBuffer<wire::Response>(nullptr));
    return flatbuffers::GetRoot<wire::Response>(body.data())->status();
  }
  // True when the server closes the connection before the deadline (no more bytes arrive).
  static bool closed_by_server(const net::Fd& fd) {
    auto end = deadline();
    for (;;) {
      pollfd p{fd.get(), POLLIN, 0};
      if (poll(&p, 1, net::poll_ms_until(end)) <= 0) return false;
      char buf[256];
      ssize_t n = recv(fd.get(), buf, sizeof(buf), 0);
      if (n <= 0) return true;  // EOF or reset
    }
  }
  void expect_server_still_serves() {
    TcpStoreOptions o;
    o.port = server_->port();
    o.token = "secret";
    o.connect_timeout = 5s;
    auto store = connect_tcp_store(o);
    store->set("alive", Bytes{1});
    EXPECT_EQ(store->get("alive", 1s), Bytes{1});
  }

  LogCapture log_;
  std::unique_ptr<TcpStoreServer> server_;
};

TEST_F(HostileClients, WrongTokenIsRefusedAndLogged) {
  TcpStoreOptions o;
  o.port = server_->port();
  o.token = "not the secret";
  o.connect_timeout = 5s;
  try {
    connect_tcp_store(o);
    FAIL() << "a wrong token was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("job token"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(log_.contains("wrong job token"));
  EXPECT_TRUE(log_.contains("refused connection from 127.0.0.1:"));
  expect_server_still_serves();
}

TEST_F(HostileClients, RequestWithoutHelloIsRefused) {
  net::Fd fd = raw();
  send_request(fd, request(wire::Op::Set, "", "sneaky"));
  EXPECT_EQ(read_status(fd), static_cast<int>(Status::kInvalidArgument));
  EXPECT_TRUE(closed_by_server(fd));
  EXPECT_TRUE(log_.contains("first message is not a hello"));
  expect_server_still_serves();
}

TEST_F(HostileClients, OversizedFirstFrameClosesWithoutReadingIt) {
  net::Fd fd = raw();
  send_frame(fd, 1u << 20, {});  // over the 4 KiB allowed before the token
  EXPECT_TRUE(closed_by_server(fd));
  net::Fd huge = raw();
  send_frame(huge, 0xFFFFFFFFu, {});
  EXPECT_TRUE(closed_by_server(huge));
  expect_server_still_serves();
}

TEST_F(HostileClients, EmptyAndGarbageFramesClose) {
  net::Fd empty = raw();
  send_frame(empty, 0, {});
  EXPECT_TRUE(closed_by_server(empty));
  net::Fd garbage = raw();
  Bytes junk(64);
  for (size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<uint8_t>(i * 37 + 11);
  send_request(garbage, junk);
  EXPECT_TRUE(closed_by_server(garbage));
  net::Fd truncated = raw();
  Bytes hello = request(wire::Op::Hello, "secret", "");
  hello.resize(hello.size() / 2);
  send_request(truncated, hello);
  EXPECT_TRUE(closed_by_server(truncated));
  expect_server_still_serves();
}

TEST_F(HostileClients, MalformedRequestsAfterTheTokenClose) {
  auto authed = [&] {
    net::Fd fd = raw();
    send_request(fd, request(wire::Op::Hello, "secret", ""));
    EXPECT_EQ(read_status(fd), 0);
    return fd;
  };
  net::Fd garbage = authed();
  send_request(garbage, Bytes(100, 0xAB));
  EXPECT_TRUE(closed_by_server(garbage));
  net::Fd too_long = authed();
  send_frame(too_long, 0xFFFFFFFFu, {});  // over the 64 MiB value limit: never allocated
  EXPECT_TRUE(closed_by_server(too_long));
  net::Fd long_key = authed();
  send_request(long_key, request(wire::Op::Set, "", std::string(2000, 'k')));
  EXPECT_TRUE(closed_by_server(long_key));
  net::Fd no_key = authed();
  send_request(no_key, request(wire::Op::Get, "", ""));
  EXPECT_TRUE(closed_by_server(no_key));
  net::Fd bad_op = authed();
  send_request(bad_op, request(static_cast<wire::Op>(42), "", "k"));
  EXPECT_TRUE(closed_by_server(bad_op));
  EXPECT_TRUE(log_.contains("malformed request"));
  expect_server_still_serves();
}

TEST_F(HostileClients, ManyHalfOpenConnectionsDoNotBlockOthers) {
  std::vector<net::Fd> idle;
  for (int i = 0; i < 50; ++i) idle.push_back(raw());  // connected, never say hello
  net::Fd partial = raw();
  send_frame(partial, 100, Bytes(10, 0));  // a frame that never completes
  expect_server_still_serves();
}

}  // namespace
}  // namespace cohort::transport
