#include "workers/ddp_engine.hpp"

#include <map>
#include <tuple>

#include <fmt/format.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/utils.h>

#include "workers/worker_error.hpp"

namespace ddprun::workers {
namespace {

// torch: _broadcast_coalesced with 250 MB buffers.
constexpr std::size_t kBroadcastChunkBytes = std::size_t{250} << 20;

std::size_t bytes_of(const at::Tensor& t) {
  return static_cast<std::size_t>(t.numel()) * t.element_size();
}

std::string mib(std::size_t bytes) {
  return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20));
}

}  // namespace

// Runs after AccumulateGrad has written the parameter's .grad for this backward pass.
class DdpEngine::ReadyHook final : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(DdpEngine* engine, std::size_t param) : engine_(engine), param_(param) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    std::lock_guard<std::mutex> lock(engine_->mutex_);
    engine_->mark_ready(param_, /*from_hook=*/true);
    return outputs;
  }

 private:
  DdpEngine* engine_;
  std::size_t param_;
};

DdpEngine::DdpEngine(torch::nn::Module& module, Collectives& comm, DdpOptions options)
    : module_(module), comm_(comm), broadcast_buffers_(options.broadcast_buffers) {
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    if (!item.value().requires_grad()) continue;
    params_.push_back(item.value());
    names_.push_back(item.key());
  }
  build_buckets(options);
  ready_.assign(params_.size(), false);
  pending_.resize(buckets_.size());
  works_.resize(buckets_.size());
  for (std::size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].params.size();

  if (options.broadcast_initial_state) broadcast_state();

  for (std::size_t i = 0; i < params_.size(); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(params_[i]);
    if (!acc) throw WorkerError(fmt::format("parameter {} has no gradient accumulator", names_[i]));
    hook_keys_.push_back(acc->add_post_hook(std::make_unique<ReadyHook>(this, i)));
    accumulators_.push_back(std::move(acc));
  }
}

DdpEngine::~DdpEngine() {
  for (std::size_t i = 0; i < accumulators_.size(); ++i) {
    accumulators_[i]->del_post_hook(hook_keys_[i]);
  }
  // An exception may have left collectives in flight; they write into our buckets.
  for (auto& work : works_) {
    if (!work) continue;
    try {
      work->wait();
    } catch (...) {  // the error was reported where it happened
    }
  }
}

void DdpEngine::build_buckets(const DdpOptions& options) {
  bucket_of_.assign(params_.size(), 0);
  slot_of_.assign(params_.size(), 0);
  std::size_t limit = options.first_bucket_bytes;
  Bucket current;
  auto close = [&] {
    if (current.params.empty()) return;
    const at::Tensor& first = params_[current.params.front()];
    std::int64_t numel = 0;
    for (std::size_t k = 0; k < current.params.size(); ++k) {
      current.offsets.push_back(numel);
      bucket_of_[current.params[k]] = buckets_.size();
      slot_of_[current.params[k]] = k;
      numel += params_[current.params[k]].numel();
    }
    current.flat = at::zeros({numel}, first.options().requires_grad(false));
    buckets_.push_back(std::move(current));
    current = Bucket{};
    limit = options.bucket_bytes;
  };
  for (std::size_t i = params_.size(); i-- > 0;) {
    const at::Tensor& p = params_[i];
    if (!current.params.empty()) {
      const at::Tensor& q = params_[current.params.front()];
      if (q.scalar_type() != p.scalar_type() || q.device() != p.device()) close();
    }
    current.params.push_back(i);
    current.bytes += bytes_of(p);
    if (current.bytes >= limit) close();
  }
  close();
}

void DdpEngine::broadcast_coalesced(const std::vector<at::Tensor>& tensors) {
  if (comm_.size() == 1 || tensors.empty()) return;
  torch::NoGradGuard no_grad;
  // Group by dtype and device, in order, up to kBroadcastChunkBytes per collective.
  std::map<std::tuple<int, std::string>, std::vector<at::Tensor>> groups;
  std::vector<std::tuple<int, std::string>> order;
  for (const auto& t : tensors) {
    auto key = std::make_tuple(static_cast<int>(t.scalar_type()), t.device().str());
    if (!groups.count(key)) order.push_back(key);
    groups[key].push_back(t);
  }
  for (const auto& key : order) {
    const auto& group = groups[key];
    std::size_t begin = 0;
    while (begin < group.size()) {
      std::size_t end = begin;
      std::size_t bytes = 0;
      std::vector<at::Tensor> flat_parts;
      while (end < group.size() && (end == begin || bytes + bytes_of(group[end]) <= kBroadcastChunkBytes)) {
        bytes += bytes_of(group[end]);
        flat_parts.push_back(group[end].reshape({-1}));
        ++end;
      }
      at::Tensor flat = at::cat(flat_parts);
      const std::string what = fmt::format("broadcast of {} tensors ({}) from rank 0", end - begin, mib(bytes));
      auto work = checked(what, [&] { return comm_.broadcast(flat, 0); });
      checked(what, [&] { work->wait(); });
      if (comm_.rank() != 0) {
        std::int64_t offset = 0;
        for (std::size_t k = begin; k < end; ++k) {
          at::Tensor t = group[k];
          t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
          offset += t.numel();
        }
      }
      begin = end;
    }
  }
}

void DdpEngine::broadcast_state() {
  std::vector<at::Tensor> state;
  for (const auto& p : module_.parameters()) state.push_back(p);
  for (const auto& b : module_.buffers()) state.push_back(b);
  broadcast_coalesced(state);
}

void DdpEngine::before_forward() {
  if (!broadcast_buffers_) return;
  broadcast_coalesced(module_.buffers());
}

void DdpEngine::mark_ready(std::size_t param, bool from_hook) {
  if (ready_[param]) {
    throw WorkerError(fmt::format(
        "parameter {} received a second gradient before finish_backward(); call "
        "finish_backward() after every backward()", names_[param]));
  }
  ready_[param] = true;
  Bucket& bucket = buckets_[bucket_of_[param]];
  const at::Tensor& p = params_[param];
  at::Tensor slot = bucket.flat.narrow(0, bucket.offsets[slot_of_[param]], p.numel()).view(p.sizes());
  torch::NoGradGuard no_grad;
  if (p.grad().defined()) {
    slot.copy_(p.grad());
  } else {
    slot.zero_();
  }
  if (--pending_[bucket_of_[param]] == 0) start_ready_buckets(from_hook);
}

void DdpEngine::start_ready_buckets(bool from_hook) {
  while (next_to_start_ < buckets_.size() && pending_[next_to_start_] == 0) {
    const std::size_t b = next_to_start_;
    Bucket& bucket = buckets_[b];
    works_[b] = checked(fmt::format("allreduce of gradient bucket {} ({})", b, mib(bucket.bytes)),
                        [&] { return comm_.allreduce_sum(bucket.flat); });
    if (from_hook) ++started_in_backward_;
    ++next_to_start_;
  }
}

void DdpEngine::finish_backward() {
  std::lock_guard<std::mutex> lock(mutex_);
  // Parameters without a gradient this iteration (unused in forward): zeros, in bucket order.
  for (const Bucket& bucket : buckets_) {
    for (std::size_t param : bucket.params) {
      if (!ready_[param]) mark_ready(param, /*from_hook=*/false);
    }
  }
  torch::NoGradGuard no_grad;
  const double world = static_cast<double>(comm_.size());
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    checked(fmt::format("allreduce of gradient bucket {} ({})", b, mib(bucket.bytes)),
            [&] { works_[b]->wait(); });
    works_[b].reset();
    bucket.flat.div_(world);
    for (std::size_t k = 0; k < bucket.params.size(); ++k) {
      at::Tensor& p = params_[bucket.params[k]];
      at::Tensor avg = bucket.flat.narrow(0, bucket.offsets[k], p.numel()).view(p.sizes());
      if (p.grad().defined()) {
        p.mutable_grad().copy_(avg);
      } else {
        p.mutable_grad() = avg.clone(at::MemoryFormat::Preserve).contiguous(p.suggest_memory_format());
      }
    }
  }
  ready_.assign(params_.size(), false);
  for (std::size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].params.size();
  next_to_start_ = 0;
  started_in_backward_last_ = started_in_backward_;
  started_in_backward_ = 0;
}

}  // namespace ddprun::workers
