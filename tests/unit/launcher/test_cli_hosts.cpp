// The command line of a one-command job (--hosts, --hostfile): what the remote agents will be
// told, and the mistakes caught before any host is contacted.

#include <algorithm>

#include "cli_test_helpers.hpp"

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
