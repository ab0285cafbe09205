#include "topology/machine.hpp"

#include <hwloc.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>

#include <fmt/format.h>

namespace ddprun {
namespace {

constexpr unsigned kNvidiaVendor = 0x10de;
constexpr unsigned kDisplayClass = 0x03;  // PCI base class: VGA and 3D controllers

struct TopologyDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
using Topology = std::unique_ptr<hwloc_topology, TopologyDeleter>;

struct BitmapDeleter {
  void operator()(hwloc_bitmap_s* b) const { hwloc_bitmap_free(b); }
};
using Bitmap = std::unique_ptr<hwloc_bitmap_s, BitmapDeleter>;

Bitmap new_bitmap() {
  Bitmap b(hwloc_bitmap_alloc());
  if (!b) throw TopologyError("hwloc: out of memory");
  return b;
}

// `configure` points hwloc at a description, or leaves it to read this machine (or what
// HWLOC_XMLFILE / HWLOC_SYNTHETIC name).
template <typename Configure>
Topology load_topology(const std::string& what, Configure configure) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) throw TopologyError("hwloc: cannot initialise a topology");
  Topology topology(raw);
  // PCI devices are only kept when asked for; bridges are kept so that a device keeps its place.
  hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (!configure(raw) || hwloc_topology_load(raw) != 0) {
    throw TopologyError(fmt::format("hwloc cannot read {}", what));
  }
  return topology;
}

int ancestor_index(hwloc_topology_t t, hwloc_obj_type_t type, hwloc_obj_t obj, int fallback) {
  hwloc_obj_t a = hwloc_get_ancestor_obj_by_type(t, type, obj);
  return a != nullptr ? static_cast<int>(a->logical_index) : fallback;
}

// The highest data or unified cache above `pu`: an L3 shared by a core complex, say.
int last_level_cache(hwloc_obj_t pu) {
  int best_depth = -1;
  int id = -1;
  for (hwloc_obj_t o = pu->parent; o != nullptr; o = o->parent) {
    if (hwloc_obj_type_is_dcache(o->type) && static_cast<int>(o->attr->cache.depth) > best_depth) {
      best_depth = static_cast<int>(o->attr->cache.depth);
      id = static_cast<int>(o->gp_index);
    }
  }
  return id;
}

// A NUMA node with memory only (HBM beside DDR, a GPU's memory) has the same locality as the
// node its CPUs' ordinary memory belongs to, and a higher number: the lowest-numbered node
// whose locality holds the CPU is the one the kernel lists the CPU under.
int numa_node_of(hwloc_topology_t t, unsigned cpu) {
  for (hwloc_obj_t n = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, nullptr); n != nullptr;
       n = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, n)) {
    if (n->cpuset != nullptr && hwloc_bitmap_isset(n->cpuset, cpu)) {
      return static_cast<int>(n->os_index);
    }
  }
  return -1;
}

Machine read_machine(hwloc_topology_t t, std::string source) {
  Machine m;
  m.this_system = hwloc_topology_is_thissystem(t) != 0;
  m.source = std::move(source);

  // The CPUs this thread may use: hwloc already leaves out those the cgroup forbids.
  Bitmap allowed = new_bitmap();
  hwloc_bitmap_copy(allowed.get(), hwloc_topology_get_allowed_cpuset(t));
  if (m.this_system) {
    Bitmap bound = new_bitmap();
    if (hwloc_get_cpubind(t, bound.get(), HWLOC_CPUBIND_THREAD) == 0) {
      hwloc_bitmap_and(allowed.get(), allowed.get(), bound.get());
    }
  }

  std::set<int> nodes;
  for (hwloc_obj_t pu = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_PU, nullptr); pu != nullptr;
       pu = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_PU, pu)) {
    if (!hwloc_bitmap_isset(allowed.get(), pu->os_index)) continue;
    MachineCpu cpu;
    cpu.os = static_cast<int>(pu->os_index);
    // A PU with no core above it is a core of its own; offset so that ids never collide.
    cpu.core = ancestor_index(t, HWLOC_OBJ_CORE, pu, 1'000'000 + cpu.os);
    cpu.package = ancestor_index(t, HWLOC_OBJ_PACKAGE, pu, 0);
    cpu.numa = numa_node_of(t, pu->os_index);
    cpu.cache = last_level_cache(pu);
    if (cpu.numa >= 0) nodes.insert(cpu.numa);
    m.cpus.push_back(cpu);
  }
  std::sort(m.cpus.begin(), m.cpus.end(), [](auto& a, auto& b) { return a.os < b.os; });
  m.numa_nodes.assign(nodes.begin(), nodes.end());

  for (hwloc_obj_t dev = hwloc_get_next_pcidev(t, nullptr); dev != nullptr;
       dev = hwloc_get_next_pcidev(t, dev)) {
    const auto& pci = dev->attr->pcidev;
    if (pci.vendor_id != kNvidiaVendor || (pci.class_id >> 8) != kDisplayClass) continue;
    MachineGpu gpu;
    gpu.pci_bus_id = fmt::format("{:04x}:{:02x}:{:02x}.{:x}", pci.domain, pci.bus, pci.dev,
                                 pci.func);
    // The object it hangs from says where it is local: one node with CPUs is an answer; the
    // whole machine (what hwloc does when the firmware gives no node) is one only when the
    // machine has a single node.
    hwloc_obj_t parent = hwloc_get_non_io_ancestor_obj(t, dev);
    std::vector<int> local;
    for (int node : m.numa_nodes) {
      if (parent != nullptr && parent->nodeset != nullptr &&
          hwloc_bitmap_isset(parent->nodeset, static_cast<unsigned>(node))) {
        local.push_back(node);
      }
    }
    if (local.size() == 1) gpu.numa = local.front();
    m.gpus.push_back(std::move(gpu));
  }
  std::sort(m.gpus.begin(), m.gpus.end(),
            [](auto& a, auto& b) { return a.pci_bus_id < b.pci_bus_id; });
  return m;
}

}  // namespace

std::string Machine::summary() const {
  std::set<int> packages;
  std::set<int> cores;
  for (const auto& cpu : cpus) {
    packages.insert(cpu.package);
    cores.insert(cpu.core);
  }
  const auto count = [](std::size_t n, const char* one, const char* many) {
    return fmt::format("{} {}", n, n == 1 ? one : many);
  };
  return fmt::format("{}, {}, {}, {}, {}", count(packages.size(), "package", "packages"),
                     count(numa_nodes.size(), "NUMA node", "NUMA nodes"),
                     count(cores.size(), "core", "cores"), count(cpus.size(), "CPU", "CPUs"),
                     count(gpus.size(), "GPU", "GPUs"));
}

Machine load_machine() {
  std::string source = "this machine";
  for (const char* name : {"HWLOC_XMLFILE", "HWLOC_SYNTHETIC"}) {
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') {
      source = fmt::format("{}={}", name, value);
    }
  }
  auto topology = load_topology(source, [](hwloc_topology_t) { return true; });
  return read_machine(topology.get(), source);
}

Machine load_machine_from_xml(const std::string& path) {
  const auto what = fmt::format("the topology in {}", path);
  auto topology = load_topology(what, [&](hwloc_topology_t t) {
    return hwloc_topology_set_xml(t, path.c_str()) == 0;
  });
  return read_machine(topology.get(), path);
}

Machine load_machine_from_synthetic(const std::string& description) {
  const auto what = fmt::format("the synthetic topology \"{}\"", description);
  auto topology = load_topology(what, [&](hwloc_topology_t t) {
    return hwloc_topology_set_synthetic(t, description.c_str()) == 0;
  });
  return read_machine(topology.get(), description);
}

std::string format_cpu_list(const std::vector<int>& cpus) {
  Bitmap set = new_bitmap();
  for (int cpu : cpus) hwloc_bitmap_set(set.get(), static_cast<unsigned>(cpu));
  char* text = nullptr;
  if (hwloc_bitmap_list_asprintf(&text, set.get()) < 0 || text == nullptr) return "?";
  std::string out(text);
  std::free(text);
  return out;
}

std::string normalize_pci_bus_id(const std::string& text) {
  unsigned domain = 0, bus = 0, dev = 0, func = 0;
  int used = 0;
  if (std::sscanf(text.c_str(), "%x:%x:%x.%1x%n", &domain, &bus, &dev, &func, &used) != 4 ||
      static_cast<std::size_t>(used) != text.size()) {
    return {};
  }
  return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", domain, bus, dev, func);
}

}  // namespace ddprun
