#pragma once
// --numa-binding and --cpu-bind for this node: the machine read through hwloc, the CUDA
// devices' PCI addresses read from the driver, the plan, and how it is shown (the startup block,
// --dry-run), in the manner of mpirun's --report-bindings.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/launch_config.hpp"
#include "topology/placement_plan.hpp"

namespace ddprun {

struct NodePlacement {
  Binding binding = Binding::kNone;
  std::string machine;  // Machine::summary() and where it was read from
  bool this_system = true;
  std::vector<RankPlacement> ranks;  // one per local rank; empty: no binding
};

// The plan for this node's config.nproc_per_node workers; empty ranks without a binding.
// Throws PlacementError or TopologyError (one line each) when the binding cannot be honoured.
// With a GPU mode, loads the CUDA driver.
NodePlacement plan_node_placement(const LaunchConfig& config);

// "placement (--numa-binding=node; 2 packages, ...):" then a line per local rank.
std::string describe(const NodePlacement& placement);
nlohmann::json to_json(const NodePlacement& placement);

}  // namespace ddprun
