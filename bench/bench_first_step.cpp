// bench_first_step: Figure 13, what a person waits for after a failure: from a rank's SIGKILL to
// the first training step of the next attempt on every rank, and from the command to the first
// step at a job's first start. bench/first_step.py (torch 1.13, Gloo, 3 ranks, env://, a
// checkpoint every 5 steps; rank 1 SIGKILLs itself at step 20, --max-restarts=1) stamps each
// phase. Subjects, run by turns: ddprun (its workers' store, TORCHELASTIC_USE_AGENT_STORE=True);
// ddprun with rank 0 hosting the workers' store (the script's BENCH_RANK0_HOSTS_STORE, as
// torchrun 1.13's c10d backend does); torchrun at a 0.1 s
// monitor interval, and at its default (fewer runs: each costs seconds of waiting).
// With --ddp-resnet, the same for the project's native worker, cold and from warm standbys:
// ResNet-18 on 2 ranks, its phases stamped by ddp_resnet's --stamp_dir. With --netns-cluster
// (run inside `scripts/netns-cluster.sh run TAG 2`), ddprun with and without standbys again on
// two nodes, network namespaces with their own addresses: 2 + 1 ranks, rank 1 on the first.

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <tuple>

#include <fmt/format.h>

#include "bench/bench_cli.hpp"
#include "bench/sys_util.hpp"
#include "common/error.hpp"
#include "testing/child.hpp"

using namespace ddprun;
using namespace ddprun::bench;
using namespace std::chrono_literals;

namespace {

constexpr const char* kCase = "3 ranks, Gloo, rank 1 SIGKILLed at step 20, --max-restarts=1";
constexpr const char* kRank0Hosts = "ddprun, rank 0 hosting the workers' store";
constexpr const char* kWarm = "ddprun --warm-standby";
constexpr const char* kTorchrunTuned = "torchrun --monitor_interval 0.1";
constexpr const char* kResnetCase =
    "ddp_resnet, ResNet-18 32x32, 2 ranks, Gloo, a checkpoint every 3 steps, rank 1 fails at "
    "step 5, --max-restarts=1";
constexpr int kResnetRanks = 2;
constexpr const char* kTwoNodeCase =
    "3 ranks on 2 nodes (network namespaces, 2 + 1), Gloo, rank 1 SIGKILLed at step 20, "
    "--max-restarts=1";
// From the last rank done importing torch to every rank out of init_process_group: the store's
// and the rendezvous' part (a rank that imported sooner waits in it for the others).
constexpr const char* kInitAfterFailure =
    "init_process_group after the failure (last import to every rank joined)";
constexpr const char* kInitFirstStart =
    "init_process_group at the first start (last import to every rank joined)";

struct Subject {
  Launcher launcher;
  std::string label;
  bool rank0_hosts = false;
  bool every_run = true;  // false: only the first --default-interval-runs of the runs
  bool warm = false;  // --warm-standby: ddprun runs the script as Python itself (no --no-python)
  bool two_nodes = false;  // two agents in the netns cluster's nodes 1 and 2
};

double ms(double seconds) { return seconds * 1e3; }

// One stamp per rank of `phase` in `attempt`, by rank.
std::map<int, double> stamps(const std::string& dir, const std::string& phase, int attempt,
                             int ranks = 3) {
  std::map<int, double> out;
  for (int rank = 0; rank < ranks; ++rank) {
    auto v = read_stamps(dir, fmt::format("{}.{}.{}", phase, attempt, rank));
    if (v.size() == 1) out[rank] = v[0];
  }
  if (out.size() != static_cast<std::size_t>(ranks)) {
    throw Error(fmt::format("{} stamps of {} in attempt {}, expected {} (in {})", out.size(),
                            phase, attempt, ranks, dir));
  }
  return out;
}

// Runs agents side by side to their ends, within 300 s. The first to fail (or the deadline)
// ends the run with its log (<log>.<i> beyond the first agent's), which is kept.
void run_agents(TempDir& dir, const std::string& label,
                const std::vector<std::vector<std::string>>& argvs,
                const std::vector<std::pair<std::string, std::string>>& env,
                const std::string& log) {
  const auto log_of = [&](std::size_t i) { return i == 0 ? log : fmt::format("{}.{}", log, i); };
  std::vector<std::unique_ptr<test::Child>> agents;
  for (std::size_t i = 0; i < argvs.size(); ++i) {
    agents.push_back(std::make_unique<test::Child>(test::SpawnSpec{argvs[i], env, log_of(i)}));
  }
  const auto deadline = std::chrono::steady_clock::now() + 300s;
  std::size_t running = agents.size();
  while (running > 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      dir.keep();
      throw Error(fmt::format("{}: {} of {} agents still running after 300 s (logs: {}*)", label,
                              running, agents.size(), log));
    }
    running = 0;
    for (std::size_t i = 0; i < agents.size(); ++i) {
      if (agents[i]->exited()) continue;
      const auto status = agents[i]->wait_for(agents.size() == 1 ? 300s : 100ms);
      if (!status) {
        ++running;
      } else if (test::exit_code(*status) != 0) {
        dir.keep();
        throw Error(fmt::format("{} (agent {}) exited with {}; its output ({}):\n{}", label, i,
                                test::exit_code(*status), log_of(i), tail(log_of(i), 20)));
      }
    }
  }
}

// The netns cluster's tag and its first node's address, from `netns-cluster.sh run`.
std::pair<std::string, std::string> cluster_env() {
  const char* tag = std::getenv("NETNS_TAG");
  const char* master = std::getenv("NODE_1_ADDR");
  if (tag == nullptr || master == nullptr) {
    throw Error("--netns-cluster: NETNS_TAG and NODE_1_ADDR are not set; run this inside "
                "`scripts/netns-cluster.sh run TAG 2`");
  }
  return {tag, master};
}

// The two agents of a two-node run: `argv`'s node split into 2 + 1 ranks, each started in its
// namespace by the cluster script, the master being node 1's address.
// argv[0] is ddprun; only its own flags, up to the program (the first word without "--"), are
// rewritten, and each must be there once.
std::vector<std::vector<std::string>> two_node_agents(const std::string& cluster,
                                                      const std::vector<std::string>& argv) {
  const auto [tag, master] = cluster_env();
  const auto end = std::find_if(std::next(argv.begin()), argv.end(),
                                [](const std::string& a) { return !a.starts_with("--"); });
  std::vector<std::vector<std::string>> agents;
  for (int node = 0; node < 2; ++node) {
    const std::vector<std::pair<std::string, std::string>> rewrites{
        {"--nproc-per-node=", node == 0 ? "2" : "1"},
        {"--nnodes=", "2"},
        {"--node-rank=", std::to_string(node)},
        {"--master-addr=", master}};
    std::vector<std::string> a{cluster, "exec", tag, std::to_string(node + 1), argv.front()};
    std::size_t rewritten = 0;
    for (auto it = std::next(argv.begin()); it != argv.end(); ++it) {
      std::string arg = *it;
      for (const auto& [flag, value] : rewrites) {
        if (it < end && arg.starts_with(flag)) {
          arg = flag + value;
          ++rewritten;
        }
      }
      a.push_back(arg);
    }
    if (rewritten != rewrites.size()) {
      throw Error(fmt::format("two nodes: {} of ddprun's {} node flags found in its command line",
                              rewritten, rewrites.size()));
    }
    agents.push_back(std::move(a));
  }
  return agents;
}

double latest(const std::map<int, double>& m) {
  double v = 0;
  for (const auto& [_, t] : m) v = std::max(v, t);
  return v;
}

// The slowest rank's time from `from` to `to`.
double slowest(const std::map<int, double>& from, const std::map<int, double>& to) {
  double v = 0;
  for (const auto& [rank, t] : to) v = std::max(v, t - from.at(rank));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_first_step: Figure 13, failure to the next training step (torch 1.13)"};
  CommonOptions common;
  LauncherOptions launcher_options;
  std::string script;
  int default_interval_runs = 5;
  std::string ddp_resnet;
  int resnet_runs = 5;
  std::string cluster;
  add_common_options(app, common);
  app.add_option("--default-interval-runs", default_interval_runs,
                 "recorded runs of torchrun at its default interval (each waits seconds)")
      ->capture_default_str();
  add_launcher_options(app, launcher_options);
  app.add_option("--script", script, "bench/first_step.py")->required();
  app.add_option("--ddp-resnet", ddp_resnet, "also ddp_resnet, cold and warm (the binary)");
  app.add_option("--ddp-resnet-runs", resnet_runs, "recorded runs of each ddp_resnet subject")
      ->capture_default_str();
  app.add_option("--netns-cluster", cluster,
                 "also two nodes: scripts/netns-cluster.sh, inside whose `run TAG 2` this runs");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return guarded_main("bench_first_step", [&] {
    if (!cluster.empty()) cluster_env();  // before any run, not at the first two-node one
    std::vector<Subject> subjects;
    for (const auto& l : launchers(launcher_options)) {
      if (!l.torchrun) {
        subjects.push_back({l, kWarm, false, true, true});
        subjects.push_back({l, l.label});
        subjects.push_back({l, kRank0Hosts, true});
        if (!cluster.empty()) {
          subjects.push_back({l, kWarm, false, true, true, true});
          subjects.push_back({l, l.label, false, true, false, true});
        }
      } else if (l.monitor_interval.empty()) {
        subjects.push_back({l, l.label, false, false});
      } else {
        auto tuned = l;
        tuned.monitor_interval = "0.1";
        subjects.push_back({tuned, kTorchrunTuned});
      }
    }
    TempDir dir("first-step");
    // (case, metric, subject) -> series: the two-node and ddp_resnet cases have the same
    // subjects as the first, so that the report puts them in the same columns.
    using Key = std::tuple<std::string, std::string, std::string>;
    std::map<Key, Series> rows;
    std::vector<Key> order;
    auto row_in = [&](const std::string& metric, const std::string& subject,
                      const char* case_name) -> Series& {
      auto& s = rows[{case_name, metric, subject}];
      if (s.metric.empty()) {
        s.figure = 13;
        s.case_name = case_name;
        s.metric = metric;
        s.subject = subject;
        s.unit = "ms";
        order.emplace_back(case_name, metric, subject);
      }
      return s;
    };
    int counter = 0;
    repeat(common, [&](int i, bool recorded) {
      for (const auto& subject : subjects) {
        if (!subject.every_run && i >= common.warmup + default_interval_runs) continue;
        const auto run = dir.file(fmt::format("run{}", counter++));
        std::filesystem::create_directories(run);
        NodeArgs node;
        node.nproc = 3;
        node.port = free_port();
        node.max_restarts = 1;
        std::vector<std::pair<std::string, std::string>> env{
            {"BENCH_STAMP_DIR", run}, {"OMP_NUM_THREADS", "1"}, {"PYTHONDONTWRITEBYTECODE", "1"}};
        // A port of its own, free when asked: the one above the agent's may be anyone's.
        if (subject.rank0_hosts) {
          env.emplace_back("BENCH_RANK0_HOSTS_STORE", std::to_string(free_port()));
        }
        // The nodes share the machine's host name, which need not resolve to an address
        // inside a namespace: Gloo is told the interface that reaches the other node.
        if (subject.two_nodes) env.emplace_back("GLOO_SOCKET_IFNAME", "eth0");
        const auto log = run + "/agent.log";
        auto agent_argv = command(subject.launcher, node, {launcher_options.python, script});
        if (subject.warm) {
          agent_argv = command(subject.launcher, node, {script});
          std::erase(agent_argv, "--no-python");
          agent_argv.insert(agent_argv.begin() + 1, "--warm-standby");
          env.emplace_back("PYTHON_EXEC", launcher_options.python);
        }
        const double start = test::mono_now();
        run_agents(dir, subject.label,
                   subject.two_nodes ? two_node_agents(cluster, agent_argv)
                                     : std::vector<std::vector<std::string>>{agent_argv},
                   env, log);
        if (!recorded) continue;
        const auto kill = read_stamps(run, "kill.0.1");
        if (kill.size() != 1) throw Error("no kill stamp in " + run);
        const auto start1 = stamps(run, "start", 1), imported1 = stamps(run, "imported", 1),
                   joined1 = stamps(run, "joined", 1), step1 = stamps(run, "step", 1);
        const auto imported0 = stamps(run, "imported", 0), joined0 = stamps(run, "joined", 0),
                   step0 = stamps(run, "step", 0);
        double first_new = start1.begin()->second;
        for (const auto& [_, t] : start1) first_new = std::min(first_new, t);
        const auto& l = subject.label;
        const auto row = [&](const std::string& metric,
                              const std::string& subject_label) -> Series& {
          return row_in(metric, subject_label, subject.two_nodes ? kTwoNodeCase : kCase);
        };
        row("failure to every rank's first step", l).samples.push_back(ms(latest(step1) - kill[0]));
        row("failure to the first new process", l).samples.push_back(ms(first_new - kill[0]));
        row("import torch, slowest rank", l).samples.push_back(ms(slowest(start1, imported1)));
        row(kInitAfterFailure, l).samples.push_back(ms(latest(joined1) - latest(imported1)));
        row("command to every rank's first step, first start", l)
            .samples.push_back(ms(latest(step0) - start));
        row(kInitFirstStart, l).samples.push_back(ms(latest(joined0) - latest(imported0)));
      }
    });
    // ddp_resnet: rows of its own case, after the Python script's.
    if (!ddp_resnet.empty()) {
      const Launcher ddprun = launchers(launcher_options).front();
      CommonOptions resnet_common = common;
      resnet_common.runs = resnet_runs;
      repeat(resnet_common, [&](int, bool recorded) {
        for (const bool warm : {false, true}) {
          const std::string label = warm ? kWarm : ddprun.label;
          const auto run = dir.file(fmt::format("run{}", counter++));
          std::filesystem::create_directories(run);
          NodeArgs node;
          node.nproc = kResnetRanks;
          node.port = free_port();
          node.max_restarts = 1;
          auto agent_argv = command(
              ddprun, node,
              {ddp_resnet, "--backend", "gloo", "--arch", "resnet18", "--syn_learnable",
               "--image_size", "32", "--batch_size", "8", "--steps_syn", "4", "--num_epochs", "3",
               "--checkpoint_every", "3", "--fail_at_step", "5", "--model_dir", run,
               "--stamp_dir", run});
          if (warm) agent_argv.insert(agent_argv.begin() + 1, "--warm-standby");
          run_agents(dir, label, {agent_argv}, {{"OMP_NUM_THREADS", "1"}}, run + "/agent.log");
          // The checkpoint is tens of megabytes, in a directory that lives until the end.
          std::filesystem::remove(std::filesystem::path(run) / "resnet_distributed.pth");
          if (!recorded) continue;
          const auto fail = read_stamps(run, "fail.0.1");
          if (fail.size() != 1) throw Error("no failure stamp in " + run);
          const auto joined = stamps(run, "joined", 1, kResnetRanks);
          const auto restored = stamps(run, "restored", 1, kResnetRanks);
          const auto step = stamps(run, "step", 1, kResnetRanks);
          row_in("failure to every rank's first step", label, kResnetCase)
              .samples.push_back(ms(latest(step) - fail[0]));
          row_in("failure to every rank in its process group, model built", label, kResnetCase)
              .samples.push_back(ms(latest(joined) - fail[0]));
          row_in("failure to every rank's checkpoint loaded and DDP set up", label, kResnetCase)
              .samples.push_back(ms(latest(restored) - fail[0]));
        }
      });
    }
    {
      auto& s = rows[{kCase, "failure to every rank's first step", kWarm}];
      s.target_max = 400;
      s.target_on_worst = true;
      s.target_text = "worst <= 400 ms of 20 runs (and median <= 300 ms)";
    }
    if (!cluster.empty()) {
      const auto& one = rows[{kCase, "failure to every rank's first step", kWarm}];
      auto& two = rows[{kTwoNodeCase, "failure to every rank's first step", kWarm}];
      if (!one.samples.empty()) {
        const double one_node = median(one.samples);
        two.target_max = one_node + 100;
        two.target_text = fmt::format("within 100 ms of one node's median ({:.0f} ms)", one_node);
      }
    }
    if (!ddp_resnet.empty()) {
      const auto& cold = rows[{kResnetCase, "failure to every rank's first step", "ddprun"}];
      auto& warm = rows[{kResnetCase, "failure to every rank's first step", kWarm}];
      if (!cold.samples.empty()) {
        const double cold_median = median(cold.samples);
        warm.target_max = cold_median / 3;
        warm.target_text = fmt::format("3x faster than cold ({:.0f} ms)", cold_median);
      }
    }
    for (const auto& metric : {kInitAfterFailure, kInitFirstStart}) {
      auto& s = rows[{kCase, metric, "ddprun"}];
      s.target_max = 300;
      s.target_on_worst = true;
      s.target_text = "no run over 300 ms (the workers' store listens before the workers start)";
    }
    for (const auto& key : order) append_series(common.results, rows[key]);
  });
}
