// bench_memory: figure 4, the agent's peak resident memory while 4 workers sleep.
// The agent is the process we start (ddprun, or the Python process of torchrun); its workers
// are not counted. /proc/<agent>/status VmHWM is read every 10 ms while it runs; the figure is
// the value read at the last moment all 4 workers were alive. ddprun's one other process, the
// orphan guard (`ddprun-guard`), runs in the agent's own memory (clone with CLONE_VM), so the
// agent's figure includes it.

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

// Samples the agent until it exits; returns its VmHWM (KiB) read at the last moment when
// `workers` workers (children named `worker_comm`) were alive, -1 if there was none.
long watch(test::Child& agent, int workers, const std::string& worker_comm) {
  long peak_kib = -1;
  while (!agent.wait_for(10ms)) {
    int alive = 0;
    for (pid_t child : children_of(agent.pid())) {
      if (comm_of(child) == worker_comm) ++alive;
    }
    if (alive < workers) continue;
    const long hwm = status_kib(agent.pid(), "VmHWM");
    if (hwm > 0) peak_kib = hwm;
  }
  return peak_kib;
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
    rows.front().note = "includes the orphan guard, which runs in the agent's memory";
    rows.front().target_max = 10e6 / (1024.0 * 1024.0);
    rows.front().target_text = "<= 10 MB (10^6 bytes: 9.54 MiB)";
    TempDir dir("memory");
    repeat(common, [&](int i, bool recorded) {
      for (std::size_t k = 0; k < all.size(); ++k) {
        const auto& l = all[k];
        NodeArgs node;
        node.nproc = 4;
        node.port = free_port();
        const auto log = dir.file(fmt::format("agent{}-{}.log", i, k));
        test::Child agent(
            {command(l, node, {worker, fmt::format("--sleep={}", sleep_s)}), {}, log});
        const long peak_kib = watch(agent, 4, "bench_worker");
        if (test::exit_code(*agent.wait_for(0ms)) != 0 || peak_kib < 0) {
          dir.keep();
          throw Error(fmt::format(
              "{}: exit {}, agent VmHWM {} kB with 4 workers alive; "
              "output ({}):\n{}",
              l.label, test::exit_code(*agent.wait_for(0ms)), peak_kib, log, tail(log, 15)));
        }
        if (!recorded) continue;
        rows[k].samples.push_back(static_cast<double>(peak_kib) / 1024.0);
      }
    });
    for (const auto& s : rows) append_series(common.results, s);
  });
}
