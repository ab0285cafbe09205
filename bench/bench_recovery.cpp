// bench_recovery: figure 12, recovery at scale. N real launcher agents on 127.0.0.1, one process
// per simulated node, each with --workers bench_workers that sleep; the job's last rank blocks
// opening a FIFO until the harness opens it, then exits 3 (--max-restarts=1). Recovery is the
// time from that worker's own CLOCK_MONOTONIC stamp before its exit to the last worker of the
// next attempt stamping its start: every rank of the job running again. With --node-death an
// elastic job's last agent is SIGKILLed instead (the harness stamps the moment), and the time
// runs until every survivor's workers run again.
//
// The harness learns of the stamps through inotify (IN_CLOSE_WRITE on the stamp directory), so
// it spends no CPU polling while 1,024 agents share the machine's cores. For ddprun it then
// reads the agents' --events-file: when each agent knew of the failure (attempt_decided), agreed
// on the root cause (restart) and started its workers, and the agent's own CPU time at each
// event (`cpu`), from which come the CPU one recovery costs an agent and the store's host.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <memory>
#include <random>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "bench/bench_cli.hpp"
#include "bench/etcd_harness.hpp"
#include "bench/sys_util.hpp"
#include "common/error.hpp"
#include "common/failure_record.hpp"
#include "testing/child.hpp"

using namespace ddprun;
using namespace ddprun::bench;
using namespace std::chrono_literals;

namespace {

struct Options {
  CommonOptions common;
  std::string launcher;  // the ddprun binary, or the Python interpreter for torchrun
  std::string worker;
  std::string backend = "static";  // static, c10d, etcd; torchrun always uses c10d
  bool torchrun = false;
  std::string monitor_interval;  // torchrun: "" keeps its default (5 s)
  std::vector<int> nodes{2, 16};
  int workers = 1;
  int etcd_members = 3;
  bool node_death = false;
  // keep_alive_interval, seconds: the default's 5 s, so that no wave of the job's beats (every
  // node beats in step with the others) falls between the failure and the restart, where it
  // would count as the recovery's own work. --node-death gives its own.
  double interval = 5;
  int attempts = 3;     // keep_alive_max_attempt
  double last_call = 0.1;
  double settle = 1.5;  // seconds between every worker running and the failure
};

// The stamp files written (closed after writing) in one directory since the last clear(),
// learnt from inotify: the harness sleeps in poll() while the agents work.
class StampWatcher {
 public:
  explicit StampWatcher(const std::string& dir) : dir_(dir) {
    fd_ = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    if (fd_ < 0 || inotify_add_watch(fd_, dir.c_str(), IN_CLOSE_WRITE) < 0) {
      throw Error(fmt::format("inotify on {}: {}", dir, errno_message(errno)));
    }
  }
  ~StampWatcher() { close(fd_); }
  StampWatcher(const StampWatcher&) = delete;
  StampWatcher& operator=(const StampWatcher&) = delete;

  void clear() {
    drain();
    names_.clear();
  }

  // Waits until `count` distinct files named `prefix`* were written since clear(); returns
  // their paths. `what` goes into the timeout's message.
  std::vector<std::string> wait(const std::string& prefix, std::size_t count,
                                std::chrono::milliseconds timeout, const std::string& what) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      drain();
      std::vector<std::string> seen;
      for (const auto& n : names_) {
        if (n.rfind(prefix, 0) == 0) seen.push_back(dir_ + "/" + n);
      }
      if (seen.size() >= count) return seen;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left <= 0ms) {
        throw TimeoutError(fmt::format("{}: {} of {} workers stamped {}* in {} s", what,
                                       seen.size(), count, prefix, timeout.count() / 1000));
      }
      pollfd p{fd_, POLLIN, 0};
      (void)poll(&p, 1, static_cast<int>(std::min<long>(left.count(), 1000)));
    }
  }

 private:
  void drain() {
    alignas(inotify_event) std::array<char, 65536> buf{};
    while (true) {
      const auto n = read(fd_, buf.data(), buf.size());
      if (n <= 0) return;
      for (std::size_t off = 0; off < static_cast<std::size_t>(n);) {
        const auto* e = reinterpret_cast<const inotify_event*>(buf.data() + off);
        if ((e->mask & IN_Q_OVERFLOW) != 0) {
          throw Error("inotify's queue overflowed (raise /proc/sys/fs/inotify/max_queued_events)");
        }
        if (e->len > 0) names_.insert(e->name);
        off += sizeof(inotify_event) + e->len;
      }
    }
  }

  std::string dir_;
  int fd_ = -1;
  std::set<std::string> names_;
};

double stamp_value(const std::string& path) {
  const auto text = read_text(path);
  if (text.empty()) throw Error(fmt::format("stamp {} is empty", path));
  return std::strtod(text.c_str(), nullptr);
}

// The first event named `name` at or after `after` (CLOCK_MONOTONIC), or null.
nlohmann::json first_after(const std::vector<nlohmann::json>& events, const std::string& name,
                           double after) {
  for (const auto& e : events) {
    if (e.value("event", "") == name && e.value("mono", 0.0) >= after) return e;
  }
  return nullptr;
}

std::string subject_of(const Options& o) {
  if (o.torchrun) {
    return o.monitor_interval.empty()
               ? "torchrun 1.13, c10d, default --monitor_interval (5 s)"
               : fmt::format("torchrun 1.13, c10d, --monitor_interval {}", o.monitor_interval);
  }
  if (o.node_death) {
    return fmt::format("ddprun, {}, node death (an agent SIGKILLed; keep-alive {:g} s x {})",
                       o.backend == "etcd" ? fmt::format("etcd ({} members)", o.etcd_members)
                                           : o.backend,
                       o.interval, o.attempts);
  }
  if (o.backend == "static") return "ddprun, static (store on node 0)";
  if (o.backend == "etcd") return fmt::format("ddprun, etcd ({} members)", o.etcd_members);
  return "ddprun, c10d";
}

// One job of N agents, started and watched until every worker runs.
class Job {
 public:
  Job(const Options& o, int nodes, int run, const std::string& dir, const EtcdCluster* etcd)
      : o_(o), nodes_(nodes), dir_(dir), stamps_dir_(dir + "/stamps"), fifo_(dir + "/fail") {
    std::filesystem::create_directories(stamps_dir_);
    if (mkfifo(fifo_.c_str(), 0600) != 0) {
      throw Error(fmt::format("mkfifo {}: {}", fifo_, errno_message(errno)));
    }
    watcher_ = std::make_unique<StampWatcher>(stamps_dir_);
    const auto port = free_port();
    std::mt19937_64 rng(std::random_device{}());
    const auto run_id = fmt::format("recovery-{:x}-{}", rng(), run);
    for (int k = 0; k < nodes; ++k) {
      events_.push_back(fmt::format("{}/events{}.jsonl", dir, k));
      logs_.push_back(fmt::format("{}/agent{}.log", dir, k));
      agents_.push_back(std::make_unique<test::Child>(test::SpawnSpec{
          command(k, port, run_id, etcd), {{"BENCH_STAMP_DIR", stamps_dir_}}, logs_.back()}));
      // c10d: the first agent binds the endpoint and serves the store, so that the store's host
      // is known (agent 0) and is never the one killed.
      if (k == 0 && o.backend == "c10d" && !o.torchrun) {
        await_event(events_[0], "rendezvous_started", [](const auto&) { return true; }, 30s,
                    logs_[0]);
      }
    }
    const auto world = static_cast<std::size_t>(nodes * o.workers);
    watcher_->wait("start.", world, std::chrono::milliseconds(60'000 + nodes * 200),
                   fmt::format("{} agents starting ({})", nodes, logs_.front()));
    if (elastic()) wait_formed(std::chrono::milliseconds(60'000 + nodes * 200));
  }

  // A ddprun agent's orphan guard ends its workers and removes its control socket when the
  // agent is killed, so only the agent is; torchrun's workers share its process group.
  ~Job() {
    for (auto& a : agents_) o_.torchrun ? a->signal_group(SIGKILL) : a->signal(SIGKILL);
    for (auto& a : agents_) (void)a->wait_for(30s);
  }

  int nodes() const { return nodes_; }
  pid_t pid(int k) const { return agents_[static_cast<std::size_t>(k)]->pid(); }
  const std::string& events(int k) const { return events_[static_cast<std::size_t>(k)]; }

  // Makes the last rank fail now; returns its own stamp of the moment it exits.
  double fail() {
    watcher_->clear();
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    int fd = -1;
    // The worker stamps its start before it opens the FIFO for reading: until it has, opening
    // the other end without blocking fails with ENXIO.
    while ((fd = open(fifo_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC)) < 0) {
      if (errno != ENXIO || std::chrono::steady_clock::now() > deadline) {
        throw Error(fmt::format("open {} for writing: {}", fifo_, errno_message(errno)));
      }
      std::this_thread::sleep_for(1ms);
    }
    close(fd);
    const auto exit_stamp = watcher_->wait("exit.", 1, 30s, "the failing worker's exit");
    return stamp_value(exit_stamp.front());
  }

  // SIGKILLs the last agent now; returns the moment, taken just before.
  double kill_last() {
    watcher_->clear();
    const double now = test::mono_now();
    agents_.back()->signal(SIGKILL);
    return now;
  }

  // Waits until `workers` distinct ranks have started since fail() or kill_last(); returns the
  // last of their start stamps. ddprun's restarted workers stamp start.1.<rank>; torchrun's
  // healthy agents restart theirs with restart count 0, and an elastic round names its ranks
  // anew, so there any start stamp counts, less a stale one (written before the failure, seen
  // after it).
  double await_running(std::size_t workers, double since) {
    const auto prefix = o_.torchrun || o_.node_death ? "start." : "start.1.";
    const auto timeout = std::chrono::milliseconds(120'000 + nodes_ * 100);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::size_t wanted = workers;
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      const auto paths = watcher_->wait(prefix, wanted, std::max(left, 1ms),
                                        fmt::format("recovery of {} agents ({})", nodes_,
                                                    logs_.back()));
      double last = 0;
      std::size_t fresh = 0;
      for (const auto& p : paths) {
        const double v = stamp_value(p);
        if (v < since) continue;
        ++fresh;
        last = std::max(last, v);
      }
      if (fresh >= workers) return last;
      wanted = paths.size() + (workers - fresh);
    }
  }

  // Every agent's events once `name` has appeared after `after` in each (bounded wait: the
  // agent writes it right after its workers start).
  std::vector<std::vector<nlohmann::json>> events_with(const std::string& name, double after,
                                                       int agents) {
    std::vector<std::vector<nlohmann::json>> all;
    for (std::size_t k = 0; k < static_cast<std::size_t>(agents); ++k) {
      await_event(events_[k], name,
                  [after](const nlohmann::json& e) { return e.value("mono", 0.0) >= after; },
                  30s, logs_[k]);
      all.push_back(read_json_lines(events_[k]));
    }
    return all;
  }

 private:
  bool elastic() const { return !o_.torchrun && o_.backend != "static"; }

  std::vector<std::string> command(int k, std::uint16_t port, const std::string& run_id,
                                   const EtcdCluster* etcd) const {
    const int world = nodes_ * o_.workers;
    const auto nnodes = o_.node_death ? fmt::format("{}:{}", std::max(1, nodes_ - 1), nodes_)
                                      : std::to_string(nodes_);
    const auto endpoint = etcd ? etcd->endpoints() : fmt::format("127.0.0.1:{}", port);
    std::vector<std::string> argv;
    if (o_.torchrun) {
      argv = {o_.launcher, "-m", "torch.distributed.run", "-r", "1", "-t", "1",
              fmt::format("--nproc_per_node={}", o_.workers), "--nnodes=" + nnodes,
              "--rdzv_backend=c10d", "--rdzv_endpoint=" + endpoint, "--rdzv_id=" + run_id,
              "--max_restarts=1"};
      if (!o_.monitor_interval.empty()) {
        argv.insert(argv.end(), {"--monitor_interval", o_.monitor_interval});
      }
      argv.push_back("--no_python");
    } else {
      argv = {o_.launcher, fmt::format("--nproc-per-node={}", o_.workers), "--nnodes=" + nnodes,
              "--max-restarts=1", "--events-file", events_[static_cast<std::size_t>(k)]};
      if (o_.backend == "static") {
        argv.insert(argv.end(), {fmt::format("--node-rank={}", k), "--master-addr=127.0.0.1",
                                 fmt::format("--master-port={}", port)});
      } else {
        argv.insert(argv.end(),
                    {"--rdzv-backend=" + o_.backend, "--rdzv-endpoint=" + endpoint,
                     "--rdzv-id=" + run_id, "--local-addr=127.0.0.1",
                     fmt::format("--rdzv-conf=join_timeout=900,last_call_timeout={},"
                                 "keep_alive_interval={},keep_alive_max_attempt={}",
                                 o_.last_call, o_.interval, o_.attempts)});
      }
      argv.push_back("--no-python");
    }
    argv.insert(argv.end(), {o_.worker, "--sleep=3600", fmt::format("--fail-once-rank={}", world - 1),
                             "--fail-when-opened=" + fifo_});
    return argv;
  }

  // Elastic: a round may close with fewer nodes than were started (one joins late, and the
  // round re-forms); wait until every agent's last round holds the whole world and its workers
  // run. Read every 200 ms: this is the job's start, not what is timed.
  void wait_formed(std::chrono::milliseconds timeout) {
    const int world = nodes_ * o_.workers;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      int ready = 0;
      for (const auto& path : events_) {
        int round = -1;
        bool started = false;
        for (const auto& e : read_json_lines(path)) {
          const auto name = e.value("event", "");
          if (name == "rendezvous_completed") {
            round = e.value("world_size", 0) == world ? e.value("round", 0) : -1;
            started = false;
          } else if (name == "workers_started" && round >= 0) {
            started = true;
          }
        }
        ready += started ? 1 : 0;
      }
      if (ready == nodes_) return;
      if (std::chrono::steady_clock::now() > deadline) {
        throw TimeoutError(fmt::format("{} of {} agents in a round of {} workers after {} s ({})",
                                       ready, nodes_, world, timeout.count() / 1000,
                                       logs_.front()));
      }
      std::this_thread::sleep_for(200ms);
    }
  }

  const Options& o_;
  int nodes_;
  std::string dir_, stamps_dir_, fifo_;
  std::unique_ptr<StampWatcher> watcher_;
  std::vector<std::string> events_, logs_;
  std::vector<std::unique_ptr<test::Child>> agents_;
};

Series make_series(const Options& o, int nodes, const std::string& metric, const std::string& unit,
                   const std::string& note) {
  Series s;
  s.figure = 12;
  s.case_name = fmt::format("{} nodes", nodes);
  s.metric = metric;
  s.subject = subject_of(o);
  s.unit = unit;
  s.note = note;
  s.compare_with = "none";
  return s;
}

constexpr const char* kRecovery = "failure to every worker running again";
constexpr int kDetailFrom = 256;

void set_targets(const Options& o, int nodes, Series& recovery, Series& agent_cpu,
                 Series& host_cpu, Series& agent_own, Series& host_own) {
  if (o.torchrun) return;
  if (o.node_death) {
    const double deadline = o.interval * o.attempts;
    if (nodes == 1024) {
      recovery.target_max = deadline + 2;
      recovery.target_text = fmt::format("<= keep-alive deadline + 2 s = {:g} s", deadline + 2);
    }
    return;
  }
  const double scale = o.backend == "etcd" ? 2 : 1;
  if (nodes == 256 || nodes == 1024) {
    const double limit = (nodes == 256 ? 2.0 : 6.0) * scale;
    recovery.target_max = limit;
    recovery.target_text = fmt::format("<= {:g} s{}", limit, scale > 1 ? " (2x static/c10d)" : "");
  }
  // torchrun runs at 2, 8 and 16 nodes, with the c10d backend: the same job as ddprun's c10d.
  if (o.backend == "c10d" && nodes <= 16) {
    recovery.compare_with = "torchrun 1.13, c10d, --monitor_interval 0.1";
  }
  if (nodes == 16 && o.backend == "c10d") {
    recovery.target_vs = recovery.compare_with;
    recovery.target_ratio = 20;
    recovery.target_text = ">= 20x faster than torchrun --monitor_interval 0.1";
  }
  if (nodes == 1024) {
    agent_cpu.target_max = agent_own.target_max = 2;
    agent_cpu.target_text = "<= 2 ms per agent";
    agent_own.target_text = "<= 2 ms per agent, less the steady state";
    if (o.backend != "etcd") {
      host_cpu.target_max = host_own.target_max = 50;
      host_cpu.target_text = "<= 50 us per node";
      host_own.target_text = "<= 50 us per node, less the steady state";
    }
  }
}

void measure(const Options& o, int nodes, const EtcdCluster* etcd) {
  const auto survivors = o.node_death ? nodes - 1 : nodes;
  auto recovery = make_series(
      o, nodes, kRecovery, "s",
      o.node_death ? "the SIGKILL (harness clock) to the last survivor's worker stamping its start"
                   : "the failing worker's exit stamp to the last worker of the next attempt "
                     "stamping its start");
  auto news = make_series(o, nodes, "failure known to every agent", "s",
                          "the last agent's attempt_decided");
  auto agreed = make_series(o, nodes, "root cause agreed by every agent", "s",
                            "the last agent's restart event");
  auto started = make_series(o, nodes, "every agent's workers started", "s",
                             "the last agent's workers_started of the next attempt");
  auto agent_cpu = make_series(o, nodes, "agent CPU per recovery", "ms",
                               "median agent (not the store's host): its `cpu` at workers_started "
                               "of the next attempt minus at attempt_decided");
  auto agent_cpu_max = make_series(o, nodes, "agent CPU per recovery, the most", "ms",
                                   "the agent that spent the most, store's host excepted");
  auto host_cpu = make_series(o, nodes, "store host CPU per node", "us",
                              o.backend == "etcd"
                                  ? "the etcd members' CPU from the failure to every worker "
                                    "running, divided by N"
                                  : "node 0's CPU (its threads' schedstat) from the failure to "
                                    "every worker running, less the median agent's, divided by N");
  // The job's background (beats, lease renewals, status records) goes on through a recovery
  // as before it; what the recovery itself costs is the rest. The background's rate is taken
  // over the settle time before the failure, from the same processes.
  auto agent_own = make_series(o, nodes, "agent CPU per recovery, less the steady state", "ms",
                               "the median agent's CPU per recovery less its own CPU per second "
                               "over the settle time before the failure, times its recovery's "
                               "length");
  auto host_own = make_series(
      o, nodes, "store host CPU per node, less the steady state", "us",
      o.backend == "etcd"
          ? "the etcd members' CPU per recovery less their CPU per second over the settle time "
            "before the failure times the recovery's length, divided by N"
          : "node 0's CPU per recovery less its CPU per second over the settle time before the "
            "failure times the recovery's length, and less the median agent's own, divided by N");
  auto host_rss = make_series(o, nodes, "store host resident memory", "MiB",
                              o.backend == "etcd" ? "the etcd members' VmRSS, summed"
                                                  : "node 0's VmRSS after the recovery");
  set_targets(o, nodes, recovery, agent_cpu, host_cpu, agent_own, host_own);
  TempDir dir("recovery");
  // One run; false when the job re-formed around the failure (an agent taken for dead under
  // this machine's load: a membership change), which measures something else.
  const auto run_once = [&](int i, int attempt, bool recorded) {
    const auto run_dir = dir.file(fmt::format("run{}-{}", i, attempt));
    std::filesystem::create_directories(run_dir);
    Job job(o, nodes, i, run_dir, etcd);
    // The store's host: node 0's threads (static, c10d), or the etcd members, from just before
    // the failure to every worker running again.
    std::vector<pid_t> hosts;
    if (etcd) {
      for (int m = 0; m < etcd->size(); ++m) hosts.push_back(etcd->pid(m));
    } else {
      hosts.push_back(job.pid(0));
    }
    const auto host_cpu_now = [&] {
      double sum = 0;
      for (const auto pid : hosts) sum += process_cpu_s(pid);
      return sum;
    };
    const auto agents_cpu_now = [&] {
      std::vector<double> cpu;
      for (int k = 0; k < survivors; ++k) cpu.push_back(process_cpu_s(job.pid(k)));
      return cpu;
    };
    // The steady state, over the settle time.
    const double steady_from = test::mono_now();
    const double steady_host0 = host_cpu_now();
    const auto steady_agents0 = agents_cpu_now();
    std::this_thread::sleep_for(std::chrono::duration<double>(o.settle));
    const auto steady_agents1 = agents_cpu_now();
    const double host_cpu0 = host_cpu_now();
    const double window_from = test::mono_now();
    const double steady_s = window_from - steady_from;
    const double host_rate = (host_cpu0 - steady_host0) / steady_s;
    const double failed = o.node_death ? job.kill_last() : job.fail();
    const double running = job.await_running(static_cast<std::size_t>(survivors * o.workers), failed);
    const double host = host_cpu_now() - host_cpu0;
    const double window_s = test::mono_now() - window_from;
    double rss = 0;
    for (const auto pid : hosts) rss += static_cast<double>(status_kib(pid, "VmRSS")) / 1024;
    if (!recorded) return true;
    if (o.torchrun) {
      recovery.samples.push_back(running - failed);
      return true;
    }
    const auto all = job.events_with("workers_started", failed, survivors);
    double last_news = 0, last_agreed = 0, last_started = 0;
    std::vector<double> cpus, own;
    for (int k = 0; k < survivors; ++k) {
      const auto& ev = all[static_cast<std::size_t>(k)];
      const auto decided = first_after(ev, "attempt_decided", failed);
      const auto begun = first_after(ev, "workers_started", failed);
      if (decided.is_null()) throw Error(fmt::format("no attempt_decided in {}", job.events(k)));
      const auto kind = decided.contains("root_cause") && decided["root_cause"].is_object()
                            ? decided["root_cause"].value("kind", -1)
                            : -1;
      const auto expected = static_cast<int>(o.node_death ? Failure::Kind::kMembership
                                                          : Failure::Kind::kWorker);
      if (kind != expected || begun.at("mono").get<double>() < decided.at("mono").get<double>()) {
        return false;
      }
      last_news = std::max(last_news, decided.at("mono").get<double>());
      last_started = std::max(last_started, begun.at("mono").get<double>());
      const auto restart = first_after(ev, "restart", failed);
      if (!restart.is_null()) last_agreed = std::max(last_agreed, restart.at("mono").get<double>());
      const double cpu = (begun.value("cpu", 0.0) - decided.value("cpu", 0.0)) * 1e3;
      const auto kk = static_cast<std::size_t>(k);
      const double rate = (steady_agents1[kk] - steady_agents0[kk]) / steady_s;
      const double length = begun.at("mono").get<double>() - decided.at("mono").get<double>();
      if (k != 0 || etcd) {
        cpus.push_back(cpu);
        own.push_back(cpu - rate * length * 1e3);
      }
    }
    recovery.samples.push_back(running - failed);
    host_rss.samples.push_back(rss);
    news.samples.push_back(last_news - failed);
    if (last_agreed > 0) agreed.samples.push_back(last_agreed - failed);
    started.samples.push_back(last_started - failed);
    const double typical = cpus.empty() ? 0 : median(cpus);
    agent_cpu.samples.push_back(typical);
    agent_cpu_max.samples.push_back(cpus.empty() ? 0 : *std::max_element(cpus.begin(), cpus.end()));
    // Node 0's own agent did what the median agent did; the rest is the store's.
    host_cpu.samples.push_back((host * 1e3 - (etcd ? 0 : typical)) / nodes * 1e3);
    const double typical_own = own.empty() ? 0 : median(own);
    agent_own.samples.push_back(typical_own);
    host_own.samples.push_back(
        ((host - host_rate * window_s) * 1e3 - (etcd ? 0 : typical_own)) / nodes * 1e3);
    return true;
  };
  int repeated = 0;
  repeat(o.common, [&](int i, bool recorded) {
    constexpr int kTries = 3;
    for (int attempt = 0; attempt < kTries; ++attempt) {
      if (run_once(i, attempt, recorded)) return;
      ++repeated;
      std::fprintf(stderr, "bench_recovery: %s, %d nodes, run %d: the job re-formed around the "
                           "failure (a membership change, not the recovery measured); again\n",
                   recovery.subject.c_str(), nodes, i);
    }
    throw Error(fmt::format("{} runs in a row re-formed around the failure", kTries));
  });
  if (repeated > 0) {
    recovery.note += fmt::format(" ({} run(s) that re-formed around the failure were run again)",
                                 repeated);
  }
  append_series(o.common.results, recovery);
  // Where the time and the CPU go, from 256 nodes up: below that a per-node share of the
  // store's host is lost in its own agent's work, and the table would only grow.
  if (o.torchrun || nodes < kDetailFrom) return;
  for (auto* s : {&news, &agreed, &started, &agent_cpu, &agent_own, &agent_cpu_max, &host_cpu,
                  &host_own, &host_rss}) {
    if (!s->samples.empty()) append_series(o.common.results, *s);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_recovery: figure 12, one failure among N real agents"};
  Options o;
  add_common_options(app, o.common);
  app.add_option("--ddprun", o.launcher, "the ddprun binary");
  std::string python;
  app.add_option("--torchrun", python, "run torchrun with this Python (torch 1.13) instead");
  app.add_option("--monitor-interval", o.monitor_interval, "torchrun's --monitor_interval");
  app.add_option("--worker", o.worker, "the bench_worker binary")->required();
  app.add_option("--backend", o.backend, "static, c10d or etcd (ddprun)")
      ->check(CLI::IsMember({"static", "c10d", "etcd"}))
      ->capture_default_str();
  app.add_option("--nodes", o.nodes, "agents (simulated nodes), one series each")->expected(1, -1);
  app.add_option("--workers", o.workers, "workers per agent")->capture_default_str();
  app.add_option("--etcd-members", o.etcd_members, "etcd members (--backend=etcd)")
      ->capture_default_str();
  app.add_flag("--node-death", o.node_death,
               "SIGKILL the last agent of an elastic job instead of failing a worker");
  app.add_option("--interval", o.interval, "keep_alive_interval, seconds")->capture_default_str();
  app.add_option("--attempts", o.attempts, "keep_alive_max_attempt")->capture_default_str();
  app.add_option("--last-call", o.last_call, "last_call_timeout, seconds")->capture_default_str();
  app.add_option("--settle", o.settle, "seconds between every worker running and the failure")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return guarded_main("bench_recovery", [&] {
    if (!python.empty()) {
      o.torchrun = true;
      o.launcher = python;
      o.backend = "c10d";
    }
    if (o.launcher.empty()) throw Error("give --ddprun or --torchrun");
    if (o.node_death && (o.torchrun || o.backend == "static")) {
      throw Error("--node-death needs an elastic ddprun job (--backend=c10d or etcd)");
    }
    const int most = *std::max_element(o.nodes.begin(), o.nodes.end());
    // The harness holds a pidfd per agent; the store's host (an agent) inherits this limit and
    // needs a few connections per node.
    raise_nofile(static_cast<long>(most) * 8 + 1024);
    std::unique_ptr<EtcdCluster> etcd;
    if (o.backend == "etcd") etcd = start_etcd(o.etcd_members);
    for (const int n : o.nodes) {
      const double t0 = test::mono_now();
      measure(o, n, etcd.get());
      std::fprintf(stderr, "bench_recovery: %s, %d nodes: %.0f s\n", subject_of(o).c_str(), n,
                   test::mono_now() - t0);
    }
  });
}
