// What the console shows of many ranks: --fold-output (identical lines once, then a summary),
// its default on a terminal and through a pipe, and torchrun's duplicate filters. Real agents,
// real worker processes (sh), a real pseudo-terminal.

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include <fmt/format.h>

#include "common/deadline.hpp"
#include "common/strings.hpp"
#include "testing/ddprun_process.hpp"
#include "testing/rank_gate.hpp"
#include "testing/test_util.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;

namespace {

constexpr int kRanks = 8;

// After the gate (testing/rank_gate.hpp) each rank prints four lines, rank 5 one more of its
// own, and a warning on stderr.
constexpr const char* kBody = R"(echo "loading the dataset"
echo "step 1 loss 0.7$RANK took ${RANK}ms"
if [ "$RANK" = 5 ]; then echo "rank five saw something else"; fi
echo "warning: rank $RANK is slow" >&2
echo "done with the job"
)";

// The lines rank `rank` writes to stdout, in order.
std::vector<std::string> stdout_lines(int rank) {
  std::vector<std::string> lines{"loading the dataset",
                                 fmt::format("step 1 loss 0.7{} took {}ms", rank, rank)};
  if (rank == 5) lines.emplace_back("rank five saw something else");
  lines.emplace_back("done with the job");
  return lines;
}

struct Job {
  TempDir dir;
  RankGate gate{dir, kBody};
  std::string logs = dir.file("logs");

  std::vector<std::string> args(std::vector<std::string> flags) const {
    flags.insert(flags.end(), {"--nproc-per-node=" + std::to_string(kRanks),
                               "--master-port=" + std::to_string(free_port()),
                               "--log-dir=" + logs, "--no-python", "/bin/sh", gate.script()});
    return flags;
  }

  void open_gate() { REQUIRE(gate.open_when_ready(kRanks, 120s)); }
};

// "1-3,5" -> {1, 2, 3, 5}
std::set<int> rank_set(const std::string& text) {
  std::set<int> out;
  for (const auto& item : ddprun::split(text, ',')) {
    const auto dash = item.find('-');
    const int low = std::stoi(std::string(item.substr(0, dash)));
    const int high =
        dash == std::string::npos ? low : std::stoi(std::string(item.substr(dash + 1)));
    for (int r = low; r <= high; ++r) out.insert(r);
  }
  return out;
}

// The console as each rank's story: every printed line ("[default<rank>]:text") and every
// summary ("[ranks 1-3] the same: text", "[rank 4] the same: text") that names the rank, in the
// order shown. Lines of the agent itself, and the ranks' warnings (stderr, whose order against
// stdout no pipe keeps), are left out.
struct Console {
  std::map<int, std::vector<std::string>> by_rank;
  std::map<std::string, int> printed;  // text -> how many times printed with a rank's prefix
  std::vector<std::string> summaries;
  std::vector<std::string> worker_lines;  // printed and summaries, as shown
};

Console read_console(const std::string& output) {
  static const std::regex printed(R"(^\[default(\d+)\]:(.*)$)");
  static const std::regex summary(R"(^\[ranks? ([0-9,-]+)\] the same: (.*)$)");
  Console c;
  for (auto line : ddprun::split(output, '\n')) {
    std::string text(line);
    if (!text.empty() && text.back() == '\r') text.pop_back();  // a terminal's line end
    std::smatch m;
    if (text.find("warning: ") != std::string::npos) continue;
    if (std::regex_match(text, m, printed)) {
      c.by_rank[std::stoi(m[1])].push_back(m[2]);
      ++c.printed[m[2]];
      c.worker_lines.push_back(text);
    } else if (std::regex_match(text, m, summary)) {
      for (int rank : rank_set(m[1])) c.by_rank[rank].push_back(m[2]);
      c.summaries.push_back(text);
      c.worker_lines.push_back(text);
    }
  }
  return c;
}

// Whether `shown` (a summary's text, with ranges) stands for `line`: equal, or equal but for
// numbers that lie in the ranges shown.
bool stands_for(const std::string& shown, const std::string& line) {
  if (shown == line) return true;
  static const std::regex range(R"((\d+(?:\.\d+)?)-(\d+(?:\.\d+)?))");
  std::string pattern;
  std::vector<std::pair<double, double>> ranges;
  auto begin = std::sregex_iterator(shown.begin(), shown.end(), range);
  std::size_t at = 0;
  for (auto it = begin; it != std::sregex_iterator(); ++it) {
    pattern += std::regex_replace(shown.substr(at, it->position() - at),
                                  std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)");
    pattern += R"((\d+(?:\.\d+)?))";
    ranges.emplace_back(std::stod((*it)[1]), std::stod((*it)[2]));
    at = it->position() + it->length();
  }
  pattern += std::regex_replace(shown.substr(at), std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)");
  std::smatch m;
  if (!std::regex_match(line, m, std::regex(pattern))) return false;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    const double v = std::stod(m[i + 1]);
    if (v < ranges[i].first || v > ranges[i].second) return false;
  }
  return true;
}

// Every rank's story is its lines, in its order, each shown once: printed or in a summary.
void check_every_rank_in_order(const Console& c) {
  for (int rank = 0; rank < kRanks; ++rank) {
    const auto expected = stdout_lines(rank);
    const auto it = c.by_rank.find(rank);
    REQUIRE(it != c.by_rank.end());
    const auto& shown = it->second;
    INFO("rank " << rank << " shown: " << Catch::Detail::stringify(shown));
    REQUIRE(shown.size() == expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i) CHECK(stands_for(shown[i], expected[i]));
  }
}

// The first attempt's directory of the one run under --log-dir.
std::string first_attempt(const std::string& logs) {
  std::vector<std::filesystem::path> runs;
  for (const auto& entry : std::filesystem::directory_iterator(logs)) runs.push_back(entry.path());
  REQUIRE(runs.size() == 1);
  return (runs.front() / "attempt_0").string();
}

// The lines each rank wrote are in its log file, byte for byte.
void check_logs(const std::string& logs) {
  for (int rank = 0; rank < kRanks; ++rank) {
    std::string expected;
    for (const auto& line : stdout_lines(rank)) expected += line + "\n";
    CHECK(read_file(fmt::format("{}/{}/stdout.log", first_attempt(logs), rank)) == expected);
  }
}

// What a person at a terminal sees: ddprun on a new pseudo-terminal, its output until it exits.
struct TerminalRun {
  int exit_code = -1;
  std::string output;
};

TerminalRun run_on_terminal(const std::vector<std::string>& args, Job& job) {
  int master = -1;
  const pid_t pid = forkpty(&master, nullptr, nullptr, nullptr);
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::vector<char*> argv;
    static std::string binary = DDPRUN_BINARY;
    argv.push_back(binary.data());
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  TerminalRun run;
  bool gate_open = false;
  const auto deadline = ddprun::Deadline::after(180s);
  while (!deadline.expired()) {
    if (!gate_open && job.gate.all_ready(kRanks)) {
      job.gate.open();
      gate_open = true;
    }
    pollfd p{master, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    char buf[4096];
    const auto n = read(master, buf, sizeof buf);
    if (n <= 0) break;  // EIO: every holder of the terminal's other end is gone
    run.output.append(buf, static_cast<std::size_t>(n));
  }
  close(master);
  run.exit_code = wait_for_exit(pid, 30s);
  if (run.exit_code < 0) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  return run;
}

}  // namespace

TEST_CASE("ddprun: --fold-output shows a line of many ranks once, then one summary naming the "
          "rest, keeps every rank's order and every byte in the logs",
          "[launcher][console]") {
  Job job;
  DdprunProcess p(job.args({"--fold-output", "--tee=1"}));
  job.open_gate();
  REQUIRE(p.wait(120s) == 0);
  const auto c = read_console(p.output());
  INFO(p.output());
  CHECK(c.printed.at("loading the dataset") == 1);
  CHECK(c.printed.at("done with the job") == 1);
  CHECK(c.printed.at("rank five saw something else") == 1);
  // The step lines differ in their numbers: one printed, the rest as ranges.
  CHECK(std::count_if(c.printed.begin(), c.printed.end(),
                      [](const auto& kv) { return kv.first.starts_with("step 1 loss"); }) == 1);
  CHECK(std::any_of(c.summaries.begin(), c.summaries.end(), [](const std::string& s) {
    return std::regex_search(s, std::regex(R"(the same: step 1 loss 0\.7\d-0\.7\d took \d-\dms$)"));
  }));
  CHECK(c.summaries.size() == 3);
  check_every_rank_in_order(c);
  check_logs(job.logs);
}

TEST_CASE("ddprun: not on a terminal (a file here) the console gets every line, as torchrun's "
          "does",
          "[launcher][console]") {
  Job job;
  DdprunProcess p(job.args({"--tee=1"}));
  job.open_gate();
  REQUIRE(p.wait(120s) == 0);
  const auto c = read_console(p.output());
  INFO(p.output());
  CHECK(c.summaries.empty());
  CHECK(c.printed.at("loading the dataset") == kRanks);
  CHECK(c.printed.at("done with the job") == kRanks);
  check_every_rank_in_order(c);
  check_logs(job.logs);
}

TEST_CASE("ddprun: on a terminal identical lines are folded by default, and what a person sees "
          "is exactly this",
          "[launcher][console]") {
  Job job;
  const auto run = run_on_terminal(job.args({}), job);
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  const auto c = read_console(run.output);
  // Line by line: the first of each, rank 5's own line after its folded step line's summary,
  // the warnings (stderr, the same terminal) folded too.
  static const std::vector<std::string> patterns = {
      R"(\[default\d\]:loading the dataset)",
      R"(\[ranks [0-9,-]+\] the same: loading the dataset)",
      R"(\[default\d\]:step 1 loss 0\.7\d took \dms)",
      R"(\[ranks [0-9,-]+\] the same: step 1 loss 0\.7\d-0\.7\d took \d-\dms)",
      R"(\[default5\]:rank five saw something else)",
      R"(\[default\d\]:done with the job)",
      R"(\[ranks [0-9,-]+\] the same: done with the job)",
  };
  // Lines of different groups may come in either order; each appears once.
  REQUIRE(c.worker_lines.size() == patterns.size());
  for (const auto& pattern : patterns) {
    CHECK(std::count_if(c.worker_lines.begin(), c.worker_lines.end(), [&](const std::string& l) {
            return std::regex_match(l, std::regex(pattern));
          }) == 1);
  }
  check_every_rank_in_order(c);
  // stderr's warnings: one printed, the others in a summary with the ranks' numbers as a range.
  CHECK(count_of(run.output, "]:warning: rank ") == 1);
  CHECK(std::regex_search(run.output, std::regex(R"(the same: warning: rank \d-\d is slow)")));
}

TEST_CASE("ddprun: --duplicate-stdout-filters and --duplicate-stderr-filters copy the matching "
          "console lines of the shown ranks to the attempt's filtered logs, before folding",
          "[launcher][console]") {
  Job job;
  DdprunProcess p(job.args({"--duplicate-stdout-filters=loss 0.7,rank five,,never",
                            "--duplicate_stderr_filters=slow", "--local-ranks-filter=0,5",
                            "--fold-output"}));
  job.open_gate();
  REQUIRE(p.wait(120s) == 0);
  INFO(p.output());
  const auto out = first_attempt(job.logs) + "/filtered_stdout.log";
  const auto err = first_attempt(job.logs) + "/filtered_stderr.log";
  REQUIRE(file_exists(out));
  REQUIRE(file_exists(err));
  auto sorted_lines = [](const std::string& path) {
    auto lines = read_lines(path);
    std::sort(lines.begin(), lines.end());
    return lines;
  };
  // "rank five,,never" is one filter, "rank five,never": no line holds it.
  CHECK(sorted_lines(out) == std::vector<std::string>{"[default0]:step 1 loss 0.70 took 0ms",
                                                      "[default5]:step 1 loss 0.75 took 5ms"});
  CHECK(sorted_lines(err) == std::vector<std::string>{"[default0]:warning: rank 0 is slow",
                                                      "[default5]:warning: rank 5 is slow"});
  // Only the ranks the filter shows fold: every line of theirs once, printed or in a summary
  // that names no other rank.
  const auto c = read_console(p.output());
  CHECK(c.by_rank.size() == 2);
  for (const int rank : {0, 5}) {
    REQUIRE(c.by_rank.contains(rank));
    CHECK(c.by_rank.at(rank).size() == stdout_lines(rank).size());
  }
  CHECK_FALSE(c.summaries.empty());
}
