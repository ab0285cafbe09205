#pragma once
// --node-check on a GPU node: the GPUs this node's workers will see, read through NVML, the
// driver's management library. It is loaded with dlopen, as the launcher loads the CUDA driver
// (launcher/gpu_count.hpp): ddprun runs on machines without either. Only queries are made: no
// GPU setting is changed, and no CUDA context is created (which would itself take memory on
// every GPU).
//
// survey_gpus() makes the calls; gpu_troubles() is pure, and its thresholds are here, as
// documented in docs/reference.md ("Node checks").

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace ddprun {

// Memory in use on a GPU with no process listed on it, above which it is named: memory NVML
// cannot put on a process (one it does not list to this user, memory kept after its process
// ended). Where NVML can tell, the memory the driver reserves for itself is not counted; where
// it cannot, that reserve stays under this.
inline constexpr std::uint64_t kGpuMaxUnexplainedUsedBytes = std::uint64_t{2} << 30;

// How long NVML may take to answer for every GPU: a GPU that fell off the bus, or a driver in
// trouble, blocks its calls (nvidia-smi hangs the same way), and a look that takes this long is
// a node in trouble either way.
inline constexpr std::chrono::milliseconds kGpuProbeTimeout{10'000};

// NVML's figure for a value it cannot give (usedGpuMemory of a process this user may not read
// the memory of).
inline constexpr std::uint64_t kNvmlValueNotAvailable = ~std::uint64_t{0};

struct GpuProcess {
  std::uint32_t pid = 0;
  std::uint64_t used_bytes = kNvmlValueNotAvailable;
};

// One GPU as NVML reports it. Counters NVML does not support on this GPU (ECC turned off,
// page retirement on GPUs that remap rows instead) are -1.
struct GpuProbe {
  int index = 0;  // NVML's, which is nvidia-smi's
  std::string name;
  std::string uuid;
  std::string error;  // a query that failed ("GPU is lost"): the GPU cannot be used
  std::uint64_t memory_total_bytes = 0;
  std::uint64_t memory_used_bytes = 0;
  std::vector<GpuProcess> processes;  // compute processes holding memory on it
  std::int64_t ecc_uncorrected_volatile = -1;   // since the driver loaded
  std::int64_t ecc_uncorrected_aggregate = -1;  // over the GPU's life
  std::int64_t retired_pages = -1;
  bool retired_pages_pending = false;  // retired, in effect after the next reset
  std::int64_t remapped_rows_uncorrectable = -1;
  bool remap_pending = false;  // rows remapped, in effect after the next reset
  bool remap_failed = false;   // a remapping failed: the GPU needs service
};

// What this node's look at its GPUs found.
struct GpuSurvey {
  // Why no GPU was looked at ("no NVIDIA driver"), for a node that is not a GPU node to the
  // check; empty when it is (`gpus` may still be empty: a driver with no GPU).
  std::string skipped = "not looked at";
  // NVML is there and failed, or did not answer in time: a finding.
  std::string error;
  bool timed_out = false;
  int visible = 0;             // GPUs CUDA_VISIBLE_DEVICES gives the workers
  std::vector<GpuProbe> gpus;  // the first of them, as many as the workers, in CUDA's order
};

// The GPUs CUDA shows a process whose CUDA_VISIBLE_DEVICES is `visible` (nullopt: unset), in
// CUDA's order, as positions in `uuids`: the UUIDs of the GPUs the process may use, in NVML's
// order. nullopt when ddprun cannot tell (MIG devices). As CUDA reads the list: its first entry
// says whether it holds numbers (read as strtoul reads them: "1gpu" is 1), positions taken to
// be in NVML's order (CUDA's own order is the same on a machine of one GPU model, and always
// with CUDA_DEVICE_ORDER=PCI_BUS_ID), or UUIDs ("GPU-8f6e...", a unique prefix will do); the
// list ends at the first entry of the other kind, a negative number, or an entry that names
// no GPU; an entry written twice, or two that name one GPU, leave none.
std::optional<std::vector<int>> visible_gpus(const std::vector<std::string>& uuids,
                                             const std::optional<std::string>& visible);

// Whether CUDA_VISIBLE_DEVICES=`value` hides every device on purpose: empty, or a list whose
// first entry is a negative number ("-1", as people write for "no GPU"; CUDA stops at it).
bool cuda_devices_hidden(std::string_view value);

// Reads this node's visible GPUs through NVML, the first `workers` of them (the ones local
// ranks take) in full. Blocks for as long as NVML takes (run it with a deadline: probe_node
// does).
GpuSurvey survey_gpus(const std::optional<std::string>& cuda_visible_devices, int workers);

// The compute processes in `count` entries of nvmlProcessInfo_t, `entry_size` bytes each (16,
// 24 or 32, by the call and the driver), from `entries`.
std::vector<GpuProcess> process_entries(const unsigned char* entries, unsigned count,
                                        std::size_t entry_size);

// What is wrong with a node that runs `workers` workers on the GPUs of `survey`, one line each
// ("GPU 1 holds 30 GiB of pid 4242"): fewer GPUs than workers, and what is wrong with the GPUs
// local ranks take; none for a node the check skipped.
std::vector<std::string> gpu_troubles(const GpuSurvey& survey, int workers);

// The node check table's cell: "8", "8 (1 held)" (held among those the workers take), "-" for
// a node the check skipped, "error" or "no answer".
std::string gpu_summary(const GpuSurvey& survey);

nlohmann::json to_json(const GpuSurvey& survey);
// Throws nlohmann::json::exception when `j` is not a survey.
GpuSurvey gpu_survey_from_json(const nlohmann::json& j);

}  // namespace ddprun
