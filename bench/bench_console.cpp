// bench_console: Figure 14, what the console shows of many ranks, read as a person's terminal
// would get it (ddprun's stdout, each line timed as it arrives).
//   - At scale: 1,024 ranks on one node pass a gate together (bench/console_worker.cpp), print
//     the same line, 100 of them then a line of their own, and go on (2 s). With --fold-output and
//     without: how many console lines the same line makes, how soon its summary follows, whether
//     the 100 lines all print, and whether every rank's log (--tee) holds what it wrote.
//   - Throughput: 8 ranks print training-like lines, one every 2 ms each (4,000 lines a second:
//     720,000 over 3 minutes); the agent's CPU per line with and without folding, and whether
//     every line reached the console (printed, or named by a summary). Then the same through
//     `--hosts` (two hosts of 4 ranks, testing/local_ssh.sh standing in for ssh): the command's
//     CPU per line, relaying every line, or folding the agents' tagged lines.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <regex>
#include <tuple>

#include <fmt/format.h>

#include "bench/bench_cli.hpp"
#include "bench/sys_util.hpp"
#include "common/error.hpp"
#include "common/strings.hpp"
#include "testing/test_util.hpp"

using namespace ddprun;
using namespace ddprun::bench;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kSame = "epoch 3 done, saving the checkpoint";
constexpr const char* kFolded = "ddprun --fold-output";
constexpr const char* kPlain = "ddprun (pipe: every line)";

struct Line {
  Clock::time_point when;
  std::string text;
};

// One ddprun run: its stdout read line by line as it comes, its stderr to `log`, the agent's
// CPU sampled until it exits.
struct Run {
  std::vector<Line> lines;
  double agent_cpu_s = 0;
  int exit_code = -1;
};

// `on_tick` runs between reads (the gate is opened from it).
Run run_ddprun(const std::vector<std::string>& argv, const std::string& log,
               const std::function<void()>& on_tick, std::chrono::seconds limit) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) throw Error("pipe failed");
  const pid_t pid = fork();
  if (pid < 0) throw Error("fork failed");
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    const int err = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (err >= 0) dup2(err, STDERR_FILENO);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(out[1]);
  Run run;
  std::string partial;
  const auto deadline = Clock::now() + limit;
  Clock::time_point sampled{};
  for (;;) {
    if (Clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      close(out[0]);
      throw Error(fmt::format("ddprun did not end within {} s (its log: {})", limit.count(), log));
    }
    if (on_tick) on_tick();
    // Every 20 ms, however many lines come: the reading costs the same with and without
    // folding.
    if (Clock::now() - sampled >= 20ms) {
      sampled = Clock::now();
      if (const double cpu = process_cpu_s(pid); cpu > 0) run.agent_cpu_s = cpu;
    }
    pollfd p{out[0], POLLIN, 0};
    if (poll(&p, 1, 20) <= 0) continue;
    char buf[65536];
    const auto n = read(out[0], buf, sizeof buf);
    if (n <= 0) break;
    const auto now = Clock::now();
    partial.append(buf, static_cast<std::size_t>(n));
    std::size_t start = 0;
    for (auto nl = partial.find('\n'); nl != std::string::npos; nl = partial.find('\n', start)) {
      run.lines.push_back({now, partial.substr(start, nl - start)});
      start = nl + 1;
    }
    partial.erase(0, start);
  }
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (run.exit_code != 0) {
    throw Error(fmt::format("ddprun exited with {}; its log ({}):\n{}", run.exit_code, log,
                            tail(log, 20)));
  }
  return run;
}

// How many ranks a summary line names ("[ranks 1-3,5] the same: ..." -> 4), 0 if not one.
std::size_t ranks_named(const std::string& line) {
  static const std::regex summary(R"(^\[ranks? ([0-9,-]+)( on [^\]]+)?\] the same: )");
  std::smatch m;
  if (!std::regex_search(line, m, summary)) return 0;
  std::size_t n = 0;
  for (const auto& item : split(m[1].str(), ',')) {
    const auto dash = item.find('-');
    n += dash == std::string::npos
             ? 1
             : static_cast<std::size_t>(std::stoi(item.substr(dash + 1)) -
                                        std::stoi(item.substr(0, dash)) + 1);
  }
  return n;
}

bool is_rank_line(const std::string& line) { return line.starts_with("[default"); }

std::vector<std::string> with_flags(std::vector<std::string> argv,
                                    const std::vector<std::string>& flags) {
  argv.insert(argv.begin() + 1, flags.begin(), flags.end());
  return argv;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_console: Figure 14, the console of many ranks"};
  CommonOptions common;
  std::string ddprun, worker;
  int ranks = 1024;
  int distinct = 100;
  int stream_ranks = 8;
  long stream_lines = 90'000;
  int stream_runs = 1;
  long hosts_lines = 15'000;
  std::string local_ssh;
  add_common_options(app, common);
  app.add_option("--ddprun", ddprun, "the ddprun binary")->required();
  app.add_option("--worker", worker, "bench/console_worker")->required();
  app.add_option("--ranks", ranks, "ranks printing the same line")->capture_default_str();
  app.add_option("--distinct", distinct, "of them, ranks printing a line of their own")
      ->capture_default_str();
  app.add_option("--stream-lines", stream_lines, "lines per rank in the throughput case")
      ->capture_default_str();
  app.add_option("--stream-runs", stream_runs, "recorded runs of the throughput case (minutes "
                 "each), after no warm-up")
      ->capture_default_str();
  app.add_option("--hosts-lines", hosts_lines, "lines per rank in the --hosts throughput case")
      ->capture_default_str();
  app.add_option("--local-ssh", local_ssh, "testing/local_ssh.sh: the --hosts case runs with it");
  CLI11_PARSE(app, argc, argv);
  return guarded_main("bench_console", [&] {
    if (common.quick) {
      ranks = std::min(ranks, 64);
      distinct = std::min(distinct, 10);
      stream_lines = std::min(stream_lines, 1000L);
      hosts_lines = std::min(hosts_lines, 1000L);
    }
    const Launcher launcher{"ddprun", false, ddprun, ""};
    const std::string scale_case =
        fmt::format("{} ranks, one node, the same line at once; {} of them a line of their own",
                    ranks, distinct);
    const std::string stream_case = fmt::format(
        "{} ranks, a line every 2 ms each ({} lines over {} s)", stream_ranks,
        stream_ranks * stream_lines, stream_lines * 2 / 1000);
    const std::string hosts_case = fmt::format(
        "{} ranks on 2 hosts (--hosts), a line every 2 ms each ({} lines over {} s)",
        stream_ranks, stream_ranks * hosts_lines, hosts_lines * 2 / 1000);
    std::map<std::tuple<std::string, std::string, std::string>, Series> rows;
    auto row = [&](const std::string& case_name, const std::string& metric,
                   const std::string& subject, const std::string& unit) -> Series& {
      Series& s = rows[{case_name, metric, subject}];
      s.figure = 14;
      s.case_name = case_name;
      s.metric = metric;
      s.subject = subject;
      s.unit = unit;
      return s;
    };

    repeat(common, [&](int i, bool recorded) {
      for (const bool fold : {true, false}) {
        const std::string subject = fold ? kFolded : kPlain;
        test::TempDir dir;
        const auto fifo = dir.file("gate"), ready = dir.file("ready"), logs = dir.file("logs");
        std::filesystem::create_directories(ready);
        if (mkfifo(fifo.c_str(), 0600) != 0) throw Error("mkfifo failed");
        // Held open for writing until every rank waits at the gate: closing it lets all pass.
        int gate = open(fifo.c_str(), O_RDWR | O_CLOEXEC);
        NodeArgs node;
        node.nproc = ranks;
        node.port = test::free_port();
        auto args = command(launcher, node,
                            {worker, "--gate=" + fifo, "--ready=" + ready,
                             std::string("--same=") + kSame,
                             "--distinct=" + std::to_string(distinct), "--hold-ms=2000"});
        args = with_flags(args, {"--tee=1", "--log-dir=" + logs,
                                 fold ? "--fold-output" : "--fold-output=off"});
        const auto run = run_ddprun(
            args, dir.file("agent.log"),
            [&] {
              if (gate < 0) return;
              std::size_t waiting = 0;
              for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(ready)) {
                ++waiting;
              }
              if (waiting < static_cast<std::size_t>(ranks)) return;
              close(gate);
              gate = -1;
            },
            300s);
        if (gate >= 0) close(gate);
        // The same line: printed with a rank's prefix, and its summaries.
        std::size_t printed = 0, summaries = 0, named = 0, own = 0;
        Clock::time_point first{}, summary{};
        for (const auto& line : run.lines) {
          if (is_rank_line(line.text) && line.text.ends_with(kSame)) {
            if (printed++ == 0) first = line.when;
          } else if (line.text.ends_with(std::string("the same: ") + kSame)) {
            ++summaries;
            named += ranks_named(line.text);
            summary = line.when;
          } else if (is_rank_line(line.text) && line.text.find("checkpoint shard ") !=
                                                       std::string::npos) {
            ++own;
          }
        }
        if (printed + named != static_cast<std::size_t>(ranks)) {
          throw Error(fmt::format("{}: the same line printed {} times and named {} times in "
                                  "summaries, of {} ranks",
                                  subject, printed, named, ranks));
        }
        // Every rank's log holds what it wrote, byte for byte.
        std::size_t differ = 0;
        const auto run_dir = std::filesystem::directory_iterator(logs)->path();
        for (int rank = 0; rank < ranks; ++rank) {
          std::string expected = std::string(kSame) + "\n";
          if (rank < distinct) {
            std::string word;
            for (int r = rank; word.empty() || r > 0; r /= 26) {
              word.insert(word.begin(), static_cast<char>('a' + r % 26));
            }
            expected += "checkpoint shard " + word + " written\n";
          }
          if (read_text((run_dir / "attempt_0" / std::to_string(rank) / "stdout.log").string()) !=
              expected) {
            ++differ;
          }
        }
        if (!recorded) continue;
        row(scale_case, "the same line: console lines with a rank's prefix", subject, "lines")
            .samples.push_back(static_cast<double>(printed));
        row(scale_case, "the same line: summary lines", subject, "lines")
            .samples.push_back(static_cast<double>(summaries));
        row(scale_case, fmt::format("lines of their own missing (of {})", distinct), subject,
            "lines")
            .samples.push_back(static_cast<double>(distinct) - static_cast<double>(own));
        row(scale_case, "ranks whose log differs from what they wrote", subject, "ranks")
            .samples.push_back(static_cast<double>(differ));
        if (fold) {
          row(scale_case, "first line to its summary", subject, "ms")
              .samples.push_back(
                  std::chrono::duration<double, std::milli>(summary - first).count());
        }
      }

      if (!recorded || i >= common.warmup + stream_runs) return;
      // Lines every 2 ms from every rank, with folding and without: the CPU per line of the
      // process that prints them (the agent, or the --hosts command), and none lost.
      const auto stream = [&](const std::string& case_name, long lines, bool on_hosts) {
        for (const bool fold : {false, true}) {
          const std::string subject = fold ? kFolded : kPlain;
          test::TempDir dir;
          NodeArgs node;
          node.nproc = stream_ranks;
          node.port = test::free_port();
          auto args = command(launcher, node,
                              {worker, "--lines=" + std::to_string(lines), "--interval-us=2000"});
          args = with_flags(args, {fold ? "--fold-output" : "--fold-output=off"});
          if (on_hosts) {
            // The command decides the hosts' node flags; --log-line-prefix keeps the lines'
            // "[default<rank>]:" for counting.
            std::erase_if(args, [](const std::string& a) {
              return a.starts_with("--nproc-per-node=") || a.starts_with("--nnodes=") ||
                     a.starts_with("--node-rank=") || a.starts_with("--master-addr=");
            });
            args = with_flags(args, {"--hosts=127.0.0.1:4,127.0.0.2:4",
                                     "--ssh-command=" + local_ssh,
                                     "--log-line-prefix=[default{rank}]:"});
          }
          const auto run = run_ddprun(args, dir.file("agent.log"), nullptr, 600s);
          std::size_t printed = 0, named = 0;
          for (const auto& line : run.lines) {
            if (is_rank_line(line.text)) {
              ++printed;
            } else {
              named += ranks_named(line.text);
            }
          }
          const double written = static_cast<double>(stream_ranks) * static_cast<double>(lines);
          const char* cpu = on_hosts ? "the command's CPU per line written"
                                     : "agent CPU per line written";
          row(case_name, cpu, subject, "us")
              .samples.push_back(run.agent_cpu_s * 1e6 / written);
          row(case_name, "console lines", subject, "lines")
              .samples.push_back(static_cast<double>(run.lines.size()));
          row(case_name, "lines lost (written, less printed and named in summaries)", subject,
              "lines")
              .samples.push_back(written - static_cast<double>(printed + named));
        }
      };
      stream(stream_case, stream_lines, false);
      if (!local_ssh.empty()) stream(hosts_case, hosts_lines, true);
    });

    for (auto& [key, s] : rows) {
      const auto& [case_name, metric, subject] = key;
      if (subject == kFolded && metric == "the same line: console lines with a rank's prefix") {
        s.target_max = 1;
        s.target_text = "1";
      } else if (subject == kFolded && metric == "the same line: summary lines") {
        s.target_max = 1;
        s.target_text = "1";
      } else if (subject == kFolded && metric == "first line to its summary") {
        s.target_max = 1000;
        s.target_on_worst = true;
        s.target_text = "<= 1 s (Ray: 5 s)";
      } else if (metric.starts_with("lines of their own missing") ||
                 metric.starts_with("ranks whose log differs") ||
                 metric.starts_with("lines lost")) {
        s.target_max = 0;
        s.target_on_worst = true;
        s.target_text = "0";
      } else if (subject == kFolded && metric.ends_with("CPU per line written")) {
        s.target_vs = kPlain;
        s.target_ratio = 1;
        s.target_text = "no more than without folding";
      }
      append_series(common.results, s);
    }
  });
}
