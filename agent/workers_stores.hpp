#pragma once
// The workers' stores this agent serves (store/torch_store_server.hpp), one per round in which
// it holds group rank 0: the workers of the round find theirs listening before any of them
// starts, and a round's keys never meet the next one's (an elastic round after a membership
// change keeps TORCHELASTIC_RESTART_COUNT, so torch's per-attempt prefix would not part them).
// Two are kept: the store of the round that runs, whose workers may still be stopping on other
// nodes, and the one offered for the next round (agent/settlement.hpp). Opening a third closes
// the oldest, whose round is over on every node.
//
// A static job of one node has nothing else on --master-port, and there, as torchrun's agent
// store does, the workers' store listens on that port: a script that names it
// (init_method="tcp://host:PORT" as in torchrun's own tests) reaches it. Its one agent has
// stopped every worker before it opens the next round's store, so each round's store takes
// the port afresh. When the port is taken, the kernel picks one (MASTER_PORT says which).

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>

#include <spdlog/spdlog.h>

#include "common/error.hpp"
#include "store/torch_store_server.hpp"

namespace ddprun {

class WorkersStores {
 public:
  explicit WorkersStores(std::optional<std::uint16_t> preferred_port = std::nullopt)
      : preferred_port_(preferred_port) {}

  // A new store listening on every address; returns its port. Throws ConnectionError.
  int open() {
    if (preferred_port_) {
      stores_.clear();
      store::TorchStoreOptions options;
      options.port = *preferred_port_;
      try {
        return opened(std::make_unique<store::TorchStoreServer>(options));
      } catch (const ConnectionError& e) {
        spdlog::info("{}; the workers' store listens on a port the kernel picks", e.what());
      }
    }
    return opened(std::make_unique<store::TorchStoreServer>());
  }

 private:
  int opened(std::unique_ptr<store::TorchStoreServer> store) {
    stores_.push_back(std::move(store));
    if (stores_.size() > kKept) stores_.pop_front();
    spdlog::debug("workers' store listening on {}", stores_.back()->endpoint());
    return stores_.back()->port();
  }

  static constexpr std::size_t kKept = 2;
  std::optional<std::uint16_t> preferred_port_;
  std::deque<std::unique_ptr<store::TorchStoreServer>> stores_;
};

}  // namespace ddprun
