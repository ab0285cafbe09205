#pragma once
// Figure 5's load: N threads, each with its own store client, each repeating set (its own key,
// 64 bytes), get (that key) and add (one shared counter) as fast as the store answers, for a
// fixed time. The server runs in a separate process, started fresh for each store under test,
// so that both stores are driven exactly the same way. Throughput counts every completed
// operation; latency is per operation, end to end, as the client sees it.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_cli.hpp"

namespace ddprun::bench {

class LoadClient {
 public:
  virtual ~LoadClient() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  virtual std::string get(const std::string& key) = 0;
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;
};

struct StoreSubject {
  std::string label;
  // The server's command line for a port.
  std::function<std::vector<std::string>(std::uint16_t port)> server;
  // One client connected to 127.0.0.1:port (retrying while the server starts).
  std::function<std::unique_ptr<LoadClient>(std::uint16_t port)> connect;
  std::string compare_with;  // Series::compare_with of its rows
};

struct LoadResult {
  double seconds = 0;
  std::uint64_t ops = 0;
  std::vector<double> latencies_us;
  double server_cpu_s = 0;  // CPU time the server process used during the load
  double client_cpu_s = 0;  // CPU time this process (the clients) used during the load
};

// Runs the load with `clients` threads against an already started server (process
// `server_pid`, whose CPU time is read from /proc).
LoadResult run_load(const StoreSubject& subject, std::uint16_t port, pid_t server_pid,
                    int clients, std::chrono::duration<double> duration);

// The whole figure: for each client count, warm-up + runs of every subject, interleaved.
void run_store_figure(const CommonOptions& common, const std::vector<StoreSubject>& subjects,
                      const std::vector<int>& client_counts, double seconds);

// ddprun's TcpStoreClient, against build/store/ddprun-store.
StoreSubject ddprun_subject(const std::string& store_binary);

}  // namespace ddprun::bench
