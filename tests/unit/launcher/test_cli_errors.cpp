// parse_command_line on bad input: every case must exit 2 with no config and one line that
// names the flag (or the environment variable) at fault.

#include "cli_test_helpers.hpp"

using namespace ddprun;
using namespace ddprun::test;

TEST_CASE("cli: --nnodes must be N or MIN:MAX with 0 < MIN <= MAX", "[launcher][cli][errors]") {
  expect_usage_error({"--nnodes=2:1", "--rdzv-backend=c10d", "x.py"},
                     {"--nnodes=2:1: MIN must be <= MAX"});
  for (const char* bad : {"0", "-1", "a:b", "1:2:3", "", "x", "0:2", "1:"}) {
    expect_usage_error({"--rdzv-backend=c10d", std::string("--nnodes=") + bad, "x.py"},
                       {"--nnodes="});
  }
  // A negative value as a separate argument is still taken as the value.
  expect_usage_error({"--nnodes", "-1", "x.py"}, {"--nnodes=-1", ">= 1"});
}

TEST_CASE("a static rendezvous needs a fixed node count and a node rank below it",
          "[launcher][cli][errors]") {
  expect_usage_error({"--nnodes=1:2", "x.py"}, {"--nnodes", "c10d"});
  expect_usage_error({"--nnodes=2", "--node-rank=2", "x.py"}, {"--node-rank=2", "< the number"});
  expect_usage_error({"--node_rank=1", "x.py"}, {"--node-rank=1"});
  expect_usage_error({"--node-rank=-1", "x.py"}, {"--node-rank=-1"});
  expect_usage_error({"x.py"}, {"PET_NODE_RANK=3"}, {{"PET_NODE_RANK", "3"}, {"PET_NNODES", "2"}});
  expect_usage_error({"--rdzv-endpoint=host", "x.py"}, {"--rdzv-endpoint=host", "host:port"});
}

TEST_CASE("ports are 0..65535", "[launcher][cli][errors]") {
  CHECK(parse_ok({"--master-port=0", "x.py"}).master_port == 0);
  CHECK(parse_ok({"--master-port=65535", "x.py"}).master_port == 65535);
  expect_usage_error({"--master-port=65536", "x.py"}, {"--master-port=65536", "0..65535"});
  expect_usage_error({"--master-port=-1", "x.py"}, {"--master-port=-1"});
  expect_usage_error({"--master-port=http", "x.py"}, {"--master-port=http"});
  expect_usage_error({"--rdzv-backend=c10d", "--rdzv-endpoint=h:70000", "x.py"},
                     {"--rdzv-endpoint", "0..65535"});
  expect_usage_error({"--master-addr=h:80", "x.py"}, {"--master-addr=h:80", "without a port"});
}

TEST_CASE("program selection errors", "[launcher][cli][errors]") {
  expect_usage_error({"--no-python", "-m", "pkg"}, {"--no-python", "--module"});
  expect_usage_error({"--nnodes=1"}, {"missing the program"});
  expect_usage_error({}, {"missing the program"});
  expect_usage_error({"--"}, {"missing the program"});
  expect_usage_error({"--standalone"}, {"missing the program"});
}

TEST_CASE("cli: --nproc-per-node must be a positive int, cpu, gpu or auto",
          "[launcher][cli][errors]") {
  for (const char* bad : {"0", "-2", "two", "1.5", "GPU", ""}) {
    expect_usage_error({std::string("--nproc-per-node=") + bad, "x.py"}, {"--nproc-per-node="});
  }
  expect_usage_error({"x.py"}, {"PET_NPROC_PER_NODE=0"}, {{"PET_NPROC_PER_NODE", "0"}});
}

TEST_CASE("cli: --node-check takes off, warn, refuse or exclude", "[launcher][cli][errors]") {
  for (const char* bad : {"on", "WARN", "excluded", ""}) {
    expect_usage_error({std::string("--node-check=") + bad, "x.py"},
                       {"--node-check=", "expected off, warn, refuse or exclude"});
  }
  expect_usage_error({"x.py"}, {"PET_NODE_CHECK=yes"}, {{"PET_NODE_CHECK", "yes"}});
  // exclude needs a minimum below the maximum: with a fixed count no node can be left out.
  for (const char* nnodes : {"--nnodes=3", "--nnodes=2:2"}) {
    expect_usage_error({nnodes, "--rdzv-backend=c10d", "--node-check=exclude", "x.py"},
                       {"--node-check=exclude: the job has a fixed number of nodes (",
                        "--nnodes=MIN:MAX"});
  }
  expect_usage_error({"--standalone", "--node-check=exclude", "x.py"},
                     {"--node-check=exclude: the job has a fixed number of nodes (1)"});
}

TEST_CASE("cli: --node-check-mib takes 0 to 1024", "[launcher][cli][errors]") {
  for (const char* bad : {"-1", "4M", "1.5", ""}) {
    expect_usage_error({std::string("--node-check-mib=") + bad, "x.py"}, {"--node-check-mib="});
  }
  expect_usage_error({"--node-check-mib=1025", "x.py"},
                     {"--node-check-mib=1025: at most 1024 (MiB each node sends to another)"});
  expect_usage_error({"x.py"}, {"PET_NODE_CHECK_MIB=8G"}, {{"PET_NODE_CHECK_MIB", "8G"}});
}

TEST_CASE("integer and duration flags", "[launcher][cli][errors]") {
  expect_usage_error({"--max-restarts=-1", "x.py"}, {"--max-restarts=-1", ">= 0"});
  expect_usage_error({"--max_restarts", "many", "x.py"}, {"--max-restarts=many"});
  // The hang timeout watches output that --raw-output sends past the agent.
  expect_usage_error({"--hang-timeout=60", "--raw-output", "x.py"},
                     {"--hang-timeout", "--raw-output"});
  // Unless some of it still goes through the agent to files.
  CHECK(parse_ok({"--hang-timeout=60", "--raw-output", "--tee=1", "x.py"}).raw_output);
  for (const char* flag : {"--shutdown-timeout", "--monitor-interval", "--exit-barrier-timeout",
                           "--hang-timeout"}) {
    for (const char* bad : {"-1", "soon", "inf", "nan", ""}) {
      expect_usage_error({std::string(flag) + "=" + bad, "x.py"}, {std::string(flag) + "="});
    }
  }
}

TEST_CASE("rendezvous backend and configuration", "[launcher][cli][errors]") {
  expect_usage_error({"--rdzv-backend=zookeeper", "x.py"},
                     {"--rdzv-backend", "static, c10d, etcd"});
  expect_usage_error({"--rdzv-backend=etcd", "--rdzv-endpoint=https://e1:2379", "x.py"},
                     {"--rdzv-endpoint=https://e1:2379", "not supported", "TLS proxy"});
  expect_usage_error({"--rdzv-backend=etcd", "--rdzv-endpoint=e1:2379,e2:x", "x.py"},
                     {"--rdzv-endpoint"});
  expect_usage_error({"--rdzv-backend=etcd", "--rdzv-endpoint= , ", "x.py"}, {"--rdzv-endpoint"});
  expect_usage_error({"--rdzv-backend=etcd", "--rdzv-conf=etcd_prefix=nope", "x.py"},
                     {"etcd_prefix=nope", "starting with /"});
  expect_usage_error({"--rdzv-backend=etcd", "--rdzv-conf=protocol=https", "x.py"},
                     {"protocol", "only http"});
  expect_usage_error({"--rdzv-conf=join_timeout", "x.py"}, {"--rdzv-conf", "key=value"});
  expect_usage_error({"--rdzv-conf=join_timeout=abc", "x.py"},
                     {"--rdzv-conf join_timeout=abc"});
  expect_usage_error({"--rdzv-conf=is_host=maybe", "x.py"}, {"--rdzv-conf is_host=maybe"});
  expect_usage_error({"--rdzv-conf==5", "x.py"}, {"--rdzv-conf", "empty key"});
  expect_usage_error({"--rdzv-conf=keep_alive_max_attempt=0", "x.py"},
                     {"keep_alive_max_attempt=0"});
  expect_usage_error({"--rdzv-id=", "x.py"}, {"--rdzv-id"});
}

TEST_CASE("cli: --redirects and --tee specs", "[launcher][cli][errors]") {
  for (const char* bad : {"4", "-1", "x", "0:4", "0:1,", "a:1", "0:1,0:2", "0:1:2", ":1", ""}) {
    expect_usage_error({std::string("--redirects=") + bad, "x.py"}, {"--redirects="});
    expect_usage_error({"-t", bad, "x.py"}, {"--tee="});
  }
}

TEST_CASE("signals, local ranks, choices and prefixes", "[launcher][cli][errors]") {
  expect_usage_error({"--signals-to-handle=SIGTERM,SIGKILL", "x.py"},
                     {"--signals-to-handle", "SIGKILL"});
  expect_usage_error({"--signals-to-handle=SIGTERM,", "x.py"}, {"--signals-to-handle"});
  expect_usage_error({"--local-ranks-filter=0,-1", "x.py"}, {"--local-ranks-filter", "'-1'"});
  expect_usage_error({"--local-ranks-filter=0,,1", "x.py"}, {"--local-ranks-filter"});
  expect_usage_error({"--start-method=thread", "x.py"}, {"--start-method=thread"});
  expect_usage_error({"--logs_specs=my_specs", "x.py"},
                     {"--logs-specs=my_specs", "Python classes", "--log-dir"});
  expect_usage_error({"--log-level=verbose", "x.py"}, {"--log-level=verbose"});
  expect_usage_error({"--log-line-prefix={nope}", "x.py"}, {"--log-line-prefix", "{nope}"});
  expect_usage_error({"--role=", "x.py"}, {"--role"});
  expect_usage_error({"--fold-output=sometimes", "x.py"},
                     {"--fold-output=sometimes", "auto, on, exact or off"});
  expect_usage_error({"--raw-output", "--fold-output", "x.py"},
                     {"--fold-output", "--raw-output", "one or the other"});
  expect_usage_error({"--raw-output", "--duplicate-stdout-filters=loss", "x.py"},
                     {"--duplicate-stdout-filters", "--raw-output"});
}

TEST_CASE("unknown options and missing values", "[launcher][cli][errors]") {
  // --nnode is an abbreviation of --nnodes (test_cli_abbreviations.cpp); one letter more is not.
  expect_usage_error({"--nnodess=2", "x.py"}, {"unknown option --nnodess=2"});
  expect_usage_error({"--bogus", "3", "x.py"}, {"unknown option --bogus"});
  expect_usage_error({"-z", "x.py"}, {"unknown option -z"});
  expect_usage_error({"--bogus", "--", "x.py"}, {"unknown option --bogus"});
  expect_usage_error({"--nnodes"}, {"--nnodes"});
  expect_usage_error({"--nproc-per-node"}, {"--nproc-per-node"});
}
