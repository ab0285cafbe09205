// describe(): the aligned startup block.

#include <catch2/catch.hpp>

#include <sstream>

#include "common/strings.hpp"
#include "common/version.hpp"
#include "launcher/cli.hpp"
#include "launcher/config_summary.hpp"

using namespace ddprun;
using Catch::Contains;

namespace {

std::vector<std::string> lines_of(const std::string& text) { return split(text, '\n'); }

// The value column: where the text resumes after the key and its padding.
std::size_t value_column(const std::string& line) {
  auto gap = line.find("  ");
  REQUIRE(gap != std::string::npos);
  return line.find_first_not_of(' ', gap);
}

LaunchConfig parsed(const std::vector<std::string>& args) {
  CliOutcome outcome = parse_command_line(args, {});
  INFO(outcome.message);
  REQUIRE(outcome.config);
  return *outcome.config;
}

}  // namespace

TEST_CASE("describe a static job", "[launcher][summary]") {
  std::string text = describe(parsed({"--nnodes=2", "--node-rank=1", "--nproc-per-node=4",
                                      "--master-addr=node0", "train.py", "--msg", "hi there"}));
  auto lines = lines_of(text);
  REQUIRE(lines.size() == 9);
  CHECK(lines[0].starts_with("nodes "));
  CHECK_THAT(lines[0], Catch::EndsWith(" 2"));
  CHECK_THAT(lines[1], Catch::StartsWith("nproc per node") && Catch::EndsWith(" 4"));
  CHECK_THAT(lines[2], Contains("static") && Contains("node0:29500") && Contains("run id none"));
  CHECK_THAT(lines[3], Catch::StartsWith("node rank") && Catch::EndsWith(" 1"));
  CHECK_THAT(lines[4], Catch::StartsWith("max restarts") && Catch::EndsWith(" 0"));
  CHECK_THAT(lines[5], Catch::StartsWith("shutdown timeout") && Catch::EndsWith(" 30s"));
  CHECK_THAT(lines[6], Catch::EndsWith("(console only)"));
  CHECK_THAT(lines[7], Catch::EndsWith("python3 -u train.py --msg 'hi there'"));
  CHECK_THAT(lines[8], Catch::StartsWith("version") && Catch::EndsWith(ddprun_version()));
  // Keys left-aligned, values in one column.
  for (const auto& line : lines) {
    INFO(line);
    CHECK(value_column(line) == std::string("shutdown timeout  ").size());
  }
  CHECK(text.back() != '\n');
}

TEST_CASE("describe an elastic and a standalone job", "[launcher][summary]") {
  std::string elastic =
      describe(parsed({"--nnodes=1:4", "--rdzv-backend=c10d", "--rdzv-endpoint=h", "--rdzv-id=j",
                       "--max-restarts=3", "--shutdown-timeout=1.5", "-r", "3", "x.py"}));
  CHECK_THAT(elastic, Contains("1:4") && Contains("c10d, endpoint h:29400, run id j") &&
                          Contains("1.5s") && Contains("(a new temp dir)"));
  CHECK_THAT(elastic, !Contains("node rank"));

  LaunchConfig standalone = parsed({"--standalone", "--log-dir=/var/log/x", "x.py"});
  std::string text = describe(standalone);
  CHECK_THAT(text, Contains("static (standalone), master 127.0.0.1 (a free port), run id " +
                            standalone.rdzv_id));
  CHECK_THAT(text, Contains("/var/log/x"));
}

TEST_CASE("shell_quote", "[launcher][summary]") {
  CHECK(shell_quote("--lr=0.1") == "--lr=0.1");
  CHECK(shell_quote("a b") == "'a b'");
  CHECK(shell_quote("") == "''");
  CHECK(shell_quote("it's") == "'it'\\''s'");
  CHECK(shell_quote("${local_rank}") == "'${local_rank}'");
}
