#pragma once
// Rendezvous and process groups, the way torch.distributed.init_process_group("env://") does
// it: rank 0 hosts a c10d TCPStore at MASTER_ADDR:MASTER_PORT (every rank connects to it; with
// torchrun's TORCHELASTIC_USE_AGENT_STORE=True the agent's store is used instead, under
// "/worker/attempt_<restart>"), and the process group lives under the "default_pg" prefix.
// Gradients go through the data group (NCCL on CUDA, else Gloo); small CPU-side exchanges
// (checkpoint bytes, checksums, losses) go through a Gloo control group, which is the data
// group itself on CPU.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/Tensor.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "workers/collectives.hpp"
#include "workers/dist_env.hpp"
#include "workers/options.hpp"

namespace ddprun::workers {

class Distributed {
 public:
  // Blocks until all WORLD_SIZE ranks have joined (or `timeout` passes). Throws WorkerError
  // naming host, rank, the store address and c10d's message.
  static std::unique_ptr<Distributed> connect(const DistEnv& env, Backend backend,
                                              std::chrono::milliseconds timeout);
  // Gloo over an existing store (tests: a c10d::HashStore shared by threads); the Gloo device
  // binds to `gloo_host`.
  static std::unique_ptr<Distributed> over_store(c10::intrusive_ptr<c10d::Store> store, int rank,
                                                 int world_size, std::chrono::milliseconds timeout,
                                                 const std::string& gloo_host);
  ~Distributed();
  Distributed(const Distributed&) = delete;
  Distributed& operator=(const Distributed&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  Collectives& data() { return *data_; }
  Collectives& control() { return control_ ? *control_ : *data_; }

  // Blocking helpers on the control group; all ranks must call them in the same order.
  // After it, every rank's `bytes` (a 1-D uint8 CPU tensor; undefined counts as empty) holds
  // root's. Other ranks receive into a new populated_bytes buffer.
  void broadcast_bytes(at::Tensor& bytes, int root);
  // Every rank's values (same count everywhere), rank by rank.
  std::vector<std::vector<std::int64_t>> allgather_int64(const std::vector<std::int64_t>& mine);
  // Every rank's tensor (same shape and dtype everywhere, CPU).
  std::vector<at::Tensor> allgather_tensor(const at::Tensor& mine);
  double allreduce_sum(double value);
  void barrier();

 private:
  Distributed(int rank, int world_size, std::chrono::milliseconds timeout);
  void wait(WorkHandle& work, const char* what);

  int rank_;
  int world_size_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::unique_ptr<Collectives> data_;
  std::unique_ptr<Collectives> control_;  // null on CPU: data_ is Gloo already
};

// Whether this binary has the NCCL/CUDA path.
bool built_with_cuda();

}  // namespace ddprun::workers
