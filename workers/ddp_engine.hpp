#pragma once
// Distributed data parallelism for one torch::nn::Module, the way torch's DDP Reducer does it:
//  - at construction every rank receives rank 0's parameters and buffers (coalesced broadcasts);
//  - gradients are packed into buckets in reverse parameter order (the order backward produces
//    them): the first bucket small (1 MiB) so communication starts early, the others about
//    25 MiB; a bucket never mixes dtypes or devices;
//  - a post hook on every parameter's gradient accumulator copies the fresh gradient into its
//    bucket; when a bucket is complete its allreduce is started at once, during backward.
//    Buckets are started strictly in index order on every rank (collectives must match);
//  - finish_backward() waits for all of them and writes the averaged gradients (sum / world
//    size) back into each parameter's .grad, before the optimizer step.
// Parameters that got no gradient in an iteration count as zero (every rank still reduces every
// bucket, so ranks never disagree on the collectives they issue).
//
// Usage per step: before_forward(); loss = f(model(x)); loss.backward(); finish_backward();
// optimizer.step(). The hooks may run on autograd's device threads (CUDA); the engine locks.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include "workers/collectives.hpp"

namespace torch::autograd {
struct Node;
}

namespace ddprun::workers {

struct DdpOptions {
  std::size_t first_bucket_bytes = std::size_t{1} << 20;  // torch: dist._DEFAULT_FIRST_BUCKET_BYTES
  std::size_t bucket_bytes = std::size_t{25} << 20;       // torch: bucket_cap_mb=25
  bool broadcast_buffers = true;                          // rank 0's BatchNorm stats every step
  // Rank 0's parameters and buffers to every rank at construction, as torch's DDP does. Off
  // only when every rank already holds the same state (loaded from the same checkpoint bytes).
  bool broadcast_initial_state = true;
};

class DdpEngine {
 public:
  struct Bucket {
    std::vector<std::size_t> params;    // indices into the module's parameters(), reverse order
    std::vector<std::int64_t> offsets;  // element offset of each in `flat`
    std::size_t bytes = 0;
    at::Tensor flat;                    // the bucket's contiguous gradient buffer
  };

  // Throws WorkerError when the initial broadcast fails. The module and the collectives must
  // outlive the engine; parameters must already be on their final device and memory format.
  DdpEngine(torch::nn::Module& module, Collectives& comm, DdpOptions options = {});
  ~DdpEngine();  // removes the hooks
  DdpEngine(const DdpEngine&) = delete;
  DdpEngine& operator=(const DdpEngine&) = delete;

  // Rank 0's parameters and buffers to every rank (blocking); the constructor calls it unless
  // options.broadcast_initial_state is false.
  void broadcast_state();
  // Before each training forward: rank 0's buffers to every rank (if broadcast_buffers).
  void before_forward();
  // After backward: starts the buckets not started yet, waits for all, averages into .grad.
  // Throws WorkerError naming the bucket when a collective fails.
  void finish_backward();

  const std::vector<Bucket>& buckets() const { return buckets_; }
  // How many buckets the last iteration started from autograd hooks, i.e. during backward.
  std::size_t buckets_started_in_backward() const { return started_in_backward_last_; }

 private:
  class ReadyHook;
  void build_buckets(const DdpOptions& options);
  void mark_ready(std::size_t param, bool from_hook);   // locked by the caller
  void start_ready_buckets(bool from_hook);             // locked by the caller
  void broadcast_coalesced(const std::vector<at::Tensor>& tensors);

  torch::nn::Module& module_;
  Collectives& comm_;
  bool broadcast_buffers_;
  std::vector<at::Tensor> params_;
  std::vector<std::string> names_;
  std::vector<std::size_t> bucket_of_;   // param -> bucket
  std::vector<std::size_t> slot_of_;     // param -> position in its bucket
  std::vector<Bucket> buckets_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<std::uintptr_t> hook_keys_;

  std::mutex mutex_;
  std::vector<bool> ready_;
  std::vector<std::size_t> pending_;     // per bucket: parameters still without gradient
  std::vector<WorkHandle> works_;
  std::size_t next_to_start_ = 0;
  std::size_t started_in_backward_ = 0;
  std::size_t started_in_backward_last_ = 0;
};

}  // namespace ddprun::workers
