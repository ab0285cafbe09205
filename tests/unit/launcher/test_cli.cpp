// parse_command_line: spellings, PET_* fallback, the program's arguments, standalone,
// the worker command line, --help and --version. Bad input is in test_cli_errors.cpp.

#include <sys/stat.h>

#include <algorithm>
#include <csignal>
#include <fstream>
#include <functional>
#include <regex>

#include "cli_test_helpers.hpp"
#include "launcher/cpu_count.hpp"
#include "testing/test_util.hpp"

using namespace ddprun;
using namespace ddprun::test;
using namespace std::chrono_literals;

TEST_CASE("a bare program gets torchrun's defaults", "[launcher][cli]") {
  LaunchConfig c = parse_ok({"train.py"});
  CHECK(c.min_nodes == 1);
  CHECK(c.max_nodes == 1);
  CHECK(c.nproc_per_node == 1);
  CHECK(c.node_rank == 0);
  CHECK(c.master_addr == "127.0.0.1");
  CHECK(c.master_port == 29500);
  CHECK(c.rdzv_backend == RdzvBackend::kStatic);
  CHECK(c.rdzv_endpoint.empty());
  CHECK(c.rdzv_id == "none");
  CHECK_FALSE(c.standalone);
  CHECK(c.max_restarts == 0);
  CHECK(c.shutdown_timeout == 30s);
  CHECK(c.exit_barrier_timeout == 300s);
  CHECK(c.hang_timeout == 0s);  // off
  CHECK(c.node_check == NodeCheck::kOff);
  CHECK(c.signals_to_handle == std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT});
  CHECK(c.redirects.for_rank(0) == Std::kNone);
  CHECK_FALSE(c.local_ranks_filter.has_value());
  CHECK(c.log_line_prefix == "[{role}{local_rank}]:");
  CHECK(c.log_level == "info");
  CHECK(c.program == "train.py");
  CHECK(c.argv == Args{"python3", "-u", "train.py"});
}

TEST_CASE("every value flag takes both spellings and both value forms", "[launcher][cli]") {
  struct Case {
    std::string name;  // dash spelling, without "--"
    std::string value;
    std::function<void(const LaunchConfig&)> check;
  };
  const std::vector<Case> cases = {
      {"nnodes", "2:4", [](auto& c) { CHECK((c.min_nodes == 2 && c.max_nodes == 4)); }},
      {"nproc-per-node", "4", [](auto& c) { CHECK(c.nproc_per_node == 4); }},
      {"master-addr", "10.0.0.1", [](auto& c) { CHECK(c.master_addr == "10.0.0.1"); }},
      {"master-port", "1234", [](auto& c) { CHECK(c.master_port == 1234); }},
      {"rdzv-id", "job7", [](auto& c) { CHECK(c.rdzv_id == "job7"); }},
      {"rdzv-conf", "join_timeout=5", [](auto& c) { CHECK(c.rdzv_conf.join_timeout == 5s); }},
      {"max-restarts", "3", [](auto& c) { CHECK(c.max_restarts == 3); }},
      {"monitor-interval", "0.5", [](auto& c) { CHECK(c.monitor_interval == 500ms); }},
      {"start-method", "fork", [](auto& c) { CHECK(c.start_method == "fork"); }},
      {"role", "trainer", [](auto& c) { CHECK(c.role == "trainer"); }},
      {"log-dir", "/tmp/logs", [](auto& c) { CHECK(c.log_dir == "/tmp/logs"); }},
      {"redirects", "3", [](auto& c) { CHECK(c.redirects.for_rank(5) == Std::kAll); }},
      {"tee", "1", [](auto& c) { CHECK(c.tee.for_rank(0) == Std::kOut); }},
      {"local-addr", "node7", [](auto& c) { CHECK(c.local_addr == "node7"); }},
      {"local-ranks-filter", "1,0",
       [](auto& c) { CHECK(c.local_ranks_filter == std::vector<int>{0, 1}); }},
      {"duplicate-stdout-filters", "loss,,acc,epoch",
       [](auto& c) {
         CHECK(c.duplicate_stdout_filters == std::vector<std::string>{"loss,acc", "epoch"});
       }},
      {"duplicate-stderr-filters", "Warning",
       [](auto& c) { CHECK(c.duplicate_stderr_filters == std::vector<std::string>{"Warning"}); }},
      {"signals-to-handle", "SIGUSR1",
       [](auto& c) { CHECK(c.signals_to_handle == std::vector<int>{SIGUSR1}); }},
      {"shutdown-timeout", "2.5", [](auto& c) { CHECK(c.shutdown_timeout == 2500ms); }},
      {"exit-barrier-timeout", "0", [](auto& c) { CHECK(c.exit_barrier_timeout == 0ms); }},
      {"hang-timeout", "300", [](auto& c) { CHECK(c.hang_timeout == 300s); }},
      {"node-check", "warn", [](auto& c) { CHECK(c.node_check == NodeCheck::kWarn); }},
      {"node-check", "refuse", [](auto& c) { CHECK(c.node_check == NodeCheck::kRefuse); }},
      {"node-check", "off", [](auto& c) { CHECK(c.node_check == NodeCheck::kOff); }},
      {"node-check-mib", "16", [](auto& c) { CHECK(c.node_check_mib == 16); }},
      {"node-check-mib", "0", [](auto& c) { CHECK(c.node_check_mib == 0); }},
      {"log-line-prefix", "<{rank}>", [](auto& c) { CHECK(c.log_line_prefix == "<{rank}>"); }},
      {"log-line-prefix-template", "${role_name}${rank}|",
       [](auto& c) { CHECK(c.log_line_prefix == "{role}{rank}|"); }},
      {"events-file", "/tmp/ev.jsonl", [](auto& c) { CHECK(c.events_file == "/tmp/ev.jsonl"); }},
      {"event-log-handler", "console", [](auto& c) { CHECK(c.events_file.empty()); }},
      {"log-level", "debug", [](auto& c) { CHECK(c.log_level == "debug"); }},
  };
  for (const auto& test_case : cases) {
    std::string underscored = test_case.name;
    std::replace(underscored.begin(), underscored.end(), '-', '_');
    // c10d so that --nnodes accepts a range.
    const Args base = {"--rdzv-backend", "c10d"};
    for (const auto& spelling : {test_case.name, underscored}) {
      Args joined = base, separate = base;
      joined.push_back("--" + spelling + "=" + test_case.value);
      separate.insert(separate.end(), {"--" + spelling, test_case.value});
      for (Args args : {joined, separate}) {
        args.push_back("train.py");
        INFO("args: " << Catch::Detail::stringify(args));
        test_case.check(parse_ok(args));
      }
    }
  }
}

TEST_CASE("cli: --node-check=exclude is taken within a range of nodes", "[launcher][cli]") {
  const auto c =
      parse_ok({"--nnodes=2:4", "--rdzv-backend=c10d", "--node-check=exclude", "x.py"});
  CHECK(c.node_check == NodeCheck::kExclude);
  CHECK(c.min_nodes == 2);
  CHECK(std::string(to_string(c.node_check)) == "exclude");
}

TEST_CASE("boolean flags take both spellings", "[launcher][cli]") {
  CHECK(parse_ok({"--no-python", "prog"}).no_python);
  CHECK(parse_ok({"--no_python", "prog"}).no_python);
  CHECK(parse_ok({"--run-path", "x.py"}).run_path);
  CHECK(parse_ok({"--run_path", "x.py"}).run_path);
  CHECK(parse_ok({"--raw-output", "x.py"}).raw_output);
  CHECK(parse_ok({"--raw_output", "x.py"}).raw_output);
  CHECK(parse_ok({"--module", "pkg.mod"}).module);
  CHECK(parse_ok({"-m", "pkg.mod"}).module);
  CHECK(parse_ok({"--standalone", "x.py"}).standalone);
  SECTION("an explicit value, which beats PET_*") {
    CHECK_FALSE(parse_ok({"--no-python=0", "x.py"}, {{"PET_NO_PYTHON", "1"}}).no_python);
    CHECK(parse_ok({"--raw-output=true", "x.py"}).raw_output);
    CHECK_FALSE(parse_ok({"--standalone=false", "x.py"}).standalone);
    expect_usage_error({"--no-python=maybe", "x"}, {"--no-python=maybe: expected a boolean"});
  }
}

TEST_CASE("short options -r and -t take attached or separate values", "[launcher][cli]") {
  LaunchConfig c = parse_ok({"-r3", "-t", "0:1,1:2", "x.py"});
  CHECK(c.redirects.for_rank(7) == Std::kAll);
  CHECK(c.tee.for_rank(0) == Std::kOut);
  CHECK(c.tee.for_rank(1) == Std::kErr);
  CHECK(c.tee.for_rank(2) == Std::kNone);
  // argparse's -r=3 too; the program's own -t=1 is left as it is.
  c = parse_ok({"-r=3", "-t=0:1,1:2", "x.py", "-t=1"});
  CHECK(c.redirects.for_rank(7) == Std::kAll);
  CHECK(c.tee.for_rank(1) == Std::kErr);
  CHECK(c.argv == Args{"python3", "-u", "x.py", "-t=1"});
}

TEST_CASE("an empty --flag= value stays empty and does not swallow the program",
          "[launcher][cli]") {
  // Scripts write --log-dir=$LOG_DIR with the variable unset.
  LaunchConfig c = parse_ok({"--log-dir=", "--local-ranks-filter=", "x.py", "--out=", "y"});
  CHECK(c.log_dir.empty());
  CHECK_FALSE(c.local_ranks_filter.has_value());
  CHECK(c.argv == Args{"python3", "-u", "x.py", "--out=", "y"});
  expect_usage_error({"--nnodes=", "x.py"}, {"--nnodes=: "});
  expect_usage_error({"--bogus=", "x.py"}, {"unknown option --bogus= "});
}

TEST_CASE("a repeated flag keeps its last value, like argparse", "[launcher][cli]") {
  CHECK(parse_ok({"--nproc-per-node", "2", "--nproc_per_node=3", "x.py"}).nproc_per_node == 3);
}

TEST_CASE("underscore spellings are ddprun's own until the program, never the program's",
          "[launcher][cli]") {
  // Values (a separate "2", -r's "3") are not taken for the program, so the flags after them
  // are still ddprun's; everything from the program on is passed untouched.
  LaunchConfig c = parse_ok({"--nproc_per_node", "2", "-r", "3", "--no_python", "prog",
                             "--nproc_per_node=5", "--log_dir", "d"});
  CHECK(c.nproc_per_node == 2);
  CHECK(c.no_python);
  CHECK(c.redirects.for_rank(0) == Std::kAll);
  CHECK(c.argv == Args{"prog", "--nproc_per_node=5", "--log_dir", "d"});
  CHECK(parse_ok({"--no-python", "--", "prog", "--no_python"}).argv ==
        Args{"prog", "--no_python"});
  expect_usage_error({"--bogus_flag", "x.py"}, {"unknown option --bogus_flag"});
}

TEST_CASE("PET_ environment variables fill in flags the command line leaves out",
          "[launcher][cli][env]") {
  Env env = {{"PET_NPROC_PER_NODE", "4"}, {"PET_NNODES", "2"},          {"PET_NODE_RANK", "1"},
             {"PET_MASTER_ADDR", "10.1.2.3"}, {"PET_MASTER_PORT", "4000"}, {"PET_NO_PYTHON", "1"},
             {"PET_MAX_RESTARTS", "2"},   {"PET_REDIRECTS", "10:3"}, {"PET_RDZV_ID", "abc"},
             {"PET_HANG_TIMEOUT", "120"}};
  LaunchConfig c = parse_ok({"prog", "x"}, env);
  CHECK(c.nproc_per_node == 4);
  CHECK(c.max_nodes == 2);
  CHECK(c.node_rank == 1);
  CHECK(c.master_addr == "10.1.2.3");
  CHECK(c.master_port == 4000);
  CHECK(c.no_python);
  CHECK(c.argv == Args{"prog", "x"});
  CHECK(c.max_restarts == 2);
  CHECK(c.redirects.for_rank(10) == Std::kAll);
  CHECK(c.rdzv_id == "abc");
  CHECK(c.hang_timeout == 120s);

  SECTION("the command line wins") {
    LaunchConfig d = parse_ok({"--nproc-per-node=2", "--node_rank", "0", "prog"}, env);
    CHECK(d.nproc_per_node == 2);
    CHECK(d.node_rank == 0);
    CHECK(d.master_port == 4000);  // still from the environment
  }
  SECTION("PET_MODULE, PET_STANDALONE and false booleans") {
    CHECK(parse_ok({"pkg.mod"}, {{"PET_MODULE", "1"}}).module);
    CHECK(parse_ok({"x.py"}, {{"PET_STANDALONE", "true"}}).standalone);
    CHECK_FALSE(parse_ok({"x.py"}, {{"PET_NO_PYTHON", "0"}}).no_python);
  }
  SECTION("empty values count as unset") {
    CHECK(parse_ok({"x.py"}, {{"PET_NNODES", ""}}).max_nodes == 1);
  }
  SECTION("a bad environment value names the variable") {
    expect_usage_error({"x.py"}, {"PET_NNODES=0"}, {{"PET_NNODES", "0"}});
    expect_usage_error({"x.py"}, {"PET_NO_PYTHON=maybe", "boolean"}, {{"PET_NO_PYTHON", "maybe"}});
  }
}

TEST_CASE("everything after the program belongs to it, untouched", "[launcher][cli]") {
  LaunchConfig c = parse_ok({"--nnodes", "1", "train.py", "--nnodes", "5", "--lr=0.1", "-m",
                             "--", "--help", "--version", "${local_rank}"});
  CHECK(c.max_nodes == 1);
  CHECK_FALSE(c.module);
  CHECK(c.argv == Args{"python3", "-u", "train.py", "--nnodes", "5", "--lr=0.1", "-m", "--",
                       "--help", "--version", "${local_rank}"});

  SECTION("a leading -- only separates ddprun's flags from the program") {
    LaunchConfig d = parse_ok({"--no-python", "--", "/bin/echo", "--", "-x"});
    CHECK(d.program == "/bin/echo");
    CHECK(d.argv == Args{"/bin/echo", "--", "-x"});
  }
  SECTION("a negative-looking first argument of the program") {
    CHECK(parse_ok({"--no-python", "prog", "-1"}).argv == Args{"prog", "-1"});
  }
}

TEST_CASE("cli: --standalone: one node, a free local master port, a random run id",
          "[launcher][cli]") {
  CliOutcome outcome = parse_command_line({"--standalone", "--nproc-per-node=2", "x.py"}, {});
  REQUIRE(outcome.config);
  const LaunchConfig& c = *outcome.config;
  CHECK(c.standalone);
  CHECK(c.is_static());
  CHECK(c.master_addr == "127.0.0.1");
  CHECK(c.master_port == 0);
  CHECK(c.node_rank == 0);
  CHECK((c.min_nodes == 1 && c.max_nodes == 1));
  CHECK(c.nproc_per_node == 2);
  CHECK(std::regex_match(c.rdzv_id, std::regex("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-"
                                               "[89ab][0-9a-f]{3}-[0-9a-f]{12}")));
  CHECK(parse_ok({"--standalone", "x.py"}).rdzv_id != c.rdzv_id);
  REQUIRE_FALSE(outcome.notes.empty());
  CHECK_THAT(outcome.notes.back(), Catch::Contains(c.rdzv_id));

  SECTION("it overrides rendezvous flags, and says so") {
    CliOutcome o = parse_command_line(
        {"--standalone", "--nnodes=4", "--rdzv-endpoint=h:1", "--rdzv_id=j", "x.py"}, {});
    REQUIRE(o.config);
    CHECK(o.config->max_nodes == 1);
    CHECK(o.config->is_static());
    CHECK(o.config->rdzv_id != "j");
    REQUIRE(o.notes.size() == 2);
    CHECK_THAT(o.notes[0], Catch::Contains("--nnodes") && Catch::Contains("--rdzv-endpoint") &&
                               Catch::Contains("--rdzv-id"));
  }
}

TEST_CASE("rendezvous endpoints", "[launcher][cli]") {
  SECTION("c10d: default port 29400, normalized host:port") {
    CHECK(parse_ok({"--rdzv-backend=c10d", "--rdzv-endpoint=node0", "x.py"}).rdzv_endpoint ==
          "node0:29400");
    CHECK(parse_ok({"--rdzv-backend=c10d", "--rdzv-endpoint", " node0:1234 ", "x.py"})
              .rdzv_endpoint == "node0:1234");
    CHECK(parse_ok({"--rdzv-backend=c10d", "--rdzv-endpoint=[::1]", "x.py"}).rdzv_endpoint ==
          "[::1]:29400");
  }
  SECTION("c10d without an endpoint uses localhost, as torchrun does") {
    CliOutcome o = parse_command_line({"--rdzv-backend=c10d", "--nnodes=1:2", "x.py"}, {});
    REQUIRE(o.config);
    CHECK(o.config->rdzv_endpoint == "localhost:29400");
    CHECK_FALSE(o.config->is_static());
    REQUIRE(o.notes.size() == 1);
    CHECK_THAT(o.notes[0], Catch::Contains("other nodes cannot reach"));
  }
  SECTION("etcd (and torchrun's etcd-v2): an endpoint list, elastic, default localhost:2379") {
    LaunchConfig c = parse_ok({"--rdzv-backend=etcd", "--nnodes=2:4",
                               "--rdzv-endpoint=http://e1:2379, e2:2380,e3", "--rdzv-conf",
                               "etcd_prefix=/jobs,protocol=http", "x.py"});
    CHECK(c.is_etcd());
    CHECK_FALSE(c.is_static());
    CHECK(c.min_nodes == 2);
    CHECK(c.max_nodes == 4);
    CHECK(c.rdzv_endpoint == "http://e1:2379, e2:2380,e3");
    CHECK(c.rdzv_conf.etcd_prefix == "/jobs");
    CHECK(parse_ok({"--rdzv-backend=etcd-v2", "x.py"}).rdzv_backend == RdzvBackend::kEtcd);
    CHECK(parse_ok({"--rdzv-backend=etcd", "x.py"}).rdzv_endpoint == "localhost:2379");
    CHECK(parse_ok({"--rdzv-backend=etcd", "x.py"}).rdzv_conf.etcd_prefix == "/ddprun");
  }
  SECTION("static: --rdzv-endpoint sets the master address and port") {
    LaunchConfig c = parse_ok({"--nnodes=2", "--rdzv-endpoint=10.0.0.9:2345", "x.py"});
    CHECK(c.master_addr == "10.0.0.9");
    CHECK(c.master_port == 2345);
  }
  SECTION("IPv6 master address in brackets is stored bare") {
    CHECK(parse_ok({"--master-addr=[::1]", "x.py"}).master_addr == "::1");
    CHECK(parse_ok({"--master-addr=fe80::1", "x.py"}).master_addr == "fe80::1");
  }
}

TEST_CASE("cli: --rdzv-conf on the command line", "[launcher][cli]") {
  LaunchConfig c = parse_ok({"--rdzv-backend=c10d",
                             "--rdzv-conf=timeout=900,read_timeout=1.5,is_host=false,store=x",
                             "x.py"});
  CHECK(c.rdzv_conf.join_timeout == 900s);
  CHECK(c.rdzv_conf.read_timeout == 1500ms);
  CHECK(c.rdzv_conf.is_host == false);
  CliOutcome o = parse_command_line(
      {"--rdzv-backend=c10d", "--rdzv-conf=read_timeout=2,store=x", "x.py"}, {});
  REQUIRE(o.config);
  REQUIRE(o.notes.size() == 1);
  CHECK_THAT(o.notes[0], Catch::Contains("--rdzv-conf: ignoring store"));
}

TEST_CASE("cli: --redirects and --tee maps allow multi-digit local ranks", "[launcher][cli]") {
  LaunchConfig c = parse_ok({"--redirects", "10:3,2:1", "--tee=11:2", "x.py"});
  CHECK(c.redirects.for_rank(10) == Std::kAll);
  CHECK(c.redirects.for_rank(2) == Std::kOut);
  CHECK(c.redirects.for_rank(1) == Std::kNone);
  CHECK(c.tee.for_rank(11) == Std::kErr);
}

TEST_CASE("the worker command line", "[launcher][cli]") {
  SECTION("a .py script runs with python3 -u") {
    CHECK(parse_ok({"a.py", "x"}).argv == Args{"python3", "-u", "a.py", "x"});
  }
  SECTION("PYTHON_EXEC picks the interpreter") {
    Env env = {{"PYTHON_EXEC", "/opt/venv/bin/python"}};
    CHECK(parse_ok({"a.py"}, env).argv == Args{"/opt/venv/bin/python", "-u", "a.py"});
    CHECK(parse_ok({"-m", "pkg.train", "--x"}, env).argv ==
          Args{"/opt/venv/bin/python", "-u", "-m", "pkg.train", "--x"});
  }
  SECTION("-m runs a module") {
    LaunchConfig c = parse_ok({"-m", "pkg.train", "--epochs", "3"});
    CHECK(c.program == "pkg.train");
    CHECK(c.argv == Args{"python3", "-u", "-m", "pkg.train", "--epochs", "3"});
  }
  SECTION("--no-python execs the program itself") {
    LaunchConfig c = parse_ok({"--no-python", "/bin/sleep", "1"});
    CHECK(c.argv == Args{"/bin/sleep", "1"});
  }
  SECTION("a program that is not .py still runs with Python, like torchrun") {
    CHECK(parse_ok({"train"}).argv == Args{"python3", "-u", "train"});
  }
  SECTION("--run-path runs the script with Python even with --no-python") {
    CliOutcome o = parse_command_line({"--run-path", "--no-python", "s.py"}, {});
    REQUIRE(o.config);
    CHECK(o.config->argv == Args{"python3", "-u", "s.py"});
    CHECK_FALSE(o.notes.empty());
  }
}

TEST_CASE("cli: --nproc-per-node cpu, gpu and auto", "[launcher][cli]") {
  CHECK(parse_ok({"--nproc-per-node=cpu", "x.py"}).nproc_per_node == usable_cpu_count());
  Env no_gpu = {{"CUDA_VISIBLE_DEVICES", "-1"}};
  CHECK(parse_ok({"--nproc-per-node=auto", "x.py"}, no_gpu).nproc_per_node ==
        usable_cpu_count());
  expect_usage_error({"--nproc-per-node=gpu", "x.py"},
                     {"--nproc-per-node=gpu: no CUDA device is visible"}, {{"CUDA_VISIBLE_DEVICES", ""}});
}

TEST_CASE("the log line prefix from ours or torchrun's flag", "[launcher][cli]") {
  CHECK(parse_ok({"--log-line-prefix={host}/{rank}:", "x.py"}).log_line_prefix ==
        "{host}/{rank}:");
  // The command line beats the other flag's environment variable.
  CHECK(parse_ok({"--log-line-prefix={rank}", "x.py"},
                 {{"PET_LOG_LINE_PREFIX_TEMPLATE", "${local_rank}"}})
            .log_line_prefix == "{rank}");
  expect_usage_error({"--log-line-prefix={rank}", "--log-line-prefix-template=${rank}", "x.py"},
                     {"--log-line-prefix", "--log-line-prefix-template"});
}

TEST_CASE("cli: --help lists the groups and exits 0", "[launcher][cli]") {
  for (const char* flag : {"--help", "-h"}) {
    CliOutcome o = parse_command_line({"--nnodes=2", flag, "x.py"}, {});
    CHECK_FALSE(o.config);
    CHECK(o.exit_code == 0);
    CHECK_THAT(o.message, Catch::Contains("Usage: ddprun [OPTIONS] PROGRAM [ARGS...]"));
    for (const char* group :
         {"Nodes and rendezvous:", "Workers:", "Failures and restarts:", "Output and logs:"}) {
      CHECK_THAT(o.message, Catch::Contains(group));
    }
    CHECK_THAT(o.message, Catch::Contains("--nproc-per-node") && Catch::Contains("-m, --module") &&
                              Catch::Contains("PET_"));
    // One spelling per line; the underscore twins are mentioned once in the footer.
    CHECK_THAT(o.message, !Catch::Contains("--master_port"));
  }
  CHECK(help_text() == parse_command_line({"--help"}, {}).message);
}

TEST_CASE("cli: --version prints ddprun and the version", "[launcher][cli]") {
  CliOutcome o = parse_command_line({"--version"}, {});
  CHECK_FALSE(o.config);
  CHECK(o.exit_code == 0);
  // The release, and from git the commit ("0.1.0-g<12 hex>", "-dirty" for a changed tree).
  CHECK(std::regex_match(o.message,
                         std::regex(R"(ddprun \d+\.\d+\.\d+(-\d+)?(-g[0-9a-f]{12})?(-dirty)?)")));
}

TEST_CASE("cli: a token file other users can read is a warning, not a note", "[launcher][cli]") {
  ddprun::test::TempDir dir;
  const auto path = dir.file("token");
  {
    std::ofstream out(path);
    out << "0123456789abcdef0123456789abcdef\n";
  }
  ::chmod(path.c_str(), 0644);
  CliOutcome o = parse_command_line({"--token-file=" + path, "x.py"}, {});
  REQUIRE(o.config.has_value());
  REQUIRE(o.warnings.size() == 1);
  CHECK_THAT(o.warnings[0], Catch::Contains("can be read by other users (mode 644)"));
  CHECK_THAT(o.warnings[0], Catch::Contains("chmod 600"));
  ::chmod(path.c_str(), 0600);
  o = parse_command_line({"--token-file=" + path, "x.py"}, {});
  CHECK(o.warnings.empty());
}

TEST_CASE("cli: --warm-standby is off by default, a boolean or the modules to import, kept only when a "
          "restart can follow", "[launcher][cli]") {
  CHECK_FALSE(parse_ok({"--max-restarts=1", "train.py"}).warm_standby.has_value());
  CHECK(parse_ok({"--max-restarts=1", "--warm-standby", "train.py"}).warm_standby ==
        std::vector<std::string>{});
  CHECK(parse_ok({"--max-restarts=1", "--warm_standby=torch, numpy.linalg", "train.py"})
            .warm_standby == std::vector<std::string>{"torch", "numpy.linalg"});
  CHECK(parse_ok({"--max-restarts=1", "train.py"}, {{"PET_WARM_STANDBY", "1"}}).warm_standby ==
        std::vector<std::string>{});
  CHECK_FALSE(parse_ok({"--max-restarts=1", "--warm-standby=false", "train.py"})
                  .warm_standby.has_value());
  // An elastic job restarts its workers when a node joins or leaves, whatever --max-restarts.
  CHECK(parse_ok({"--warm-standby", "--nnodes=1:2", "--rdzv-backend=c10d", "train.py"})
            .warm_standby.has_value());
  // A program run without Python keeps standbys too: it speaks the protocol itself.
  CHECK(parse_ok({"--max-restarts=1", "--warm-standby", "--no-python", "ddp_resnet"})
            .warm_standby.has_value());
  const auto o = parse_command_line({"--warm-standby", "train.py"}, {});
  REQUIRE(o.config.has_value());
  CHECK_FALSE(o.config->warm_standby.has_value());
  REQUIRE_FALSE(o.notes.empty());
  CHECK_THAT(o.notes.back(), Catch::Contains("--warm-standby") && Catch::Contains("no restart"));
  expect_usage_error({"--max-restarts=1", "--warm-standby=torch;rm", "train.py"},
                     {"--warm-standby=torch;rm", "module names"});
  expect_usage_error({"--max-restarts=1", "--warm-standby=.torch", "train.py"},
                     {"--warm-standby=.torch"});
}

TEST_CASE("cli: --fold-output is auto by default, a boolean, exact, or PET_FOLD_OUTPUT",
          "[launcher][cli]") {
  CHECK(parse_ok({"train.py"}).fold_output == FoldOutput::kAuto);
  CHECK(parse_ok({"--fold-output", "train.py"}).fold_output == FoldOutput::kOn);
  CHECK(parse_ok({"--fold_output=exact", "train.py"}).fold_output == FoldOutput::kExact);
  CHECK(parse_ok({"--fold-output=off", "train.py"}).fold_output == FoldOutput::kOff);
  CHECK(parse_ok({"--fold-output=auto", "train.py"}).fold_output == FoldOutput::kAuto);
  CHECK(parse_ok({"train.py"}, {{"PET_FOLD_OUTPUT", "exact"}}).fold_output == FoldOutput::kExact);
  CHECK(parse_ok({"train.py"}, {{"PET_DUPLICATE_STDERR_FILTERS", "a,b"}})
            .duplicate_stderr_filters == std::vector<std::string>{"a", "b"});
  // Without --raw-output's conflict, auto stays quiet about it.
  CHECK(parse_ok({"--raw-output", "train.py"}).fold_output == FoldOutput::kAuto);
}
