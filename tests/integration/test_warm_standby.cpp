// --warm-standby with real torch 1.13 programs: a worker started from a standby sees what a cold
// one sees (tests/python/identity_probe.py), a standby that dies is replaced and said so, and one
// whose imports fail is reported and its rank starts cold.

#include <catch2/catch.hpp>

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "testing/ddprun_process.hpp"
#include "testing/test_util.hpp"

using namespace ddprun;
using namespace ddprun::test;
using namespace std::chrono_literals;
using nlohmann::json;

namespace fs = std::filesystem;

namespace {

// Replaces every occurrence of `from` in the strings of `j`.
void replace_in(json& j, const std::string& from, const std::string& to) {
  if (j.is_string()) {
    auto s = j.get<std::string>();
    for (auto pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size())) {
      s.replace(pos, from.size(), to);
    }
    j = s;
  } else if (j.is_structured()) {
    for (auto& item : j) replace_in(item, from, to);
  }
}

// One job of the probe: 2 ranks, rank 1 fails once, each attempt's view of every rank written to
// `out`. The command line and environment are the same for both runs but for `extra`, and the
// paths that name the run's own directory are made equal before comparing.
struct ProbeRun {
  TempDir out;
  TempDir logs;
  std::string console;
  int code = -1;

  ProbeRun(const std::vector<std::string>& program, std::uint16_t port,
           const std::vector<std::string>& extra, std::map<std::string, std::string> env = {}) {
    env["PYTHON_EXEC"] = "/usr/bin/python3";
    env["PROBE_OUT"] = out.path();
    DdprunProcess p(std::vector<std::string>{"--nproc-per-node=2", "--max-restarts=1",
                                             "--master-port=" + std::to_string(port),
                                             "--redirects=3", "--log-dir=" + logs.path()} +
                        extra + program,
                    env);
    code = p.wait(280s);
    console = p.output();
  }

  json view(int attempt, int rank) const {
    std::ifstream in(out.file(std::to_string(attempt) + "." + std::to_string(rank) + ".json"));
    if (!in) return json();
    auto j = json::parse(in);
    replace_in(j, out.path(), "<out>");
    replace_in(j, logs.path(), "<logs>");
    return j;
  }

  // A rank's file of an attempt (error.json, stderr.log), with the run's directories replaced.
  std::string rank_file(int attempt, int rank, const std::string& name) const {
    for (const auto& job : fs::directory_iterator(logs.path())) {
      auto text = read_file((job.path() / ("attempt_" + std::to_string(attempt)) /
                             std::to_string(rank) / name).string());
      json j = text;
      replace_in(j, logs.path(), "<logs>");
      replace_in(j, job.path().string(), "<job>");
      return j.get<std::string>();
    }
    return {};
  }
};

// A worker's stderr without what Python's multiprocessing resource tracker says of the
// DataLoader's semaphores at the worker's exit: the tracker is a process of its own, in the
// worker's group, and says it only when it gets to before the agent ends that group.
std::string without_resource_tracker(const std::string& text) {
  std::istringstream in(text);
  std::string out;
  for (std::string line; std::getline(in, line);) {
    if (line.find("resource_tracker") == std::string::npos) out += line + "\n";
  }
  return out;
}

json without_preload(json j) {
  j.erase("torch_preloaded");
  // The run's own log directory has a random name: its files' paths differ by that alone.
  for (const char* name : {"TORCHELASTIC_ERROR_FILE", "TORCH_FR_DUMP_TEMP_FILE",
                           "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"}) {
    auto& v = j["env"][name];
    if (v.is_string()) v = std::regex_replace(v.get<std::string>(), std::regex("/[^/]+/attempt_"), "/<job>/attempt_");
  }
  return j;
}

void compare_cold_and_warm(const ProbeRun& cold, const ProbeRun& warm) {
  INFO("cold run:\n" << cold.console << "\nwarm run:\n" << warm.console);
  REQUIRE(cold.code == 0);
  REQUIRE(warm.code == 0);
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (int rank = 0; rank < 2; ++rank) {
      INFO("attempt " << attempt << ", rank " << rank);
      const auto c = cold.view(attempt, rank);
      const auto w = warm.view(attempt, rank);
      REQUIRE(c.is_object());
      REQUIRE(w.is_object());
      CHECK(c["torch_preloaded"] == false);
      // Every attempt of the warm run, the first one included, began in a standby.
      CHECK(w["torch_preloaded"] == true);
      CHECK(w["torchelastic"] == true);
      CHECK(w["modules_cuda_initialized"] == false);
      CHECK(without_preload(c).dump(1) == without_preload(w).dump(1));
    }
  }
  // torch's @record error file and the traceback on stderr: the program's frames, no
  // standby's.
  CHECK(cold.rank_file(0, 1, "error.json").find("the planned failure of rank 1") !=
        std::string::npos);
  const auto cold_error = json::parse(cold.rank_file(0, 1, "error.json"));
  const auto warm_error = json::parse(warm.rank_file(0, 1, "error.json"));
  CHECK(cold_error["message"]["message"] == warm_error["message"]["message"]);
  CHECK(cold_error["message"]["extraInfo"]["py_callstack"] ==
        warm_error["message"]["extraInfo"]["py_callstack"]);
  CHECK(without_resource_tracker(cold.rank_file(0, 1, "stderr.log")) ==
        without_resource_tracker(warm.rank_file(0, 1, "stderr.log")));
  CHECK(warm.rank_file(0, 1, "stderr.log").find("_ddprun_standby") == std::string::npos);
}

}  // namespace

TEST_CASE("warm standby: a worker started from a standby sees what a cold one sees",
          "[warm-standby][python]") {
  if (!torch_available()) {
    WARN("Debian's python3-torch is not installed: skipped");
    return;
  }
  const auto port = free_port();
  const std::vector<std::string> program{IDENTITY_PROBE_SCRIPT, "an-argument", "--flag=x"};
  ProbeRun cold(program, port, {});
  ProbeRun warm(program, port, {"--warm-standby"});
  compare_cold_and_warm(cold, warm);
}

TEST_CASE("warm standby: python -m pkg.mod from a standby is the same module run",
          "[warm-standby][python]") {
  if (!torch_available()) {
    WARN("Debian's python3-torch is not installed: skipped");
    return;
  }
  TempDir packages;
  fs::create_directories(packages.file("probe_pkg"));
  std::ofstream(packages.file("probe_pkg/__init__.py")).flush();
  fs::copy_file(IDENTITY_PROBE_SCRIPT, packages.file("probe_pkg/probe.py"));
  const auto port = free_port();
  const std::vector<std::string> program{"-m", "probe_pkg.probe", "x"};
  const std::map<std::string, std::string> env{{"PYTHONPATH", packages.path()},
                                               {"PROBE_QUICK", "1"}};
  ProbeRun cold(program, port, {}, env);
  ProbeRun warm(program, port, {"--warm-standby=torch,torch.distributed"}, env);
  compare_cold_and_warm(cold, warm);
  CHECK(warm.view(1, 0)["argv"][0] == packages.file("probe_pkg/probe.py"));
}

TEST_CASE("warm standby: a standby killed before its use is replaced and said so, and the "
          "restart still starts warm", "[warm-standby][python]") {
  if (!torch_available()) {
    WARN("Debian's python3-torch is not installed: skipped");
    return;
  }
  TempDir dir;
  Gate gate;
  // Attempt 0 waits at the gate, then rank 0 fails; attempt 1 says whether torch was there
  // before the script imported it.
  std::ofstream(dir.file("job.py"))
      << "import os, subprocess, sys\n"
         "preloaded = 'torch' in sys.modules\n"
         "import torch\n"
         "attempt, rank = os.environ['TORCHELASTIC_RESTART_COUNT'], os.environ['RANK']\n"
         "if attempt == '0':\n"
         "    subprocess.run(['flock', '-s', '" << gate.path() << "', 'true'], check=True)\n"
         "    sys.exit(3 if rank == '0' else 0)\n"
         "print(f'attempt {attempt} rank {rank} preloaded {preloaded}', flush=True)\n";
  DdprunProcess p({"--nproc-per-node=2", "--max-restarts=1", "--warm-standby",
                   "--master-port=" + std::to_string(free_port()), "--log-level=debug",
                   dir.file("job.py")},
                  {{"PYTHON_EXEC", "/usr/bin/python3"}});
  // The first standbys become attempt 0's workers; the next ones start once those began.
  REQUIRE(p.wait_for_output("warm standby for local rank 0: pid", 120s));
  // `m` points into `seen`, which must outlive it.
  std::string seen;
  std::smatch m;
  const std::regex second("warm standby for local rank 1: pid (\\d+)[\\s\\S]*"
                          "warm standby for local rank 1: pid (\\d+)\n");  // the whole pid
  REQUIRE(wait_until([&] {
    seen = p.output();
    return std::regex_search(seen, m, second);
  }, 120s));
  const pid_t victim = std::stoi(m[2].str());
  INFO("standby " << victim << " in:\n" << seen);
  REQUIRE(parent_of(victim) == p.pid());  // never signal a process this test did not start
  REQUIRE(kill(victim, SIGKILL) == 0);
  if (!p.wait_for_output("warm standby for local rank 1 (pid " + std::to_string(victim) +
                             ") ended before it was used (killed by SIGKILL): starting another",
                         60s)) {
    FAIL("no report of the killed standby " << victim << ":\n" << p.output());
  }
  gate.open();
  CHECK(p.wait(180s) == 0);
  const auto out = p.output();
  INFO(out);
  CHECK(count_of(out, "attempt 1 rank 0 preloaded True") == 1);
  CHECK(count_of(out, "attempt 1 rank 1 preloaded True") == 1);
  CHECK(count_of(out, "from its warm standby") == 4);
}

TEST_CASE("warm standby: a module that cannot be imported is reported once, and the job runs "
          "cold", "[warm-standby][python]") {
  if (!torch_available()) {
    WARN("Debian's python3-torch is not installed: skipped");
    return;
  }
  TempDir dir;
  Gate gate;
  // Rank 1 of attempt 0 waits at the gate (so that the job lasts until the standbys have
  // spoken), then fails.
  std::ofstream(dir.file("job.py"))
      << "import os, subprocess, sys\n"
         "attempt, rank = os.environ['TORCHELASTIC_RESTART_COUNT'], os.environ['RANK']\n"
         "print(f'attempt {attempt} rank {rank} ran', flush=True)\n"
         "if attempt == '0' and rank == '1':\n"
         "    subprocess.run(['flock', '-s', '" << gate.path() << "', 'true'], check=True)\n"
         "    sys.exit(5)\n";
  DdprunProcess p({"--nproc-per-node=2", "--max-restarts=1",
                   "--warm-standby=no_such_module_here",
                   "--master-port=" + std::to_string(free_port()), dir.file("job.py")},
                  {{"PYTHON_EXEC", "/usr/bin/python3"}});
  for (const char* rank : {"0", "1"}) {
    if (!p.wait_for_output(std::string("warm standby for local rank ") + rank, 120s)) {
      FAIL("no report of rank " << rank << "'s standby:\n" << p.output());
    }
  }
  // Rank 1 fails only once rank 0 has had its say: on a busy machine rank 0's interpreter may
  // still be starting when the standbys have spoken, and the failure would stop it unheard.
  if (!p.wait_for_output("attempt 0 rank 0 ran", 120s)) {
    FAIL("rank 0 of attempt 0 said nothing:\n" << p.output());
  }
  gate.open();
  CHECK(p.wait(180s) == 0);
  const auto out = p.output();
  INFO(out);
  for (const char* line : {"attempt 0 rank 0 ran", "attempt 0 rank 1 ran", "attempt 1 rank 0 ran",
                           "attempt 1 rank 1 ran"}) {
    CHECK(count_of(out, line) == 1);
  }
  for (const char* rank : {"0", "1"}) {
    CHECK(count_of(out, std::string("warm standby for local rank ") + rank) == 1);
  }
  CHECK(count_of(out, "failed importing no_such_module_here: ModuleNotFoundError") == 2);
  CHECK(count_of(out, "its restarts start cold") == 2);
}
