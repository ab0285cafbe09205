// The command line of a one-command job (--hosts, --hostfile): what the remote agents will be
// told, and the mistakes caught before any host is contacted.

#include <algorithm>
#include <cctype>

#include "cli_test_helpers.hpp"
#include "cluster/remote_command.hpp"
#include "cluster/session_protocol.hpp"

using namespace ddprun;
using namespace ddprun::test;

namespace {

bool has(const std::vector<std::string>& flags, const std::string& flag) {
  return std::find(flags.begin(), flags.end(), flag) != flags.end();
}

}  // namespace

TEST_CASE("cli: --hosts describes the job the remote agents form", "[launcher][cli][hosts]") {
  // -x's value is not the program: the flag after it is still ddprun's.
  auto config = parse_ok({"--hosts=10.0.0.1:2,10.0.0.2", "--nproc-per-node=gpu", "-x",
                          "FOO=bar", "--max_restarts=2", "-x", "BAZ", "train.py", "--lr", "0.1"});
  REQUIRE(config.cluster);
  const auto& c = *config.cluster;
  CHECK(c.hosts == std::vector<HostSpec>{{"10.0.0.1", 2}, {"10.0.0.2", std::nullopt}});
  CHECK(config.min_nodes == 2);
  CHECK(config.max_nodes == 2);
  CHECK(config.master_addr == "10.0.0.1");  // the first host
  CHECK(config.rdzv_id != "none");          // a fresh id per job
  // gpu is resolved on each host, not here (where there may be no GPU at all).
  CHECK(c.nproc_per_node == "gpu");
  CHECK(c.forward == std::vector<std::string>{"FOO=bar", "BAZ"});
  CHECK(c.program_and_args == std::vector<std::string>{"train.py", "--lr", "0.1"});
  // Flags that mean the same everywhere travel as given; per-host ones are set per host.
  CHECK(has(c.agent_flags, "--max-restarts=2"));
  CHECK(has(c.agent_flags, "--log-line-prefix=[{host}:{rank}]:"));
  for (const auto& flag : c.agent_flags) {
    CHECK_FALSE(flag.starts_with("--hosts"));
    CHECK_FALSE(flag.starts_with("--nproc-per-node"));
  }
  CHECK(c.ssh_command == std::vector<std::string>{"ssh", "-o", "BatchMode=yes"});
}

TEST_CASE("cli: --hosts tells each agent its worker count, one unless the flag or the host "
          "says otherwise", "[launcher][cli][hosts]") {
  const auto nproc_of = [](const LaunchConfig& config, std::size_t host) {
    std::vector<std::string> found;
    for (const auto& a : agent_args(config, host)) {
      if (a == "--") break;
      if (a.starts_with("--nproc-per-node=")) found.push_back(a);
    }
    return found;
  };
  // An agent under srun left to choose would take the Slurm step's GPU count.
  auto plain = parse_ok({"--hosts=a,b:3", "x.py"});
  CHECK(nproc_of(plain, 0) == std::vector<std::string>{"--nproc-per-node=1"});
  CHECK(nproc_of(plain, 1) == std::vector<std::string>{"--nproc-per-node=3"});
  auto gpu = parse_ok({"--hosts=a,b:3", "--nproc-per-node=gpu", "x.py"});
  CHECK(nproc_of(gpu, 0) == std::vector<std::string>{"--nproc-per-node=gpu"});
}

TEST_CASE("cli: the PET_* form of every flag the command keeps or sets per host stays with "
          "the command", "[launcher][cli][hosts]") {
  // Forwarded, PET_STANDALONE would make every agent a job of its own, and PET_TOKEN_FILE
  // would send each agent looking for the command's file on its own host.
  int checked = 0;
  for (auto role : {HostsRole::kNeedsHosts, HostsRole::kCommandOnly, HostsRole::kSetPerHost}) {
    for (auto flag : flags_with_hosts_role(role)) {
      std::string pet = "PET_";
      for (char ch : flag) {
        pet += ch == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      }
      CAPTURE(pet);
      CHECK_FALSE(forwarded_by_default(pet));
      ++checked;
    }
  }
  CHECK(checked > 0);
  CHECK(forwarded_by_default("PET_MAX_RESTARTS"));  // flags that travel still do
}

TEST_CASE("cli: --hosts passes torchrun's prefix template from the environment on to the "
          "agents", "[launcher][cli][hosts]") {
  auto config = parse_ok({"--hosts=a,b", "x.py"},
                         {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "${rank}: "}});
  REQUIRE(config.cluster);
  CHECK(has(config.cluster->agent_flags, "--log-line-prefix-template=${rank}: "));
  CHECK_FALSE(has(config.cluster->agent_flags, "--log-line-prefix=[{host}:{rank}]:"));
  // The flag on the command line wins, on the head as on the agents.
  config = parse_ok({"--hosts=a,b", "--log-line-prefix={rank}:", "x.py"},
                    {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "${rank}: "}});
  REQUIRE(config.cluster);
  CHECK(has(config.cluster->agent_flags, "--log-line-prefix={rank}:"));
  for (const auto& flag : config.cluster->agent_flags) {
    CHECK_FALSE(flag.starts_with("--log-line-prefix-template"));
  }
  // PET_* reaches the agents in their environment.
  config = parse_ok({"--hosts=a,b", "x.py"}, {{"PET_LOG_LINE_PREFIX_TEMPLATE", "${rank}: "}});
  REQUIRE(config.cluster);
  for (const auto& flag : config.cluster->agent_flags) {
    CHECK_FALSE(flag.starts_with("--log-line-prefix"));
  }
}

TEST_CASE("cli: --hosts with its own flags and an elastic rendezvous", "[launcher][cli][hosts]") {
  auto config = parse_ok({"--hosts=a,b,c", "--rdzv-backend=c10d", "--nnodes=2:4",
                          "--ssh-command=ssh -p 2222 -i '/keys/my key'", "--master-addr=10.9.9.9",
                          "--fanout=4", "--connect-timeout=5", "--hangup-timeout=2.5",
                          "--log-line-prefix={rank}|", "x.py"});
  REQUIRE(config.cluster);
  const auto& c = *config.cluster;
  CHECK(config.min_nodes == 2);
  CHECK(config.max_nodes == 4);
  CHECK(config.rdzv_endpoint == "a:29400");
  CHECK(c.ssh_command == std::vector<std::string>{"ssh", "-p", "2222", "-i", "/keys/my key"});
  CHECK(c.fanout == 4);
  CHECK(c.connect_timeout == std::chrono::seconds(5));
  CHECK(c.hangup_timeout == std::chrono::milliseconds(2500));
  CHECK(has(c.agent_flags, "--log-line-prefix={rank}|"));
  CHECK_FALSE(has(c.agent_flags, "--log-line-prefix=[{host}:{rank}]:"));
}

TEST_CASE("cli: --hosts mistakes are usage errors before any host is contacted",
          "[launcher][cli][hosts][errors]") {
  expect_usage_error({"--hosts=a,b", "--node-rank=1", "x.py"},
                     {"--node-rank", "the order of the hosts gives the node ranks"});
  expect_usage_error({"--hosts=a,b", "--nnodes=3", "x.py"}, {"--nnodes=3", "lists 2 host(s)"});
  expect_usage_error({"--hosts=a,b,c", "--rdzv-backend=c10d", "--nnodes=1:2", "x.py"},
                     {"--nnodes=1:2", "3 host(s) listed, outside 1..2"});
  expect_usage_error({"--hosts=a", "--hostfile=h.txt", "x.py"}, {"cannot be used together"});
  expect_usage_error({"--hosts=a", "--standalone", "x.py"}, {"--standalone"});
  expect_usage_error({"--hosts=a,a", "x.py"}, {"--hosts=a,a", "listed twice"});
  expect_usage_error({"--hosts=a", "-x", "1BAD", "x.py"}, {"-x 1BAD", "NAME=VALUE"});
  expect_usage_error({"--hosts=a", "--ssh-command='ssh", "x.py"}, {"unterminated"});
  expect_usage_error({"--hosts=a", "--nproc-per-node=lots", "x.py"}, {"--nproc-per-node=lots"});
  expect_usage_error({"--hosts=a", "--fanout=0", "x.py"}, {"--fanout=0"});
  expect_usage_error({"--hostfile=/nonexistent/hosts.txt", "x.py"},
                     {"/nonexistent/hosts.txt", "No such file"});
  // The cluster's own flags mean nothing without hosts.
  expect_usage_error({"-x", "FOO", "x.py"}, {"-x needs --hosts or --hostfile"});
  expect_usage_error({"--ssh-command=ssh", "x.py"}, {"--ssh-command needs --hosts"});
  // ...but in the environment (PET_*) they are ignored without hosts.
  CHECK_FALSE(parse_ok({"x.py"}, {{"PET_SSH_COMMAND", "ssh -p 2"}}).cluster);
}
