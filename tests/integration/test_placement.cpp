// --cpu-bind and --numa-binding through the ddprun binary: the bindings each worker really runs
// with on this machine (read back from /proc/self/status and get_mempolicy in the worker), the
// startup block and --dry-run's lines, and the bindings this machine cannot honour, refused before
// any worker starts. hwloc reads this machine, or a described one through HWLOC_XMLFILE.

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "testing/ddprun_process.hpp"
#include "testing/test_util.hpp"
#include "topology/machine.hpp"
#include "topology/placement_plan.hpp"

using namespace ddprun;
using namespace ddprun::test;
using namespace std::chrono_literals;

namespace {

const std::string kScript = LAUNCHER_CASES_SCRIPT;
const std::string kGpuNode = std::string(TOPOLOGY_FIXTURES) + "/gpu_node_2x4.xml";

std::map<std::string, std::string> python_env(std::map<std::string, std::string> extra = {}) {
  extra.emplace("PYTHON_EXEC", "/usr/bin/python3");
  extra.emplace("TEST_SENTINEL_PARENT", "placement");
  return extra;
}

constexpr int kPreferred = 1;      // MPOL_PREFERRED
constexpr int kPreferredMany = 5;  // MPOL_PREFERRED_MANY

}  // namespace

TEST_CASE("placement: --cpu-bind applies each rank's CPUs and memory policy",
          "[launcher][placement]") {
  if (!std::filesystem::exists("/usr/bin/python3")) {
    WARN("/usr/bin/python3 is not installed: skipped");
    return;
  }
  const Machine machine = load_machine();
  std::vector<int> cores;
  for (const auto& cpu : machine.cpus) cores.push_back(cpu.core);
  std::sort(cores.begin(), cores.end());
  const int core_count = static_cast<int>(std::unique(cores.begin(), cores.end()) - cores.begin());
  const int nproc = std::min(2, core_count);

  for (Binding binding : {Binding::kCpuCore, Binding::kCpuNuma}) {
    const std::string flag = to_string(binding);
    INFO(flag);
    const auto plan = plan_placement(machine, binding, nproc, {});
    DdprunProcess p({flag, "--nproc-per-node=" + std::to_string(nproc), "--master-port=0",
                     kScript, "--print-placement"},
                    python_env());
    REQUIRE(p.wait(120s) == 0);
    const auto out = p.output();
    INFO(out);
    CHECK_THAT(out, Catch::Contains("placement (" + flag + "; " + machine.summary() + "):"));
    for (const auto& rank : plan) {
      const std::string policy =
          std::to_string(rank.numa_nodes.size() == 1 ? kPreferred : kPreferredMany);
      // What the kernel says of the worker is what the plan said.
      CHECK_THAT(out, Catch::Contains(fmt::format(
                          "local rank {}: cpus={} mems={} policy={} nodes={}", rank.local_rank,
                          format_cpu_list(rank.placement.cpus), format_cpu_list(machine.numa_nodes),
                          policy, fmt::format("{}", fmt::join(rank.numa_nodes, ",")))));
      // And the startup block shows it, one line per rank.
      CHECK_THAT(out, Catch::Contains(fmt::format("local rank {}: {}", rank.local_rank,
                                                  rank.describe())));
    }
  }
  // Without a binding a worker keeps the agent's CPUs and the default policy.
  DdprunProcess p({"--nproc-per-node=1", "--master-port=0", kScript, "--print-placement"},
                  python_env());
  REQUIRE(p.wait(120s) == 0);
  std::vector<int> all;
  for (const auto& cpu : machine.cpus) all.push_back(cpu.os);
  CHECK_THAT(p.output(), Catch::Contains("local rank 0: cpus=" + format_cpu_list(all)));
  CHECK_THAT(p.output(), Catch::Contains("policy=0 nodes=\n"));
}

TEST_CASE("placement: --dry-run shows a described 8-GPU node's bindings", "[launcher][placement]") {
  DdprunProcess p({"--dry-run", "--numa-binding=exclusive", "--nproc-per-node=8", "--no-python",
                   "true"},
                  {{"HWLOC_XMLFILE", kGpuNode}});
  REQUIRE(p.wait(60s) == 0);
  const auto out = p.output();
  INFO(out);
  CHECK_THAT(out, Catch::Contains("placement (--numa-binding=exclusive; 2 packages, 2 NUMA nodes, "
                                  "32 cores, 64 CPUs, 8 GPUs, from HWLOC_XMLFILE="));
  CHECK_THAT(out, Catch::Contains("local rank 0: GPU 0 (0000:18:00.0), NUMA node 0, CPUs 0-3,32-35"));
  CHECK_THAT(out, Catch::Contains("local rank 7: GPU 7 (0000:db:00.0), NUMA node 1, CPUs 28-31,60-63"));

  DdprunProcess json({"--dry-run=json", "--numa-binding=core-complex", "--nproc-per-node=2",
                      "--no-python", "true"},
                     {{"HWLOC_XMLFILE", kGpuNode}});
  REQUIRE(json.wait(60s) == 0);
  const auto plan = nlohmann::json::parse(json.output());
  REQUIRE(plan["placement"]["ranks"].size() == 2);
  CHECK(plan["placement"]["binding"] == "--numa-binding=core-complex");
  CHECK(plan["placement"]["ranks"][1]["cpus"] == "8-15,40-47");
  CHECK(plan["placement"]["ranks"][1]["gpu_pci_bus_id"] == "0000:2a:00.0");
  CHECK(plan["placement"]["ranks"][1]["numa_nodes"] == nlohmann::json::array({0}));
}

TEST_CASE("placement: a binding the machine cannot honour stops before any worker starts",
          "[launcher][placement]") {
  TempDir dir;
  const std::vector<std::string> touch = {"--no-python", "touch", dir.file("started")};
  SECTION("a described machine's bindings can be shown, not applied") {
    DdprunProcess p(std::vector<std::string>{"--numa-binding=node", "--nproc-per-node=2",
                                             "--master-port=0"} + touch,
                    {{"HWLOC_XMLFILE", kGpuNode}});
    CHECK(p.wait(60s) == 2);
    CHECK_THAT(p.output(), Catch::Contains("ddprun: --numa-binding=node: the machine described by "
                                           "HWLOC_XMLFILE or HWLOC_SYNTHETIC is not this one"));
  }
  SECTION("more workers than GPUs on the described node") {
    DdprunProcess p(std::vector<std::string>{"--dry-run", "--numa-binding=socket",
                                             "--nproc-per-node=9"} + touch,
                    {{"HWLOC_XMLFILE", kGpuNode}});
    CHECK(p.wait(60s) == 2);
    CHECK_THAT(p.output(), Catch::Contains("--numa-binding=socket: local rank 8 has no GPU of its "
                                           "own: 8 visible here"));
  }
  SECTION("more workers than cores, on this machine") {
    DdprunProcess p(std::vector<std::string>{"--cpu-bind=core", "--nproc-per-node=4097",
                                             "--master-port=0"} + touch);
    CHECK(p.wait(60s) == 2);
    CHECK_THAT(p.output(), Catch::Contains("--cpu-bind=core: 4097 workers, but this process may "
                                           "run on"));
  }
  CHECK_FALSE(file_exists(dir.file("started")));
}
