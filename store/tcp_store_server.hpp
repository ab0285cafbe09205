#pragma once
// The TCP store server: one Asio io_context on one thread, many clients. Blocking requests are
// answered by the server when their keys appear (no polling anywhere). A client that breaks the
// protocol loses its own connection, with a logged reason; the server and other clients go on.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "store/protocol.hpp"
#include "store/store.hpp"

namespace ddprun::store {

struct StoreServerOptions {
  std::string host = "127.0.0.1";  // bound exactly as given; "::1" and "0.0.0.0" work too
  std::uint16_t port = 0;          // 0: the kernel picks one; see TcpStoreServer::port()
  store::Limits limits;
  // A client that has sent part of a frame and nothing more for this long is dropped; so is
  // one that has not completed the handshake (hello, and auth with a secret) in this time.
  std::chrono::milliseconds read_timeout{30'000};
  // The job's shared secret (store/store_auth.hpp); empty: clients are not asked for one.
  std::string secret;
  // The run id of the agent that hosts this store (it ends with that job); clients of other
  // jobs are told, and refuse to depend on it. Empty: a store of its own (ddprun-store).
  std::string served_for;
  // Connections open at once. At the limit a new one takes the place of the oldest one that
  // has not finished its handshake (a flood of idle or unauthenticated connections cannot lock
  // agents out); with none such, it is refused. 0: the open-files limit less 64.
  std::size_t max_connections = 0;
  // Bytes of unfinished requests held over all connections; a connection that would go
  // beyond is closed, not buffered.
  std::size_t max_buffered = 256 * 1024 * 1024;
};

class TcpStoreServer {
 public:
  // Resolves, binds and listens at once. Throws ConnectionError naming host:port when the
  // address cannot be resolved or bound (e.g. the port is taken). Warns when it listens beyond
  // loopback without a secret.
  explicit TcpStoreServer(StoreServerOptions options);
  // Stops and joins the background thread, if any.
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  std::uint16_t port() const;
  // "host:port" as bound, IPv6 in brackets.
  std::string endpoint() const;

  // Serves on a background thread until stop() or destruction.
  void start();
  // Serves on the calling thread until stop() is called (from another thread or a handler).
  void run();
  // Closes the listener and every connection. Thread-safe, idempotent.
  void stop();

  // A client for the process that runs this server: the same keys and waiters as a TCP client
  // of run `run_id` sees, without a socket, a handshake or a hop to the server's thread (an
  // in-process MemoryStore handle; thread-safe to create). It stays usable after stop().
  std::unique_ptr<Store> local_client(const std::string& run_id) const;

  // Requests its TCP clients have made since it started (handshakes not counted). Thread-safe.
  std::uint64_t requests_served() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddprun::store
