#pragma once
// Runs N ranks of a Gloo process group as N threads of this process, over one c10d::HashStore;
// the devices bind to 127.0.0.1. Exceptions in a rank are rethrown in the caller (the first).
// The ranks share everything that is global to a process, unlike real ranks: torch's default
// random generator (manual_seed, rand, module initialization), the environment, the working
// directory, torch's thread settings. A body must not touch them: build models and data on the
// calling thread before run_ranks (or give each rank its own torch::Generator).

#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "workers/distributed.hpp"

namespace ddprun::workers::test {

inline void run_ranks(int world_size, const std::function<void(Distributed&)>& body) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(world_size));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        auto dist = Distributed::over_store(store, rank, world_size, std::chrono::seconds(60),
                                            "127.0.0.1");
        body(*dist);
      } catch (...) {
        errors[static_cast<std::size_t>(rank)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace ddprun::workers::test
