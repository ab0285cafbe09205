// Worker placement against described machines (hwloc XML and synthetic topologies, loaded by
// the real hwloc): every mode's CPUs per local rank checked against a table worked out by hand
// from the machine's description, and the machines a mode cannot serve.

#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "topology/machine.hpp"
#include "topology/placement_plan.hpp"

using namespace ddprun;

namespace {

std::string fixture(const std::string& name) { return std::string(TOPOLOGY_FIXTURES) + "/" + name; }

// A 2-socket, 8-GPU node: per package one NUMA node and two L3 caches of 8 cores; 2 threads per
// core, Linux's numbering (core c is CPUs c and c+32); GPUs 0-3 on node 0, 4-7 on node 1, a
// NIC beside GPU 0.
const Machine& gpu_node() {
  static const Machine m = load_machine_from_xml(fixture("gpu_node_2x4.xml"));
  return m;
}

// A CPU box of 2 packages, each of 2 NUMA nodes of 4 cores with 2 threads (core c is CPUs 2c
// and 2c+1): NUMA node n holds CPUs 8n..8n+7.
const Machine& cpu_box() {
  static const Machine m = load_machine_from_synthetic("pack:2 group:2 [numa] core:4 pu:2");
  return m;
}

std::vector<std::string> cpu_lists(const std::vector<RankPlacement>& plan) {
  std::vector<std::string> out;
  for (const auto& r : plan) out.push_back(format_cpu_list(r.placement.cpus));
  return out;
}

using Lists = std::vector<std::string>;

template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const PlacementError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("topology: the described GPU node as hwloc reads it", "[topology]") {
  const auto& m = gpu_node();
  CHECK_FALSE(m.this_system);
  CHECK(m.summary() == "2 packages, 2 NUMA nodes, 32 cores, 64 CPUs, 8 GPUs");
  CHECK(m.numa_nodes == std::vector<int>{0, 1});
  REQUIRE(m.gpus.size() == 8);  // the NIC is not a GPU
  CHECK(m.gpus[0].pci_bus_id == "0000:18:00.0");
  CHECK(m.gpus[7].pci_bus_id == "0000:db:00.0");
  for (int i = 0; i < 8; ++i) CHECK(m.gpus[i].numa == (i < 4 ? 0 : 1));
  // Hardware threads of a core share its id; the two L3s of a package differ.
  CHECK(m.cpus[0].core == m.cpus[32].core);
  CHECK(m.cpus[0].cache == m.cpus[7].cache);
  CHECK(m.cpus[0].cache != m.cpus[8].cache);
  CHECK(m.cpus[16].package == 1);
  CHECK(m.cpus[48].numa == 1);
}

TEST_CASE("topology: --numa-binding's four modes on a 2-socket 8-GPU node", "[topology]") {
  const auto& m = gpu_node();
  const Lists node0 = {"0-15,32-47"};
  const Lists node1 = {"16-31,48-63"};

  SECTION("node: every CPU of the GPU's NUMA node") {
    auto plan = plan_placement(m, Binding::kGpuNode, 8, {});
    CHECK(cpu_lists(plan) == Lists{"0-15,32-47", "0-15,32-47", "0-15,32-47", "0-15,32-47",
                                   "16-31,48-63", "16-31,48-63", "16-31,48-63", "16-31,48-63"});
    CHECK(plan[5].gpu == 5);
    CHECK(plan[5].gpu_bus_id == "0000:ab:00.0");
    CHECK(plan[5].numa_nodes == std::vector<int>{1});
    CHECK(plan[5].placement.mem_nodes == std::vector<int>{1});
    CHECK(plan[5].describe() == "GPU 5 (0000:ab:00.0), NUMA node 1, CPUs 16-31,48-63");
  }
  SECTION("socket: every CPU of the GPU's package") {
    CHECK(cpu_lists(plan_placement(m, Binding::kGpuSocket, 8, {})) ==
          Lists{"0-15,32-47", "0-15,32-47", "0-15,32-47", "0-15,32-47", "16-31,48-63",
                "16-31,48-63", "16-31,48-63", "16-31,48-63"});
  }
  SECTION("exclusive: the node's 16 cores split among its 4 GPUs, threads included") {
    CHECK(cpu_lists(plan_placement(m, Binding::kGpuExclusive, 8, {})) ==
          Lists{"0-3,32-35", "4-7,36-39", "8-11,40-43", "12-15,44-47", "16-19,48-51",
                "20-23,52-55", "24-27,56-59", "28-31,60-63"});
    // Two workers: the node's four GPUs still share its cores, as torchrun divides them.
    CHECK(cpu_lists(plan_placement(m, Binding::kGpuExclusive, 2, {})) ==
          Lists{"0-3,32-35", "4-7,36-39"});
  }
  SECTION("core-complex: one L3's CPUs per GPU, shared in turn by more GPUs than caches") {
    auto plan = cpu_lists(plan_placement(m, Binding::kGpuCoreComplex, 8, {}));
    CHECK(plan == Lists{"0-7,32-39", "8-15,40-47", "0-7,32-39", "8-15,40-47", "16-23,48-55",
                        "24-31,56-63", "16-23,48-55", "24-31,56-63"});
  }
  SECTION("the driver's device order decides which GPU a local rank has") {
    // CUDA_VISIBLE_DEVICES=4,0 as the driver reports it: device 0 is the GPU at 9a:00.0.
    auto plan = plan_placement(m, Binding::kGpuNode, 2, {"00000000:9A:00.0", "00000000:18:00.0"});
    CHECK(cpu_lists(plan) == Lists{node1[0], node0[0]});
    CHECK(plan[0].gpu_bus_id == "0000:9a:00.0");
  }
}

TEST_CASE("topology: GPU modes this machine cannot honour", "[topology]") {
  const auto& m = gpu_node();
  CHECK_THAT(error_of([&] { plan_placement(m, Binding::kGpuNode, 9, {}); }),
             Catch::Contains("--numa-binding=node: local rank 8 has no GPU of its own: 8 visible"));
  CHECK_THAT(error_of([&] { plan_placement(m, Binding::kGpuNode, 1, {"0000:01:00.0"}); }),
             Catch::Contains("GPU 0 (0000:01:00.0) is not among the GPUs hwloc lists"));

  const auto unknown = load_machine_from_xml(fixture("gpu_node_unknown_locality.xml"));
  REQUIRE(unknown.gpus.size() == 2);
  CHECK(unknown.gpus[0].numa == -1);
  CHECK_THAT(error_of([&] { plan_placement(unknown, Binding::kGpuSocket, 1, {}); }),
             Catch::Contains("does not say which of the 2 NUMA nodes GPU 0 (0000:18:00.0)"));

  const auto few = load_machine_from_xml(fixture("gpu_node_few_cores.xml"));
  CHECK_THAT(error_of([&] { plan_placement(few, Binding::kGpuExclusive, 1, {}); }),
             Catch::Contains("NUMA node 0 has 2 core(s) this process may run on, fewer than its "
                             "4 GPUs"));
  // Without L3 caches every CPU is one complex, which the GPUs share: no error.
  CHECK(cpu_lists(plan_placement(few, Binding::kGpuCoreComplex, 4, {})) ==
        Lists{"0-1", "0-1", "0-1", "0-1"});
  // One NUMA node: the GPU's node is not in doubt even when the firmware gives none.
  CHECK(cpu_lists(plan_placement(few, Binding::kGpuNode, 2, {})) == Lists{"0-1", "0-1"});
}

TEST_CASE("topology: --cpu-bind on a 4-NUMA-node CPU box", "[topology]") {
  const auto& m = cpu_box();
  CHECK(m.summary() == "2 packages, 4 NUMA nodes, 16 cores, 32 CPUs, 0 GPUs");
  SECTION("numa: ranks spread round-robin over the nodes") {
    auto plan = plan_placement(m, Binding::kCpuNuma, 6, {});
    CHECK(cpu_lists(plan) == Lists{"0-7", "8-15", "16-23", "24-31", "0-7", "8-15"});
    CHECK(plan[2].placement.mem_nodes == std::vector<int>{2});
    CHECK(plan[2].gpu == -1);
    CHECK(plan[2].describe() == "NUMA node 2, CPUs 16-23");
  }
  SECTION("socket: ranks spread over the packages") {
    auto plan = plan_placement(m, Binding::kCpuSocket, 3, {});
    CHECK(cpu_lists(plan) == Lists{"0-15", "16-31", "0-15"});
    CHECK(plan[1].placement.mem_nodes == std::vector<int>{2, 3});
  }
  SECTION("core: the 16 cores in contiguous shares, the first rank one core more") {
    auto plan = plan_placement(m, Binding::kCpuCore, 3, {});
    CHECK(cpu_lists(plan) == Lists{"0-11", "12-21", "22-31"});
    CHECK(plan[0].placement.mem_nodes == std::vector<int>{0, 1});
    CHECK(plan[1].placement.mem_nodes == std::vector<int>{1, 2});
    CHECK(plan[2].describe() == "NUMA nodes 2-3, CPUs 22-31");
  }
  CHECK_THAT(error_of([&] { plan_placement(m, Binding::kCpuCore, 17, {}); }),
             Catch::Contains("--cpu-bind=core: 17 workers, but this process may run on 16 core(s)"));
  // GPU modes need GPUs.
  CHECK_THAT(error_of([&] { plan_placement(m, Binding::kGpuNode, 1, {}); }),
             Catch::Contains("local rank 0 has no GPU of its own: 0 visible"));
  CHECK(plan_placement(m, Binding::kNone, 4, {}).empty());
}

TEST_CASE("topology: this machine, limited to the CPUs this process may use", "[topology]") {
  const Machine m = load_machine();
  CHECK(m.this_system);
  REQUIRE_FALSE(m.cpus.empty());
  REQUIRE_FALSE(m.numa_nodes.empty());
  for (const auto& cpu : m.cpus) CHECK(cpu.numa >= 0);
  // The same CPUs the kernel lists for this process.
  std::ifstream status("/proc/self/status");
  std::string line;
  std::string allowed;
  while (std::getline(status, line)) {
    if (line.rfind("Cpus_allowed_list:", 0) == 0) allowed = line.substr(line.find_first_not_of(" \t", 18));
  }
  std::vector<int> ids;
  for (const auto& cpu : m.cpus) ids.push_back(cpu.os);
  CHECK(format_cpu_list(ids) == allowed);
}

TEST_CASE("topology: CPU lists and PCI addresses", "[topology]") {
  CHECK(format_cpu_list({0, 1, 2, 3, 8, 32, 33}) == "0-3,8,32-33");
  CHECK(format_cpu_list({5}) == "5");
  CHECK(normalize_pci_bus_id("00000000:9A:00.0") == "0000:9a:00.0");
  CHECK(normalize_pci_bus_id("0000:18:00.0") == "0000:18:00.0");
  CHECK(normalize_pci_bus_id("GPU-5a1b").empty());
  CHECK(normalize_pci_bus_id("0000:18:00.0x").empty());
}

TEST_CASE("topology: a real GPU machine as its lstopo exported it", "[topology]") {
  // h200_vm.xml: lstopo's XML of a virtual machine with one NVIDIA H200, 16 cores, one NUMA
  // node, recorded as it came. The firmware gives the GPU no node (it hangs from the machine);
  // with a single node that is still an answer.
  const auto m = load_machine_from_xml(fixture("h200_vm.xml"));
  CHECK(m.summary() == "1 package, 1 NUMA node, 16 cores, 16 CPUs, 1 GPU");
  REQUIRE(m.gpus.size() == 1);
  CHECK(m.gpus[0].pci_bus_id == "0000:00:06.0");
  CHECK(m.gpus[0].numa == 0);
  for (Binding b : {Binding::kGpuNode, Binding::kGpuSocket, Binding::kGpuExclusive,
                    Binding::kGpuCoreComplex}) {
    CHECK(cpu_lists(plan_placement(m, b, 1, {"00000000:00:06.0"})) == Lists{"0-15"});
  }
  CHECK_THAT(error_of([&] { plan_placement(m, Binding::kGpuExclusive, 2, {}); }),
             Catch::Contains("local rank 1 has no GPU of its own: 1 visible"));
}
