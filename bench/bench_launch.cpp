// bench_launch: the launcher figures that time whole commands.
//   --figure launch    figure 1: 4 trivial workers (`true`), one node, wall time of the command;
//                      with --floor, also 1..32 workers by turns with the floor (spawn_floor:
//                      posix_spawn N `true` and wait), 5 times the runs: the chart of launch
//                      over workers, and at 4 workers the target of <= 2x the floor
//   --figure restart   figure 2: 4 workers, rank 0 exits 3 on the first attempt,
//                      --max-restarts=1: wall time, and failure-to-restart time
//   --figure two-node  figure 3: 2 agents on 127.0.0.1 (2 + 1 workers): launch to all workers
//                      running
// Each launcher runs the same bench_worker; the workers stamp CLOCK_MONOTONIC when they start,
// so ddprun and torchrun are timed from the workers' side the same way; ddprun's
// --events-file adds its own view. Runs of the launchers are interleaved (ABCABC...), so that
// a slow moment of the machine does not fall on one launcher only.

#include <algorithm>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "bench/bench_cli.hpp"
#include "bench/sys_util.hpp"
#include "common/error.hpp"
#include "testing/child.hpp"

using namespace ddprun;
using namespace ddprun::bench;
using namespace std::chrono_literals;

namespace {

struct Context {
  CommonOptions common;
  LauncherOptions launcher_options;
  std::vector<Launcher> launchers;
  std::string worker;
  std::string floor;  // the spawn_floor binary; empty: no floor rows
  std::string mpirun;  // Open MPI's mpirun; empty: no mpirun row in figure 1
  std::unique_ptr<TempDir> dir;
  int run_counter = 0;
};

// A fresh scratch directory for one run (stamps, events, output).
std::string run_dir(Context& ctx) {
  auto path = ctx.dir->file(fmt::format("run{}", ctx.run_counter++));
  std::filesystem::create_directories(path);
  return path;
}

void expect_exit(int status, int expected, const std::string& what, const std::string& log) {
  if (test::exit_code(status) == expected) return;
  throw Error(fmt::format("{} exited with {} (expected {}); its output ({}):\n{}", what,
                          test::exit_code(status), expected, log, tail(log, 15)));
}

double ms(double seconds) { return seconds * 1e3; }

// The series of one figure, one per (metric, launcher), in a stable order.
struct Table {
  std::vector<Series> rows;
  Series& get(int figure, const std::string& case_name, const std::string& metric,
              const std::string& subject, const std::string& note = "") {
    for (auto& s : rows) {
      if (s.case_name == case_name && s.metric == metric && s.subject == subject) return s;
    }
    Series s;
    s.figure = figure;
    s.case_name = case_name;
    s.metric = metric;
    s.subject = subject;
    s.unit = "ms";
    s.note = note;
    rows.push_back(s);
    return rows.back();
  }
  // The first series of `metric` and `subject` (in `case_name`, when given).
  Series* find(const std::string& metric, const std::string& subject,
               const std::string& case_name = "") {
    for (auto& s : rows) {
      if (s.metric == metric && s.subject == subject &&
          (case_name.empty() || s.case_name == case_name)) {
        return &s;
      }
    }
    return nullptr;
  }
  void write(const std::string& path) const {
    for (const auto& s : rows) append_series(path, s);
  }
};

// ddprun's own account of a launch, from its --events-file: where the milliseconds go.
void breakdown(Table& t, const std::string& case_name, const std::string& subject,
               const std::string& events, double start, double end) {
  auto first = [&](const std::string& name) {
    auto e = events_named(events, name);
    if (e.empty()) throw Error("no " + name + " event in " + events);
    return e.front().at("mono").get<double>();
  };
  double last_exit = 0;
  for (const auto& e : events_named(events, "worker_exited")) {
    last_exit = std::max(last_exit, e.at("exit_mono").get<double>());
  }
  const double rs = first("rendezvous_started"), rc = first("rendezvous_completed"),
               ws = first("workers_started"), jf = first("job_finished");
  const std::vector<std::pair<std::string, double>> parts{
      {"where: spawn to rendezvous_started (exec, configuration, store)", rs - start},
      {"where: rendezvous_started to rendezvous_completed", rc - rs},
      {"where: rendezvous_completed to workers_started (start barrier, 4 workers spawned)", ws - rc},
      {"where: last worker exit to job_finished", jf - last_exit},
      {"where: job_finished to the agent's exit", end - jf}};
  for (const auto& [metric, seconds] : parts) {
    auto& s = t.get(1, case_name, metric, subject);
    s.compare_with = "none";
    s.samples.push_back(ms(seconds));
  }
}

constexpr const char* kFloor = "floor: spawn_floor (C), posix_spawn N true and wait";
constexpr const char* kMpirun = "Open MPI mpirun -np 4";

std::string workers_case(int n) {
  return fmt::format("{} worker{} (`true`), one node", n, n == 1 ? "" : "s");
}

constexpr const char* kInterleaved = "ddprun, run by turns with the floor";

// Launch over the number of workers: ddprun and the floor by turns, so that both see the same
// moments of a noisy machine, with 5 times the runs of the other series (they are cheap). At
// 4 workers this is the target's comparison: ddprun <= 2x the floor.
void launch_scaling(Context& ctx, Table& t) {
  const std::vector<int> counts{1, 2, 4, 8, 16, 32};
  CommonOptions turns = ctx.common;
  turns.runs *= 5;
  repeat(turns, [&](int, bool recorded) {
    for (int n : counts) {
      for (const bool floor : {false, true}) {
        auto dir = run_dir(ctx);
        const auto log = dir + "/out.log";
        NodeArgs node;
        node.nproc = n;
        node.port = free_port();
        const auto argv = floor ? std::vector<std::string>{ctx.floor, std::to_string(n), "true"}
                                : command(ctx.launchers.front(), node, {"true"});
        const double start = test::mono_now();
        test::Child c({argv, {}, log});
        expect_exit(c.wait(120s), 0, floor ? "spawn_floor" : "ddprun", log);
        if (!recorded) continue;
        t.get(1, workers_case(n), "wall time", floor ? kFloor : kInterleaved,
              floor ? "the floor's row: a C program that only spawns the workers and waits" : "")
            .samples.push_back(ms(c.exit_mono() - start));
      }
    }
  });
  if (auto* s = t.find("wall time", kInterleaved, workers_case(4))) {
    s->target_vs = kFloor;
    s->target_ratio = 0.5;
    s->target_text = "<= 2x the floor (the floor / ddprun >= 0.50x), the same runs by turns";
    s->compare_with = "none";  // not with figure 1's first row, timed in other runs
  }
  if (auto* s = t.find("wall time", kFloor, workers_case(4))) s->compare_with = kInterleaved;
}

void figure_launch(Context& ctx) {
  Table t;
  const std::string case_name = workers_case(4);
  // One more ddprun subject, with --events-file: the same launch, taken apart.
  auto subjects = ctx.launchers;
  Launcher traced = subjects.front();
  traced.label = "ddprun --events-file";
  subjects.push_back(traced);
  repeat(ctx.common, [&](int, bool recorded) {
    for (const auto& l : subjects) {
      auto dir = run_dir(ctx);
      NodeArgs node;
      node.nproc = 4;
      node.port = free_port();
      if (&l == &subjects.back()) node.events_file = dir + "/events.jsonl";
      const auto log = dir + "/agent.log";
      const double start = test::mono_now();
      test::Child agent({command(l, node, {"true"}), {}, log});
      expect_exit(agent.wait(120s), 0, l.label, log);
      if (!recorded) continue;
      auto& wall = t.get(1, case_name, "wall time", l.label);
      wall.samples.push_back(ms(agent.exit_mono() - start));
      if (!node.events_file.empty()) {
        wall.compare_with = "none";
        breakdown(t, case_name, l.label, node.events_file, start, agent.exit_mono());
      }
    }
    if (ctx.mpirun.empty()) return;
    // The launch target's peer: the same 4 `true` on this host, as Open MPI starts them.
    const auto log = run_dir(ctx) + "/mpirun.log";
    const double start = test::mono_now();
    test::Child mpirun({{ctx.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "4", "true"},
                  {},
                  log});
    expect_exit(mpirun.wait(120s), 0, kMpirun, log);
    if (recorded) {
      t.get(1, case_name, "wall time", kMpirun).samples.push_back(ms(mpirun.exit_mono() - start));
    }
  });
  if (auto* s = t.find("wall time", "ddprun")) {
    s->target_max = 20;
    if (ctx.mpirun.empty()) {
      s->target_vs = kTorchrunDefault;
      s->target_ratio = 100;
      s->target_text = "<= 20 ms median; >= 100x faster than torchrun (default interval)";
    } else {  // the target's peer; torchrun's ratio stays in the table
      s->target_vs = kMpirun;
      s->target_ratio = 6;
      s->target_text = "<= 20 ms median; >= 6x faster than Open MPI's mpirun -np 4";
    }
  }
  if (!ctx.floor.empty()) launch_scaling(ctx, t);
  t.write(ctx.common.results);
}

constexpr const char* kRestartAlone = "ddprun, runs of its own (no torchrun between)";

// One restart job under `l` (rank 0 exits 3 once, --max-restarts=1), recorded as `label`.
void restart_run(Context& ctx, const Launcher& l, const std::string& label, bool recorded,
                 Table& t) {
  const std::string case_name = "4 workers, rank 0 exits 3 once, --max-restarts=1";
  auto dir = run_dir(ctx);
  NodeArgs node;
  node.nproc = 4;
  node.port = free_port();
  node.max_restarts = 1;
  if (!l.torchrun) node.events_file = dir + "/events.jsonl";
  const auto log = dir + "/agent.log";
  const double start = test::mono_now();
  test::Child agent(
      {command(l, node, {ctx.worker, "--fail-once-rank=0"}), {{"BENCH_STAMP_DIR", dir}}, log});
  expect_exit(agent.wait(180s), 0, label, log);
  if (!recorded) return;
  t.get(2, case_name, "whole job, wall time", label)
      .samples.push_back(ms(agent.exit_mono() - start));
  auto failed = read_stamps(dir, "exit.0.");
  auto restarted = read_stamps(dir, "start.1.");
  if (failed.size() != 1 || restarted.size() != 4) {
    throw Error(fmt::format("{}: expected 1 failure and 4 restarted workers, stamps show {} "
                            "and {} (in {})", label, failed.size(), restarted.size(), dir));
  }
  t.get(2, case_name, "failure to first restarted worker running (worker stamps)", label)
      .samples.push_back(ms(*std::min_element(restarted.begin(), restarted.end()) - failed[0]));
  if (l.torchrun) return;
  double exit_mono = 0, noticed = 0, started = 0;
  for (const auto& e : events_named(node.events_file, "worker_exited")) {
    if (e.at("exit_code") == 3) {
      exit_mono = e.at("exit_mono");
      noticed = e.at("mono");
    }
  }
  for (const auto& e : events_named(node.events_file, "workers_started")) {
    if (e.at("attempt") == 1) started = e.at("mono");
  }
  if (exit_mono == 0 || started == 0) throw Error("events missing in " + node.events_file);
  t.get(2, case_name, "failure to all workers restarted (events: workers_started)", label,
        "ddprun's --events-file: workers_started(attempt 1).mono - worker_exited.exit_mono")
      .samples.push_back(ms(started - exit_mono));
  t.get(2, case_name, "failure noticed by the agent (events)", label,
        "worker_exited.mono - worker_exited.exit_mono")
      .samples.push_back(ms(noticed - exit_mono));
}

void figure_restart(Context& ctx) {
  Table t;
  repeat(ctx.common, [&](int, bool recorded) {
    for (const auto& l : ctx.launchers) restart_run(ctx, l, l.label, recorded, t);
  });
  // The target is ddprun's own time, so it is timed once more without torchrun's runs
  // in between: each of those leaves the machine busy for a while (its Python processes'
  // ends), which lands on the ddprun run that follows it (the row above). 5 times the runs.
  const auto& ddprun = ctx.launchers.front();
  if (!ddprun.torchrun) {
    CommonOptions alone = ctx.common;
    alone.runs *= 5;
    repeat(alone,
           [&](int, bool recorded) { restart_run(ctx, ddprun, kRestartAlone, recorded, t); });
    for (auto& s : t.rows) {
      if (s.subject == kRestartAlone) s.compare_with = "none";  // other runs than ddprun's row
    }
    if (auto* s = t.find("whole job, wall time", kRestartAlone)) {
      s->target_max = 10;
      s->target_text = "whole job <= 10 ms";
    }
  }
  t.write(ctx.common.results);
}

void figure_two_node(Context& ctx) {
  Table t;
  const std::string case_name = "2 agents on 127.0.0.1, 2 + 1 workers";
  repeat(ctx.common, [&](int, bool recorded) {
    for (const auto& l : ctx.launchers) {
      auto dir = run_dir(ctx);
      const auto port = free_port();
      std::vector<std::unique_ptr<test::Child>> agents;
      std::vector<std::string> logs, events;
      const double start = test::mono_now();
      for (int node_rank = 0; node_rank < 2; ++node_rank) {
        NodeArgs node;
        node.nproc = node_rank == 0 ? 2 : 1;
        node.nnodes = 2;
        node.node_rank = node_rank;
        node.port = port;
        if (!l.torchrun) node.events_file = fmt::format("{}/events{}.jsonl", dir, node_rank);
        logs.push_back(fmt::format("{}/agent{}.log", dir, node_rank));
        events.push_back(node.events_file);
        agents.push_back(std::make_unique<test::Child>(test::SpawnSpec{
            command(l, node, {ctx.worker}), {{"BENCH_STAMP_DIR", dir}}, logs.back()}));
      }
      for (int i = 0; i < 2; ++i) {
        expect_exit(agents[static_cast<std::size_t>(i)]->wait(180s), 0,
                    fmt::format("{} node {}", l.label, i), logs[static_cast<std::size_t>(i)]);
      }
      if (!recorded) continue;
      auto started = read_stamps(dir, "start.0.");
      if (started.size() != 3) {
        throw Error(fmt::format("{}: {} worker stamps, expected 3 (in {})", l.label,
                                started.size(), dir));
      }
      t.get(3, case_name, "launch to all workers running (worker stamps)", l.label)
          .samples.push_back(ms(*std::max_element(started.begin(), started.end()) - start));
      double end = std::max(agents[0]->exit_mono(), agents[1]->exit_mono());
      t.get(3, case_name, "whole job, wall time", l.label).samples.push_back(ms(end - start));
      if (l.torchrun) continue;
      double last = 0;
      for (const auto& path : events) {
        for (const auto& e : events_named(path, "workers_started")) {
          last = std::max(last, e.at("mono").get<double>());
        }
      }
      t.get(3, case_name, "launch to workers_started on both agents (events)", l.label,
            "max over both agents of workers_started.mono, minus the launch time")
          .samples.push_back(ms(last - start));
    }
  });
  if (auto* s = t.find("launch to all workers running (worker stamps)", "ddprun")) {
    s->target_max = 50;
    s->target_text = "launch to all workers running <= 50 ms";
  }
  t.write(ctx.common.results);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_launch: launcher timing figures 1-3 (ddprun vs torchrun)"};
  Context ctx;
  std::string figure;
  add_common_options(app, ctx.common);
  add_launcher_options(app, ctx.launcher_options);
  app.add_option("--figure", figure, "launch, restart or two-node")
      ->required()
      ->check(CLI::IsMember({"launch", "restart", "two-node"}));
  app.add_option("--worker", ctx.worker, "the bench_worker binary")->required();
  app.add_option("--floor", ctx.floor,
                 "the spawn_floor binary: figure 1 also over 1..32 workers, next to the floor");
  app.add_option("--mpirun", ctx.mpirun, "Open MPI's mpirun: figure 1 also times mpirun -np 4");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return guarded_main("bench_launch", [&] {
    ctx.launchers = launchers(ctx.launcher_options);
    ctx.dir = std::make_unique<TempDir>(figure);
    try {
      if (figure == "launch") figure_launch(ctx);
      if (figure == "restart") figure_restart(ctx);
      if (figure == "two-node") figure_two_node(ctx);
    } catch (...) {
      ctx.dir->keep();  // the logs named in the message stay for a look
      throw;
    }
  });
}
