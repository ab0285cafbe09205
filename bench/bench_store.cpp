// bench_store: figure 5, store throughput and latency with 1, 16 and 64 concurrent clients.
// Built twice: bench_store measures ddprun's store alone; bench_store_c10d (when libtorch is
// found) also measures c10d's TCPStore, interleaved run by run with ddprun's, and serves the
// c10d store itself with --serve-c10d.

#include <fmt/format.h>

#include "bench/bench_cli.hpp"
#include "bench/lean_client.hpp"
#include "bench/store_load.hpp"
#ifdef DDPRUN_BENCH_C10D
#include "bench/c10d_client.hpp"
#endif

using namespace ddprun::bench;

int main(int argc, char** argv) {
  CLI::App app{"bench_store: figure 5, store throughput with N concurrent clients"};
  CommonOptions common;
  std::string store_binary;
  std::vector<int> clients{1, 16, 64};
  double seconds = 1;
  [[maybe_unused]] bool serve = false;
  bool diagnostic = false;
  [[maybe_unused]] std::uint16_t port = 0;
  app.add_option("--results", common.results, "JSON-lines file the series are appended to");
  app.add_option("--runs", common.runs, "recorded runs per series")->capture_default_str();
  app.add_option("--warmup", common.warmup, "runs before those, not recorded")->capture_default_str();
  app.add_option("--store", store_binary, "the ddprun-store binary");
  app.add_option("--clients", clients, "client counts")->capture_default_str();
  app.add_option("--seconds", seconds, "seconds per run")->capture_default_str();
  app.add_flag("--diagnostic", diagnostic,
               "also drive ddprun-store with a minimal blocking client (where the time goes)");
#ifdef DDPRUN_BENCH_C10D
  app.add_flag("--serve-c10d", serve, "serve a c10d TCPStore on 127.0.0.1:--port until SIGTERM");
  app.add_option("--port", port, "port for --serve-c10d");
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return guarded_main(argv[0], [&] {
#ifdef DDPRUN_BENCH_C10D
    if (serve) {
      serve_c10d(port);
      return;
    }
#endif
    if (common.results.empty() || store_binary.empty()) {
      throw std::runtime_error("--results and --store are required");
    }
    std::vector<StoreSubject> subjects{ddprun_subject(store_binary)};
#ifdef DDPRUN_BENCH_C10D
    subjects.push_back(c10d_subject(argv[0]));
#endif
    if (diagnostic) {
      subjects.push_back(lean_subject(store_binary));
      subjects.back().compare_with = subjects.size() > 2 ? subjects[1].label : "none";
    }
    run_store_figure(common, subjects, clients, seconds);
  });
}
