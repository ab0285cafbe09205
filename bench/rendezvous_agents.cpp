#include "bench/rendezvous_agents.hpp"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "bench/sys_util.hpp"
#include "common/error.hpp"
#include "etcd/etcd_store.hpp"
#include "rendezvous/elastic_rendezvous.hpp"
#include "store/tcp_store_client.hpp"
#include "testing/child.hpp"

namespace ddprun::bench {
namespace {

using namespace std::chrono_literals;

constexpr std::size_t kStackBytes = 256 * 1024;

// The agent threads and their clients. Whatever fails, stop() interrupts every client, so
// that no thread waits out the join timeout; the destructor joins them all.
class Agents {
 public:
  explicit Agents(int n) : clients_(static_cast<std::size_t>(n)) {
    threads_.reserve(static_cast<std::size_t>(n));
  }
  ~Agents() {
    stop();
    join();
  }
  Agents(const Agents&) = delete;
  Agents& operator=(const Agents&) = delete;

  void start(const std::function<void(int)>& body) {
    threads_.emplace_back(body, static_cast<int>(threads_.size()));
  }
  // Keeps client i (i = -1: the release client) so that stop() can interrupt it.
  store::Store& hold(int i, std::unique_ptr<store::Store> client) {
    std::lock_guard lock(mutex_);
    auto& slot = i < 0 ? sync_ : clients_[static_cast<std::size_t>(i)];
    slot = std::move(client);
    if (stopped_) slot->interrupt();
    return *slot;
  }
  // An agent: counts itself ready and waits for the release; false when stopped.
  bool ready_and_wait() {
    std::unique_lock lock(mutex_);
    ++ready_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return go_ || stopped_; });
    return !stopped_;
  }
  // True when all are ready, false when something failed first.
  bool wait_all_ready(int n) {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return ready_ == n || stopped_; });
    return !stopped_;
  }
  void release() {
    std::lock_guard lock(mutex_);
    go_ = true;
    cv_.notify_all();
  }
  void stop() {
    std::lock_guard lock(mutex_);
    if (stopped_) return;
    stopped_ = true;
    for (auto& c : clients_) {
      if (c) c->interrupt();
    }
    if (sync_) sync_->interrupt();
    cv_.notify_all();
  }
  void join() {
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int ready_ = 0;
  bool go_ = false;
  bool stopped_ = false;
  std::vector<std::unique_ptr<store::Store>> clients_;
  std::unique_ptr<store::Store> sync_;
  std::vector<std::thread> threads_;
};

}  // namespace

std::unique_ptr<store::Store> connect_store(const StoreTarget& target, const std::string& run_id,
                                     Deadline deadline) {
  if (!target.etcd.empty()) {
    EtcdStoreOptions o;
    o.endpoints = parse_etcd_endpoints(target.etcd, "--etcd");
    o.prefix = "/ddprun-bench";
    o.run_id = run_id;
    return std::make_unique<EtcdStore>(o, deadline);
  }
  store::StoreClientOptions o;
  o.host = "127.0.0.1";
  o.port = target.port;
  o.run_id = run_id;
  return std::make_unique<store::TcpStoreClient>(o, deadline);
}

int run_agent_process(const AgentProcessOptions& o) {
  // join_round logs two lines per agent at info; a real agent would too, in its own process,
  // but thousands of agents writing to one log would measure the log.
  spdlog::set_level(spdlog::level::warn);
  // Every thread of this process (the agents', and any a client starts) gets a small stack.
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, kStackBytes);
  pthread_setattr_default_np(&attr);
  pthread_attr_destroy(&attr);
  raise_nofile(kFdsPerAgent * o.count + 100);

  ElasticRendezvousOptions options;
  options.min_nodes = o.total;
  options.max_nodes = o.total;
  options.join_timeout = 120s;
  options.last_call_timeout = 30s;
  options.read_timeout = 120s;

  std::vector<double> done(static_cast<std::size_t>(o.count), 0);
  std::vector<int> ranks(static_cast<std::size_t>(o.count), -1);
  std::mutex error_mutex;
  std::string first_error;
  auto fail = [&](const std::string& message) {
    std::lock_guard lock(error_mutex);
    if (first_error.empty()) first_error = message;
  };
  {
    Agents agents(o.count);
    for (int i = 0; i < o.count; ++i) {
      agents.start([&](int k) {
        try {
          auto& store = agents.hold(k, connect_store(o.target, o.run_id, Deadline::after(120s)));
          if (!agents.ready_and_wait()) return;
          ElasticNode self;
          self.id = fmt::format("bench-agent-{}:{}", getpid(), o.first + k);
          self.host = "127.0.0.1";
          self.nproc = 1;
          auto r = join_round(store, 0, self, options);
          done[static_cast<std::size_t>(k)] = test::mono_now();
          ranks[static_cast<std::size_t>(k)] = r.member ? r.ranks.group_rank : -2;
        } catch (const std::exception& e) {
          fail(fmt::format("agent {} of {}: {}", o.first + k, o.total, e.what()));
          agents.stop();
        }
      });
    }
    try {
      auto& sync = agents.hold(-1, connect_store(o.target, o.run_id + "-sync", Deadline::after(120s)));
      if (agents.wait_all_ready(o.count)) {
        if (sync.add("ready", o.count, Deadline::after(30s)) == o.total) {
          sync.set("all_ready", "1", Deadline::after(30s));
        }
        (void)sync.get("go", Deadline::after(180s));
        agents.release();
      }
    } catch (const std::exception& e) {
      fail(fmt::format("agent process {}..{}: {}", o.first, o.first + o.count - 1, e.what()));
      agents.stop();
    }
    agents.join();
  }
  if (!first_error.empty()) {
    std::printf("ERROR %s\n", first_error.c_str());
    return 1;
  }
  std::ofstream out(o.ranks_file);
  for (int r : ranks) out << r << '\n';
  std::printf("RESULT %.9f\n", *std::max_element(done.begin(), done.end()));
  // The process's peak resident memory: every agent's client, thread and buffers were alive
  // at once (all joined the same round), so this is what `count` agents cost together.
  std::printf("PEAK_RSS_KIB %ld\n", status_kib(getpid(), "VmHWM"));
  return 0;
}

}  // namespace ddprun::bench
