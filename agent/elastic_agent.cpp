#include "agent/elastic_agent.hpp"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "agent/elastic_rendezvous.hpp"
#include "common/error.hpp"

namespace ddprun {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

void replace_all(std::string& s, const std::string& token, const std::string& value) {
  for (auto pos = s.find(token); pos != std::string::npos; pos = s.find(token, pos + value.size())) {
    s.replace(pos, token.size(), value);
  }
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string render_prefix(const std::string& tmpl, int rank, int local_rank, int node,
                          const std::string& host, const std::string& role) {
  std::string out = tmpl;
  replace_all(out, "{rank}", std::to_string(rank));
  replace_all(out, "{local_rank}", std::to_string(local_rank));
  replace_all(out, "{node}", std::to_string(node));
  replace_all(out, "{host}", host);
  replace_all(out, "{role}", role);
  return out;
}

ElasticAgent::ElasticAgent(const LaunchConfig& config, AgentContext context)
    : config_(config), ctx_(std::move(context)) {}

ElasticAgent::~ElasticAgent() {
  heartbeat_.reset();
  stop_watcher();
  // The runner's exit callback points into this agent: no worker may outlive it.
  try {
    ctx_.runner->stop(SIGKILL, 0s);
  } catch (const std::exception& e) {
    spdlog::error("stopping workers: {}", e.what());
  }
}

std::string ElasticAgent::key(const std::string& name) const { return prefix_ + "/" + name; }

void ElasticAgent::emit(const std::string& name, nlohmann::json fields) {
  if (!ctx_.events) return;
  fields["node"] = rdzv_.ranks.group_rank;
  ctx_.events->write(name, std::move(fields));
}

std::string ElasticAgent::attempt_dir() const {
  return (fs::path(ctx_.log_dir) /
          fmt::format("attempt_{}", config_.is_static() ? attempt_ : round_))
      .string();
}

void ElasticAgent::on_signal(int signal) {
  int expected = 0;
  if (!signal_.compare_exchange_strong(expected, signal)) return;
  AgentEvent e;
  e.kind = AgentEvent::Kind::kSignal;
  e.signal = signal;
  e.attempt = -1;
  events_.push(e);
  // A rendezvous or barrier may be blocking the main thread in the store: end it.
  ctx_.store->interrupt();
}

RunResult ElasticAgent::run() {
  auto result = run_job();
  emit("job_finished", {{"exit_code", result.exit_code}, {"restarts", result.restarts},
                        {"reason", result.reason}});
  return result;
}

RunResult ElasticAgent::run_job() {
  RunResult result;
  int stop_signal = SIGKILL;
  auto grace = Clock::duration::zero();
  try {
    return config_.is_static() ? run_static() : run_elastic();
  } catch (const InterruptedError&) {
    // A signal ended a store call: forward it to any workers, with the usual grace.
    const int sig = signal_.load();
    result.exit_code = 128 + sig;
    result.reason = fmt::format("stopped by {}", signal_name(sig));
    announce_signal(sig);
    // Say goodbye too, so that the agent serving the store does not wait for this one.
    if (rendezvous_done_) leave();
    stop_signal = sig;
    grace = config_.shutdown_timeout;
  } catch (const TimeoutError& e) {
    result.exit_code = kExitRendezvous;
    result.reason = e.what();
  } catch (const RendezvousError& e) {
    result.exit_code = kExitRendezvous;
    result.reason = e.what();
  } catch (const ConnectionError& e) {
    result.exit_code = kExitRendezvous;
    result.reason = e.what();
  } catch (const std::exception& e) {
    result.exit_code = kExitInternal;
    result.reason = std::string("internal error: ") + e.what();
  }
  heartbeat_.reset();
  stop_watcher();
  try {
    ctx_.runner->stop(stop_signal, grace);
  } catch (const std::exception& e) {
    spdlog::error("stopping workers: {}", e.what());
  }
  return result;
}

RunResult ElasticAgent::run_static() {
  rendezvous();
  master_addr_ = config_.master_addr;
  while (true) {
    round_ = attempt_;
    prefix_ = fmt::format("attempt/{}", attempt_);
    start_barrier();
    auto outcome = run_attempt();
    if (outcome.success) return finish_success();
    const auto& f = outcome.failure;
    if (retryable(f) && attempt_ < config_.max_restarts && signal_ == 0) {
      log_restart(f);
      ++attempt_;
      emit("restart", {{"attempt", attempt_}});
      continue;
    }
    return finish_failure(f);
  }
}

RunResult ElasticAgent::finish_success() {
  leave();
  RunResult result;
  result.restarts = attempt_;
  result.reason = fmt::format("all {} workers succeeded", rdzv_.ranks.world_size);
  return result;
}

void ElasticAgent::log_restart(const Failure& f) const {
  spdlog::warn("{} {} failed (rank {} on {}: exit code {}); restarting all workers ({} of {} "
               "restarts left)",
               config_.is_static() ? "attempt" : "round", round_, f.rank, f.host, f.exit_code,
               config_.max_restarts - attempt_ - 1, config_.max_restarts);
}

RunResult ElasticAgent::finish_failure(const Failure& f) {
  if (f.lost_node >= 0) lost_nodes_ = 1;
  std::fputs(format_root_cause(f, rdzv_.ranks.world_size).c_str(), stderr);
  // With the store gone there is nobody to say goodbye to.
  if (!store_lost_) leave();
  RunResult result;
  result.restarts = attempt_;
  result.root_cause = f;
  result.exit_code = f.exit_code != 0 ? f.exit_code : kExitInternal;
  result.reason = f.kind == Failure::Kind::kWorker
                      ? fmt::format("rank {} on {} failed with exit code {}", f.rank, f.host,
                                    f.exit_code)
                      : f.message;
  return result;
}

std::vector<WorkerLaunch> ElasticAgent::make_launches(int master_port) {
  const auto& r = rdzv_.ranks;
  std::vector<WorkerLaunch> launches;
  for (int local = 0; local < r.local_world_size; ++local) {
    auto dir = fs::path(attempt_dir()) / std::to_string(local);
    fs::create_directories(dir);
    WorkerEnvInput in;
    in.ranks = r;
    in.local_rank = local;
    in.role = config_.role;
    in.master_addr = master_addr_;
    in.master_port = master_port;
    in.restart_count = attempt_;
    in.max_restarts = config_.max_restarts;
    in.run_id = config_.rdzv_id;
    in.error_file = (dir / "error.json").string();
    in.set_omp_threads = r.local_world_size > 1;
    fs::remove(in.error_file);

    WorkerLaunch w;
    w.local_rank = local;
    w.rank = r.global_rank(local);
    w.argv = substitute_local_rank(config_.argv, local);
    w.env = to_env_strings(build_worker_env(ctx_.base_env, in));
    const auto redirect = config_.redirects.for_rank(local);
    const auto tee = config_.tee.for_rank(local);
    auto has = [](Std s, Std bit) {
      return (static_cast<int>(s) & static_cast<int>(bit)) != 0;
    };
    const bool shown = !config_.local_ranks_filter ||
                       std::count(config_.local_ranks_filter->begin(),
                                  config_.local_ranks_filter->end(), local) > 0;
    auto& o = w.output;
    o.stdout_to_console = shown && (!has(redirect, Std::kOut) || has(tee, Std::kOut));
    o.stderr_to_console = shown && (!has(redirect, Std::kErr) || has(tee, Std::kErr));
    if (has(redirect, Std::kOut) || has(tee, Std::kOut)) o.stdout_file = (dir / "stdout.log").string();
    if (has(redirect, Std::kErr) || has(tee, Std::kErr)) o.stderr_file = (dir / "stderr.log").string();
    o.prefix = render_prefix(config_.log_line_prefix, w.rank, local, r.group_rank, ctx_.host,
                             config_.role);
    o.raw = config_.raw_output;
    launches.push_back(std::move(w));
  }
  return launches;
}

ElasticAgent::Outcome ElasticAgent::run_attempt() {
  // Every store call gets a fresh deadline: an attempt may run for days.
  const auto op = [&] { return Deadline::after(config_.rdzv_conf.read_timeout); };
  const auto& r = rdzv_.ranks;
  start_watcher();
  start_heartbeat();
  if (r.group_rank == 0) {
    ctx_.store->set(key("master_port"), std::to_string(ctx_.reserve_master_port()), op());
  }
  // Group rank 0 publishes the port right after the rendezvous; if it has not within the
  // keep-alive deadline it is gone, and waiting longer would only hang.
  int master_port = 0;
  const auto keep_alive = config_.rdzv_conf.keep_alive_interval *
                          std::max(1, config_.rdzv_conf.keep_alive_max_attempt);
  try {
    master_port = static_cast<int>(parse_counter(
        ctx_.store->get(key("master_port"), Deadline::after(keep_alive + 5s)), "master_port"));
  } catch (const TimeoutError&) {
    Failure f = agent_failure(fmt::format("node 0 ({}) did not publish the workers' master port "
                                          "within {}", rdzv_.nodes.empty() ? "?" : rdzv_.nodes[0].host,
                                          format_duration(keep_alive + 5s)));
    f.kind = config_.is_static() ? Failure::Kind::kAgent : Failure::Kind::kMembership;
    f.exit_code = kExitRendezvous;
    f.lost_node = 0;
    auto decided = decide(publish_failure(f));
    heartbeat_.reset();
    stop_watcher();
    return decided;
  }

  // Events are tagged with the round (static: the attempt), so a late event of an earlier one
  // is recognised and dropped.
  const int attempt = round_;
  auto launches = make_launches(master_port);
  spdlog::info("attempt {}: starting {} workers (ranks {}..{} of {}), MASTER_ADDR={} "
               "MASTER_PORT={}", attempt, r.local_world_size, r.base_rank,
               r.base_rank + r.local_world_size - 1, r.world_size, master_addr_,
               master_port);
  try {
    auto pids = ctx_.runner->start(launches, [this, attempt](const WorkerExit& exit) {
      AgentEvent e;
      e.kind = AgentEvent::Kind::kWorkerExited;
      e.attempt = attempt;
      e.exit = exit;
      events_.push(e);
    });
    emit("workers_started", {{"attempt", attempt}, {"pids", pids}, {"master_port", master_port}});
  } catch (const Error& e) {
    auto f = agent_failure(e.what());
    f.exit_code = kExitCannotStart;
    auto decided = decide(publish_failure(f));
    ctx_.runner->stop(SIGKILL, 0s);  // the ranks that did start
    heartbeat_.reset();
    stop_watcher();
    return decided;
  }

  int running = r.local_world_size;
  bool published = false;
  std::optional<Outcome> outcome;
  // Once this node's workers all succeeded, wait for the others at most the exit barrier.
  std::optional<Deadline> barrier;
  while (!outcome) {
    auto event = events_.pop(barrier ? *barrier : Deadline::after(1h));
    if (!event) {
      if (!barrier) continue;  // an hour without events: keep watching
      spdlog::warn("exit barrier: other nodes still running after {}; leaving with success",
                   format_duration(config_.exit_barrier_timeout));
      heartbeat_.reset();
      ctx_.store->set(key(fmt::format("hb/{}", r.group_rank)), kHeartbeatDone, op());
      outcome = Outcome{true, {}};
      break;
    }
    switch (event->kind) {
      case AgentEvent::Kind::kWorkerExited: {
        if (event->attempt != attempt) break;
        const auto& exit = event->exit;
        --running;
        emit("worker_exited",
             {{"attempt", attempt}, {"rank", exit.rank}, {"local_rank", exit.local_rank},
              {"pid", exit.pid}, {"exit_code", exit.exit_code}, {"signal", exit.signal},
              {"exit_mono", std::chrono::duration<double>(exit.when.time_since_epoch()).count()}});
        if (exit.succeeded()) {
          spdlog::debug("rank {} (local {}) exited 0", exit.rank, exit.local_rank);
          if (running == 0 && !published) {
            published = true;
            auto done = ctx_.store->add(key("succeeded"), 1, op());
            if (done == r.group_world_size) {
              ctx_.store->compare_set(key("outcome"), "", kSuccess, op());
            }
            // The agent serving the store stays until the others are done: leaving would take
            // the store away from nodes that are still training.
            if (!ctx_.hosts_store) barrier = Deadline::after(config_.exit_barrier_timeout);
          }
          break;
        }
        spdlog::error("rank {} (local rank {}, pid {}) on {} {}", exit.rank, exit.local_rank,
                      exit.pid, ctx_.host,
                      exit.signal ? "was killed by " + signal_name(exit.signal)
                                  : fmt::format("exited with code {}", exit.exit_code));
        {
          auto error_file = fs::path(attempt_dir()) / std::to_string(exit.local_rank) / "error.json";
          auto f = worker_failure(exit, error_file.string(), ctx_.host, r.group_rank, attempt);
          record_failure(f);
          if (!published) {
            published = true;
            const auto json = f.to_json();
            const auto value = publish_failure(f);
            outcome_mine_ = value == json;
            outcome = decide(value);
          }
        }
        break;
      }
      case AgentEvent::Kind::kOutcome:
        if (event->attempt == attempt) outcome = decide(event->text);
        break;
      case AgentEvent::Kind::kSignal: {
        spdlog::warn("received {}: stopping workers", signal_name(event->signal));
        announce_signal(event->signal);
        Failure f = agent_failure(fmt::format("the agent on {} received {}", ctx_.host,
                                              signal_name(event->signal)));
        f.kind = Failure::Kind::kSignal;
        f.signal = event->signal;
        f.exit_code = 128 + event->signal;
        outcome = Outcome{false, f};
        break;
      }
      case AgentEvent::Kind::kStoreLost: {
        if (event->attempt != attempt) break;
        outcome = Outcome{false, agent_failure("lost the rendezvous store: " + event->text)};
        outcome->failure.exit_code = kExitRendezvous;
        store_lost_ = true;
        break;
      }
    }
  }

  emit("attempt_decided",
       {{"attempt", attempt}, {"success", outcome->success},
        {"root_cause", outcome->success ? nlohmann::json() : nlohmann::json::parse(outcome->failure.to_json())}});
  // Forward the signal that stopped us, else SIGTERM; SIGKILL after the shutdown timeout.
  const int stop_signal = signal_ != 0 ? signal_.load() : SIGTERM;
  if (running > 0) {
    spdlog::info("stopping {} local worker(s) with {}", running, signal_name(stop_signal));
  }
  ctx_.runner->stop(stop_signal, config_.shutdown_timeout);
  emit("workers_stopped", {{"attempt", attempt}});
  // Workers that failed on their own while the job was stopping are candidates for the root
  // cause too; the ones our own signal ended are not.
  while (auto late = events_.pop(Deadline::after(0s))) {
    if (late->kind == AgentEvent::Kind::kSignal) {
      events_.push(*late);  // still to be acted on by the caller
      break;
    }
    if (late->kind != AgentEvent::Kind::kWorkerExited || late->attempt != attempt) continue;
    const auto& exit = late->exit;
    if (exit.succeeded()) continue;
    auto error_file = fs::path(attempt_dir()) / std::to_string(exit.local_rank) / "error.json";
    // One that our signal ended counts only if it had already failed on its own (it wrote its
    // error file): it may have been busy exiting when the stop came.
    const bool stopped_by_us = exit.signal == stop_signal || exit.signal == SIGKILL;
    if (stopped_by_us && !fs::exists(error_file)) continue;
    record_failure(worker_failure(exit, error_file.string(), ctx_.host, r.group_rank, attempt));
  }
  heartbeat_.reset();
  stop_watcher();
  if (!outcome->success && outcome->failure.kind == Failure::Kind::kWorker) {
    outcome->failure = resolve_root_cause(outcome->failure);
  }
  outcome_mine_ = false;
  return *outcome;
}

Failure ElasticAgent::agent_failure(const std::string& message) const {
  Failure f;
  f.kind = Failure::Kind::kAgent;
  f.host = ctx_.host;
  f.node = rdzv_.ranks.group_rank;
  f.pid = static_cast<int>(getpid());
  f.attempt = attempt_;
  f.unix_time = unix_now();
  f.message = message;
  f.exit_code = kExitInternal;
  return f;
}

}  // namespace ddprun
