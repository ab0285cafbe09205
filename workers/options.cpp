#include "workers/options.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <initializer_list>
#include <system_error>
#include <utility>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

namespace ddprun::workers {
namespace {

std::string usage_line(const std::string& what) { return "ddp_resnet: " + what; }

// Sets `target` to the choice named `text`; otherwise returns "<flag>=<text>: must be a, b or c".
template <class Enum>
std::string choose(Enum& target, const char* flag, const std::string& text,
                   std::initializer_list<std::pair<const char*, Enum>> choices) {
  std::string names;
  std::size_t i = 0;
  for (const auto& [name, value] : choices) {
    if (text == name) {
      target = value;
      return {};
    }
    if (i > 0) names += i + 1 == choices.size() ? " or " : ", ";
    names += name;
    ++i;
  }
  return fmt::format("{}={}: must be {}", flag, text, names);
}

// The first problem found, as "<flag>: <what is wrong>", or empty.
std::string validate(const Options& o, bool cuda_built) {
  const auto& archs = known_archs();
  if (std::find(archs.begin(), archs.end(), o.arch) == archs.end()) {
    return fmt::format("--arch={}: unknown architecture (one of resnet18, resnet34, resnet50, "
                       "resnet101, resnet152)", o.arch);
  }
  if (o.backend == Backend::kNccl && !cuda_built) {
    return "--backend=nccl: this ddp_resnet was built against a CPU-only libtorch, so NCCL "
           "and CUDA are not available; use --backend=gloo (CPU)";
  }
  if (o.device == Device::kCuda && !cuda_built) {
    return "--device=cuda: this ddp_resnet was built against a CPU-only libtorch; use "
           "--device=cpu";
  }
  if (o.backend == Backend::kNccl && o.device == Device::kCpu) {
    return "--device=cpu: NCCL reduces CUDA tensors only; use --backend=gloo for the CPU";
  }
  if (o.batch_size <= 0) return fmt::format("--batch_size={}: must be positive", o.batch_size);
  if (o.num_epochs <= 0) return fmt::format("--num_epochs={}: must be positive", o.num_epochs);
  if (!(o.learning_rate > 0) || !std::isfinite(o.learning_rate)) {
    return fmt::format("--learning_rate={}: must be a positive number", o.learning_rate);
  }
  if (o.random_seed < 0) return fmt::format("--random_seed={}: must be >= 0", o.random_seed);
  if (o.image_size <= 0 || o.image_size > 4096) {
    return fmt::format("--image_size={}: must be in 1..4096", o.image_size);
  }
  if (o.steps_syn <= 0) return fmt::format("--steps_syn={}: must be positive", o.steps_syn);
  if (o.num_classes <= 1) return fmt::format("--num_classes={}: must be at least 2", o.num_classes);
  if (o.checkpoint_every < 0) {
    return fmt::format("--checkpoint_every={}: must be >= 0 (0: final checkpoint only)",
                       o.checkpoint_every);
  }
  if (o.log_every < 0) return fmt::format("--log_every={}: must be >= 0", o.log_every);
  if (!(o.dist_timeout_s > 0) || !std::isfinite(o.dist_timeout_s)) {
    return fmt::format("--dist_timeout={}: must be a positive number of seconds", o.dist_timeout_s);
  }
  if (o.model_filename.empty() || o.model_filename.find('/') != std::string::npos) {
    return fmt::format("--model_filename='{}': must be a plain file name", o.model_filename);
  }
  if (o.model_dir.empty()) return "--model_dir: must not be empty";
  if (!o.use_syn && o.data_dir.empty()) return "--data_dir: must not be empty";
  if (o.fail_at_step && *o.fail_at_step < 0) {
    return fmt::format("--fail_at_step={}: must be >= 0", *o.fail_at_step);
  }
  if (o.fail_rank && *o.fail_rank < 0) return fmt::format("--fail_rank={}: must be >= 0", *o.fail_rank);
  if (std::error_code ec; !o.stamp_dir.empty() && !std::filesystem::is_directory(o.stamp_dir, ec)) {
    return fmt::format("--stamp_dir={}: not a directory", o.stamp_dir);
  }
  return {};
}

}  // namespace

const char* to_string(Backend backend) {
  switch (backend) {
    case Backend::kGloo: return "gloo";
    case Backend::kNccl: return "nccl";
  }
  return "?";
}

const char* to_string(Precision precision) {
  switch (precision) {
    case Precision::kFp32: return "fp32";
    case Precision::kBf16: return "bf16";
  }
  return "?";
}

const char* to_string(Device device) {
  switch (device) {
    case Device::kAuto: return "auto";
    case Device::kCpu: return "cpu";
    case Device::kCuda: return "cuda";
  }
  return "?";
}

const std::vector<std::string>& known_archs() {
  static const std::vector<std::string> archs{"resnet18", "resnet34", "resnet50", "resnet101",
                                              "resnet152"};
  return archs;
}

ParseOutcome parse_options(const std::vector<std::string>& args, bool cuda_built) {
  Options o;
  CLI::App app{"ddp_resnet: ResNet training with distributed data parallelism (libtorch, "
               "NCCL on GPU, Gloo on CPU). Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, "
               "MASTER_PORT and TORCHELASTIC_RESTART_COUNT; start it with ddprun or torchrun.",
               "ddp_resnet"};
  app.set_help_flag("-h,--help", "print this help and exit");
  app.get_formatter()->column_width(32);

  std::string backend = "nccl";
  std::string precision = "fp32";
  std::string device = "auto";
  std::optional<int> num_classes;
  app.add_option("--arch", o.arch, "resnet18|resnet34|resnet50|resnet101|resnet152")
      ->capture_default_str();
  app.add_option("--backend", backend, "nccl (CUDA) or gloo (CPU)")->capture_default_str();
  app.add_option("--device", device, "auto (cuda with nccl, cpu with gloo), cpu or cuda "
                 "(gloo over CUDA tensors; ranks may share a GPU)")->capture_default_str();
  app.add_option("--batch_size", o.batch_size, "batch size of one process")->capture_default_str();
  app.add_option("--num_epochs", o.num_epochs, "epochs")->capture_default_str();
  app.add_option("--learning_rate", o.learning_rate, "SGD learning rate (momentum 0.9, "
                 "weight decay 1e-5)")->capture_default_str();
  app.add_option("--random_seed", o.random_seed, "seed of the model, data and order")
      ->capture_default_str();
  app.add_option("--image_size", o.image_size, "synthetic image side")->capture_default_str();
  app.add_flag("--use_syn", o.use_syn, "synthetic data instead of CIFAR-10");
  app.add_option("--steps_syn", o.steps_syn, "steps per epoch with synthetic data")
      ->capture_default_str();
  app.add_flag("--syn_learnable", o.syn_learnable,
               "synthetic data set with labels that follow from the images (implies --use_syn)");
  app.add_option("--model_dir", o.model_dir, "checkpoint directory")->capture_default_str();
  app.add_option("--model_filename", o.model_filename, "checkpoint file name")
      ->capture_default_str();
  app.add_flag("--resume", o.resume, "continue from the checkpoint when there is one "
               "(implied after an elastic restart)");
  app.add_option("--local_rank,--local-rank", o.local_rank, "accepted and ignored (LOCAL_RANK)");
  app.add_option("--data_dir", o.data_dir, "CIFAR-10 binary batches (data_batch_N.bin)")
      ->capture_default_str();
  app.add_option("--num_classes", num_classes, "classes (default 1000; 10 with CIFAR-10 or "
                 "--syn_learnable)");
  app.add_option("--checkpoint_every", o.checkpoint_every,
                 "checkpoint every N steps (0: only at the end)")->capture_default_str();
  app.add_option("--precision", precision, "fp32 or bf16 (autocast)")->capture_default_str();
  app.add_flag("--channels_last", o.channels_last, "NHWC memory format");
  app.add_flag("--verify_sync", o.verify_sync,
               "compare a parameter checksum across ranks at the end; a mismatch exits 4");
  app.add_option("--log_every", o.log_every, "print the mean loss every N steps (0: never)")
      ->capture_default_str();
  app.add_option("--dist_timeout", o.dist_timeout_s, "seconds for the store and collectives")
      ->capture_default_str();
  app.add_option("--fail_at_step", o.fail_at_step,
                 "exit 3 before global step N on the first attempt (tests, demo)");
  app.add_option("--fail_rank", o.fail_rank, "the rank that fails (default: the last)");
  app.add_option("--stamp_dir", o.stamp_dir,
                 "write the moment of each phase (joined, step, fail) as "
                 "<phase>.<restart>.<rank> files there (benchmarks)");

  std::vector<std::string> reversed(args.rbegin(), args.rend());
  ParseOutcome out;
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    out.message = app.help();
    out.exit_code = 0;
    return out;
  } catch (const CLI::ParseError& e) {
    out.message = usage_line(e.what());
    out.exit_code = kExitUsage;
    return out;
  }

  std::string problem = choose(o.backend, "--backend", backend,
                                {{"nccl", Backend::kNccl}, {"gloo", Backend::kGloo}});
  if (problem.empty()) {
    problem = choose(o.device, "--device", device,
                     {{"auto", Device::kAuto}, {"cpu", Device::kCpu}, {"cuda", Device::kCuda}});
  }
  if (problem.empty()) {
    problem = choose(o.precision, "--precision", precision,
                     {{"fp32", Precision::kFp32}, {"bf16", Precision::kBf16}});
  }
  if (o.syn_learnable) o.use_syn = true;
  o.num_classes = num_classes.value_or(o.use_syn && !o.syn_learnable ? 1000 : 10);
  if (problem.empty()) problem = validate(o, cuda_built);
  if (!problem.empty()) {
    out.message = usage_line(problem);
    out.exit_code = kExitUsage;
    return out;
  }
  out.options = std::move(o);
  return out;
}

}  // namespace ddprun::workers
