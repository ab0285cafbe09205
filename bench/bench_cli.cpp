#include "bench/bench_cli.hpp"

#include <cstdio>
#include <exception>

namespace ddprun::bench {

void add_common_options(CLI::App& app, CommonOptions& o) {
  app.add_option("--runs", o.runs, "recorded runs per series")->capture_default_str();
  app.add_option("--warmup", o.warmup, "runs before those, not recorded")->capture_default_str();
  app.add_option("--results", o.results, "JSON-lines file the series are appended to")
      ->required();
  app.add_flag("--quick", o.quick, "small sizes (smoke mode)");
}

void repeat(const CommonOptions& o, const std::function<void(int, bool)>& run) {
  for (int i = 0; i < o.warmup + o.runs; ++i) run(i, i >= o.warmup);
}

std::vector<std::string> command(const Launcher& l, const NodeArgs& n,
                                 const std::vector<std::string>& program) {
  std::vector<std::string> argv;
  const auto port = std::to_string(n.port);
  if (l.torchrun) {
    argv = {l.binary, "-m", "torch.distributed.run", "-r", "1", "-t", "1",
            "--nproc_per_node=" + std::to_string(n.nproc), "--nnodes=" + std::to_string(n.nnodes),
            "--node_rank=" + std::to_string(n.node_rank), "--master_addr=127.0.0.1",
            "--master_port=" + port, "--max_restarts=" + std::to_string(n.max_restarts)};
    if (!l.monitor_interval.empty()) {
      argv.insert(argv.end(), {"--monitor_interval", l.monitor_interval});
    }
    argv.push_back("--no_python");
  } else {
    argv = {l.binary, "--nproc-per-node=" + std::to_string(n.nproc),
            "--nnodes=" + std::to_string(n.nnodes), "--node-rank=" + std::to_string(n.node_rank),
            "--master-addr=127.0.0.1", "--master-port=" + port,
            "--max-restarts=" + std::to_string(n.max_restarts)};
    if (!n.events_file.empty()) argv.insert(argv.end(), {"--events-file", n.events_file});
    argv.push_back("--no-python");
  }
  argv.insert(argv.end(), program.begin(), program.end());
  return argv;
}

void add_launcher_options(CLI::App& app, LauncherOptions& o) {
  app.add_option("--ddprun", o.ddprun, "the ddprun binary")->required();
  app.add_option("--python", o.python, "Python with torch 1.13 (torchrun)")->capture_default_str();
  app.add_option("--torchrun", o.torchrun, "torchrun variants: default, fast (0.05 s), none")
      ->capture_default_str();
}

std::vector<Launcher> launchers(const LauncherOptions& o) {
  std::vector<Launcher> out{{"ddprun", false, o.ddprun, ""}};
  if (o.torchrun.find("default") != std::string::npos) {
    out.push_back({kTorchrunDefault, true, o.python, ""});
  }
  if (o.torchrun.find("fast") != std::string::npos) {
    out.push_back({kTorchrunFast, true, o.python, "0.05"});
  }
  return out;
}

int guarded_main(const char* program, const std::function<void()>& body) {
  try {
    body();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
}

}  // namespace ddprun::bench
