#pragma once
// The workers' store: a server of torch's own TCPStore protocol (store/torch_protocol.hpp), so
// that workers started with TORCHELASTIC_USE_AGENT_STORE=True find a store listening at
// MASTER_ADDR:MASTER_PORT before any of them starts, as torchrun's agent store is. Without it,
// rank 0 hosts the store inside init_process_group and every rank that connects before rank 0
// listens waits out torch's one-second retry.
//
// One io_context on a thread of its own. The keys and waiters are a StoreState of one
// namespace; a WAIT is answered when its keys exist, nothing polls. No secret: torch's client
// cannot prove one (docs/security.md says what that opens). A client that breaks the protocol,
// or asks for what is not served (torch 1.13's WATCH_KEY, 2.8's queues), loses its connection
// with a logged reason; the others go on.

#include <cstdint>
#include <memory>
#include <string>

#include "store/torch_protocol.hpp"

namespace ddprun::store {

struct TorchStoreOptions {
  // Empty: every address, IPv6 and IPv4, as torch's own server binds (the workers reach it by
  // whatever MASTER_ADDR resolves to where they run).
  std::string host;
  std::uint16_t port = 0;  // 0: the kernel picks one
  TorchLimits limits;
  // Connections open at once; beyond it a new one is refused. It shares the open-files limit
  // with the agent that runs it, which keeps two such stores: 0 is a quarter of that limit.
  std::size_t max_connections = 0;
};

class TorchStoreServer {
 public:
  // Binds, listens and serves at once. Throws ConnectionError naming the address when it cannot
  // bind.
  explicit TorchStoreServer(TorchStoreOptions options = {});
  // Closes every connection and joins the thread.
  ~TorchStoreServer();
  TorchStoreServer(const TorchStoreServer&) = delete;
  TorchStoreServer& operator=(const TorchStoreServer&) = delete;

  std::uint16_t port() const;
  // "host:port" as bound, IPv6 in brackets.
  std::string endpoint() const;
  // Queries answered since it started. Thread-safe.
  std::uint64_t requests_served() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddprun::store
