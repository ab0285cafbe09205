#include "bench/store_load.hpp"

#include <signal.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "bench/sys_util.hpp"
#include "common/error.hpp"
#include "common/limits.hpp"
#include "store/tcp_store_client.hpp"
#include "testing/child.hpp"

namespace ddprun::bench {

using Seconds = std::chrono::duration<double>;

LoadResult run_load(const StoreSubject& subject, std::uint16_t port, pid_t server_pid,
                    int clients, std::chrono::duration<double> duration) {
  std::vector<std::unique_ptr<LoadClient>> conns;
  for (int i = 0; i < clients; ++i) conns.push_back(subject.connect(port));

  std::mutex mutex;
  std::condition_variable cv;
  bool go = false;
  std::atomic<bool> stop{false};
  std::vector<std::vector<double>> latencies(static_cast<std::size_t>(clients));
  std::vector<std::string> errors(static_cast<std::size_t>(clients));
  std::vector<std::thread> threads;
  const std::string value(64, 'v');
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&, i] {
      auto& lat = latencies[static_cast<std::size_t>(i)];
      lat.reserve(1 << 16);
      auto& c = *conns[static_cast<std::size_t>(i)];
      const auto key = fmt::format("bench/k{}", i);
      {
        std::unique_lock lock(mutex);
        cv.wait(lock, [&] { return go; });
      }
      try {
        int op = 0;
        while (!stop.load(std::memory_order_relaxed)) {
          const auto t0 = std::chrono::steady_clock::now();
          switch (op) {
            case 0: c.set(key, value); break;
            case 1:
              if (c.get(key).size() != value.size()) throw Error("get returned a wrong value");
              break;
            default: c.add("bench/counter", 1); break;
          }
          op = (op + 1) % 3;
          lat.push_back(std::chrono::duration<double, std::micro>(
                            std::chrono::steady_clock::now() - t0).count());
        }
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(i)] = e.what();
      }
    });
  }
  const double server_cpu = process_cpu_s(server_pid), client_cpu = process_cpu_seconds();
  const auto start = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(mutex);
    go = true;
  }
  cv.notify_all();
  std::this_thread::sleep_for(duration);
  stop = true;
  for (auto& t : threads) t.join();
  LoadResult r;
  r.seconds = Seconds(std::chrono::steady_clock::now() - start).count();
  r.server_cpu_s = process_cpu_s(server_pid) - server_cpu;
  r.client_cpu_s = process_cpu_seconds() - client_cpu;
  for (std::size_t i = 0; i < latencies.size(); ++i) {
    if (!errors[i].empty()) {
      throw Error(fmt::format("{}: client {} of {} failed: {}", subject.label, i, clients, errors[i]));
    }
    r.ops += latencies[i].size();
    r.latencies_us.insert(r.latencies_us.end(), latencies[i].begin(), latencies[i].end());
  }
  return r;
}

void run_store_figure(const CommonOptions& common, const std::vector<StoreSubject>& subjects,
                      const std::vector<int>& client_counts, double seconds) {
  raise_nofile(4096);
  TempDir dir("store");
  for (int n : client_counts) {
    const auto case_name = fmt::format("{} client{}", n, n == 1 ? "" : "s");
    std::vector<Series> ops, p99, p50, server_cpu, client_cpu;
    for (const auto& s : subjects) {
      Series base;
      base.figure = 5;
      base.case_name = case_name;
      base.subject = s.label;
      base.metric = "throughput";
      base.unit = "ops/s";
      base.lower_is_better = false;
      base.note = fmt::format("set/get/add cycle, {} s per run", seconds);
      base.compare_with = s.compare_with;
      ops.push_back(base);
      base.metric = "p99 latency";
      base.unit = "us";
      base.lower_is_better = true;
      p99.push_back(base);
      base.metric = "median latency";
      p50.push_back(base);
      base.metric = "server CPU per operation";
      base.note = "CPU time of the server process (all threads, /proc/<pid>/task/*/schedstat) "
                  "during the run, divided by the operations";
      server_cpu.push_back(base);
      base.metric = "client CPU per operation";
      base.note = "CPU time of the client process (getrusage) during the run, divided by the "
                  "operations";
      client_cpu.push_back(base);
    }
    // One fresh server per store and client count, all started before the runs, so that the
    // runs of the stores can be interleaved.
    std::vector<std::uint16_t> ports;
    std::vector<std::string> logs;
    std::vector<std::unique_ptr<test::Child>> servers;
    for (std::size_t k = 0; k < subjects.size(); ++k) {
      ports.push_back(free_port());
      logs.push_back(dir.file(fmt::format("server-{}-{}.log", n, k)));
      servers.push_back(std::make_unique<test::Child>(
          test::SpawnSpec{subjects[k].server(ports[k]), {}, logs[k]}));
    }
    repeat(common, [&](int, bool recorded) {
      for (std::size_t k = 0; k < subjects.size(); ++k) {
        LoadResult r;
        try {
          r = run_load(subjects[k], ports[k], servers[k]->pid(), n, Seconds(seconds));
        } catch (const std::exception& e) {
          dir.keep();
          throw Error(fmt::format("{} ({} clients): {}; server output ({}):\n{}",
                                  subjects[k].label, n, e.what(), logs[k], tail(logs[k], 10)));
        }
        if (!recorded) continue;
        ops[k].samples.push_back(static_cast<double>(r.ops) / r.seconds);
        p99[k].samples.push_back(percentile(r.latencies_us, 99));
        p50[k].samples.push_back(percentile(r.latencies_us, 50));
        const double per_op = 1e6 / static_cast<double>(std::max<std::uint64_t>(r.ops, 1));
        server_cpu[k].samples.push_back(r.server_cpu_s * per_op);
        client_cpu[k].samples.push_back(r.client_cpu_s * per_op);
      }
    });
    for (auto& server : servers) {
      server->signal(SIGTERM);
      (void)server->wait_for(std::chrono::seconds(5));
    }
    if (n == 64 && subjects.size() > 1) {
      ops[0].target_vs = subjects[1].label;
      ops[0].target_ratio = 2;
      ops[0].target_text = ">= 2x c10d's throughput at 64 clients";
    }
    for (const auto* rows : {&ops, &p99, &p50, &server_cpu, &client_cpu}) {
      for (const auto& s : *rows) append_series(common.results, s);
    }
  }
}

namespace {

class DdprunClient final : public LoadClient {
 public:
  explicit DdprunClient(std::uint16_t port) : client_(options(port), Deadline::after(std::chrono::seconds(20))) {}
  void set(const std::string& key, const std::string& value) override {
    client_.set(key, value, op());
  }
  std::string get(const std::string& key) override { return client_.get(key, op()); }
  std::int64_t add(const std::string& key, std::int64_t delta) override {
    return client_.add(key, delta, op());
  }

 private:
  static store::StoreClientOptions options(std::uint16_t port) {
    store::StoreClientOptions o;
    o.host = "127.0.0.1";
    o.port = port;
    o.run_id = "bench";
    return o;
  }
  static Deadline op() { return Deadline::after(std::chrono::seconds(30)); }
  store::TcpStoreClient client_;
};

}  // namespace

StoreSubject ddprun_subject(const std::string& store_binary) {
  StoreSubject s;
  s.label = "ddprun store";
  s.server = [store_binary](std::uint16_t port) {
    return std::vector<std::string>{store_binary, "--host", "127.0.0.1", "--port",
                                    std::to_string(port), "--log-level", "warn"};
  };
  s.connect = [](std::uint16_t port) -> std::unique_ptr<LoadClient> {
    return std::make_unique<DdprunClient>(port);
  };
  return s;
}

}  // namespace ddprun::bench
