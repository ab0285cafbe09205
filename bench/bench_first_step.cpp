// bench_first_step: Figure 13, what a person waits for after a failure: from a rank's SIGKILL to
// the first training step of the next attempt on every rank, and from the command to the first
// step at a job's first start. bench/first_step.py (torch 1.13, Gloo, 3 ranks, env://, a
// checkpoint every 5 steps; rank 1 SIGKILLs itself at step 20, --max-restarts=1) stamps each
// phase. Subjects, run by turns: ddprun (its workers' store, TORCHELASTIC_USE_AGENT_STORE=True);
// ddprun with rank 0 hosting the workers' store (the script's BENCH_RANK0_HOSTS_STORE, as
// torchrun 1.13's c10d backend does); torchrun at a 0.1 s
// monitor interval, and at its default (fewer runs: each costs seconds of waiting).

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "bench/bench_cli.hpp"
#include "bench/sys_util.hpp"
#include "common/error.hpp"
#include "testing/child.hpp"

using namespace ddprun;
using namespace ddprun::bench;
using namespace std::chrono_literals;

namespace {

constexpr const char* kCase = "3 ranks, Gloo, rank 1 SIGKILLed at step 20, --max-restarts=1";
constexpr const char* kRank0Hosts = "ddprun, rank 0 hosting the workers' store";
constexpr const char* kWarm = "ddprun --warm-standby";
constexpr const char* kTorchrunTuned = "torchrun --monitor_interval 0.1";
// From the last rank done importing torch to every rank out of init_process_group: the store's
// and the rendezvous' part (a rank that imported sooner waits in it for the others).
constexpr const char* kInitAfterFailure =
    "init_process_group after the failure (last import to every rank joined)";
constexpr const char* kInitFirstStart =
    "init_process_group at the first start (last import to every rank joined)";

struct Subject {
  Launcher launcher;
  std::string label;
  bool rank0_hosts = false;
  bool every_run = true;  // false: only the first --default-interval-runs of the runs
  bool warm = false;  // --warm-standby: ddprun runs the script as Python itself (no --no-python)
};

double ms(double seconds) { return seconds * 1e3; }

// One stamp per rank of `phase` in `attempt`, by rank.
std::map<int, double> stamps(const std::string& dir, const std::string& phase, int attempt) {
  std::map<int, double> out;
  for (int rank = 0; rank < 3; ++rank) {
    auto v = read_stamps(dir, fmt::format("{}.{}.{}", phase, attempt, rank));
    if (v.size() == 1) out[rank] = v[0];
  }
  if (out.size() != 3) {
    throw Error(fmt::format("{} stamps of {} in attempt {}, expected 3 (in {})", out.size(), phase,
                            attempt, dir));
  }
  return out;
}

double latest(const std::map<int, double>& m) {
  double v = 0;
  for (const auto& [_, t] : m) v = std::max(v, t);
  return v;
}

// The slowest rank's time from `from` to `to`.
double slowest(const std::map<int, double>& from, const std::map<int, double>& to) {
  double v = 0;
  for (const auto& [rank, t] : to) v = std::max(v, t - from.at(rank));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_first_step: Figure 13, failure to the next training step (torch 1.13)"};
  CommonOptions common;
  LauncherOptions launcher_options;
  std::string script;
  int default_interval_runs = 5;
  add_common_options(app, common);
  app.add_option("--default-interval-runs", default_interval_runs,
                 "recorded runs of torchrun at its default interval (each waits seconds)")
      ->capture_default_str();
  add_launcher_options(app, launcher_options);
  app.add_option("--script", script, "bench/first_step.py")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return guarded_main("bench_first_step", [&] {
    std::vector<Subject> subjects;
    for (const auto& l : launchers(launcher_options)) {
      if (!l.torchrun) {
        subjects.push_back({l, kWarm, false, true, true});
        subjects.push_back({l, l.label});
        subjects.push_back({l, kRank0Hosts, true});
      } else if (l.monitor_interval.empty()) {
        subjects.push_back({l, l.label, false, false});
      } else {
        auto tuned = l;
        tuned.monitor_interval = "0.1";
        subjects.push_back({tuned, kTorchrunTuned});
      }
    }
    TempDir dir("first-step");
    std::map<std::string, std::map<std::string, Series>> rows;  // metric -> subject -> series
    std::vector<std::pair<std::string, std::string>> order;
    auto row = [&](const std::string& metric, const std::string& subject) -> Series& {
      auto& s = rows[metric][subject];
      if (s.metric.empty()) {
        s.figure = 13;
        s.case_name = kCase;
        s.metric = metric;
        s.subject = subject;
        s.unit = "ms";
        order.emplace_back(metric, subject);
      }
      return s;
    };
    int counter = 0;
    repeat(common, [&](int i, bool recorded) {
      for (const auto& subject : subjects) {
        if (!subject.every_run && i >= common.warmup + default_interval_runs) continue;
        const auto run = dir.file(fmt::format("run{}", counter++));
        std::filesystem::create_directories(run);
        NodeArgs node;
        node.nproc = 3;
        node.port = free_port();
        node.max_restarts = 1;
        std::vector<std::pair<std::string, std::string>> env{
            {"BENCH_STAMP_DIR", run}, {"OMP_NUM_THREADS", "1"}, {"PYTHONDONTWRITEBYTECODE", "1"}};
        if (subject.rank0_hosts) env.emplace_back("BENCH_RANK0_HOSTS_STORE", "1");
        const auto log = run + "/agent.log";
        auto agent_argv = command(subject.launcher, node, {launcher_options.python, script});
        if (subject.warm) {
          agent_argv = command(subject.launcher, node, {script});
          std::erase(agent_argv, "--no-python");
          agent_argv.insert(agent_argv.begin() + 1, "--warm-standby");
          env.emplace_back("PYTHON_EXEC", launcher_options.python);
        }
        const double start = test::mono_now();
        test::Child agent({agent_argv, env, log});
        const int status = agent.wait(300s);
        if (test::exit_code(status) != 0) {
          dir.keep();
          throw Error(fmt::format("{} exited with {}; its output ({}):\n{}", subject.label,
                                  test::exit_code(status), log, tail(log, 20)));
        }
        if (!recorded) continue;
        const auto kill = read_stamps(run, "kill.0.1");
        if (kill.size() != 1) throw Error("no kill stamp in " + run);
        const auto start1 = stamps(run, "start", 1), imported1 = stamps(run, "imported", 1),
                   joined1 = stamps(run, "joined", 1), step1 = stamps(run, "step", 1);
        const auto imported0 = stamps(run, "imported", 0), joined0 = stamps(run, "joined", 0),
                   step0 = stamps(run, "step", 0);
        double first_new = start1.begin()->second;
        for (const auto& [_, t] : start1) first_new = std::min(first_new, t);
        const auto& l = subject.label;
        row("failure to every rank's first step", l).samples.push_back(ms(latest(step1) - kill[0]));
        row("failure to the first new process", l).samples.push_back(ms(first_new - kill[0]));
        row("import torch, slowest rank", l).samples.push_back(ms(slowest(start1, imported1)));
        row(kInitAfterFailure, l).samples.push_back(ms(latest(joined1) - latest(imported1)));
        row("command to every rank's first step, first start", l)
            .samples.push_back(ms(latest(step0) - start));
        row(kInitFirstStart, l).samples.push_back(ms(latest(joined0) - latest(imported0)));
      }
    });
    {
      auto& s = rows["failure to every rank's first step"][kWarm];
      s.target_max = 400;
      s.target_on_worst = true;
      s.target_text = "worst <= 400 ms of 20 runs (and median <= 300 ms)";
    }
    for (const auto& metric : {kInitAfterFailure, kInitFirstStart}) {
      auto& s = rows[metric]["ddprun"];
      s.target_max = 300;
      s.target_on_worst = true;
      s.target_text = "no run over 300 ms (the workers' store listens before the workers start)";
    }
    for (const auto& [metric, subject] : order) append_series(common.results, rows[metric][subject]);
  });
}
