// bench_rendezvous: figure 6, the elastic rendezvous at scale. N simulated agents, each a
// thread with its own store client (a real connection), run the real protocol
// (rendezvous/elastic_rendezvous.hpp join_round) against one ddprun-store process (or, with
// --etcd-members, an etcd cluster on loopback: the etcd backend's store), with
// --nnodes=N:N, so the round closes when the N-th joins. The agents live in as few processes
// as RLIMIT_NOFILE allows (rendezvous_agents.hpp; one process up to ~3000 agents with a limit
// of 20000). Timed from the release of all N connected agents: until the round's "closed"
// record appears (seen by a watcher connection), and until the last agent has its rank.

#include <signal.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <sstream>

#include <fmt/format.h>

#include "bench/bench_cli.hpp"
#include "bench/etcd_harness.hpp"
#include "bench/rendezvous_agents.hpp"
#include "bench/sys_util.hpp"
#include "common/error.hpp"
#include "rendezvous/elastic_rendezvous.hpp"
#include "store/store.hpp"
#include "testing/child.hpp"


using namespace ddprun;
using namespace ddprun::bench;
using namespace std::chrono_literals;

namespace {

struct RunTimes {
  double connect_s = 0;  // agent processes started and all N clients connected
  double closed_s = 0;   // release to the round's "closed" record
  double all_s = 0;      // release to the last agent holding its rank
  int processes = 0;
  long agents_kib = 0;   // the agent processes' peak RSS, summed
};

std::unique_ptr<store::Store> connect(const StoreTarget& target, const std::string& run_id) {
  return connect_store(target, run_id, Deadline::after(60s));
}

struct Context {
  std::string self;
  StoreTarget target;
  std::string run_id;
  int per_process = 0;
  TempDir* dir = nullptr;
};

// Blocks in `call` (a store wait) in slices of one second, failing as soon as an agent process
// has exited; gives up after `limit`.
void await(const std::function<void(Deadline)>& call,
           std::vector<std::unique_ptr<test::Child>>& procs, const std::vector<std::string>& logs,
           std::chrono::seconds limit, const char* what) {
  const auto end = Clock::now() + limit;
  while (true) {
    try {
      call(Deadline::after(1s));
      return;
    } catch (const TimeoutError&) {
    }
    for (std::size_t p = 0; p < procs.size(); ++p) {
      if (procs[p]->wait_for(0ms)) {
        throw Error(fmt::format("agent process {} exited while waiting for {}:\n{}", p, what,
                                tail(logs[p], 5)));
      }
    }
    if (Clock::now() > end) throw TimeoutError(fmt::format("no {} after {} s", what, limit.count()));
  }
}

RunTimes run_once(const Context& c, int n) {
  RunTimes t;
  t.processes = (n + c.per_process - 1) / c.per_process;
  auto sync = connect(c.target, c.run_id + "-sync");
  auto watcher = connect(c.target, c.run_id);
  std::vector<std::unique_ptr<test::Child>> procs;
  std::vector<std::string> logs, rank_files;
  const double spawned = test::mono_now();
  for (int p = 0, first = 0; p < t.processes; ++p) {
    const int count = n / t.processes + (p < n % t.processes ? 1 : 0);
    logs.push_back(c.dir->file(fmt::format("{}-agents{}.log", c.run_id, p)));
    rank_files.push_back(c.dir->file(fmt::format("{}-ranks{}", c.run_id, p)));
    procs.push_back(std::make_unique<test::Child>(test::SpawnSpec{
        {c.self, "--agent-process", "--port", std::to_string(c.target.port), "--etcd",
         c.target.etcd, "--run-id", c.run_id,
         "--first", std::to_string(first), "--count", std::to_string(count), "--total",
         std::to_string(n), "--ranks-file", rank_files.back()},
        {}, logs.back()}));
    first += count;
  }
  await([&](Deadline d) { sync->wait({"all_ready"}, d); }, procs, logs, 180s, "all agents ready");
  const double start = test::mono_now();
  t.connect_s = start - spawned;
  sync->set("go", "1", Deadline::after(10s));
  await([&](Deadline d) { (void)watcher->get(news_key(0, "closed"), d); }, procs, logs, 180s,
        "the round to close");
  t.closed_s = test::mono_now() - start;
  double last = 0;
  std::vector<int> ranks;
  for (std::size_t p = 0; p < procs.size(); ++p) {
    const int code = test::exit_code(procs[p]->wait(180s));
    const auto out = read_text(logs[p]);
    const auto at = out.find("RESULT ");
    if (code != 0 || at == std::string::npos) {
      throw Error(fmt::format("agent process {} exited {}:\n{}", p, code, tail(logs[p], 5)));
    }
    last = std::max(last, std::strtod(out.c_str() + at + 7, nullptr));
    if (const auto rss = out.find("PEAK_RSS_KIB "); rss != std::string::npos) {
      t.agents_kib += std::strtol(out.c_str() + rss + 13, nullptr, 10);
    }
    std::ifstream in(rank_files[p]);
    for (int r = 0; in >> r;) ranks.push_back(r);
  }
  t.all_s = last - start;
  std::sort(ranks.begin(), ranks.end());
  for (int i = 0; i < n; ++i) {
    if (static_cast<int>(ranks.size()) != n || ranks[static_cast<std::size_t>(i)] != i) {
      throw Error(fmt::format("{} agents: the group ranks are not 0..{}", n, n - 1));
    }
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_rendezvous: figure 6, N simulated agents joining one elastic round"};
  CommonOptions common;
  std::string store_binary;
  std::vector<int> agents{256, 1024, 4096};
  bool agent_process = false;
  AgentProcessOptions ap;
  app.add_option("--results", common.results, "JSON-lines file the series are appended to");
  app.add_option("--runs", common.runs, "recorded runs per series")->capture_default_str();
  app.add_option("--warmup", common.warmup, "runs before those, not recorded")->capture_default_str();
  app.add_option("--store", store_binary, "the ddprun-store binary");
  app.add_option("--agents", agents, "agent counts")->capture_default_str();
  app.add_flag("--agent-process", agent_process, "(internal) run agents for a coordinator");
  int etcd_members = 0;
  app.add_option("--etcd-members", etcd_members,
                 "rendezvous over an etcd cluster of this many members on loopback (started "
                 "here) instead of a ddprun-store");
  app.add_option("--port", ap.target.port, "(internal) the store's port");
  app.add_option("--etcd", ap.target.etcd, "(internal) the etcd endpoints");
  app.add_option("--run-id", ap.run_id, "(internal) the rendezvous' run id");
  app.add_option("--first", ap.first, "(internal) first agent of this process");
  app.add_option("--count", ap.count, "(internal) agents in this process");
  app.add_option("--total", ap.total, "(internal) agents in all");
  app.add_option("--ranks-file", ap.ranks_file, "(internal) where the group ranks go");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (agent_process) return run_agent_process(ap);
  return guarded_main("bench_rendezvous", [&] {
    if (common.results.empty() || (store_binary.empty() && etcd_members == 0)) {
      throw Error("--results and --store (or --etcd-members) are required");
    }
    std::unique_ptr<EtcdCluster> etcd;
    if (etcd_members > 0) etcd = start_etcd(etcd_members);
    const std::string subject =
        etcd ? fmt::format("ddprun over etcd ({} members)", etcd_members) : "ddprun";
    const int most = *std::max_element(agents.begin(), agents.end());
    // The store process inherits this limit and holds one descriptor per agent; the agent
    // processes raise their own.
    raise_nofile(most + 500);
    const long limit = raise_nofile(0);
    TempDir dir("rendezvous");
    Context c;
    c.self = argv[0];
    c.dir = &dir;
    c.per_process = static_cast<int>(std::max(1L, (limit - 200) / kFdsPerAgent));
    for (int n : agents) {
      Series all, closed, conn, agent_mem, store_mem;
      for (auto* s : {&all, &closed, &conn, &agent_mem, &store_mem}) {
        s->figure = 6;
        s->case_name = fmt::format("{} agents", n);
        s->subject = subject;
        s->unit = "s";
      }
      all.metric = "release to every agent holding its rank";
      if ((n == 4096 || n == 16384) && !etcd) {
        all.target_max = 3;
        all.target_text = fmt::format("{} agents in <= 3 s on 2 cores", n);
      }
      closed.metric = "release to the round closed";
      closed.note = "the N-th join closed the round (a watcher's get of news/r/0/closed)";
      conn.metric = "starting the agent processes, connecting N clients";
      conn.note = "before the release; not part of the figure";
      agent_mem.metric = "memory per simulated agent";
      agent_mem.unit = "KiB";
      agent_mem.note = "the agent processes' peak RSS (VmHWM) summed, over N: a thread (its "
                       "touched stack pages), its store client and its round's data; a real "
                       "agent is a process of its own (figure 4)";
      store_mem.metric = "store server memory per agent";
      store_mem.unit = "KiB";
      store_mem.subject = "ddprun-store";
      store_mem.compare_with = "none";
      store_mem.note = "the ddprun-store process's peak RSS (VmHWM) over N: one connection "
                       "and the round's keys per agent";
      int processes = 0;
      repeat(common, [&](int i, bool recorded) {
        c.run_id = fmt::format("bench{}-{}", n, i);
        RunTimes t;
        if (etcd) {
          c.target.etcd = etcd->endpoints();
          try {
            t = run_once(c, n);
          } catch (const std::exception& e) {
            throw Error(fmt::format("{} agents over etcd: {}; etcd member 0's log:\n{}", n,
                                    e.what(), etcd->log_tail(0)));
          }
        } else {
          c.target.port = free_port();
          const auto log = dir.file(fmt::format("store-{}-{}.log", n, i));
          test::Child server({{store_binary, "--host", "127.0.0.1", "--port",
                         std::to_string(c.target.port), "--log-level", "warn"}, {}, log});
          try {
            t = run_once(c, n);
            if (recorded) store_mem.samples.push_back(
                static_cast<double>(status_kib(server.pid(), "VmHWM")) / n);
          } catch (const std::exception& e) {
            dir.keep();
            throw Error(fmt::format("{} agents: {}; store output ({}):\n{}", n, e.what(), log,
                                    tail(log, 10)));
          }
          server.signal(SIGTERM);
          (void)server.wait_for(10s);
        }
        processes = t.processes;
        if (!recorded) return;
        all.samples.push_back(t.all_s);
        closed.samples.push_back(t.closed_s);
        conn.samples.push_back(t.connect_s);
        agent_mem.samples.push_back(static_cast<double>(t.agents_kib) / n);
      });
      all.note = fmt::format("the figure: join_round returned in all N threads ({} process{}, "
                             "RLIMIT_NOFILE {})", processes, processes == 1 ? "" : "es", limit);
      for (const auto* s : {&all, &closed, &conn, &agent_mem}) append_series(common.results, *s);
      if (!store_mem.samples.empty()) append_series(common.results, store_mem);
    }
  });
}
