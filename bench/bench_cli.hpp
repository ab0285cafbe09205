#pragma once
// What every bench program shares: how many runs, where results go, and the launchers under
// comparison (ddprun, and Debian's torchrun 1.13 with its default and a 0.05 s monitor
// interval). torchrun 1.13 crashes on Python 3.11 unless -r and -t are given, so it always
// gets `-r 1 -t 1`.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/results.hpp"

namespace ddprun::bench {

struct CommonOptions {
  int runs = 5;     // recorded runs per series
  int warmup = 1;   // runs before those, not recorded
  std::string results;  // JSON-lines file the series are appended to
  bool quick = false;   // smaller sizes (the smoke mode)
};
void add_common_options(CLI::App& app, CommonOptions& o);

// Calls `run(i, recorded)` for warm-up + runs iterations.
void repeat(const CommonOptions& o, const std::function<void(int, bool)>& run);

struct Launcher {
  std::string label;  // the subject in the report
  bool torchrun = false;
  std::string binary;            // ddprun, or the Python interpreter for torchrun
  std::string monitor_interval;  // torchrun: "" keeps its default (5 s in 1.13)
};

struct NodeArgs {
  int nproc = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::uint16_t port = 0;  // the static rendezvous' master port on 127.0.0.1
  int max_restarts = 0;
  std::string events_file;  // ddprun only
};

// The agent's command line for one node running `program` (an executable, no Python).
std::vector<std::string> command(const Launcher& l, const NodeArgs& node,
                                 const std::vector<std::string>& program);

// The subjects (report labels) of the torchrun variants.
inline constexpr const char* kTorchrunDefault = "torchrun (default --monitor_interval 5)";
inline constexpr const char* kTorchrunFast = "torchrun --monitor_interval 0.05";

struct LauncherOptions {
  std::string ddprun;
  std::string python = "/usr/bin/python3";
  // Which torchrun variants to compare: "default", "fast" (0.05 s), both comma-separated, or
  // "none".
  std::string torchrun = "default,fast";
};
void add_launcher_options(CLI::App& app, LauncherOptions& o);
// ddprun first, then the torchrun variants asked for.
std::vector<Launcher> launchers(const LauncherOptions& o);

// Runs a bench program's body: parses nothing, turns exceptions into a message and exit 1.
int guarded_main(const char* program, const std::function<void()>& body);

}  // namespace ddprun::bench
