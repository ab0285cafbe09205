// --node-check's GPU rules (pure): which GPUs CUDA_VISIBLE_DEVICES gives the workers, what is
// named about a GPU as NVML reports it, the report's JSON, and the node's verdict with them.
// NVML itself is read on a real GPU by tests/gpu/gpu_checks.sh.

#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <nlohmann/json.hpp>

#include "agent/gpu_check.hpp"
#include "agent/node_check.hpp"
#include "agent/node_check_table.hpp"
#include "unit/agent/healthy_probe.hpp"

using namespace ddprun;
using ddprun::test::healthy;
using ddprun::test::kGiB;
using Catch::Matchers::Contains;

namespace {

std::optional<std::vector<int>> of(std::vector<int> indexes) { return indexes; }

const std::vector<std::string> kUuids{"GPU-8f6e0000-aaaa", "GPU-8f6e1111-bbbb", "GPU-12ab2222-cccc",
                                      "GPU-12ab3333-dddd"};

GpuProbe gpu(int index) {
  GpuProbe g;
  g.index = index;
  g.name = "NVIDIA H100 80GB HBM3";
  g.uuid = "GPU-0000000" + std::to_string(index);
  g.memory_total_bytes = 80 * kGiB;
  g.memory_used_bytes = 512ull << 20;
  g.ecc_uncorrected_volatile = 0;
  g.ecc_uncorrected_aggregate = 0;
  g.remapped_rows_uncorrectable = 0;
  return g;
}

GpuSurvey gpus(int count) {
  GpuSurvey s;
  s.skipped.clear();
  s.visible = count;
  for (int i = 0; i < count; ++i) s.gpus.push_back(gpu(i));
  return s;
}

}  // namespace

TEST_CASE("gpu check: CUDA_VISIBLE_DEVICES picks the workers' GPUs as CUDA reads it",
          "[agent][node_check]") {
  CHECK(visible_gpus(kUuids, std::nullopt) == of({0, 1, 2, 3}));
  CHECK(visible_gpus(kUuids, "2,0") == of({2, 0}));
  CHECK(visible_gpus(kUuids, " 3 , 1 ") == of({3, 1}));
  CHECK(visible_gpus(kUuids, "1gpu,+2,03") == of({1, 2, 3}));  // as strtoul reads numbers
  // By UUID, whole or a unique prefix; a prefix of two names none.
  CHECK(visible_gpus(kUuids, "GPU-12ab3333-dddd,GPU-8f6e1") == of({3, 1}));
  CHECK(visible_gpus(kUuids, "GPU-8f6e") == of({}));
  CHECK(visible_gpus(kUuids, "GPU-12ab3333,GPU-8f6e,GPU-8f6e1") == of({3}));
  // The list ends at the first entry that names no GPU, or is not named as the first is.
  CHECK(visible_gpus(kUuids, "1,7,2") == of({1}));
  CHECK(visible_gpus(kUuids, "-1,0") == of({}));
  CHECK(visible_gpus(kUuids, "") == of({}));
  CHECK(visible_gpus(kUuids, "0,GPU-12ab3333-dddd") == of({0}));
  CHECK(visible_gpus(kUuids, "GPU-12ab3333-dddd,0") == of({3}));
  // An entry written twice leaves none, even past one that names no GPU; so do two entries
  // that name one GPU.
  CHECK(visible_gpus(kUuids, "1,2,1") == of({}));
  CHECK(visible_gpus(kUuids, "0,9,0") == of({}));
  CHECK(visible_gpus(kUuids, "1,01") == of({}));
  CHECK(visible_gpus(kUuids, "GPU-8f6e0,GPU-zz,GPU-8f6e0") == of({}));
  CHECK(visible_gpus(kUuids, "GPU-8f6e1,GPU-8f6e1111-bbbb") == of({}));
  CHECK(visible_gpus(kUuids, "0,-1,0") == of({0}));  // the list ended before the second 0
  // Hidden on purpose: not a GPU job on this node.
  CHECK(cuda_devices_hidden(""));
  CHECK(cuda_devices_hidden(" -1,0"));
  CHECK_FALSE(cuda_devices_hidden("-0"));
  CHECK_FALSE(cuda_devices_hidden("0,-1"));
  CHECK_FALSE(cuda_devices_hidden("GPU-8f6e"));
  CHECK_FALSE(cuda_devices_hidden("none"));  // names no GPU: a node with none is named
  // MIG instances are not GPUs NVML's index can name: the check cannot tell which are theirs.
  CHECK(visible_gpus(kUuids, "MIG-4f2d0000-1111") == std::nullopt);
}

TEST_CASE("gpu check: a healthy node's GPUs, and a node that is not a GPU node, name nothing",
          "[agent][node_check]") {
  CHECK(gpu_troubles(gpus(8), 8).empty());
  CHECK(gpu_troubles(gpus(8), 2).empty());
  GpuSurvey none;
  none.skipped = "no NVIDIA driver here (libnvidia-ml.so.1)";
  CHECK(gpu_troubles(none, 8).empty());
  // A GPU past the workers' (local rank i takes GPU i) is another job's business.
  auto shared = gpus(4);
  shared.gpus[3].processes = {{4242, 30 * kGiB}};
  shared.gpus[2].ecc_uncorrected_volatile = 1;
  CHECK(gpu_troubles(shared, 2).empty());
  CHECK(gpu_troubles(shared, 4).size() == 2);
  shared.gpus.resize(2);  // as the survey reads them: the workers' in full, the others counted
  CHECK(gpu_troubles(shared, 2).empty());
  CHECK(gpu_summary(shared) == "4");
  auto unsupported = gpus(1);
  unsupported.gpus[0].ecc_uncorrected_volatile = -1;  // ECC off
  unsupported.gpus[0].retired_pages = -1;
  CHECK(gpu_troubles(unsupported, 1).empty());
}

TEST_CASE("gpu check: a GPU another process holds is named with the pid and its memory",
          "[agent][node_check]") {
  auto s = gpus(2);
  s.gpus[1].processes = {{4242, 30 * kGiB}, {77, kNvmlValueNotAvailable}};
  s.gpus[1].memory_used_bytes = 31 * kGiB;
  CHECK(gpu_troubles(s, 2) ==
        std::vector<std::string>{"GPU 1 holds 30 GiB of pid 4242, pid 77"});
  // Memory in use with no process listed: named above the threshold.
  auto hidden = gpus(1);
  hidden.gpus[0].memory_used_bytes = 30 * kGiB;
  CHECK(gpu_troubles(hidden, 1) ==
        std::vector<std::string>{"GPU 0 has 30 GiB of 80 GiB in use that no listed process "
                                 "holds"});
  hidden.gpus[0].memory_used_bytes = kGpuMaxUnexplainedUsedBytes;
  CHECK(gpu_troubles(hidden, 1).empty());
}

TEST_CASE("gpu check: fewer GPUs than workers, NVML's health fields, and NVML's own failure",
          "[agent][node_check]") {
  CHECK(gpu_troubles(gpus(2), 4) ==
        std::vector<std::string>{"4 workers, but 2 GPU(s) visible to them"});
  // A driver that sees no GPU (all gone, or CUDA_VISIBLE_DEVICES naming none of them).
  CHECK(gpu_troubles(gpus(0), 8) ==
        std::vector<std::string>{"8 workers, but 0 GPU(s) visible to them"});
  auto s = gpus(4);
  s.gpus[0].ecc_uncorrected_volatile = 3;
  s.gpus[0].ecc_uncorrected_aggregate = 9;
  s.gpus[1].ecc_uncorrected_aggregate = 12;  // errors of the past alone are figures, not a finding
  s.gpus[2].remap_pending = true;
  s.gpus[3].remap_failed = true;
  s.gpus[3].remap_pending = true;
  CHECK(gpu_troubles(s, 4) ==
        std::vector<std::string>{
            "GPU 0: 3 uncorrectable ECC error(s) since the driver loaded",
            "GPU 2: memory rows remapped pending a reset of the GPU",
            "GPU 3: a row remapping failed (the GPU needs service)"});
  auto retired = gpus(1);
  retired.gpus[0].retired_pages = 4;
  CHECK(gpu_troubles(retired, 1).empty());
  retired.gpus[0].retired_pages_pending = true;
  CHECK(gpu_troubles(retired, 1) ==
        std::vector<std::string>{"GPU 0: memory pages retired pending a reset of the GPU"});
  auto lost = gpus(2);
  lost.gpus[1] = GpuProbe{};
  lost.gpus[1].index = 1;
  lost.gpus[1].error = "GPU is lost";
  CHECK(gpu_troubles(lost, 2) == std::vector<std::string>{"GPU 1: GPU is lost"});
  GpuSurvey failed;
  failed.skipped.clear();
  failed.error = "NVML did not start: Insufficient Permissions";
  CHECK(gpu_troubles(failed, 8) == std::vector<std::string>{failed.error});
  failed.timed_out = true;
  failed.error = "NVML did not answer within 10s";
  CHECK(gpu_troubles(failed, 8) ==
        std::vector<std::string>{"NVML did not answer within 10s (a GPU or its driver in "
                                 "trouble?)"});
}

TEST_CASE("gpu check: the findings are the node's, so that exclude can leave it out",
          "[agent][node_check]") {
  std::vector<NodeProbe> nodes{healthy(0), healthy(1), healthy(2)};
  for (auto& n : nodes) {
    n.workers = 2;
    n.gpus = gpus(2);
    n.min_nodes = 2;
  }
  nodes[1].gpus.gpus[0].processes = {{4242, 30 * kGiB}};
  const auto findings = judge(nodes);
  REQUIRE(findings.size() == 1);
  CHECK(findings[0].line() == "node 1 (host1): GPU 0 holds 30 GiB of pid 4242");
  CHECK(plan_exclusion(findings, nodes).nodes == std::vector<int>{1});
  // The table has a column for the GPUs once a node has a driver to ask.
  const auto table = format_node_check_table(nodes, findings, {}, 0.5);
  INFO(table);
  CHECK_THAT(table, Contains("GPUs"));
  CHECK_THAT(table, Contains("2 (1 held)"));
  CHECK_THAT(format_node_check_table({healthy(0)}, {}, {}, 0.5), !Contains("GPUs"));
  // The healthy line counts the GPUs read, where any node has a driver to ask.
  CHECK(gpus_summary(nodes) == "; 6 GPU(s)");
  nodes[2].gpus.gpus.resize(1);  // its workers take one of its two: both are counted
  CHECK(gpus_summary(nodes) == "; 6 GPU(s)");
  CHECK(gpus_summary({healthy(0)}).empty());
}

TEST_CASE("gpu check: a report with its GPUs round-trips through JSON", "[agent][node_check]") {
  auto p = healthy(3);
  p.workers = 4;
  p.gpus = gpus(4);
  p.gpus.gpus[2].processes = {{4242, 30 * kGiB}, {77, kNvmlValueNotAvailable}};
  p.gpus.gpus[3].error = "GPU is lost";
  p.gpus.gpus[1].retired_pages = 2;
  p.gpus.gpus[1].retired_pages_pending = true;
  p.gpus.gpus[0].remap_failed = true;
  const auto back = probe_from_json(to_json(p));
  CHECK(to_json(back) == to_json(p));
  CHECK(back.gpus.gpus[2].processes[1].used_bytes == kNvmlValueNotAvailable);
  CHECK(gpu_summary(back.gpus) == "4 (1 held)");
  GpuSurvey none;
  CHECK(gpu_survey_from_json(to_json(none)).skipped == none.skipped);
  CHECK(gpu_summary(none) == "-");
}

TEST_CASE("gpu check: NVML's process entries read at each size drivers write",
          "[agent][node_check]") {
  // The unversioned call's entries (16 bytes), _v2's and most drivers' _v3 (24), and _v3 of the
  // drivers that added usedGpuCcProtectedMemory (32).
  struct V1 {
    unsigned int pid;
    unsigned long long used;
  };
  struct V2 {
    unsigned int pid;
    unsigned long long used;
    unsigned int gpu_instance, compute_instance;
  };
  struct V3Wide {
    unsigned int pid;
    unsigned long long used, cc_protected;
    unsigned int gpu_instance, compute_instance;
  };
  static_assert(sizeof(V1) == 16 && sizeof(V2) == 24 && sizeof(V3Wide) == 32);
  const auto read = [](const auto& entries) {
    std::vector<std::pair<unsigned, std::uint64_t>> out;
    for (const auto& p :
         process_entries(reinterpret_cast<const unsigned char*>(entries.data()),
                         static_cast<unsigned>(entries.size()), sizeof(entries[0]))) {
      out.emplace_back(p.pid, p.used_bytes);
    }
    return out;
  };
  const std::vector<std::pair<unsigned, std::uint64_t>> want{{4242, 30 * kGiB}, {77, 5}};
  CHECK(read(std::vector<V1>{{4242, 30 * kGiB}, {77, 5}}) == want);
  CHECK(read(std::vector<V2>{{4242, 30 * kGiB, 1, 2}, {77, 5, 3, 4}}) == want);
  CHECK(read(std::vector<V3Wide>{{4242, 30 * kGiB, 9, 1, 2}, {77, 5, 9, 3, 4}}) == want);
}

TEST_CASE("gpu check: a machine without NVIDIA's driver is not a GPU node to the check",
          "[agent][node_check]") {
  // Hidden on purpose, the GPUs are not looked for, driver or not.
  CHECK(survey_gpus("-1", 2).skipped == "CUDA_VISIBLE_DEVICES hides every GPU");
  CHECK(survey_gpus("", 2).skipped == "CUDA_VISIBLE_DEVICES hides every GPU");
  if (void* nvml = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL)) {
    dlclose(nvml);
    WARN("skipped: this machine has NVML; tests/gpu/gpu_checks.sh reads it");
    return;
  }
  const auto s = survey_gpus(std::nullopt, 2);
  CHECK_THAT(s.skipped, Contains("libnvidia-ml.so.1"));
  CHECK(s.gpus.empty());
  CHECK(gpu_troubles(s, 8).empty());
  ProbeInputs in;
  in.workers = 2;
  const auto probe = probe_node(in);
  CHECK(probe.workers == 2);
  CHECK(probe.gpus.skipped == s.skipped);
}
