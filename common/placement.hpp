#pragma once
// Where one worker may run and take its memory from: what --numa-binding and --cpu-bind decide
// for each local rank (topology/) and what the worker's child process applies before exec
// (process/spawn.cpp). Empty lists: no restriction.

#include <vector>

namespace ddprun {

struct Placement {
  std::vector<int> cpus;       // OS indexes of the CPUs the worker may run on
  std::vector<int> mem_nodes;  // NUMA nodes its memory is preferably taken from

  bool empty() const { return cpus.empty() && mem_nodes.empty(); }
};

}  // namespace ddprun
