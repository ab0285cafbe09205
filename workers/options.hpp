#pragma once
// ddp_resnet's command line: the flag names of the well-known Python DDP ResNet example
// (main.py --backend=nccl --use_syn --batch_size=... --arch=...) plus ddprun's additions.
// Parsing is pure: nothing here touches libtorch, the environment or the file system.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ddprun::workers {

// Exit codes of ddp_resnet. A failed collective, store or CUDA call is 1, like any
// uncaught error in a PyTorch script.
inline constexpr int kExitWorkerError = 1;
inline constexpr int kExitUsage = 2;              // bad flag, value or environment
inline constexpr int kExitInjectedFailure = 3;    // --fail_at_step reached
inline constexpr int kExitOutOfSync = 4;          // --verify_sync found ranks that differ

enum class Backend { kGloo, kNccl };
enum class Precision { kFp32, kBf16 };
// Where the model and the gradients live. kAuto: CUDA with NCCL, the CPU with Gloo. Gloo also
// reduces CUDA tensors (through host memory), and with it several ranks may share one GPU.
enum class Device { kAuto, kCpu, kCuda };

const char* to_string(Backend backend);
const char* to_string(Precision precision);
const char* to_string(Device device);

struct Options {
  std::string arch = "resnet50";
  Backend backend = Backend::kNccl;
  Device device = Device::kAuto;
  int batch_size = 256;              // per process
  int num_epochs = 10000;
  double learning_rate = 0.1;
  std::int64_t random_seed = 0;
  int image_size = 224;              // synthetic data only; CIFAR-10 images are 32x32
  bool use_syn = false;
  int steps_syn = 20;                // steps per epoch with synthetic data
  // Synthetic data set whose labels are a function of the images (a learnable task), sharded
  // by the distributed sampler, instead of the example's single fixed batch with label 0.
  bool syn_learnable = false;
  std::string model_dir = "saved_models";
  std::string model_filename = "resnet_distributed.pth";
  bool resume = false;
  std::optional<int> local_rank;     // accepted for torch.distributed.launch; LOCAL_RANK wins
  std::string data_dir = "data/cifar-10-batches-bin";
  int num_classes = 1000;            // 10 by default with CIFAR-10 or --syn_learnable
  int checkpoint_every = 0;          // steps; 0: only the final checkpoint
  Precision precision = Precision::kFp32;
  bool channels_last = false;
  bool verify_sync = false;
  int log_every = 0;                 // print the mean loss every N steps (rank 0); 0: never
  double dist_timeout_s = 1800;      // store and collective timeout, as PyTorch's default
  std::optional<std::int64_t> fail_at_step;  // exit 3 before this global step, attempt 0 only
  std::optional<int> fail_rank;      // which rank fails; default: the last rank
  std::string stamp_dir;             // benchmarks: where each phase's moment is written
};

struct ParseOutcome {
  // Set when training should run. When empty, print `message` (stdout for exit code 0,
  // stderr otherwise) and exit with `exit_code`.
  std::optional<Options> options;
  int exit_code = 0;
  // Help text, or one line "ddp_resnet: <flag>: <what is wrong>".
  std::string message;
};

// `args`: argv without argv[0]. `cuda_built`: whether this binary has the NCCL/CUDA path
// (--backend nccl and --device cuda are usage errors otherwise). Never throws for bad input.
ParseOutcome parse_options(const std::vector<std::string>& args, bool cuda_built);

// "resnet18" ... "resnet152".
const std::vector<std::string>& known_archs();

}  // namespace ddprun::workers
