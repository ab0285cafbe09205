#include "cluster/head.hpp"

#include <optional>

#include <signal.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "cluster/remote_command.hpp"
#include "cluster/remote_session.hpp"
#include "cluster/session_protocol.hpp"
#include "cluster/slurm_broadcast.hpp"
#include "cluster/staging.hpp"
#include "cluster/tree.hpp"
#include "common/deadline.hpp"
#include "common/error.hpp"
#include "common/failure_record.hpp"
#include "common/strings.hpp"
#include "common/version.hpp"
#include "process/console_fold.hpp"
#include "process/worker_output.hpp"
#include "store/store_auth.hpp"

namespace ddprun {

namespace asio = boost::asio;

struct ClusterHead::Impl {
  enum class Phase { kChecking, kAborting, kRunning, kStopping };

  Impl(const LaunchConfig& c, std::map<std::string, std::string> e, std::string self_path,
       std::string dir)
      : config(c), cluster(*c.cluster), env(std::move(e)), cwd(std::move(dir)),
        self(std::move(self_path)),
        remote_ddprun(remote_ddprun_path(cluster, self)), token(random_token()),
        connect_timer(io), ping_timer(io), stop_timer(io), left_timer(io),
        fold(io.get_executor(), write_all) {
    // The console's own: a pipe gets every line (auto), a terminal the folded view.
    fold_stdout = fold_mode_for(config.fold_output, config.raw_output, STDOUT_FILENO);
    fold_stderr = fold_mode_for(config.fold_output, config.raw_output, STDERR_FILENO);
    if (cluster.stage) {
      try {
        binary = read_own_binary();
      } catch (const Error& failure) {
        spdlog::warn("ddprun cannot be staged on hosts that lack it: {}", failure.what());
      }
    }
    if (binary && cluster.via_srun) {
      // Half the connect timeout at most: a hung sbcast leaves the hosts the other half to get
      // the bytes on their own sessions.
      broadcast.emplace(io, self, binary, Deadline::after(cluster.connect_timeout / 2));
    }
    forwarded = forwarded_environment(env, cluster.forward);
    // The store's secret travels in the hello (never on a command line): the user's, or a
    // fresh one for this job.
    forwarded[store::kTokenEnv] =
        config.store_secret.empty() ? store::random_secret() : config.store_secret;
    result.elastic = !config.is_static();
    result.run_id = config.rdzv_id;
    for (std::size_t i = 0; i < cluster.hosts.size(); ++i) {
      HostOutcome h;
      h.spec = cluster.hosts[i];
      h.node = static_cast<int>(i);
      result.hosts.push_back(std::move(h));
    }
  }

  const LaunchConfig& config;
  const ClusterConfig& cluster;
  std::map<std::string, std::string> env;
  std::map<std::string, std::string> forwarded;
  std::string cwd;
  std::string self;  // this executable's path
  std::string remote_ddprun;
  std::string token;
  // This executable, for hosts without it; null: --no-stage, or it could not be read.
  std::shared_ptr<const StagedBinary> binary;
  asio::io_context io;
  asio::steady_timer connect_timer;
  asio::steady_timer ping_timer;
  asio::steady_timer stop_timer;
  asio::steady_timer left_timer;
  // --fold-output over every host's lines, which the agents send tagged.
  ConsoleFold fold;
  FoldMode fold_stdout = FoldMode::kOff;
  FoldMode fold_stderr = FoldMode::kOff;
  // --hosts=slurm with staging: one sbcast for every node, on the first host's request.
  std::optional<SlurmBroadcast> broadcast;
  // The hosts this command reaches itself (all of them, or the tree's first level), one session
  // each; the others are reached through them.
  std::vector<TreeEntry> top;
  std::vector<std::unique_ptr<RemoteSession>> sessions;  // parallel to `top`
  std::vector<bool> session_ended;
  std::vector<bool> host_ended;  // by node
  std::size_t next_to_start = 0;
  int opening = 0;  // top sessions started, their host not yet ready or failed
  Phase phase = Phase::kChecking;
  // Every session has ended: no timer may be armed again, or the io_context never runs out of
  // work. (A timer whose expiry is already queued when it is cancelled still runs its handler
  // with success.)
  bool finished = false;
  bool node_check_shown = false;
  bool losing_subtree = false;  // a relay's connection ended: its hosts are being counted out
  // The first host that left the job under its minimum; the others are stopped when
  // left_timer expires and they still run.
  int left_first = -1;
  ClusterResult result;
  Clock::time_point started_at;

  std::vector<std::string> command_for(std::size_t i) const {
    return remote_shell_command(cluster, i, remote_ddprun, binary.get());
  }

  SessionHello hello_for(const TreeEntry& entry) const {
    SessionHello hello;
    hello.version = ddprun_version();
    hello.token = token;
    hello.host = entry.host;
    hello.node = entry.node;
    hello.subtree = tree_to_json(entry.subtree);
    hello.remote_ddprun = remote_ddprun;
    hello.cwd = cwd;
    hello.env = forwarded;
    hello.args = entry.args;
    hello.hangup_timeout = cluster.hangup_timeout;
    hello.connect_timeout = cluster.connect_timeout;
    hello.fold_at_head = fold_stdout != FoldMode::kOff || fold_stderr != FoldMode::kOff;
    return hello;
  }

  HostOutcome& host(int node) { return result.hosts.at(static_cast<std::size_t>(node)); }

  // A host asks for the binary: on its session, or under Slurm through sbcast.
  void binary_for(const RemoteSession::BinaryReady& ready) {
    if (broadcast) return broadcast->request(ready);
    ready(binary, "");
  }

  void start_more() {
    while (phase == Phase::kChecking && next_to_start < sessions.size() &&
           opening < cluster.fanout) {
      const std::size_t t = next_to_start++;
      try {
        sessions[t]->start(encode_hello(hello_for(top[t])));
        ++opening;
      } catch (const Error& e) {
        session_ended[t] = true;
        answered(top[t].node, e.what());
        lose_subtree(top[t], "not reached: its relay could not be started");
      }
    }
  }

  // A host passed its checks (`problem` empty) or failed them.
  void answered(int node, std::string problem) {
    auto& h = host(node);
    if (h.ready || !h.problem.empty()) return;
    if (problem.empty()) {
      h.ready = true;
    } else {
      h.problem = std::move(problem);
    }
    for (std::size_t t = 0; t < top.size(); ++t) {
      if (top[t].node == node && t < next_to_start) --opening;
    }
    start_more();
    check_all_answered();
  }

  void on_report(std::size_t t, const Report& report) {
    const int node = report.body.value("node", top[t].node);
    if (node < 0 || static_cast<std::size_t>(node) >= result.hosts.size()) return;
    auto& h = host(node);
    if (report.kind == Report::Kind::kReady && phase == Phase::kChecking) {
      h.ready_info = report.body;
      if (node == top[t].node) h.ready_info.update(sessions[t]->staging().to_json());
      answered(node, "");
    } else if (report.kind == Report::Kind::kRefused) {
      answered(node, report.body.value("reason", std::string("refused to start")));
    } else if (report.kind == Report::Kind::kResult) {
      h.result = report.body;
      gone(node);
    } else if (report.kind == Report::Kind::kNodeCheck && !node_check_shown) {
      // The first round's group rank 0 sends it once; a node of a later round checks nothing.
      // A quiet log (--log-level warn) shows it only when it found something.
      node_check_shown = true;
      if (report.body.value("findings", 0) > 0 ||
          spdlog::default_logger()->should_log(spdlog::level::info)) {
        write_all(STDERR_FILENO, report.body.value("table", std::string()));
      }
    } else if (report.kind == Report::Kind::kEnded) {
      h.stderr_tail = report.body.value("stderr_tail", std::vector<std::string>());
      ended(node, report.body.value("code", 255),
            report.body.value("lost", std::string()));
    }
  }

  // A host's remote shell exited (here, or on the relay that started it).
  void ended(int node, int code, const std::string& lost) {
    if (host_ended.at(static_cast<std::size_t>(node))) return;
    host_ended[static_cast<std::size_t>(node)] = true;
    auto& h = host(node);
    h.code = code;
    if (!h.ready && h.problem.empty()) {
      answered(node, lost.empty() ? early_end_reason(code, {h.stderr_tail.begin(),
                                                            h.stderr_tail.end()},
                                                     remote_ddprun)
                                  : lost);
    } else if (h.ready && phase == Phase::kChecking) {
      // Ready, then gone before the start: the job cannot start with it.
      const std::string last = h.stderr_tail.empty() ? std::string() : ": " + h.stderr_tail.back();
      h.problem = fmt::format("ready, then ended before the start (exit code {}){}", code, last);
      check_all_answered();
    } else if (h.ready && !h.result && phase != Phase::kAborting && h.problem.empty()) {
      h.problem = !lost.empty()  ? lost
                  : code == 255 ? "lost the connection (the remote shell exited 255)"
                                : fmt::format("its agent ended without a result (exit code {})",
                                              code);
      spdlog::error("host {} (node {}): {}; its agent stops its workers once it notices",
                    h.spec.host, h.node, h.problem);
      gone(node);
    }
    maybe_finish();
  }

  // Whether a host left the job on its own: its agent ended without a result (killed, its
  // connection lost) or with an end of its own (a signal to it, its store, its own error), not
  // one every agent of the job reaches (a failure, a refusal, the job's success).
  bool left_on_its_own(const HostOutcome& h) const {
    if (h.result) return h.result->value("own_end", false);
    return h.ready && host_ended[static_cast<std::size_t>(h.node)] && !h.problem.empty();
  }

  // A host left while the job runs. The others of an elastic job go on without it while they
  // are at least the job's minimum; below it they would wait out the rendezvous' join timeout
  // for a node that no --hosts job can bring: they are stopped now.
  void gone(int node) {
    if (!result.elastic || phase != Phase::kRunning || losing_subtree) return;
    const auto& h = host(node);
    if (!left_on_its_own(h)) return;
    const int running = running_hosts();
    if (running == 0) return;
    const auto why = h.result ? h.result->value("reason", std::string()) : h.problem;
    if (running >= config.min_nodes) {
      spdlog::warn("host {} (node {}) left the job: {}; it goes on with {} host(s)", h.spec.host,
                   h.node, why, running);
      return;
    }
    if (left_first >= 0 || finished) return;
    // An end every agent reaches on its own at about the same time (their store gone, the
    // rendezvous timed out) leaves nobody to stop: the others get the time their own end takes.
    left_first = node;
    left_timer.expires_after(config.shutdown_timeout + std::chrono::seconds(2));
    left_timer.async_wait([this, why](boost::system::error_code ec) {
      if (ec || finished || phase != Phase::kRunning) return;
      const int still = running_hosts();
      if (still == 0 || still >= config.min_nodes) return;
      const auto& first = host(left_first);
      result.stopped_for = left_first;
      spdlog::error("host {} (node {}) left the job: {}; the job needs at least {} host(s) "
                    "(--nnodes) and no other can join a --hosts job: stopping the {} left",
                    first.spec.host, first.node, why, config.min_nodes, still);
      stop_agents(SIGTERM);
    });
  }

  int running_hosts() const {
    int running = 0;
    for (const auto& h : result.hosts) {
      if (h.ready && !h.result && !host_ended[static_cast<std::size_t>(h.node)]) ++running;
    }
    return running;
  }

  // Hosts below a relay whose connection ended: nobody can tell them anything any more (their
  // agents notice the silence and stop).
  void lose_subtree(const TreeEntry& relay, const std::string& why) {
    for_each_below(relay, [&](const TreeEntry& host) { ended(host.node, 255, why); });
  }

  void on_session_ended(std::size_t t, int code) {
    session_ended[t] = true;
    auto& h = host(top[t].node);
    const auto& tail = sessions[t]->stderr_tail();
    h.stderr_tail.assign(tail.begin(), tail.end());
    const bool was_ready = h.ready;
    // The host and those it relayed leave at once: they are counted out together, then judged
    // once, by the first of them that left on its own.
    losing_subtree = true;
    ended(top[t].node, code, sessions[t]->lost());
    lose_subtree(top[t], was_ready ? fmt::format("lost with the connection to {} (node {}), "
                                                 "which relayed it",
                                                 h.spec.host, h.node)
                                   : fmt::format("not reached: {} (node {}), which starts it, "
                                                 "failed",
                                                 h.spec.host, h.node));
    losing_subtree = false;
    std::optional<int> first;
    if (left_on_its_own(h)) first = h.node;
    for_each_below(top[t], [&](const TreeEntry& below) {
      if (!first && left_on_its_own(host(below.node))) first = below.node;
    });
    if (first) gone(*first);
  }

  bool all_answered() const {
    for (const auto& h : result.hosts) {
      if (!h.ready && h.problem.empty()) return false;
    }
    return true;
  }

  void check_all_answered() {
    if (phase != Phase::kChecking || !all_answered()) return;
    connect_timer.cancel();
    for (const auto& h : result.hosts) {
      if (!h.problem.empty()) {
        abort_start();
        return;
      }
    }
    phase = Phase::kRunning;
    report_staging();
    // Every host runs ddprun now: the copy in memory is not needed for the rest of the job (a
    // session still writing it to a host holds a reference of its own).
    binary.reset();
    if (broadcast) broadcast->release();
    spdlog::info("all {} hosts are ready ({} after the start): starting the workers",
                 result.hosts.size(), format_duration(Clock::now() - started_at));
    for (auto& s : sessions) {
      s->release_stderr();
      s->send(encode_control({Control::Kind::kGo, 0}));
    }
  }

  // Which hosts got a copy of ddprun, and how long the longest copy took.
  void report_staging() const {
    std::vector<std::string> sent;
    std::vector<std::string> cached;
    std::size_t by_relays = 0;
    std::size_t by_sbcast = 0;
    double longest = 0;
    for (const auto& h : result.hosts) {
      const auto how = h.ready_info.value("staging", std::string());
      if (how == "sent") {
        sent.push_back(h.spec.host);
        if (h.ready_info.contains("staged_by")) ++by_relays;
        if (h.ready_info.value("broadcast", false)) ++by_sbcast;
        longest = std::max(longest, h.ready_info.value("staged_seconds", 0.0));
      } else if (how == "cached") {
        cached.push_back(h.spec.host);
      }
    }
    if (!sent.empty()) {
      const auto how = by_sbcast > 0
                           ? fmt::format("{} from sbcast's copy, {} sent from here", by_sbcast,
                                         sent.size() - by_sbcast)
                           : fmt::format("{} sent from here, {} by relays",
                                         sent.size() - by_relays, by_relays);
      spdlog::info("staged ddprun {} on {} host(s) that lacked it ({}), {} at most: {}",
                   ddprun_version(), sent.size(), how,
                   format_duration(std::chrono::duration_cast<Clock::duration>(
                       std::chrono::duration<double>(longest))),
                   fmt::join(sent, ", "));
    }
    if (!cached.empty()) {
      spdlog::info("ddprun {} from the cache on {} host(s): {}", ddprun_version(), cached.size(),
                   fmt::join(cached, ", "));
    }
  }

  // A host failed its checks, did not answer, or a signal came first: nobody starts. Ending the
  // input makes every agent (and relay) that is waiting for "go" end without starting.
  void abort_start() {
    phase = Phase::kAborting;
    result.preflight_failed = result.signal == 0;
    for (std::size_t t = 0; t < sessions.size(); ++t) {
      if (!session_ended[t] && t < next_to_start) sessions[t]->close_input();
    }
    arm_stop_timer(std::chrono::seconds(10));
    maybe_finish();
  }

  void on_connect_timeout() {
    if (phase != Phase::kChecking) return;
    const auto limit = format_duration(cluster.connect_timeout);
    // A host whose turn never came (at most --fanout connections open at once) was not slow:
    // the ones before it were.
    const auto not_contacted =
        fmt::format("not contacted: the {} connection(s) before it were still open at the end of "
                    "{} (--connect-timeout; --fanout allows {} at once)",
                    opening, limit, cluster.fanout);
    for (std::size_t t = next_to_start; t < top.size(); ++t) {
      host(top[t].node).problem = not_contacted;
      for_each_below(top[t], [&](const TreeEntry& below) {
        host(below.node).problem = not_contacted;
      });
    }
    for (auto& h : result.hosts) {
      if (h.ready || !h.problem.empty()) continue;
      h.problem = fmt::format("no answer within {} (--connect-timeout)", limit);
    }
    abort_start();
  }

  void ping() {
    ping_timer.expires_after(keep_alive_every(cluster.hangup_timeout));
    ping_timer.async_wait([this](boost::system::error_code ec) {
      if (ec || finished) return;
      for (std::size_t t = 0; t < next_to_start; ++t) {
        if (!session_ended[t]) sessions[t]->send(encode_control({}));
      }
      ping();
    });
  }

  void arm_stop_timer(Clock::duration after) {
    if (finished) return;
    stop_timer.expires_after(after);
    stop_timer.async_wait([this](boost::system::error_code ec) {
      if (ec || finished) return;
      spdlog::warn("hosts still running {} after the stop: ending their connections",
                   format_duration(Clock::now() - started_at));
      for (auto& s : sessions) s->kill();
    });
  }

  void on_signal(int signal) {
    // After a first signal, or once the hosts are being stopped for one that left: at once.
    if (result.signal != 0 || phase == Phase::kAborting || result.stopped_for >= 0) {
      spdlog::warn("{}{}: ending every host's connection (their agents stop their workers)",
                   signal_name(signal),
                   result.signal != 0 || phase == Phase::kAborting ? " again"
                                                                   : " while the hosts stop");
      for (auto& s : sessions) s->kill();
      return;
    }
    result.signal = signal;
    if (phase == Phase::kChecking) {
      spdlog::info("{} before the start: nothing was started", signal_name(signal));
      connect_timer.cancel();
      abort_start();
      return;
    }
    spdlog::info("{}: forwarding it to the agents on {} hosts", signal_name(signal),
                 result.hosts.size());
    stop_agents(signal);
  }

  // Every agent still running stops as on `signal`. Each gives its workers the shutdown grace;
  // beyond it (and the time to hear of it) the connections are ended, which makes every agent
  // stop at once.
  void stop_agents(int signal) {
    phase = Phase::kStopping;
    for (std::size_t t = 0; t < sessions.size(); ++t) {
      if (!session_ended[t]) sessions[t]->send(encode_control({Control::Kind::kSignal, signal}));
    }
    arm_stop_timer(config.shutdown_timeout + cluster.hangup_timeout + std::chrono::seconds(10));
  }

  // An agent's tagged console line: folded with every host's, or printed with its prefix. An
  // untagged one (an agent's own log line: a worker failed, ...) comes after what is pending.
  bool console_line(bool is_err, const std::string& line, std::string& batch) {
    if (fold_stdout == FoldMode::kOff && fold_stderr == FoldMode::kOff) return false;
    const auto tagged = untag_console_line(line);
    if (!tagged) {
      if (fold.pending() > 0) {
        write_all(is_err ? STDERR_FILENO : STDOUT_FILENO, batch);
        batch.clear();
        fold.flush();
      }
      return false;
    }
    fold.add(is_err ? STDERR_FILENO : STDOUT_FILENO, is_err ? fold_stderr : fold_stdout,
             tagged->rank, tagged->host, tagged->prefix, tagged->text, batch);
    return true;
  }

  void maybe_finish() {
    for (std::size_t t = 0; t < next_to_start; ++t) {
      if (!session_ended[t]) return;  // its host, or one it relays, still runs
    }
    // Sessions never started (a check failed first) have nothing to wait for.
    finished = true;
    fold.flush();
    connect_timer.cancel();
    ping_timer.cancel();
    stop_timer.cancel();
    left_timer.cancel();
    if (broadcast) broadcast->cancel();
  }

  ClusterResult run() {
    started_at = Clock::now();
    std::vector<TreeEntry> all;
    for (std::size_t i = 0; i < cluster.hosts.size(); ++i) {
      all.push_back({static_cast<int>(i), cluster.hosts[i].host, command_for(i),
                     ddprun::agent_args(config, i), {}});
    }
    const bool tree = static_cast<int>(all.size()) > cluster.tree_threshold;
    top = tree ? plan_tree(std::move(all), cluster.fanout) : std::move(all);
    host_ended.assign(cluster.hosts.size(), false);
    session_ended.assign(top.size(), false);
    for (std::size_t t = 0; t < top.size(); ++t) {
      sessions.push_back(std::make_unique<RemoteSession>(
          io, top[t].argv, token,
          RemoteSession::Handlers{[this, t](const Report& r) { on_report(t, r); },
                                  [this, t](int code) { on_session_ended(t, code); },
                                  binary ? std::function([this](const RemoteSession::BinaryReady& r) {
                                    binary_for(r);
                                  })
                                         : nullptr,
                                  [this](bool is_err, const std::string& line, std::string& batch) {
                                    return console_line(is_err, line, batch);
                                  }},
          cluster.hangup_timeout));
    }
    if (tree) {
      spdlog::info("starting agents on {} hosts with {}: {} directly, each of those starting "
                   "the rest of its group (tree fan-out, width {})",
                   result.hosts.size(), fmt::join(cluster.ssh_command, " "), top.size(),
                   cluster.fanout);
    } else {
      spdlog::info("starting agents on {} hosts with {} (at most {} connections at once)",
                   result.hosts.size(), fmt::join(cluster.ssh_command, " "), cluster.fanout);
    }
    connect_timer.expires_after(cluster.connect_timeout);
    connect_timer.async_wait([this](boost::system::error_code ec) {
      if (!ec && !finished) on_connect_timeout();
    });
    ping();
    asio::post(io, [this] {
      start_more();
      maybe_finish();
    });
    io.run();
    result.seconds = std::chrono::duration<double>(Clock::now() - started_at).count();
    return result;
  }
};

ClusterHead::ClusterHead(const LaunchConfig& config, std::map<std::string, std::string> env,
                         std::string self, std::string cwd)
    : impl_(std::make_unique<Impl>(config, std::move(env), std::move(self), std::move(cwd))) {}

ClusterHead::~ClusterHead() = default;

ClusterResult ClusterHead::run() { return impl_->run(); }

void ClusterHead::on_signal(int signal) {
  asio::post(impl_->io, [this, signal] { impl_->on_signal(signal); });
}

std::string ClusterHead::store_secret() const {
  return impl_->forwarded.at(store::kTokenEnv);
}

}  // namespace ddprun
