// Slurm's hostlist syntax, checked against Slurm's own `scontrol show hostnames` where it is
// installed.

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "cluster/host_list.hpp"
#include "common/error.hpp"
#include "testing/test_util.hpp"

using namespace ddprun;

namespace {

using Hosts = std::vector<std::string>;

// `scontrol show hostnames TEXT` with a throw-away configuration, in a directory that goes with
// the test run; nullopt without scontrol.
std::optional<Hosts> scontrol_hostnames(const std::string& text) {
  if (access("/usr/bin/scontrol", X_OK) != 0) return std::nullopt;
  static const ddprun::test::TempDir dir;
  static const std::string conf = [] {
    const std::string path = dir.file("slurm.conf");
    std::ofstream(path) << "ClusterName=x\nSlurmctldHost=localhost\nNodeName=n1\n"
                           "PartitionName=p Nodes=n1\n";
    return path;
  }();
  const std::string command = "SLURM_CONF=" + conf + " /usr/bin/scontrol show hostnames '" +
                              text + "' 2>/dev/null";
  Hosts out;
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char line[512];
    while (fgets(line, sizeof line, pipe)) {
      std::string s(line);
      while (!s.empty() && s.back() == '\n') s.pop_back();
      out.push_back(s);
    }
    pclose(pipe);
  }
  return out;
}

}  // namespace

TEST_CASE("slurm: hostlist expansion matches scontrol show hostnames", "[cluster][slurm]") {
  const std::vector<std::pair<std::string, Hosts>> cases = {
      {"n1", {"n1"}},
      {"n[1-3]", {"n1", "n2", "n3"}},
      {"gpu[01-04,07],cpu-a[1-2]", {"gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "cpu-a1", "cpu-a2"}},
      {"node[008-011]", {"node008", "node009", "node010", "node011"}},
      {"a[9-11]", {"a9", "a10", "a11"}},
      {"x[1-2]y[3-4]", {"x1y3", "x1y4", "x2y3", "x2y4"}},
      {"rack[1-2]-n[1,3]", {"rack1-n1", "rack1-n3", "rack2-n1", "rack2-n3"}},
      {"host,other", {"host", "other"}},
      {"n[5],m[2-2]", {"n5", "m2"}},
      {"10-gpu[0-1]", {"10-gpu0", "10-gpu1"}},
  };
  bool compared = false;
  for (const auto& [text, expected] : cases) {
    INFO(text);
    CHECK(expand_hostlist(text, "test") == expected);
    if (auto theirs = scontrol_hostnames(text)) {
      CHECK(*theirs == expected);
      compared = true;
    }
  }
  if (!compared) WARN("scontrol is not installed: the expansions were not compared with Slurm's");
}

TEST_CASE("slurm: malformed hostlists are usage errors naming the variable", "[cluster][slurm]") {
  auto rejected = [](const std::string& text) {
    try {
      expand_hostlist(text, "SLURM_JOB_NODELIST");
      return false;
    } catch (const ConfigError& e) {
      CHECK_THAT(e.what(), Catch::StartsWith("SLURM_JOB_NODELIST="));
      return true;
    }
  };
  // Slurm refuses these too (scontrol prints no host names).
  for (const char* bad : {"n[]", "n[a-b]", "n[3-1]", "n[[1]]", "n[1-2]-ib"}) {
    INFO(bad);
    CHECK(rejected(bad));
    if (auto theirs = scontrol_hostnames(bad)) CHECK(theirs->empty());
  }
  // Slurm reads these as something (an unclosed bracket as a name, a blank or an empty item as a
  // separator); no scheduler writes them, and ddprun refuses to guess.
  for (const char* bad : {"n[1-", "n1]", "n[1-2", "a,,b", "", "n 1"}) {
    INFO(bad);
    CHECK(rejected(bad));
  }
}
