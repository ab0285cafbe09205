#include "cluster/head.hpp"

#include <signal.h>

#include <filesystem>

#include <boost/asio.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "cluster/remote_session.hpp"
#include "cluster/session_protocol.hpp"
#include "common/deadline.hpp"
#include "common/error.hpp"
#include "common/failure_record.hpp"
#include "common/strings.hpp"
#include "common/version.hpp"

namespace ddprun {

namespace asio = boost::asio;

namespace {

// An address as a flag value: IPv6 literals in brackets.
std::string address_arg(const std::string& host) {
  return host.find(':') != std::string::npos ? "[" + host + "]" : host;
}

// Why a remote shell ended before its agent said it was ready, in words.
std::string early_end_reason(int code, const std::deque<std::string>& stderr_lines,
                             const std::string& remote_ddprun) {
  const std::string last = stderr_lines.empty() ? std::string() : stderr_lines.back();
  const std::string detail = last.empty() ? std::string() : ": " + last;
  if (code == 255) return "cannot connect" + detail;
  if (code == 127) return fmt::format("{} not found there (see --remote-ddprun){}", remote_ddprun, detail);
  if (code == 126) return fmt::format("{} cannot be executed there{}", remote_ddprun, detail);
  for (const auto& line : stderr_lines) {
    if (line.find(std::string(kSessionFlag)) != std::string::npos) {
      return fmt::format("{} there does not support --hosts (an older ddprun?){}", remote_ddprun,
                         detail);
    }
  }
  return fmt::format("ended with exit code {} before its checks{}", code, detail);
}

}  // namespace

struct ClusterHead::Impl {
  enum class Phase { kChecking, kAborting, kRunning, kStopping };

  Impl(const LaunchConfig& c, std::map<std::string, std::string> e, std::string self,
       std::string dir)
      : config(c), cluster(*c.cluster), env(std::move(e)), cwd(std::move(dir)),
        remote_ddprun(cluster.remote_ddprun.empty() ? std::move(self) : cluster.remote_ddprun),
        token(random_token()), connect_timer(io), ping_timer(io), stop_timer(io) {
    forwarded = forwarded_environment(env, cluster.forward);
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
  std::string remote_ddprun;
  std::string token;

  asio::io_context io;
  asio::steady_timer connect_timer;
  asio::steady_timer ping_timer;
  asio::steady_timer stop_timer;
  std::vector<std::unique_ptr<RemoteSession>> sessions;
  std::vector<bool> ended;
  std::size_t next_to_start = 0;
  int opening = 0;  // started, not yet ready or failed
  Phase phase = Phase::kChecking;
  ClusterResult result;
  Clock::time_point started_at;

  std::vector<std::string> agent_args(std::size_t i) const {
    const auto& host = cluster.hosts.at(i);
    std::vector<std::string> args(cluster.agent_flags);
    args.push_back(config.min_nodes == config.max_nodes
                       ? fmt::format("--nnodes={}", config.max_nodes)
                       : fmt::format("--nnodes={}:{}", config.min_nodes, config.max_nodes));
    if (config.is_static()) {
      args.push_back(fmt::format("--node-rank={}", i));
      args.push_back("--master-addr=" + address_arg(config.master_addr));
      args.push_back(fmt::format("--master-port={}", config.master_port));
    } else {
      args.push_back("--rdzv-endpoint=" + config.rdzv_endpoint);
    }
    args.push_back("--rdzv-id=" + config.rdzv_id);
    args.push_back("--local-addr=" + address_arg(host.host));
    if (host.slots) {
      args.push_back(fmt::format("--nproc-per-node={}", *host.slots));
    } else if (!cluster.nproc_per_node.empty()) {
      args.push_back("--nproc-per-node=" + cluster.nproc_per_node);
    }
    args.push_back("--");
    args.insert(args.end(), cluster.program_and_args.begin(), cluster.program_and_args.end());
    return args;
  }

  std::vector<std::string> command_for(std::size_t i) const {
    std::vector<std::string> argv(cluster.ssh_command);
    // OpenSSH's own keep-alive, so that this command learns of a host that went silent (a cut
    // cable sends no end of connection) within about the hangup timeout, as the host's agent
    // does. Last among the options: ssh takes the first value given, so the user's own wins.
    if (std::filesystem::path(argv.front()).filename() == "ssh") {
      const auto interval = std::max<long long>(
          1, std::chrono::duration_cast<std::chrono::seconds>(cluster.hangup_timeout).count() / 3);
      argv.insert(argv.end(), {"-o", fmt::format("ServerAliveInterval={}", interval), "-o",
                               "ServerAliveCountMax=3"});
    }
    argv.push_back(cluster.hosts.at(i).host);
    std::vector<std::string> args{std::string(kSessionFlag)};
    auto rest = agent_args(i);
    args.insert(args.end(), rest.begin(), rest.end());
    argv.push_back(remote_command(remote_ddprun, args));
    return argv;
  }

  std::string hello_for(std::size_t i) const {
    SessionHello hello;
    hello.version = ddprun_version();
    hello.token = token;
    hello.host = cluster.hosts.at(i).host;
    hello.cwd = cwd;
    hello.env = forwarded;
    hello.hangup_timeout = cluster.hangup_timeout;
    return encode_hello(hello);
  }

  void start_more() {
    while (phase == Phase::kChecking && next_to_start < sessions.size() &&
           opening < cluster.fanout) {
      const std::size_t i = next_to_start++;
      try {
        sessions[i]->start(hello_for(i));
        ++opening;
      } catch (const Error& e) {
        fail_check(i, e.what());
        ended[i] = true;
      }
    }
  }

  void fail_check(std::size_t i, std::string problem) {
    auto& h = result.hosts[i];
    if (h.problem.empty()) h.problem = std::move(problem);
  }

  void on_report(std::size_t i, const Report& report) {
    auto& h = result.hosts[i];
    if (report.kind == "ready" && phase == Phase::kChecking && !h.ready && h.problem.empty()) {
      h.ready = true;
      h.ready_info = report.body;
      --opening;
      start_more();
      check_all_answered();
    } else if (report.kind == "refused" && !h.ready && h.problem.empty()) {
      h.problem = report.body.value("reason", std::string("refused to start"));
      --opening;
      start_more();
      check_all_answered();
    } else if (report.kind == "result") {
      h.result = report.body;
    }
  }

  void on_ended(std::size_t i, int code) {
    auto& h = result.hosts[i];
    h.code = code;
    const auto& held = sessions[i]->stderr_tail();
    h.stderr_tail.assign(held.begin(), held.end());
    ended[i] = true;
    if (!h.ready && h.problem.empty()) {
      h.problem = early_end_reason(code, held, remote_ddprun);
      if (phase == Phase::kChecking) {
        --opening;
        start_more();
        check_all_answered();
      }
    } else if (h.ready && !h.result && phase != Phase::kAborting && h.problem.empty()) {
      h.problem = code == 255 ? "lost the connection (the remote shell exited 255)"
                              : fmt::format("its agent ended without a result (exit code {})", code);
      spdlog::error("host {} (node {}): {}; its agent stops its workers", h.spec.host, h.node,
                    h.problem);
    }
    maybe_finish();
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
    spdlog::info("all {} hosts are ready ({} after the start): starting the workers",
                 sessions.size(), format_duration(Clock::now() - started_at));
    for (auto& s : sessions) {
      s->release_stderr();
      s->send(encode_control({Control::Kind::kGo, 0}));
    }
  }

  // A host failed its checks, did not answer, or a signal came first: nobody starts.
  void abort_start() {
    phase = Phase::kAborting;
    result.preflight_failed = result.signal == 0;
    for (std::size_t i = 0; i < sessions.size(); ++i) {
      if (ended[i]) continue;
      if (result.hosts[i].ready) {
        sessions[i]->close_input();
      } else {
        sessions[i]->kill();
      }
    }
    arm_stop_timer(std::chrono::seconds(10));
    maybe_finish();
  }

  void on_connect_timeout() {
    if (phase != Phase::kChecking) return;
    for (std::size_t i = 0; i < sessions.size(); ++i) {
      auto& h = result.hosts[i];
      if (h.ready || !h.problem.empty()) continue;
      h.problem = i < next_to_start
                      ? fmt::format("no answer within {} (--connect-timeout)",
                                    format_duration(cluster.connect_timeout))
                      : fmt::format("not tried: the other hosts took the {} (--connect-timeout)",
                                    format_duration(cluster.connect_timeout));
    }
    abort_start();
  }

  void ping() {
    ping_timer.expires_after(std::max<Clock::duration>(cluster.hangup_timeout / 4,
                                                       std::chrono::milliseconds(50)));
    ping_timer.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      for (std::size_t i = 0; i < sessions.size(); ++i) {
        if (!ended[i] && i < next_to_start) sessions[i]->send(encode_control({}));
      }
      ping();
    });
  }

  void arm_stop_timer(Clock::duration after) {
    stop_timer.expires_after(after);
    stop_timer.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      spdlog::warn("hosts still running {} after the stop: ending their connections",
                   format_duration(Clock::now() - started_at));
      for (auto& s : sessions) s->kill();
    });
  }

  void on_signal(int signal) {
    if (result.signal != 0 || phase == Phase::kAborting) {
      spdlog::warn("{} again: ending every host's connection (their agents stop their workers)",
                   signal_name(signal));
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
    phase = Phase::kStopping;
    spdlog::info("{}: forwarding it to the agents on {} hosts", signal_name(signal),
                 sessions.size());
    for (std::size_t i = 0; i < sessions.size(); ++i) {
      if (!ended[i]) sessions[i]->send(encode_control({Control::Kind::kSignal, signal}));
    }
    // Each agent gives its workers the shutdown grace; beyond it (and the time to hear of it)
    // the connections are ended, which makes every agent stop at once.
    arm_stop_timer(config.shutdown_timeout + cluster.hangup_timeout + std::chrono::seconds(10));
  }


  void maybe_finish() {
    for (std::size_t i = 0; i < sessions.size(); ++i) {
      // Never started (a check failed first): nothing to wait for.
      if (!ended[i] && i < next_to_start) return;
    }
    connect_timer.cancel();
    ping_timer.cancel();
    stop_timer.cancel();
  }

  ClusterResult run() {
    started_at = Clock::now();
    sessions.reserve(cluster.hosts.size());
    ended.assign(cluster.hosts.size(), false);
    for (std::size_t i = 0; i < cluster.hosts.size(); ++i) {
      sessions.push_back(std::make_unique<RemoteSession>(
          io, command_for(i), token,
          RemoteSession::Handlers{[this, i](const Report& r) { on_report(i, r); },
                                  [this, i](int code) { on_ended(i, code); }}));
    }
    spdlog::info("starting agents on {} hosts with {} (at most {} connections at once)",
                 sessions.size(), fmt::join(cluster.ssh_command, " "), cluster.fanout);
    connect_timer.expires_after(cluster.connect_timeout);
    connect_timer.async_wait([this](boost::system::error_code ec) {
      if (!ec) on_connect_timeout();
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

std::vector<std::string> ClusterHead::command_for(std::size_t index) const {
  return impl_->command_for(index);
}

std::vector<std::string> ClusterHead::agent_args(std::size_t index) const {
  return impl_->agent_args(index);
}

}  // namespace ddprun
