#include "topology/placement_plan.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace ddprun {
namespace {

using Cpus = std::vector<MachineCpu>;

// CPUs grouped by a key (core, package, cache), each group in OS order and the groups in the
// order of their lowest CPU, as torchrun orders cores.
template <typename Key>
std::vector<Cpus> group_by(const Cpus& cpus, Key key) {
  std::vector<Cpus> groups;
  std::map<int, std::size_t> index;
  for (const auto& cpu : cpus) {  // already in OS order
    auto [it, fresh] = index.emplace(key(cpu), groups.size());
    if (fresh) groups.emplace_back();
    groups[it->second].push_back(cpu);
  }
  return groups;
}

Cpus cpus_where(const Machine& m, auto predicate) {
  Cpus out;
  std::copy_if(m.cpus.begin(), m.cpus.end(), std::back_inserter(out), predicate);
  return out;
}

Cpus joined(std::vector<Cpus>::const_iterator begin, std::vector<Cpus>::const_iterator end) {
  Cpus out;
  for (auto it = begin; it != end; ++it) out.insert(out.end(), it->begin(), it->end());
  return out;
}

// The `share`-th of `parts` contiguous runs of `groups`, the first `groups % parts` runs one
// group longer (torchrun's division of a node's cores among its GPUs).
Cpus share_of(const std::vector<Cpus>& groups, int parts, int share) {
  const int per = static_cast<int>(groups.size()) / parts;
  const int extra = static_cast<int>(groups.size()) % parts;
  const int start = share * per + std::min(share, extra);
  const int length = per + (share < extra ? 1 : 0);
  return joined(groups.begin() + start, groups.begin() + start + length);
}

RankPlacement placed(int local_rank, const Cpus& cpus) {
  RankPlacement r;
  r.local_rank = local_rank;
  std::set<int> nodes;
  for (const auto& cpu : cpus) {
    r.placement.cpus.push_back(cpu.os);
    if (cpu.numa >= 0) nodes.insert(cpu.numa);
  }
  std::sort(r.placement.cpus.begin(), r.placement.cpus.end());
  r.numa_nodes.assign(nodes.begin(), nodes.end());
  r.placement.mem_nodes = r.numa_nodes;
  return r;
}

// Placement by the GPU with the rank's index: torchrun's --numa-binding.
class GpuPlanner {
 public:
  GpuPlanner(const Machine& m, Binding binding, const std::vector<std::string>& bus_ids)
      : m_(m), flag_(to_string(binding)), binding_(binding) {
    if (bus_ids.empty()) {
      for (const auto& gpu : m.gpus) bus_ids_.push_back(gpu.pci_bus_id);
    } else {
      for (const auto& id : bus_ids) bus_ids_.push_back(normalize_pci_bus_id(id));
    }
  }

  RankPlacement plan(int local_rank) const {
    const int gpu = local_rank;
    if (gpu >= static_cast<int>(bus_ids_.size())) {
      throw PlacementError(fmt::format(
          "{}: local rank {} has no GPU of its own: {} visible here ({}), and a worker's GPU is "
          "the one with its LOCAL_RANK",
          flag_, local_rank, bus_ids_.size(), m_.source));
    }
    const int node = node_of(gpu);
    const Cpus on_node = cpus_where(m_, [&](const MachineCpu& c) { return c.numa == node; });
    if (on_node.empty()) {
      throw PlacementError(fmt::format("{}: GPU {} ({}) is on NUMA node {}, which has no CPU "
                                       "this process may run on",
                                       flag_, gpu, bus_ids_[gpu], node));
    }
    RankPlacement r;
    if (binding_ == Binding::kGpuNode) {
      r = placed(local_rank, on_node);
    } else if (binding_ == Binding::kGpuSocket) {
      const int package = on_node.front().package;
      r = placed(local_rank,
                 cpus_where(m_, [&](const MachineCpu& c) { return c.package == package; }));
    } else {
      // The node's GPUs share its cores: all those visible, used by a worker or not.
      std::vector<int> on_same_node;
      for (int other = 0; other < static_cast<int>(bus_ids_.size()); ++other) {
        if (other == gpu || locality(other) == node) on_same_node.push_back(other);
      }
      const int parts = static_cast<int>(on_same_node.size());
      const int rel = static_cast<int>(
          std::find(on_same_node.begin(), on_same_node.end(), gpu) - on_same_node.begin());
      if (binding_ == Binding::kGpuExclusive) {
        const auto cores = group_by(on_node, [](const MachineCpu& c) { return c.core; });
        if (static_cast<int>(cores.size()) < parts) {
          throw PlacementError(fmt::format(
              "{}: NUMA node {} has {} core(s) this process may run on, fewer than its {} GPUs",
              flag_, node, cores.size(), parts));
        }
        r = placed(local_rank, share_of(cores, parts, rel));
      } else {
        auto complexes = group_by(on_node, [](const MachineCpu& c) { return c.cache; });
        std::stable_sort(complexes.begin(), complexes.end(),
                         [](const Cpus& a, const Cpus& b) { return a.size() > b.size(); });
        // More GPUs than caches share them in turn, as torchrun does.
        r = placed(local_rank, complexes[static_cast<std::size_t>(rel) % complexes.size()]);
      }
    }
    r.gpu = gpu;
    r.gpu_bus_id = bus_ids_[gpu];
    return r;
  }

 private:
  // The GPU's NUMA node, nullopt when hwloc has no answer.
  std::optional<int> locality(int gpu) const {
    const auto& id = bus_ids_[gpu];
    auto it = std::find_if(m_.gpus.begin(), m_.gpus.end(),
                           [&](const MachineGpu& g) { return g.pci_bus_id == id; });
    if (it == m_.gpus.end()) return std::nullopt;
    if (it->numa >= 0) return it->numa;
    if (m_.numa_nodes.size() == 1) return m_.numa_nodes.front();
    return std::nullopt;
  }

  int node_of(int gpu) const {
    if (auto node = locality(gpu)) return *node;
    const auto& id = bus_ids_[gpu];
    const bool known = std::any_of(m_.gpus.begin(), m_.gpus.end(),
                                   [&](const MachineGpu& g) { return g.pci_bus_id == id; });
    if (!known) {
      throw PlacementError(fmt::format("{}: GPU {} ({}) is not among the GPUs hwloc lists for {}",
                                       flag_, gpu, id.empty() ? "no PCI address" : id, m_.source));
    }
    // torchrun takes node 0 here; on a machine of several nodes that is a guess, and a wrong
    // guess binds the worker to the far socket.
    throw PlacementError(fmt::format(
        "{}: the firmware does not say which of the {} NUMA nodes GPU {} ({}) is attached to "
        "(its numa_node is -1); use --cpu-bind, or no binding",
        flag_, m_.numa_nodes.size(), gpu, id));
  }

  const Machine& m_;
  const char* flag_;
  Binding binding_;
  std::vector<std::string> bus_ids_;
};

RankPlacement plan_by_rank(const Machine& m, Binding binding, int nproc, int local_rank) {
  const char* flag = to_string(binding);
  if (binding == Binding::kCpuCore) {
    const auto cores = group_by(m.cpus, [](const MachineCpu& c) { return c.core; });
    if (static_cast<int>(cores.size()) < nproc) {
      throw PlacementError(fmt::format("{}: {} workers, but this process may run on {} core(s) "
                                       "of {}",
                                       flag, nproc, cores.size(), m.source));
    }
    return placed(local_rank, share_of(cores, nproc, local_rank));
  }
  const auto groups = binding == Binding::kCpuNuma
                          ? group_by(m.cpus, [](const MachineCpu& c) { return c.numa; })
                          : group_by(m.cpus, [](const MachineCpu& c) { return c.package; });
  if (groups.empty()) throw PlacementError(fmt::format("{}: {} has no CPU", flag, m.source));
  return placed(local_rank, groups[static_cast<std::size_t>(local_rank) % groups.size()]);
}

}  // namespace

std::string RankPlacement::describe() const {
  std::string out;
  if (gpu >= 0) out = fmt::format("GPU {} ({}), ", gpu, gpu_bus_id);
  out += fmt::format("{} {}, CPUs {}", numa_nodes.size() == 1 ? "NUMA node" : "NUMA nodes",
                     numa_nodes.empty() ? "?" : format_cpu_list(numa_nodes),
                     format_cpu_list(placement.cpus));
  return out;
}

std::vector<RankPlacement> plan_placement(const Machine& machine, Binding binding,
                                          int nproc_per_node,
                                          const std::vector<std::string>& gpu_bus_ids) {
  std::vector<RankPlacement> plan;
  if (binding == Binding::kNone) return plan;
  if (machine.cpus.empty()) {
    throw PlacementError(fmt::format("{}: hwloc found no CPU this process may run on in {}",
                                     to_string(binding), machine.source));
  }
  std::optional<GpuPlanner> gpus;
  if (by_gpu(binding)) gpus.emplace(machine, binding, gpu_bus_ids);
  for (int local = 0; local < nproc_per_node; ++local) {
    plan.push_back(gpus ? gpus->plan(local) : plan_by_rank(machine, binding, nproc_per_node, local));
  }
  return plan;
}

}  // namespace ddprun
