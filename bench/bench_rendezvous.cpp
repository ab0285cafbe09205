// bench_rendezvous: figure 6, the elastic rendezvous at scale. N simulated agents, each a
// thread of this process with its own TcpStoreClient (a real connection), run the real
// protocol (agent/elastic_rendezvous.hpp join_round) against one ddprun-store in another
// process, with --nnodes=N:N, so the round closes when the N-th joins. Timed from the moment
// all N (already connected) are released: when the round's "closed" record appears (seen by
// one extra watcher connection), and when the last agent has its rank.
//
// Thousands of threads on 2 cores: every thread of this process (the agents', and the resolver
// thread Asio starts per client) gets a 256 KiB stack, and RLIMIT_NOFILE is raised.

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "agent/elastic_rendezvous.hpp"
#include "bench/bench_cli.hpp"
#include "bench/process.hpp"
#include "bench/sys_util.hpp"
#include "common/error.hpp"
#include "rendezvous/tcp_store_client.hpp"

using namespace ddprun;
using namespace ddprun::bench;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t kStackBytes = 256 * 1024;

struct RunTimes {
  double connect_s = 0;  // all N clients connected (threads started in parallel)
  double closed_s = 0;   // release to the round's "closed" record
  double all_s = 0;      // release to the last agent holding its rank
};

std::unique_ptr<TcpStoreClient> connect(std::uint16_t port, const std::string& run_id) {
  StoreClientOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.run_id = run_id;
  return std::make_unique<TcpStoreClient>(o, Deadline::after(120s));
}

RunTimes run_once(int n, std::uint16_t port, const std::string& run_id) {
  ElasticRendezvousOptions options;
  options.min_nodes = n;
  options.max_nodes = n;
  options.join_timeout = 300s;
  options.last_call_timeout = 30s;
  options.read_timeout = 300s;

  std::mutex mutex;
  std::condition_variable cv;
  int connected = 0;
  bool go = false;
  std::vector<double> done(static_cast<std::size_t>(n), 0);
  std::vector<int> ranks(static_cast<std::size_t>(n), -1);
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(n));
  const double connect_start = mono_now();
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      const auto idx = static_cast<std::size_t>(i);
      try {
        auto store = connect(port, run_id);
        {
          std::unique_lock lock(mutex);
          ++connected;
          cv.notify_all();
          cv.wait(lock, [&] { return go; });
        }
        ElasticNode self;
        self.id = fmt::format("bench-agent-{}:{}", getpid(), i);
        self.host = "127.0.0.1";
        self.nproc = 1;
        auto r = join_round(*store, 0, self, options);
        done[idx] = mono_now();
        ranks[idx] = r.member ? r.ranks.group_rank : -2;
      } catch (const std::exception& e) {
        errors[idx] = e.what();
        std::lock_guard lock(mutex);
        ++connected;  // so that the release never waits for a thread that failed
        cv.notify_all();
      }
    });
  }
  auto watcher = connect(port, run_id);
  {
    std::unique_lock lock(mutex);
    cv.wait(lock, [&] { return connected == n; });
  }
  RunTimes t;
  const double start = mono_now();
  t.connect_s = start - connect_start;
  {
    std::lock_guard lock(mutex);
    go = true;
  }
  cv.notify_all();
  (void)watcher->get(round_key(0, "closed"), Deadline::after(300s));
  t.closed_s = mono_now() - start;
  for (auto& th : threads) th.join();
  for (int i = 0; i < n; ++i) {
    if (!errors[static_cast<std::size_t>(i)].empty()) {
      throw Error(fmt::format("agent {} of {}: {}", i, n, errors[static_cast<std::size_t>(i)]));
    }
  }
  auto sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < n; ++i) {
    if (sorted[static_cast<std::size_t>(i)] != i) {
      throw Error(fmt::format("{} agents: group ranks are not 0..{} (rank {} at position {})", n,
                              n - 1, sorted[static_cast<std::size_t>(i)], i));
    }
  }
  t.all_s = *std::max_element(done.begin(), done.end()) - start;
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_rendezvous: figure 6, N simulated agents joining one elastic round"};
  CommonOptions common;
  std::string store_binary;
  std::vector<int> agents{256, 1024, 4096};
  add_common_options(app, common);
  app.add_option("--store", store_binary, "the ddprun-store binary")->required();
  app.add_option("--agents", agents, "agent counts")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return guarded_main("bench_rendezvous", [&] {
    // join_round logs two lines per agent at info; one agent per process would log them too,
    // but 4096 agents writing to one stderr would measure the terminal.
    spdlog::set_level(spdlog::level::warn);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, kStackBytes);
    pthread_setattr_default_np(&attr);
    pthread_attr_destroy(&attr);
    const int most = *std::max_element(agents.begin(), agents.end());
    // Per client: its socket, and the epoll and event fds of its io_context.
    const long limit = raise_nofile(4L * most + 200);
    TempDir dir("rendezvous");
    for (int n : agents) {
      if (limit < 4L * n + 100) {
        throw Error(fmt::format("{} agents need about {} file descriptors; RLIMIT_NOFILE allows {}",
                                n, 4L * n + 100, limit));
      }
      Series all, closed, conn;
      all.figure = closed.figure = conn.figure = 6;
      all.case_name = closed.case_name = conn.case_name = fmt::format("{} agents", n);
      all.subject = closed.subject = conn.subject = "ddprun";
      all.unit = closed.unit = conn.unit = "s";
      all.metric = "release to every agent holding its rank";
      all.note = "the figure: join_round returned in all N threads";
      if (n == 4096) {
        all.target_max = 3;
        all.target_text = "4096 agents in <= 3 s on 2 cores";
      }
      closed.metric = "release to the round closed";
      closed.note = "the N-th join closed the round (a watcher's get of r/0/closed)";
      conn.metric = "connecting N clients (before the release)";
      conn.note = "N threads connecting at once; not part of the figure";
      repeat(common, [&](int i, bool recorded) {
        const auto port = free_port();
        const auto log = dir.file(fmt::format("store-{}-{}.log", n, i));
        Child server({{store_binary, "--host", "127.0.0.1", "--port", std::to_string(port),
                       "--log-level", "warn"}, {}, log});
        RunTimes t;
        try {
          t = run_once(n, port, fmt::format("bench{}", i));
        } catch (const std::exception& e) {
          dir.keep();
          throw Error(fmt::format("{}; store output ({}):\n{}", e.what(), log, tail(log, 10)));
        }
        server.signal(SIGTERM);
        (void)server.wait_for(10s);
        if (!recorded) return;
        all.samples.push_back(t.all_s);
        closed.samples.push_back(t.closed_s);
        conn.samples.push_back(t.connect_s);
      });
      for (const auto* s : {&all, &closed, &conn}) append_series(common.results, *s);
    }
  });
}
