// bench_watch: figure 11, what watching a job costs it.
//   The job's side: the launch of 4 `true` workers, a restart (rank 0 exits 3 once) and an
//   agent's CPU over 3 s of sleeping workers, each timed plain and watched (--metrics-port,
//   with `ddprun status --json` run and /metrics scraped every 100 ms), by turns.
//   The store's side: N simulated agents (TcpStoreClient connections, 32 per thread) keep a
//   node record (8 ranks, 120-byte lines) in one ddprun-store process as the agents do, every
//   5 s (idle) and every second (every node changing state at once, the publisher's most);
//   the store's writes per second and CPU, and one `ddprun status --rdzv-endpoint` reading all
//   N records.
// Usage: bench_watch --ddprun PATH --store PATH --worker PATH --results FILE [--runs N]
//          [--warmup N] [--agents N]

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "agent/status_board.hpp"
#include "bench/bench_cli.hpp"
#include "bench/results.hpp"
#include "bench/sys_util.hpp"
#include "common/error.hpp"
#include "monitor/job_view.hpp"
#include "testing/test_util.hpp"
#include "store/tcp_store_client.hpp"
#include "testing/child.hpp"

namespace ddprun::bench {
namespace {

using namespace std::chrono_literals;

constexpr const char* kPlain = "ddprun";
constexpr const char* kWatched = "ddprun watched: status and /metrics every 100 ms";
constexpr auto kPollEvery = 100ms;

struct Context {
  std::string ddprun, store, worker;
  CommonOptions common;
  std::unique_ptr<TempDir> dir;
  int counter = 0;
  std::string next_dir() {
    auto path = dir->file(fmt::format("run{}", counter++));
    std::filesystem::create_directories(path);
    return path;
  }
};

// What a watcher does every 100 ms while the job runs: `ddprun status --json` (a process, as a
// person's terminal or a script runs it) and a scrape of /metrics. For the plain runs it only
// samples the agent's CPU time, as it does for the watched ones.
class Watcher {
 public:
  Watcher(const Context& ctx, bool watch, std::uint16_t metrics, std::string runtime, pid_t agent)
      : thread_([this, ddprun = ctx.ddprun, watch, metrics, runtime, agent] {
          while (!stop_) {
            const auto next = std::chrono::steady_clock::now() + kPollEvery;
            if (const double cpu = process_cpu_s(agent); cpu > 0) agent_cpu_ = cpu;
            if (watch) {
              test::Child status({{ddprun, "status", "--json"}, {{"XDG_RUNTIME_DIR", runtime}}, ""});
              status.wait(30s);
              test::http_get(metrics, "/metrics");
              ++polls_;
            }
            std::this_thread::sleep_until(next);
          }
        }) {}
  ~Watcher() {
    stop_ = true;
    thread_.join();
  }
  double agent_cpu() const { return agent_cpu_; }
  int polls() const { return polls_; }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<double> agent_cpu_{0};
  std::atomic<int> polls_{0};
  std::thread thread_;
};

struct JobRun {
  double wall_ms = 0;
  double agent_cpu_ms = 0;
  std::string events;
  std::string dir;
  int polls = 0;
};

JobRun run_job(Context& ctx, bool watched, int nproc, int max_restarts,
               const std::vector<std::string>& program) {
  JobRun r;
  r.dir = ctx.next_dir();
  const auto runtime = r.dir + "/rt";
  std::filesystem::create_directory(runtime);
  std::filesystem::permissions(runtime, std::filesystem::perms::owner_all);
  r.events = r.dir + "/events.jsonl";
  const auto metrics = free_port();
  std::vector<std::string> argv{ctx.ddprun, fmt::format("--nproc-per-node={}", nproc),
                                fmt::format("--master-port={}", free_port()),
                                fmt::format("--max-restarts={}", max_restarts),
                                "--events-file", r.events, "--no-python"};
  if (watched) argv.insert(argv.begin() + 1, fmt::format("--metrics-port={}", metrics));
  argv.insert(argv.end(), program.begin(), program.end());
  const auto log = r.dir + "/agent.log";
  const double start = test::mono_now();
  test::Child agent({argv, {{"XDG_RUNTIME_DIR", runtime}, {"BENCH_STAMP_DIR", r.dir}}, log});
  {
    Watcher watcher(ctx, watched, metrics, runtime, agent.pid());
    if (test::exit_code(agent.wait(180s)) != 0) {
      throw Error(fmt::format("the job exited with {}; its output:\n{}",
                              test::exit_code(agent.wait(1s)), tail(log, 15)));
    }
    r.agent_cpu_ms = watcher.agent_cpu() * 1e3;
    r.polls = watcher.polls();
  }
  r.wall_ms = (agent.exit_mono() - start) * 1e3;
  return r;
}

Series& row(std::vector<Series>& rows, const std::string& case_name, const std::string& metric,
            const std::string& subject, const std::string& unit, const std::string& note = "") {
  for (auto& s : rows) {
    if (s.case_name == case_name && s.metric == metric && s.subject == subject) return s;
  }
  Series s;
  s.figure = 11;
  s.case_name = case_name;
  s.metric = metric;
  s.subject = subject;
  s.unit = unit;
  s.note = note;
  rows.push_back(s);
  return rows.back();
}

void job_side(Context& ctx, std::vector<Series>& rows) {
  repeat(ctx.common, [&](int, bool recorded) {
    for (const bool watched : {false, true}) {
      const char* subject = watched ? kWatched : kPlain;
      auto launch = run_job(ctx, watched, 4, 0, {"true"});
      auto restart = run_job(ctx, watched, 4, 1, {ctx.worker, "--fail-once-rank=0"});
      auto idle = run_job(ctx, watched, 2, 0, {"sleep", "3"});
      if (!recorded) continue;
      row(rows, "4 workers (`true`), one node", "wall time", subject, "ms")
          .samples.push_back(launch.wall_ms);
      double exit_mono = 0, started = 0;
      for (const auto& e : events_named(restart.events, "worker_exited")) {
        if (e.at("exit_code") == 3) exit_mono = e.at("exit_mono");
      }
      for (const auto& e : events_named(restart.events, "workers_started")) {
        if (e.at("attempt") == 1) started = e.at("mono");
      }
      if (exit_mono == 0 || started == 0) throw Error("events missing in " + restart.events);
      row(rows, "4 workers, rank 0 exits 3 once, --max-restarts=1",
          "failure to all workers restarted (events)", subject, "ms")
          .samples.push_back((started - exit_mono) * 1e3);
      row(rows, "4 workers, rank 0 exits 3 once, --max-restarts=1", "whole job, wall time",
          subject, "ms")
          .samples.push_back(restart.wall_ms);
      row(rows, "2 workers `sleep 3`, one node", "agent CPU time over the job", subject, "ms",
          "the agent's threads (/proc/<pid>/task/*/schedstat), read every 100 ms until it exits")
          .samples.push_back(idle.agent_cpu_ms);
      if (watched) {
        row(rows, "2 workers `sleep 3`, one node", "status and /metrics requests answered",
            subject, "requests")
            .samples.push_back(idle.polls);
        rows.back().compare_with = "none";
        rows.back().lower_is_better = false;
      }
    }
  });
}

// A node record as an agent with 8 workers writes it.
std::string sample_record(int node) {
  NodeStatus s;
  s.run_id = "bench";
  s.backend = "c10d";
  s.host = fmt::format("node-{:04}.cluster.example", node);
  s.version = "0.1.0";
  s.agent_pid = 100000 + node;
  s.node = node;
  s.state = "running";
  for (int i = 0; i < 8; ++i) {
    RankStatus r;
    r.rank = node * 8 + i;
    r.local_rank = i;
    r.pid = 200000 + r.rank;
    r.state = "running";
    r.last_output_age = 0.5;
    r.last_line = std::string(120, 'x');
    r.cpu_seconds = 1234.5;
    r.cpu_percent = 99.5;
    r.rss_bytes = std::int64_t{3} << 30;
    s.ranks.push_back(r);
  }
  return s.to_json().dump();
}

void store_side(Context& ctx, std::vector<Series>& rows, int agents) {
  raise_nofile(agents + 256);
  const auto port = free_port();
  const auto log = ctx.dir->file("store.log");
  test::Child server({{ctx.store, "--host", "127.0.0.1", "--port", std::to_string(port),
                       "--log-level", "warn"},
                      {},
                      log});
  const auto connect = [&] {
    store::StoreClientOptions o;
    o.host = "127.0.0.1";
    o.port = port;
    o.run_id = "bench";
    return std::make_unique<store::TcpStoreClient>(o, Deadline::after(60s));
  };
  constexpr int kPerThread = 32;
  std::vector<std::vector<std::unique_ptr<store::Store>>> groups((agents + kPerThread - 1) / kPerThread);
  for (int i = 0; i < agents; ++i) groups[static_cast<std::size_t>(i / kPerThread)].push_back(connect());
  std::vector<std::string> records;
  for (int i = 0; i < agents; ++i) records.push_back(sample_record(i));
  {
    auto first = connect();
    first->add(kStatusSlotsKey, agents, Deadline::after(60s));
  }
  const std::string case_name = fmt::format("{} simulated agents, 8 ranks each", agents);
  for (const auto period : {5000ms, 1000ms}) {
    const auto label = period == 5000ms ? "every 5 s (no change)" : "every second (every node changing)";
    repeat(ctx.common, [&](int, bool recorded) {
      // Two periods: the first spreads the writes, the second is measured.
      const auto t0 = std::chrono::steady_clock::now();
      std::atomic<std::uint64_t> writes{0};
      std::vector<std::thread> threads;
      for (std::size_t g = 0; g < groups.size(); ++g) {
        threads.emplace_back([&, g] {
          for (int lap = 0; lap < 2; ++lap) {
            for (std::size_t k = 0; k < groups[g].size(); ++k) {
              const auto i = static_cast<int>(g * kPerThread + k);
              // Each agent writes at its own moment within the period, as agents started at
              // different times do.
              std::this_thread::sleep_until(t0 + lap * period + period * i / agents);
              groups[g][k]->set(status_record_key(i), records[static_cast<std::size_t>(i)],
                                Deadline::after(30s));
              if (lap == 1) ++writes;
            }
          }
        });
      }
      std::this_thread::sleep_until(t0 + period);
      const double cpu0 = process_cpu_s(server.pid());
      for (auto& t : threads) t.join();
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                                           (t0 + period)).count();
      const double cpu = process_cpu_s(server.pid()) - cpu0;
      if (!recorded) return;
      row(rows, case_name, fmt::format("status writes per second, {}", label), "ddprun-store",
          "ops/s")
          .samples.push_back(static_cast<double>(writes) / seconds);
      rows.back().compare_with = "none";
      row(rows, case_name, fmt::format("store CPU, {}", label), "ddprun-store", "% of a core",
          "the server process's threads (/proc/<pid>/task/*/schedstat) over the measured period")
          .samples.push_back(100 * cpu / seconds);
      rows.back().compare_with = "none";
    });
  }
  repeat(ctx.common, [&](int, bool recorded) {
    const double start = test::mono_now();
    test::Child status({{ctx.ddprun, "status", "--json", "--rdzv-endpoint",
                         fmt::format("127.0.0.1:{}", port), "--rdzv-id", "bench"},
                        {},
                        ctx.dir->file("status.json")});
    if (test::exit_code(status.wait(60s)) != 0) {
      throw Error("ddprun status failed: " + tail(ctx.dir->file("status.json"), 5));
    }
    if (recorded) {
      row(rows, case_name, "`ddprun status --rdzv-endpoint` reading every record, wall time",
          "ddprun status", "ms")
          .samples.push_back((status.exit_mono() - start) * 1e3);
      rows.back().compare_with = "none";
    }
    std::filesystem::remove(ctx.dir->file("status.json"));
  });
}

}  // namespace
}  // namespace ddprun::bench

int main(int argc, char** argv) {
  using namespace ddprun::bench;
  Context ctx;
  int agents = 1024;
  CLI::App app{"bench_watch: figure 11, the cost of watching a job"};
  add_common_options(app, ctx.common);
  app.add_option("--ddprun", ctx.ddprun)->required();
  app.add_option("--store", ctx.store, "the ddprun-store binary")->required();
  app.add_option("--worker", ctx.worker, "bench_worker")->required();
  app.add_option("--agents", agents, "simulated agents on the store's side");
  CLI11_PARSE(app, argc, argv);
  return guarded_main("bench_watch", [&] {
    ctx.dir = std::make_unique<TempDir>("watch");
    std::vector<Series> rows;
    job_side(ctx, rows);
    store_side(ctx, rows, agents);
    for (const auto& s : rows) append_series(ctx.common.results, s);
  });
}
