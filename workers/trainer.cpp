#include "workers/trainer.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <span>

#include <time.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <fmt/format.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#ifdef DDPRUN_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

#include "workers/byte_buffer.hpp"
#include "workers/checkpoint.hpp"
#include "workers/cifar10.hpp"
#include "workers/data.hpp"
#include "workers/ddp_engine.hpp"
#include "workers/distributed.hpp"
#include "workers/param_sync.hpp"
#include "workers/resnet.hpp"
#include "workers/sampler.hpp"
#include "workers/sgd_step.hpp"
#include "workers/torch_compat.hpp"
#include "workers/worker_error.hpp"

namespace ddprun::workers {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

template <class... Args>
void say(fmt::format_string<Args...> format, Args&&... args) {
  std::fputs((fmt::format(format, std::forward<Args>(args)...) + "\n").c_str(), stdout);
  std::fflush(stdout);
}

// --stamp_dir: the moment of `phase` (CLOCK_MONOTONIC seconds, the clock of ddprun's events
// file) in <dir>/<phase>.<restart count>.<rank>, for the benchmarks. A stamp that cannot be
// written is said on stderr and changes nothing else (the failure path stamps too).
void stamp(const Options& o, const DistEnv& env, const char* phase) {
  if (o.stamp_dir.empty()) return;
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  const auto name = fmt::format("{}.{}.{}", phase, env.restart_count, env.rank);
  const auto path = fs::path(o.stamp_dir) / name;
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "ddp_resnet: --stamp_dir: cannot write %s: %s\n", path.c_str(),
                 std::strerror(errno));
    return;
  }
  std::fprintf(f, "%lld.%09ld\n", static_cast<long long>(now.tv_sec), now.tv_nsec);
  std::fclose(f);
}

bool wants_cuda(const Options& o) {
  return o.device == Device::kCuda || (o.device == Device::kAuto && o.backend == Backend::kNccl);
}

// NCCL: the GPU LOCAL_RANK (one per rank, as NCCL requires). Gloo over CUDA tensors: ranks
// beyond the GPU count share them (LOCAL_RANK modulo the count).
torch::Device pick_device(const Options& options, const DistEnv& env) {
  if (!wants_cuda(options)) return torch::kCPU;
#ifdef DDPRUN_WITH_CUDA
  const bool nccl = options.backend == Backend::kNccl;
  const int count = checked("counting CUDA devices", [] { return static_cast<int>(c10::cuda::device_count()); });
  if (count == 0) {
    throw ConfigError(fmt::format("{}: no CUDA device is visible (check CUDA_VISIBLE_DEVICES and "
                                  "the driver); use --backend=gloo --device=cpu for CPU training",
                                  nccl ? "--backend=nccl" : "--device=cuda"));
  }
  if (nccl && env.local_rank >= count) {
    throw ConfigError(fmt::format("LOCAL_RANK {} but only {} CUDA devices are visible, and NCCL "
                                  "needs a GPU per rank; start at most {} workers on this node "
                                  "(or share GPUs with --backend=gloo --device=cuda)",
                                  env.local_rank, count, count));
  }
  const auto index = static_cast<c10::DeviceIndex>(env.local_rank % count);
  checked(fmt::format("selecting CUDA device {}", index), [&] { c10::cuda::set_device(index); });
  // Let cuDNN time its convolution algorithms for the shapes it sees (the batch never changes
  // shape but for an epoch's last one), as torch.backends.cudnn.benchmark = True does.
  at::globalContext().setBenchmarkCuDNN(true);
  return {torch::kCUDA, index};
#else
  (void)env;
  throw ConfigError("--backend=nccl/--device=cuda: this ddp_resnet was built without CUDA");
#endif
}

void synchronize(const torch::Device& device) {
#ifdef DDPRUN_WITH_CUDA
  if (device.is_cuda()) checked("cudaDeviceSynchronize", [] { c10::cuda::device_synchronize(); });
#else
  (void)device;
#endif
}

void to_channels_last(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& p : module.parameters()) {
    if (p.dim() == 4) p.set_data(p.data().contiguous(at::MemoryFormat::ChannelsLast));
  }
}

// bf16 autocast around forward and loss, like `with torch.autocast(device, torch.bfloat16)`.
class AutocastScope {
 public:
  AutocastScope(bool enabled, c10::DeviceType device) : enabled_(enabled), device_(device) {
    if (!enabled_) return;
    compat::set_autocast(device_, true, at::kBFloat16);
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (!enabled_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    compat::set_autocast(device_, false, at::kBFloat16);
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool enabled_;
  c10::DeviceType device_;
};

struct Run {
  const Options& options;
  const DistEnv& env;
  torch::Device device;
  std::string checkpoint_path;
  std::unique_ptr<Distributed> dist;
  ResNet model{nullptr};
  std::unique_ptr<torch::optim::SGD> optimizer;
  std::unique_ptr<Dataset> dataset;
  std::unique_ptr<DistributedSampler> sampler;
  std::int64_t steps_per_epoch = 0;
  TrainingPosition position;
};

std::unique_ptr<Dataset> make_dataset(const Options& o, int world_size) {
  const auto seed = static_cast<std::uint64_t>(o.random_seed);
  // One epoch of synthetic data is steps_syn steps on every rank.
  const auto syn_size = static_cast<std::size_t>(o.steps_syn) * static_cast<std::size_t>(o.batch_size) *
                        static_cast<std::size_t>(world_size);
  if (o.syn_learnable) return make_learnable_synthetic(syn_size, o.image_size, o.num_classes, seed);
  if (o.use_syn) return make_fixed_synthetic(syn_size, o.batch_size, o.image_size, o.num_classes, seed);
  return make_cifar10(read_cifar10(cifar10_train_files(o.data_dir)), /*augment=*/true, seed);
}

// Collective: every rank's CPU generator state, rank by rank.
at::Tensor gather_rng_states(Distributed& dist) {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  at::Tensor mine;
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    mine = generator.get_state();
  }
  return at::stack(dist.allgather_tensor(mine));
}

// Collective: rank 0 writes the checkpoint.
void save(Run& run) {
  Checkpoint checkpoint;
  checkpoint.position = run.position;
  if (checkpoint.position.epoch_step >= run.steps_per_epoch) {  // the epoch is complete
    ++checkpoint.position.epoch;
    checkpoint.position.epoch_step = 0;
  }
  checkpoint.arch = run.options.arch;
  checkpoint.rng_states = gather_rng_states(*run.dist);
  if (run.dist->rank() != 0) return;
  const std::string bytes = save_checkpoint(*run.model, *run.optimizer, checkpoint);
  std::error_code ec;
  fs::create_directories(fs::path(run.checkpoint_path).parent_path(), ec);
  write_file_atomically(run.checkpoint_path, bytes);
  say("checkpoint: {} (epoch {}, step {} of {}, global step {})", run.checkpoint_path,
      checkpoint.position.epoch, checkpoint.position.epoch_step, run.steps_per_epoch,
      checkpoint.position.global_step);
}

// Collective: rank 0 reads the checkpoint (if any) and sends its bytes to everyone. True when
// every rank loaded it (the same bytes, so the same parameters and buffers).
bool try_resume(Run& run) {
  at::Tensor bytes;
  if (run.dist->rank() == 0) bytes = read_file_if_exists(run.checkpoint_path).value_or(at::Tensor());
  run.dist->broadcast_bytes(bytes, 0);
  if (byte_view(bytes).empty()) return false;
  const Checkpoint checkpoint =
      load_checkpoint(byte_view(bytes), *run.model, *run.optimizer, run.options.arch, run.device);
  bytes = at::Tensor();  // tens of megabytes, not needed past here
  if (run.options.channels_last) to_channels_last(*run.model);
  TrainingPosition p = checkpoint.position;
  const int world = run.dist->world_size();
  if (p.world_size != world || p.batch_size != run.options.batch_size) {
    // Re-shard: continue the epoch after the samples already seen, in the new layout.
    const std::int64_t seen = p.epoch_step * p.batch_size * p.world_size;
    p.epoch_step = seen / (static_cast<std::int64_t>(run.options.batch_size) * world);
  }
  if (p.epoch_step >= run.steps_per_epoch) {
    ++p.epoch;
    p.epoch_step = 0;
  }
  if (checkpoint.rng_states.defined() && checkpoint.rng_states.size(0) == world) {
    at::Generator generator = at::detail::getDefaultCPUGenerator();  // a handle, shared
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(checkpoint.rng_states[run.dist->rank()]);
  }
  const std::int64_t old_world = checkpoint.position.world_size;
  p.world_size = world;
  p.batch_size = run.options.batch_size;
  run.position = p;
  say("Local Rank: {}, resumed from {}: epoch {}, step {}, global step {}{}", run.env.local_rank,
      run.checkpoint_path, p.epoch, p.epoch_step, p.global_step,
      old_world != world ? fmt::format(" (world size {} -> {}, re-sharded)", old_world, world) : "");
  return true;
}

void report_epoch(const Run& run, std::int64_t steps, double seconds) {
  if (run.dist->rank() != 0 || steps == 0) return;
  const double step_time = seconds / static_cast<double>(steps);
  say("num_steps_per_gpu: {}, avg_step_time: {:.4f}", steps, step_time);
  say("samples_per_sec: {:.1f}",
      static_cast<double>(run.options.batch_size) * run.dist->world_size() / step_time);
}

}  // namespace

ResNet build_model(const Options& o) {
  // Same seed on every rank, like the example; rank 0's weights are broadcast anyway.
  {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_current_seed(static_cast<std::uint64_t>(o.random_seed));
  }
  return ResNet(o.arch, o.num_classes);
}

void run_training(const Options& o, const DistEnv& env, ResNet model) {
  set_error_context(host_name(), env.rank);
  Run run{o, env, pick_device(o, env), (fs::path(o.model_dir) / o.model_filename).string(),
          nullptr, std::move(model), nullptr, nullptr, nullptr, 0, {}};
  run.model->to(run.device);
  if (o.channels_last) to_channels_last(*run.model);
  run.optimizer = std::make_unique<torch::optim::SGD>(
      run.model->parameters(),
      torch::optim::SGDOptions(o.learning_rate).momentum(0.9).weight_decay(1e-5));
  // From here on each rank draws its own random numbers.
  torch::manual_seed(static_cast<std::uint64_t>(o.random_seed) + 1 + static_cast<std::uint64_t>(env.rank));

  run.dist = Distributed::connect(env, o.backend,
                                  std::chrono::milliseconds(static_cast<std::int64_t>(o.dist_timeout_s * 1000)));
  const int world = run.dist->world_size();
  stamp(o, env, "joined");
  run.dataset = make_dataset(o, world);
  if (run.device.is_cuda()) run.dataset->pin_memory();
  run.sampler = std::make_unique<DistributedSampler>(run.dataset->size(), world, env.rank,
                                                     /*shuffle=*/!(o.use_syn && !o.syn_learnable),
                                                     static_cast<std::uint64_t>(o.random_seed));
  run.steps_per_epoch = static_cast<std::int64_t>((run.sampler->num_samples() + static_cast<std::size_t>(o.batch_size) - 1) /
                                                  static_cast<std::size_t>(o.batch_size));
  run.position.world_size = world;
  run.position.batch_size = o.batch_size;

  if (env.rank == 0) {
    say("ddp_resnet: {} ({} parameters, {} classes), {} x {} ranks, backend {}, device {}, {}, "
        "{} intra-op threads, {} samples/epoch, {} steps/epoch, restart {}",
        o.arch, count_parameters(*run.model), o.num_classes, o.batch_size, world,
        run.dist->data().backend_name(), run.device.str(), to_string(o.precision),
        at::get_num_threads(), run.dataset->size(), run.steps_per_epoch, env.restart_count);
  }
  const bool resumed = (o.resume || env.restart_count > 0) && try_resume(run);

  DdpOptions ddp;
  // Every rank loaded the same checkpoint bytes: rank 0's state is already everyone's, and
  // broadcasting it again would add as many bytes as the model has to every restart.
  ddp.broadcast_initial_state = !resumed;
  DdpEngine engine(*run.model, run.dist->data(), ddp);
  stamp(o, env, "restored");
  run.model->train();
  const bool fail_here = o.fail_at_step && env.restart_count == 0 &&
                         env.rank == o.fail_rank.value_or(world - 1);
  std::vector<double> epoch_times;
  bool first_step_done = false;

  for (; run.position.epoch < o.num_epochs; ++run.position.epoch, run.position.epoch_step = 0) {
    say("Local Rank: {}, Epoch: {}, Training ...", env.local_rank, run.position.epoch);
    run.sampler->set_epoch(static_cast<std::uint64_t>(run.position.epoch));
    const std::vector<std::size_t> indices = run.sampler->indices();
    const auto start = Clock::now();
    const std::int64_t first_step = run.position.epoch_step;
    for (; run.position.epoch_step < run.steps_per_epoch; ++run.position.epoch_step) {
      if (fail_here && run.position.global_step == *o.fail_at_step) {
        InjectedFailure failure(fmt::format(
            "injected failure (--fail_at_step {}) on {}, attempt {}: exiting with {}",
            *o.fail_at_step, error_context(), env.restart_count, kExitInjectedFailure));
        // Now, before unwinding closes the process group under the peers' feet.
        write_error_file("InjectedFailure", failure.what(), failure.unix_time());
        stamp(o, env, "fail");
        throw failure;
      }
      const auto begin = static_cast<std::size_t>(run.position.epoch_step * o.batch_size);
      const auto count = std::min(static_cast<std::size_t>(o.batch_size), indices.size() - begin);
      Batch batch = run.dataset->batch(std::span(indices).subspan(begin, count),
                                       static_cast<std::uint64_t>(run.position.epoch));
      if (run.device.is_cuda() && !batch.images.is_pinned()) {
        // Page-locked, so that the copies below do not block the host until the GPU is idle.
        batch.images = batch.images.pin_memory();
        batch.labels = batch.labels.pin_memory();
      }
      at::Tensor images = batch.images.to(run.device, /*non_blocking=*/true);
      if (o.channels_last) images = images.contiguous(at::MemoryFormat::ChannelsLast);
      at::Tensor labels = batch.labels.to(run.device, /*non_blocking=*/true);

      engine.before_forward();
      run.optimizer->zero_grad();
      at::Tensor loss;
      {
        AutocastScope autocast(o.precision == Precision::kBf16, run.device.type());
        loss = torch::nn::functional::cross_entropy(run.model->forward(images), labels);
      }
      loss.backward();
      engine.finish_backward();
      foreach_sgd_step(*run.optimizer);
      ++run.position.global_step;
      if (!first_step_done && !o.stamp_dir.empty()) {
        synchronize(run.device);  // the step done, not only queued on the GPU
        stamp(o, env, "step");
      }
      if (!first_step_done && env.rank == 0) {
        std::string sizes;
        for (const auto& b : engine.buckets()) {
          sizes += fmt::format("{}{:.1f}", sizes.empty() ? "" : ", ", static_cast<double>(b.bytes) / (1 << 20));
        }
        say("ddp: {} gradient buckets ({} MiB), {} started during backward",
            engine.buckets().size(), sizes, engine.buckets_started_in_backward());
      }
      first_step_done = true;

      if (o.log_every > 0 && run.position.global_step % o.log_every == 0) {
        const double mean = run.dist->allreduce_sum(loss.item<double>()) / world;
        if (env.rank == 0) say("step: {}, loss: {:.6f}", run.position.global_step, mean);
      }
      if (o.checkpoint_every > 0 && run.position.global_step % o.checkpoint_every == 0) {
        ++run.position.epoch_step;  // the position after this step
        save(run);
        --run.position.epoch_step;
      }
    }
    synchronize(run.device);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    report_epoch(run, run.position.epoch_step - first_step, seconds);
    epoch_times.push_back(seconds);
  }
  if (env.rank == 0 && epoch_times.size() > 1) {
    double sum = 0;
    for (std::size_t i = 1; i < epoch_times.size(); ++i) sum += epoch_times[i];
    say("Average epoch time: {:.4f}", sum / static_cast<double>(epoch_times.size() - 1));
  }
  // The final checkpoint (the trained model), unless the last step just wrote it.
  const bool just_saved = o.checkpoint_every > 0 && run.position.global_step % o.checkpoint_every == 0;
  if ((o.checkpoint_every > 0 || !o.use_syn) && !just_saved) {
    run.position.epoch_step = 0;  // epoch == num_epochs: training is complete
    save(run);
  }
  if (o.verify_sync) {
    const ParamFingerprint f = verify_in_sync(*run.model, *run.dist);
    if (env.rank == 0) {
      say("param_checksum: {:.17g} (in sync across {} ranks)", f.checksum, world);
      say("param_digest: {:016x}", f.digest);
    }
  }
  run.dist->barrier();
}

}  // namespace ddprun::workers
