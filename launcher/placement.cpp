#include "launcher/placement.hpp"

#include <cstdlib>

#include <fmt/format.h>

#include "launcher/gpu_count.hpp"

namespace ddprun {

NodePlacement plan_node_placement(const LaunchConfig& config) {
  NodePlacement out;
  out.binding = config.binding;
  if (config.binding == Binding::kNone) return out;
  const Machine machine = load_machine();
  out.this_system = machine.this_system;
  out.machine = machine.this_system ? machine.summary()
                                    : fmt::format("{}, from {}", machine.summary(), machine.source);
  std::vector<std::string> bus_ids;
  if (by_gpu(config.binding) && machine.this_system) {
    // The devices as the workers will number them: the driver applies CUDA_VISIBLE_DEVICES and
    // CUDA_DEVICE_ORDER. Without a driver, the bus order hwloc lists stands for it only when
    // nothing reorders or hides devices.
    bus_ids = visible_cuda_pci_bus_ids();
    if (bus_ids.empty() && std::getenv("CUDA_VISIBLE_DEVICES") != nullptr) {
      throw PlacementError(fmt::format(
          "{}: the CUDA driver lists no device, so CUDA_VISIBLE_DEVICES={} cannot be mapped to "
          "the GPUs' places in the machine",
          to_string(config.binding), std::getenv("CUDA_VISIBLE_DEVICES")));
    }
  }
  out.ranks = plan_placement(machine, config.binding, config.nproc_per_node, bus_ids);
  return out;
}

std::string describe(const NodePlacement& placement) {
  std::string out = fmt::format("placement ({}; {}):", to_string(placement.binding),
                                placement.machine);
  for (const auto& r : placement.ranks) {
    out += fmt::format("\n  local rank {}: {}", r.local_rank, r.describe());
  }
  return out;
}

nlohmann::json to_json(const NodePlacement& placement) {
  auto ranks = nlohmann::json::array();
  for (const auto& r : placement.ranks) {
    nlohmann::json rank{{"local_rank", r.local_rank},
                        {"numa_nodes", r.numa_nodes},
                        {"cpus", format_cpu_list(r.placement.cpus)},
                        {"description", r.describe()}};
    if (r.gpu >= 0) {
      rank["gpu"] = r.gpu;
      rank["gpu_pci_bus_id"] = r.gpu_bus_id;
    }
    ranks.push_back(std::move(rank));
  }
  return {{"binding", to_string(placement.binding)},
          {"machine", placement.machine},
          {"ranks", ranks}};
}

}  // namespace ddprun
