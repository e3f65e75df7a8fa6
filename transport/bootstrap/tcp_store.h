// The TCP rendezvous store: rank 0 runs a TcpStoreServer (one thread, poll()) and every rank,
// rank 0 included, talks to it through a TcpStore client. A client must present the job token
// in its first message; the server refuses and logs connections that do not. Messages are
// FlatBuffers (store_msg.fbs) behind a 4-byte little-endian length. When the server goes away,
// clients' calls fail with Status::kPeerFailed instead of hanging.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "transport/bootstrap/store.h"

namespace cohort::transport {

struct TcpStoreOptions {
  std::string host = "127.0.0.1";  // server address (client) or bind address (server)
  int port = 0;                    // 0 on a server picks a free port
  std::string token;               // the job token; must match the server's
  // How long a client keeps retrying to reach a server that is not up yet.
  std::chrono::milliseconds connect_timeout{30000};
  // How long a client waits for a reply beyond the server-side wait of get().
  std::chrono::milliseconds reply_timeout{30000};
};

// Serves a key-value store on host:port from a background thread until stop() or destruction.
// Thread-safe; stop() closes every connection, so clients see kPeerFailed.
class TcpStoreServer {
 public:
  // Binds and starts serving. Throws kInvalidArgument (bad host/port), kIo (bind failed).
  TcpStoreServer(const std::string& host, int port, const std::string& token);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  // The bound port (the one picked when constructed with port 0).
  int port() const;
  // Stops serving and joins the thread; idempotent, bounded.
  void stop();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Connects to the server at options.host:options.port, retrying until connect_timeout, and
// presents options.token. Throws kTimeout (server never came up), kInvalidArgument (token
// refused), kPeerFailed (connection lost). The returned store is thread-safe: concurrent calls
// use separate connections.
std::shared_ptr<Store> connect_tcp_store(const TcpStoreOptions& options);

// Starts a TcpStoreServer on options.host:options.port and returns a client store connected to
// it that also keeps the server alive (the store of rank 0). *port_out gets the bound port.
std::shared_ptr<Store> host_tcp_store(const TcpStoreOptions& options, int* port_out = nullptr);

}  // namespace cohort::transport
