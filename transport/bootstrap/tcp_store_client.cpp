// TcpStore: the client side of the rendezvous store. Each call borrows a connection from a small
// pool (opening one when none is idle), sends one Request and waits for its Response, so
// concurrent callers never share a socket. Any socket failure closes that connection and turns
// into kPeerFailed; a reply that does not come in time into kTimeout.
#include <mutex>
#include <vector>

#include "core/base/error.h"
#include "transport/bootstrap/net.h"
#include "transport/bootstrap/tcp_store.h"
#include "transport/bootstrap/wire.h"

namespace cohort::transport {
namespace {

struct Reply {
  Status status = Status::kOk;
  Bytes value;
  int64_t number = 0;
  std::string message;
};

class TcpStore final : public Store {
 public:
  explicit TcpStore(const TcpStoreOptions& options, std::shared_ptr<TcpStoreServer> server)
      : options_(options),
        name_(net::address_name(options.host, options.port)),
        server_(std::move(server)) {
    auto deadline = Clock::now() + options_.connect_timeout;
    give_back(open(deadline, true));  // fail early: unreachable server or refused token
  }

  ~TcpStore() override {
    idle_.clear();  // close our connections before the server (if we own it) stops
    if (server_) server_->stop();
  }

  void set(const std::string& key, const Bytes& value) override {
    detail::check_key("TcpStore::set", key);
    detail::check_value("TcpStore::set", key, value.size());
    flatbuffers::FlatBufferBuilder fbb(256 + value.size());
    auto key_off = fbb.CreateString(key);
    auto value_off = fbb.CreateVector(value);
    fbb.Finish(wire::CreateRequest(fbb, wire::Op::Set, 0, key_off, value_off));
    Reply r = call(fbb, Clock::now() + options_.reply_timeout, str_cat("set of key '", key, "'"));
    check_ok(r, "set", key);
  }

  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override {
    detail::check_key("TcpStore::get", key);
    auto wait = detail::clamp_wait(timeout);
    flatbuffers::FlatBufferBuilder fbb(256);
    auto key_off = fbb.CreateString(key);
    fbb.Finish(wire::CreateRequest(fbb, wire::Op::Get, 0, key_off, 0, 0, wait.count()));
    // The server answers kTimeout at `wait`; reply_timeout covers a server that went silent.
    Reply r =
        call(fbb, Clock::now() + wait + options_.reply_timeout, str_cat("get of key '", key, "'"));
    check_ok(r, "get", key);
    return std::move(r.value);
  }

  int64_t add(const std::string& key, int64_t delta) override {
    detail::check_key("TcpStore::add", key);
    flatbuffers::FlatBufferBuilder fbb(256);
    auto key_off = fbb.CreateString(key);
    fbb.Finish(wire::CreateRequest(fbb, wire::Op::Add, 0, key_off, 0, delta));
    Reply r = call(fbb, Clock::now() + options_.reply_timeout, str_cat("add to key '", key, "'"));
    check_ok(r, "add", key);
    return r.number;
  }

 private:
  // The server's messages name the key already; an empty one gets the key from here.
  void check_ok(const Reply& r, const char* op, const std::string& key) {
    COHORT_CHECK(r.status == Status::kOk, r.status, "TcpStore::", op, " (server ", name_,
                 "): ", r.message.empty() ? "key '" + key + "' failed" : r.message);
  }

  // Opens a connection and presents the token. The first one retries until the server is up;
  // later ones fail at once, since a server that was up and is gone has failed.
  net::Fd open(Clock::time_point deadline, bool retry) {
    net::Fd fd = net::connect_tcp(options_.host, options_.port, deadline, retry);
    flatbuffers::FlatBufferBuilder fbb(128);
    auto token_off = fbb.CreateString(options_.token);
    fbb.Finish(wire::CreateRequest(fbb, wire::Op::Hello, token_off));
    Reply r = exchange(fd, fbb, deadline, "hello");
    COHORT_CHECK(r.status == Status::kOk, Status::kInvalidArgument, "TcpStore: server ", name_,
                 " refused this process: the job token is missing or wrong (", r.message, ")");
    return fd;
  }

  Reply call(const flatbuffers::FlatBufferBuilder& fbb, Clock::time_point deadline,
             const std::string& what) {
    net::Fd fd = take();
    if (!fd.valid()) fd = open(Clock::now() + options_.reply_timeout, false);
    Reply r = exchange(fd, fbb, deadline, what);  // a throw closes fd: its stream is unusable
    give_back(std::move(fd));
    return r;
  }

  Reply exchange(const net::Fd& fd, const flatbuffers::FlatBufferBuilder& fbb,
                 Clock::time_point deadline, const std::string& what) {
    std::string context = str_cat("TcpStore: ", what, " with server ", name_);
    uint8_t header[net::kFrameHeaderBytes];
    net::put_le32(header, static_cast<uint32_t>(fbb.GetSize()));
    net::send_all(fd.get(), header, sizeof(header), deadline, context);
    net::send_all(fd.get(), fbb.GetBufferPointer(), fbb.GetSize(), deadline, context);
    net::recv_all(fd.get(), header, sizeof(header), deadline, context);
    uint32_t len = net::get_le32(header);
    COHORT_CHECK(len > 0 && len <= wire::kMaxFrameBytes, Status::kCorrupt, context, ": reply of ",
                 len, " bytes is out of bounds");
    Bytes body(len);
    net::recv_all(fd.get(), body.data(), len, deadline, context);
    const wire::Response* resp = wire::verify_response(body.data(), body.size());
    COHORT_CHECK(resp, Status::kCorrupt, context, ": malformed reply");
    Reply r;
    bool known = resp->status() >= 0 && resp->status() <= static_cast<int>(Status::kInvalidState);
    COHORT_CHECK(known, Status::kCorrupt, context, ": reply has unknown status ", resp->status());
    r.status = static_cast<Status>(resp->status());
    if (resp->value()) r.value.assign(resp->value()->begin(), resp->value()->end());
    r.number = resp->number();
    if (resp->message()) r.message = resp->message()->str();
    return r;
  }

  net::Fd take() {
    std::lock_guard<std::mutex> lock(mu_);
    if (idle_.empty()) return net::Fd();
    net::Fd fd = std::move(idle_.back());
    idle_.pop_back();
    return fd;
  }

  void give_back(net::Fd fd) {
    std::lock_guard<std::mutex> lock(mu_);
    idle_.push_back(std::move(fd));
  }

  TcpStoreOptions options_;
  std::string name_;
  std::shared_ptr<TcpStoreServer> server_;  // set only on the hosting rank
  std::mutex mu_;
  std::vector<net::Fd> idle_;
};

}  // namespace

std::shared_ptr<Store> connect_tcp_store(const TcpStoreOptions& options) {
  return std::make_shared<TcpStore>(options, nullptr);
}

std::shared_ptr<Store> host_tcp_store(const TcpStoreOptions& options, int* port_out) {
  auto server = std::make_shared<TcpStoreServer>(options.host, options.port, options.token);
  TcpStoreOptions client = options;
  client.port = server->port();
  if (port_out) *port_out = client.port;
  return std::make_shared<TcpStore>(client, std::move(server));
}

}  // namespace cohort::transport
