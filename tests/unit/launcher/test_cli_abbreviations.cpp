// torchrun reads its command line with argparse, which takes any unambiguous prefix of a long
// option for the option: these lines must mean the same to ddprun. Checked over the whole option
// table, then on the command lines torchrun's users write.

#include <algorithm>
#include <set>

#include "cli_test_helpers.hpp"

using namespace ddprun;
using namespace ddprun::test;

namespace {

// The names `prefix` could stand for, read straight off the table.
std::set<std::string> names_with_prefix(std::string_view prefix) {
  std::set<std::string> out;
  for (auto name : long_option_names()) {
    if (name.starts_with(prefix)) out.emplace(name);
  }
  return out;
}

bool is_option(std::string_view name) {
  auto names = long_option_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

TEST_CASE("cli: every prefix of every long option resolves or is refused as ambiguous",
          "[launcher][cli][abbrev]") {
  int unique = 0;
  int ambiguous = 0;
  int torchruns = 0;
  for (auto name : long_option_names()) {
    for (std::size_t length = 1; length <= name.size(); ++length) {
      const std::string prefix(name.substr(0, length));
      INFO("--" << prefix);
      const auto match = match_long_option(prefix);
      const auto expected = names_with_prefix(prefix);
      if (is_option(prefix)) {
        // An exact name wins even when it begins a longer one (--log-line-prefix).
        CHECK(match.name == prefix);
        CHECK(match.candidates.empty());
      } else if (expected.size() == 1) {
        CHECK(match.name == std::string(name));
        ++unique;
      } else if (std::count_if(expected.begin(), expected.end(), is_torchrun_option) == 1) {
        // Ambiguous only through ddprun's own options: torchrun's reading.
        CHECK(is_torchrun_option(match.name));
        CHECK(expected.count(match.name) == 1);
        CHECK(match.candidates.empty());
        ++torchruns;
      } else {
        CHECK(match.name.empty());
        CHECK(std::set<std::string>(match.candidates.begin(), match.candidates.end()) == expected);
        CHECK(match.candidates.size() == expected.size());
        ++ambiguous;
      }
    }
  }
  // Every kind occurs in the table, so no branch above is vacuous.
  CHECK(unique > 50);
  CHECK(ambiguous > 10);
  CHECK(torchruns > 3);
  CHECK(match_long_option("no-such-option").name.empty());
  CHECK(match_long_option("no-such-option").candidates.empty());
  CHECK(match_long_option("").name.empty());
}

TEST_CASE("cli: every option's unique prefixes parse, in both spellings",
          "[launcher][cli][abbrev]") {
  // Boolean flags need no value; the others get one their parser accepts, so each line must
  // parse, and the value must land where the full name puts it.
  for (auto name : long_option_names()) {
    if (name == "help" || name == "version") continue;
    std::size_t shortest = name.size();
    while (shortest > 1 && names_with_prefix(name.substr(0, shortest - 1)).size() == 1 &&
           !is_option(name.substr(0, shortest - 1))) {
      --shortest;
    }
    if (shortest == name.size()) continue;  // no abbreviation of it is unique
    std::string prefix(name.substr(0, shortest));
    std::string underscored = prefix;
    std::replace(underscored.begin(), underscored.end(), '-', '_');
    INFO("--" << name << " as --" << prefix << " and --" << underscored);
    const auto full = match_long_option(prefix);
    CHECK(full.name == name);
    // Through the whole parser: an unknown option would exit 2, an ambiguous one too.
    CliOutcome outcome = parse_command_line({"--" + underscored + "=", "x.py"}, {});
    CHECK_THAT(outcome.message, !Catch::Contains("unknown option"));
    CHECK_THAT(outcome.message, !Catch::Contains("ambiguous"));
  }
}

TEST_CASE("cli: torchrun's abbreviated command lines", "[launcher][cli][abbrev]") {
  // torchrun's own launcher test passes --redirect=3.
  auto c = parse_ok({"--redirect=3", "--nproc_per=2", "--max_rest=0", "--nnode", "1:2",
                     "--rdzv_back=c10d", "--rdzv-endp", "localhost:29400", "x.py"});
  CHECK(static_cast<int>(c.redirects.all) == 3);
  CHECK(c.nproc_per_node == 2);
  CHECK(c.max_restarts == 0);
  CHECK(c.min_nodes == 1);
  CHECK(c.max_nodes == 2);
  CHECK(c.rdzv_backend == RdzvBackend::kC10d);
  CHECK(c.rdzv_endpoint == "localhost:29400");
  CHECK(c.program == "x.py");

  // A value in the next argument is still skipped over, not taken for the program.
  c = parse_ok({"--max_rest", "4", "--monitor", "0.5", "x.py", "--nproc=9"});
  CHECK(c.max_restarts == 4);
  CHECK(c.program == "x.py");
  // The program's own arguments are never rewritten.
  CHECK(c.argv.back() == "--nproc=9");

  // Flags without a value.
  CHECK(parse_ok({"--no-py", "a.out"}).no_python);
  CHECK(parse_ok({"--stand", "x.py"}).standalone);

  // --he is --help, as in argparse.
  CliOutcome help = parse_command_line({"--he"}, {});
  CHECK(help.exit_code == 0);
  CHECK_THAT(help.message, Catch::Contains("Usage: ddprun"));
}

TEST_CASE("cli: a prefix torchrun reads as one of its options means that option here too",
          "[launcher][cli][abbrev]") {
  // torchrun's flags, by its contract, and some of ddprun's own.
  for (const char* name : {"nnodes", "nproc-per-node", "node-rank", "master-addr", "master-port",
                           "rdzv-backend", "rdzv-endpoint", "rdzv-id", "rdzv-conf", "standalone",
                           "max-restarts", "monitor-interval", "start-method", "role", "module",
                           "no-python", "run-path", "log-dir", "redirects", "tee",
                           "local-ranks-filter", "local-addr", "signals-to-handle",
                           "event-log-handler", "numa-binding", "virtual-local-rank"}) {
    INFO(name);
    CHECK(is_option(name));
    CHECK(is_torchrun_option(name));
  }
  for (const char* name : {"events-file", "token-file", "tree-threshold", "node-check", "hosts",
                           "version", "log-line-prefix", "log-line-prefix-template", "no-stage",
                           "shutdown-timeout"}) {
    INFO(name);
    CHECK(is_option(name));
    CHECK_FALSE(is_torchrun_option(name));
  }
  // --events-file, --token-file, --tree-threshold, --version, --node-check and --no-stage make
  // these ambiguous to ddprun alone.
  auto c = parse_ok({"--t=3", "--v", "--node", "1", "--nnodes=2", "--no-", "a.out"});
  CHECK(static_cast<int>(c.tee.all) == 3);
  CHECK(c.virtual_local_rank);
  CHECK(c.node_rank == 1);
  CHECK(c.no_python);
  CliOutcome handler = parse_command_line({"--event=console", "x.py"}, {});
  CHECK(handler.exit_code == 0);
  CHECK(handler.config.has_value());
  // Still ambiguous to torchrun, or between ddprun's own: still an error.
  expect_usage_error({"--ma=1", "x.py"}, {"--ma could match", "--master-addr", "--max-restarts"});
  expect_usage_error({"--log-line=x", "x.py"},
                     {"--log-line could match", "--log-line-prefix", "--log-line-prefix-template"});
}

TEST_CASE("cli: an ambiguous abbreviation is one line naming every candidate",
          "[launcher][cli][abbrev]") {
  expect_usage_error({"--log=x", "x.py"},
                     {"ambiguous option --log could match", "--log-dir", "--log-line-prefix",
                      "--log-line-prefix-template", "--log-level"});
  expect_usage_error({"--no", "x.py"}, {"--no could match", "--node-rank", "--no-python"});
  // torchrun's spelling is kept in the message.
  expect_usage_error({"--master_", "h", "x.py"},
                     {"--master_ could match", "--master-addr", "--master-port"});
  // Not a prefix of anything: unknown, as before.
  expect_usage_error({"--nprocs=2", "x.py"}, {"unknown option --nprocs"});
}

TEST_CASE("cli: PET_ variables are read by their full name only", "[launcher][cli][abbrev]") {
  CHECK(parse_ok({"x.py"}, {{"PET_NPROC_PER", "3"}}).nproc_per_node == 1);
  CHECK(parse_ok({"x.py"}, {{"PET_NPROC_PER_NODE", "3"}}).nproc_per_node == 3);
}

TEST_CASE("cli: a quoted --rdzv-conf value", "[launcher][cli][abbrev]") {
  // torchrun's own launcher test writes the quotes into the value.
  for (const char* quoted : {"'join_timeout=5,last_call_timeout=1,timeout=5'",
                             "\"join_timeout=5,last_call_timeout=1,timeout=5\""}) {
    INFO(quoted);
    auto c = parse_ok({"--rdzv-backend=c10d", "--rdzv-endpoint=localhost:29400", "--nnodes=1:2",
                       std::string("--rdzv-conf=") + quoted, "x.py"});
    CHECK(c.rdzv_conf.join_timeout == std::chrono::seconds(5));
    CHECK(c.rdzv_conf.last_call_timeout == std::chrono::seconds(1));
  }
  // One quote alone is not a pair: the key keeps it, and the error names it.
  expect_usage_error({"--rdzv-conf=join_timeout=5'", "x.py"}, {"join_timeout", "5'"});
}

TEST_CASE("cli: placement flags", "[launcher][cli][placement]") {
  CHECK(parse_ok({"x.py"}).binding == Binding::kNone);
  CHECK(parse_ok({"--numa-binding=node", "x.py"}).binding == Binding::kGpuNode);
  CHECK(parse_ok({"--numa_binding", "socket", "x.py"}).binding == Binding::kGpuSocket);
  CHECK(parse_ok({"--numa-binding=exclusive", "x.py"}).binding == Binding::kGpuExclusive);
  CHECK(parse_ok({"--numa-binding=core-complex", "x.py"}).binding == Binding::kGpuCoreComplex);
  CHECK(parse_ok({"--cpu-bind=numa", "x.py"}).binding == Binding::kCpuNuma);
  CHECK(parse_ok({"--cpu-bind=socket", "x.py"}).binding == Binding::kCpuSocket);
  CHECK(parse_ok({"--cpu-bind=core", "x.py"}).binding == Binding::kCpuCore);
  CHECK(parse_ok({"--cpu-bind=none", "x.py"}).binding == Binding::kNone);
  CHECK(parse_ok({"x.py"}, {{"PET_NUMA_BINDING", "node"}}).binding == Binding::kGpuNode);
  expect_usage_error({"--numa-binding=numa", "x.py"},
                     {"--numa-binding=numa", "node", "socket", "exclusive", "core-complex"});
  expect_usage_error({"--cpu-bind=cores", "x.py"}, {"--cpu-bind=cores"});
  expect_usage_error({"--numa-binding=node", "--cpu-bind=core", "x.py"},
                     {"--numa-binding", "--cpu-bind", "cannot be used together"});

  auto c = parse_ok({"--virtual-local-rank", "--mpi-env", "x.py"});
  CHECK(c.virtual_local_rank);
  CHECK(c.mpi_env);
  CHECK(parse_ok({"x.py"}, {{"PET_VIRTUAL_LOCAL_RANK", "1"}}).virtual_local_rank);
  // Each worker needs a device of its own from the agent's list.
  CHECK(parse_ok({"--virtual-local-rank", "--nproc-per-node=2", "x.py"},
                 {{"CUDA_VISIBLE_DEVICES", "1,0"}})
            .virtual_local_rank);
  expect_usage_error({"--virtual-local-rank", "--nproc-per-node=3", "x.py"},
                     {"--virtual-local-rank", "CUDA_VISIBLE_DEVICES=1,0", "3 workers"},
                     {{"CUDA_VISIBLE_DEVICES", "1,0"}});
}

TEST_CASE("cli: mpirun's -H is --hosts", "[launcher][cli][placement]") {
  auto c = parse_ok({"-H", "host1:2,host2:2", "--mpi-env", "x.py"});
  REQUIRE(c.cluster.has_value());
  REQUIRE(c.cluster->hosts.size() == 2);
  CHECK(c.cluster->hosts[0].host == "host1");
  CHECK(c.cluster->hosts[1].slots == 2);
  // The agents get the flag too.
  CHECK(std::find(c.cluster->agent_flags.begin(), c.cluster->agent_flags.end(),
                  "--mpi-env=true") != c.cluster->agent_flags.end());
}

TEST_CASE("cli: TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, after the flag and PET_",
          "[launcher][cli]") {
  CHECK(parse_ok({"x.py"}, {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "[rank${rank}]: "}})
            .log_line_prefix == "[rank{rank}]: ");
  CHECK(parse_ok({"x.py"}, {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "[rank${rank}]: "},
                            {"PET_LOG_LINE_PREFIX_TEMPLATE", "${role_name}> "}})
            .log_line_prefix == "{role}> ");
  CHECK(parse_ok({"--log-line-prefix-template=${local_rank}|", "x.py"},
                 {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "[rank${rank}]: "}})
            .log_line_prefix == "{local_rank}|");
  // As torchrun's safe_substitute: a name it does not know stays as written, not an error.
  CHECK(parse_ok({"--log-line-prefix-template=${gpu}$$", "x.py"}).log_line_prefix ==
        "${{gpu}}$");
}
