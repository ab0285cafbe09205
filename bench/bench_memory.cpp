// bench_memory: figure 4, the agent's peak resident memory while 4 workers sleep.
// The agent is the process we start (ddprun, or the Python process of torchrun); its workers
// are not counted. /proc/<agent>/status VmHWM is read every 10 ms while it runs; the figure is
// the value read at the last moment all 4 workers were alive. ddprun forks one more process,
// the orphan guard (`ddprun-guard`), which is reported on a row of its own.

#include <memory>

#include <fmt/format.h>

#include "bench/bench_cli.hpp"
#include "bench/process.hpp"
#include "bench/sys_util.hpp"
#include "common/error.hpp"

using namespace ddprun;
using namespace ddprun::bench;
using namespace std::chrono_literals;

namespace {

struct Peak {
  long agent_kib = -1;
  long guard_kib = -1;
};

// Samples the agent (and its guard) until it exits; keeps the readings from moments when
// `workers` workers (children named `worker_comm`) were alive.
Peak watch(Child& agent, int workers, const std::string& worker_comm) {
  Peak peak;
  while (!agent.wait_for(10ms)) {
    int alive = 0;
    pid_t guard = -1;
    for (pid_t child : children_of(agent.pid())) {
      auto comm = comm_of(child);
      if (comm == worker_comm) ++alive;
      if (comm == "ddprun-guard") guard = child;
    }
    if (alive < workers) continue;
    const long hwm = status_kib(agent.pid(), "VmHWM");
    if (hwm > 0) peak.agent_kib = hwm;
    if (guard > 0) {
      const long g = status_kib(guard, "VmHWM");
      if (g > 0) peak.guard_kib = g;
    }
  }
  return peak;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_memory: figure 4, peak RSS of the agent while 4 workers sleep"};
  CommonOptions common;
  LauncherOptions lo;
  std::string worker;
  double sleep_s = 2;
  add_common_options(app, common);
  add_launcher_options(app, lo);
  app.add_option("--worker", worker, "the bench_worker binary")->required();
  app.add_option("--sleep", sleep_s, "seconds the workers sleep")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return guarded_main("bench_memory", [&] {
    const std::string case_name = "4 workers sleeping, one node";
    auto all = launchers(lo);
    std::vector<Series> rows;
    for (const auto& l : all) {
      Series s;
      s.figure = 4;
      s.case_name = case_name;
      s.metric = "peak RSS (VmHWM)";
      s.subject = l.label + (l.torchrun ? "" : " agent");
      s.unit = "MiB";
      rows.push_back(s);
    }
    Series guard = rows.front();
    guard.subject = "ddprun-guard (orphan guard, forked by the agent)";
    guard.compare_with = "none";
    rows.front().target_max = 10e6 / (1024.0 * 1024.0);
    rows.front().target_text = "<= 10 MB (10^6 bytes: 9.54 MiB)";
    guard.note = "a fork of the agent: its pages are shared with the agent until either writes";
    TempDir dir("memory");
    repeat(common, [&](int i, bool recorded) {
      for (std::size_t k = 0; k < all.size(); ++k) {
        const auto& l = all[k];
        NodeArgs node;
        node.nproc = 4;
        node.port = free_port();
        const auto log = dir.file(fmt::format("agent{}-{}.log", i, k));
        Child agent({command(l, node, {worker, fmt::format("--sleep={}", sleep_s)}), {}, log});
        auto peak = watch(agent, 4, "bench_worker");
        if (exit_code(*agent.wait_for(0ms)) != 0 || peak.agent_kib < 0) {
          dir.keep();
          throw Error(fmt::format("{}: exit {}, agent VmHWM {} kB with 4 workers alive; "
                                  "output ({}):\n{}", l.label, exit_code(*agent.wait_for(0ms)),
                                  peak.agent_kib, log, tail(log, 15)));
        }
        if (!recorded) continue;
        rows[k].samples.push_back(static_cast<double>(peak.agent_kib) / 1024.0);
        if (!l.torchrun && peak.guard_kib > 0) {
          guard.samples.push_back(static_cast<double>(peak.guard_kib) / 1024.0);
        }
      }
    });
    rows.insert(rows.begin() + 1, guard);
    for (const auto& s : rows) append_series(common.results, s);
  });
}
