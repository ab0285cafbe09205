#pragma once
// Which CPUs and NUMA nodes each local rank gets, for --numa-binding (torchrun's four modes, by
// the GPU with the rank's index) and --cpu-bind (by local rank alone). Pure: a Machine in, a
// plan out, so every mode is checked against described machines.

#include <string>
#include <vector>

#include "common/launch_config.hpp"
#include "common/placement.hpp"
#include "topology/machine.hpp"

namespace ddprun {

struct RankPlacement {
  int local_rank = 0;
  int gpu = -1;            // the CUDA device index it is placed by; -1: placed by rank alone
  std::string gpu_bus_id;  // that device's PCI address
  std::vector<int> numa_nodes;  // the nodes its CPUs belong to
  Placement placement;          // its CPUs; memory preferred from numa_nodes

  // "GPU 0 (0000:18:00.0), NUMA node 0, CPUs 0-7,32-39".
  std::string describe() const;
};

// The mode cannot be honoured on this machine; what() names the mode, the device or node, and
// what is missing.
class PlacementError : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

// One entry per local rank. `gpu_bus_ids`: the PCI address of each CUDA device index as the
// workers will number them (the driver's order under the agent's CUDA_VISIBLE_DEVICES); empty:
// the machine's GPUs in bus order, which is what the driver gives with
// CUDA_DEVICE_ORDER=PCI_BUS_ID and no CUDA_VISIBLE_DEVICES. `binding` must not be kNone.
std::vector<RankPlacement> plan_placement(const Machine& machine, Binding binding,
                                          int nproc_per_node,
                                          const std::vector<std::string>& gpu_bus_ids);

}  // namespace ddprun
