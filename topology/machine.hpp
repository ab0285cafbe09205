#pragma once
// The parts of a machine that worker placement needs, read through hwloc: each CPU's core,
// package, NUMA node and last-level cache, and where the GPUs hang. Loading honours hwloc's own
// HWLOC_XMLFILE and HWLOC_SYNTHETIC, so a described machine can stand in for this one.

#include <string>
#include <vector>

#include "common/error.hpp"

namespace ddprun {

// One logical CPU (a hardware thread). The ids group CPUs; only `os` and `numa` are the
// kernel's numbers.
struct MachineCpu {
  int os = 0;       // the kernel's CPU number
  int core = 0;     // CPUs with the same id are hardware threads of one core
  int package = 0;  // a socket
  int numa = -1;    // the kernel's number of the NUMA node whose memory is local to it
  int cache = 0;    // its highest data or unified cache (an L3: AMD's core complex)
};

struct MachineGpu {
  std::string pci_bus_id;  // "0000:18:00.0", lower case
  int numa = -1;           // -1: the firmware does not say, and several nodes have CPUs
};

struct Machine {
  std::vector<MachineCpu> cpus;  // those this process may run on, by OS number
  std::vector<int> numa_nodes;   // nodes that have some of those CPUs, ascending
  std::vector<MachineGpu> gpus;  // NVIDIA display and 3D controllers, in PCI bus order
  bool this_system = true;       // false: read from HWLOC_XMLFILE or HWLOC_SYNTHETIC
  std::string source;            // "this machine", "HWLOC_XMLFILE=/path", ...

  // "2 packages, 2 NUMA nodes, 32 cores, 64 CPUs, 8 GPUs".
  std::string summary() const;
};

class TopologyError : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

// This machine as hwloc sees it, limited to the CPUs this thread may use (its affinity and
// cgroup). Throws TopologyError when hwloc cannot read it.
Machine load_machine();
// A machine described by an hwloc XML file or a synthetic description (tests).
Machine load_machine_from_xml(const std::string& path);
Machine load_machine_from_synthetic(const std::string& description);

// "0-15,32-47": the kernel's list format, as hwloc writes it.
std::string format_cpu_list(const std::vector<int>& cpus);

// "00000000:18:00.0" (the CUDA driver's form) or "0000:18:00.0" -> "0000:18:00.0"; empty when
// it is not a PCI address.
std::string normalize_pci_bus_id(const std::string& text);

}  // namespace ddprun
