#include "agent/agent.hpp"

#include "agent/worker_launch.hpp"

#include <signal.h>

#include <filesystem>
#include <optional>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "agent/failure.hpp"
#include "agent/link_check.hpp"
#include "agent/node_check.hpp"
#include "agent/node_check_table.hpp"
#include "agent/round_channel.hpp"
#include "agent/status_board.hpp"
#include "agent/worker_launch.hpp"
#include "common/error.hpp"
#include "common/exit_codes.hpp"

namespace ddprun {

using namespace std::chrono_literals;

namespace {

// The directory of the program given by path (a script or a binary); the working directory
// for a module or a program found on PATH. Worked out from the names alone: the check must not
// block on a file system that does not answer before its look, which has a deadline.
std::string program_dir(const LaunchConfig& config) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path program(config.program);
  if (!config.module && program.has_parent_path()) {
    return fs::absolute(program, ec).lexically_normal().parent_path().string();
  }
  return fs::current_path(ec).string();
}

}  // namespace

Agent::Agent(const LaunchConfig& config, AgentContext context)
    : config_(config), ctx_(std::move(context)) {
  ctx_.rendezvous->set_event_sink(
      [this](const std::string& name, nlohmann::json fields) { emit(name, std::move(fields)); });
}

Agent::~Agent() {
  ctx_.rendezvous->set_event_sink(nullptr);
  // The runner's exit callback points into this agent: no worker may outlive it.
  try {
    ctx_.runner->stop(SIGKILL, 0s);
  } catch (const std::exception& e) {
    spdlog::error("stopping workers: {}", e.what());
  }
}

void Agent::emit(const std::string& name, nlohmann::json fields) {
  if (ctx_.status != nullptr) ctx_.status->on_event(name, fields);
  if (!ctx_.events) return;
  fields["node"] = round_ ? round_->ranks.group_rank : 0;
  ctx_.events->write(name, std::move(fields));
}

void Agent::on_signal(int signal) {
  int expected = 0;
  if (!signal_.compare_exchange_strong(expected, signal)) return;
  AgentEvent e;
  e.kind = AgentEvent::Kind::kSignal;
  e.signal = signal;
  events_.push(e);
  // A rendezvous or barrier may be blocking this agent's thread in the store: end it.
  ctx_.store->interrupt();
  side_.interrupt();
}

RunResult Agent::result(RunResult::End end, std::string reason) const {
  RunResult r;
  r.end = end;
  r.restarts = restarts_;
  r.reason = std::move(reason);
  r.host = ctx_.host;
  r.max_restarts = config_.max_restarts;
  r.membership_changes = membership_changes_;
  r.attempts = attempts_;
  r.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
  if (round_) {
    r.world_size = round_->ranks.world_size;
    r.group_rank = round_->ranks.group_rank;
  }
  return r;
}

RunResult Agent::run() {
  int stop_signal = SIGKILL;
  auto grace = Clock::duration::zero();
  RunResult r;
  try {
    start_file_timer();
    if (config_.warm_standby) {
      ctx_.runner->keep_standbys(
          standby_templates(config_, ctx_, timers_ != nullptr ? timers_->path() : std::string()));
    }
    return run_rounds();
  } catch (const InterruptedError&) {
    // A signal ended a store call: forward it to any workers, with the usual grace.
    const int sig = signal_.load();
    r = result(RunResult::End::kStopped, fmt::format("stopped by {}", signal_name(sig)));
    r.signal = sig;
    if (round_) {
      announce_stop(ctx_, *round_, sig);
      // Say goodbye too, so that the agent serving the store does not wait for this one.
      say_goodbye(-1);
    }
    stop_signal = sig;
    grace = config_.shutdown_timeout;
  } catch (const std::exception& e) {
    // Usage errors are found before an agent runs; one here is as unexpected as a bug.
    r = classify(e) == ErrorClass::kRendezvous
            ? result(RunResult::End::kRendezvousFailed, e.what())
            : result(RunResult::End::kInternalError, std::string("internal error: ") + e.what());
  }
  try {
    ctx_.runner->stop(stop_signal, grace);
  } catch (const std::exception& e) {
    spdlog::error("stopping workers: {}", e.what());
  }
  return r;
}

// torchrun's FileTimer server, when the job asks for it as torchrun's does.
void Agent::start_file_timer() {
  if (env_value(ctx_.base_env, "TORCHELASTIC_ENABLE_FILE_TIMER") != "1") return;
  auto path = env_value(ctx_.base_env, "TORCHELASTIC_TIMER_FILE");
  if (path.empty()) {
    if (ctx_.log_dir.empty()) throw Error("FileTimer: no log directory to make its FIFO in");
    path = (std::filesystem::path(ctx_.log_dir) / "timer.fifo").string();
  }
  timers_ = std::make_unique<FileTimerServer>(path, events_, [this](int) { progress_.note(); });
  spdlog::info("serving FileTimer requests at {}", path);
}

RunResult Agent::run_rounds() {
  auto& rdzv = *ctx_.rendezvous;
  while (true) {
    auto next = rdzv.next_round(restarts_);
    if (!next.round) return finished_without_this_node(next.job_outcome);
    round_ = std::move(next.round);
    const auto carried_port = std::exchange(next_master_port_, std::nullopt);
    if (round_->ranks_kept) round_->master_port = carried_port;
    restarts_ = round_->restart_count;
    if (ctx_.status != nullptr) ctx_.status->on_round(*round_);
    if (config_.node_check != NodeCheck::kOff && !node_checked_) {
      node_checked_ = true;
      // Every member of the job's first round checks; a node that joins later has nobody to
      // compare with, since the others checked before it came.
      if (round_->id == 0) {
        auto checked = check_nodes();
        if (checked.end) return std::move(*checked.end);
        if (checked.reform) {
          ++membership_changes_;
          rdzv.round_ended(*round_, RoundEnd{});
          continue;
        }
      } else {
        spdlog::info("node check: not run: this node joined the job at round {}, after its first",
                     round_->id);
      }
    }
    const auto started = Clock::now();
    const auto outcome =
        Attempt(config_, ctx_, *round_, events_, signal_, side_,
                [this](const std::string& name, nlohmann::json fields) {
                  emit(name, std::move(fields));
                },
                progress_, timers_.get())
            .run();
    attempts_.push_back(AttemptRecord{
        round_->id, round_->restart_count, round_->ranks, how_it_ended(outcome),
        std::chrono::duration<double>(Clock::now() - started).count()});
    if (outcome.success) return finish_success();
    const auto& f = outcome.failure;
    if (f.kind == Failure::Kind::kMembership) {
      ++membership_changes_;
      spdlog::warn("round {} ends: {}; re-forming without spending a restart", round_->id,
                   f.message);
    } else if (restarts_after(f, restarts_, config_.max_restarts, signal_)) {
      log_restart(f);
      ++restarts_;
      emit("restart", {{"attempt", restarts_}, {"round", round_->id + 1}});
    } else {
      return finish_failure(f, outcome.store_lost);
    }
    next_master_port_ = outcome.end.next_master_port;
    rdzv.round_ended(*round_, outcome.end);
  }
}

std::string Agent::how_it_ended(const AttemptOutcome& outcome) {
  if (outcome.success) return "succeeded";
  const auto& f = outcome.failure;
  switch (f.kind) {
    case Failure::Kind::kWorker:
      return fmt::format("failed: rank {} on {} {}", f.rank, f.host,
                         f.signal ? killed_by(f.signal, f.out_of_memory)
                                  : fmt::format("exited with {}", f.exit_code));
    case Failure::Kind::kMembership:
      return "re-formed: " + f.message;
    case Failure::Kind::kHang:
      return "hung: " + f.message;
    case Failure::Kind::kSignal:
    case Failure::Kind::kAgent:
      return "stopped: " + f.message;
  }
  return "ended";
}

// Every node of the job's first round looks at itself and publishes it; every node judges all
// of them by the same rules and reaches the same verdict. Group rank 0 names every finding,
// each other node its own, so that the console of any node says why the job did not start.
Agent::NodeCheckOutcome Agent::check_nodes() {
  const auto started = Clock::now();
  ProbeInputs inputs;
  inputs.node = round_->ranks.group_rank;
  inputs.host = ctx_.host;
  inputs.log_dir = ctx_.log_dir;
  inputs.log_dir_is_scratch = ctx_.log_dir_is_scratch;
  inputs.program_dir = program_dir(config_);
  inputs.workers = round_->ranks.local_world_size;
  if (const auto visible = ctx_.base_env.find("CUDA_VISIBLE_DEVICES");
      visible != ctx_.base_env.end()) {
    inputs.cuda_visible_devices = visible->second;
  }
  NodeProbe mine = probe_node(inputs);
  mine.serves_store = ctx_.hosts_store;
  mine.min_nodes = config_.min_nodes;
  const int me = round_->ranks.group_rank;
  const int group = round_->ranks.group_world_size;
  // The listener is up before this node's report says where it is.
  std::optional<LinkCheck> links;
  if (config_.node_check_mib > 0 && group > 1) {
    links.emplace();
    mine.link_port = links->port();
    if (mine.link_port == 0) {
      spdlog::warn("node check: no listener for the links check here: {}", links->listen_error());
    }
  }
  const auto read_timeout = config_.rdzv_conf.read_timeout;
  // Another node's report may wait for its look's deadline.
  const auto nodes = exchange_probes(*ctx_.store, round_->prefix, mine, group,
                                     Deadline::after(read_timeout + kNodeProbeTimeout));
  auto findings = judge(nodes);
  std::vector<LinkFigures> measured;
  if (links) {
    // The exchanges wait for the others' pairings too: at most their time, then the read
    // timeout.
    auto m = measure_links(*ctx_.store, round_->prefix, *links, nodes, me,
                           std::uint64_t(config_.node_check_mib) << 20,
                           Deadline::after(read_timeout + 2 * kLinkLooks * kLinkPairingTime));
    measured = std::move(m.links);
    auto on_links = judge_links(measured, nodes, m.norm);
    findings.insert(findings.end(), on_links.begin(), on_links.end());
    auto on_clocks = judge_clocks(measured, nodes);
    findings.insert(findings.end(), on_clocks.begin(), on_clocks.end());
    order_by_node(findings);
  }
  Exclusion exclusion;
  if (config_.node_check == NodeCheck::kExclude) {
    exclusion = plan_exclusion(findings, nodes);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  auto listed = nlohmann::json::array();
  for (const auto& f : findings) {
    listed.push_back({{"node", f.node}, {"host", f.host}, {"what", f.what}});
  }
  // This node's links, both ways: every node's event file has the figures of its own.
  auto own_links = nlohmann::json::array();
  for (const auto& l : measured) {
    if (l.from == me || l.to == me) own_links.push_back(to_json(l));
  }
  nlohmann::json event{{"figures", to_json(mine)}, {"links", std::move(own_links)},
                       {"findings", std::move(listed)}, {"seconds", seconds}};
  if (exclusion.refused.empty() && !exclusion.nodes.empty()) event["excluded"] = exclusion.nodes;
  emit("node_check", std::move(event));
  const bool to_command = static_cast<bool>(ctx_.report_node_check);
  if (to_command && me == 0) {
    ctx_.report_node_check(format_node_check_table(nodes, findings, measured, seconds),
                           findings.size());
  }
  for (const auto& f : findings) {
    if (me == 0 || f.node == me) {
      spdlog::log(to_command ? spdlog::level::debug : spdlog::level::warn, "node check: {}",
                  f.line());
    }
  }
  if (findings.empty()) {
    spdlog::log(to_command ? spdlog::level::debug : spdlog::level::info,
                "node check: {} node(s), nothing found{}{} ({:.0f} ms)", nodes.size(),
                gpus_summary(nodes), links_summary(measured), seconds * 1e3);
    return {};
  }
  // What every node decides alike, said once on the command's console.
  const auto once = to_command && me != 0 ? spdlog::level::debug : spdlog::level::warn;
  switch (config_.node_check) {
    case NodeCheck::kExclude:
      if (!exclusion.refused.empty()) {
        return {false, refuse(fmt::format("--node-check=exclude: {} finding(s), and {}; the "
                                          "first: {}",
                                          findings.size(), exclusion.refused,
                                          findings.front().line()))};
      }
      if (!exclusion.nodes.empty()) return exclude(exclusion.nodes, findings, nodes);
      spdlog::log(once, "node check: {} finding(s), each about a link between two nodes the "
                  "check cannot tell apart; starting with every node (--node-check=exclude)",
                  findings.size());
      return {};
    case NodeCheck::kRefuse:
      return {false, refuse(fmt::format("--node-check=refuse: {} finding(s), the first: {}",
                                        findings.size(), findings.front().line()))};
    case NodeCheck::kWarn:
    case NodeCheck::kOff:
      break;
  }
  spdlog::log(once, "node check: {} finding(s) among {} node(s); starting anyway "
              "(--node-check=warn)",
              findings.size(), nodes.size());
  return {};
}

// Every node ends with kExitNodeCheck. The round's outcome says why, for the nodes that were
// not in it (an elastic job's spares, a node that came late): they end with the same code
// instead of waiting for a round.
RunResult Agent::refuse(std::string reason) {
  auto refused = result(RunResult::End::kNodeCheckRefused, std::move(reason));
  publish_check_outcome(Failure::Kind::kAgent, kExitNodeCheck, refused.reason, "the refusal");
  ctx_.rendezvous->job_ended();
  say_goodbye(-1);
  return refused;
}

// The nodes named leave the job, each with kExitNodeCheck; the others end the round as a change
// of members and form the next one without them (it waits the last call, as any round does,
// so that a spare may take their place).
Agent::NodeCheckOutcome Agent::exclude(const std::vector<int>& excluded,
                                       const std::vector<Finding>& findings,
                                       const std::vector<NodeProbe>& nodes) {
  const int me = round_->ranks.group_rank;
  std::string names;
  for (int node : excluded) {
    names += fmt::format("{}node {} ({})", names.empty() ? "" : ", ", node, nodes[node].host);
  }
  const auto left = nodes.size() - excluded.size();
  if (std::find(excluded.begin(), excluded.end(), me) != excluded.end()) {
    const auto mine = std::find_if(findings.begin(), findings.end(),
                                   [&](const Finding& f) { return f.node == me && f.link_to < 0; });
    spdlog::error("node check: this node leaves the job; the other {} node(s) go on without it "
                  "(--node-check=exclude)",
                  left);
    // Nothing of this job watches this node any more; the store's host, not being excluded,
    // does not wait for its goodbye.
    ctx_.rendezvous->job_ended();
    return {false, result(RunResult::End::kNodeCheckExcluded,
                          fmt::format("--node-check=exclude: this node was left out of the job: "
                                      "{}",
                                      mine->what))};
  }
  // Said once on the command's console: by the first node that goes on.
  int first_left = 0;
  while (std::find(excluded.begin(), excluded.end(), first_left) != excluded.end()) ++first_left;
  spdlog::log(ctx_.report_node_check && me != first_left ? spdlog::level::debug
                                                         : spdlog::level::warn,
              "node check: going on without {}: {} of {} node(s) (--node-check=exclude)", names,
              left, nodes.size());
  publish_check_outcome(Failure::Kind::kMembership, 0, "--node-check=exclude left out " + names,
                        "the exclusion");
  return {true, std::nullopt};
}

// The first round's outcome, decided by the check before any worker: every member acts on its
// own verdict, so the outcome is for the nodes outside the round (spares, latecomers), and a
// store that fails here is only said.
void Agent::publish_check_outcome(Failure::Kind kind, int exit_code, const std::string& message,
                                  const char* what) {
  try {
    RoundChannel(*ctx_.store, *round_, config_.rdzv_conf.read_timeout)
        .publish_outcome(agent_failure(ctx_.host, round_->ranks.group_rank, round_->id, kind,
                                       exit_code, message)
                             .to_json());
  } catch (const Error& e) {
    spdlog::warn("node check: publishing {}: {}", what, e.what());
  }
}

// A spare, or a node that came after the end: the job's outcome was decided without it.
RunResult Agent::finished_without_this_node(const std::string& outcome) const {
  if (outcome == kRoundSucceeded) {
    return result(RunResult::End::kSucceeded, "the job finished without this node");
  }
  auto f = Failure::from_json(outcome);
  auto r = result(RunResult::End::kFailed,
                  "the job failed without this node: " +
                      (f.kind == Failure::Kind::kWorker
                           ? fmt::format("rank {} on {} exited with code {}", f.rank, f.host,
                                         f.exit_code)
                           : f.message));
  r.root_cause = std::move(f);
  return r;
}

RunResult Agent::finish_success() {
  ctx_.rendezvous->job_ended();
  say_goodbye(-1);
  return result(RunResult::End::kSucceeded,
                fmt::format("all {} workers succeeded", round_->ranks.world_size));
}

RunResult Agent::finish_failure(const Failure& f, bool store_lost) {
  ctx_.rendezvous->job_ended();
  // With the store gone there is nobody to say goodbye to.
  if (!store_lost) say_goodbye(f.lost_node);
  auto r = result(RunResult::End::kFailed,
                  f.kind == Failure::Kind::kWorker
                      ? fmt::format("rank {} on {} failed with exit code {}", f.rank, f.host,
                                    f.exit_code)
                      : f.message);
  r.root_cause = f;
  return r;
}

void Agent::log_restart(const Failure& f) const {
  const auto what = f.kind == Failure::Kind::kWorker
                        ? fmt::format("rank {} on {}: exit code {}", f.rank, f.host, f.exit_code)
                        : f.message;
  spdlog::warn("attempt {} failed ({}); restarting all workers ({} of {} restarts left)",
               round_->id, what, config_.max_restarts - restarts_ - 1, config_.max_restarts);
}

// The end of the job: this node says goodbye, and the node serving the store waits (bounded)
// until every node has, before the store goes away. A signal interrupts this agent's own
// connection, before the goodbye or during it, so the goodbye then goes through a fresh one:
// without it the node serving the store would wait its whole close timeout for this node.
void Agent::say_goodbye(int lost_node) {
  const auto deadline = Deadline::after(config_.rdzv_conf.close_timeout);
  const auto channel = [&](store::Store& store) {
    return RoundChannel(store, *round_, config_.rdzv_conf.read_timeout);
  };
  try {
    store::Store* store = ctx_.store;
    std::unique_ptr<store::Store> fresh;
    bool left = false;
    if (signal_ == 0) {
      try {
        channel(*store).leave(deadline);
        left = true;
      } catch (const InterruptedError&) {
      }
    }
    if (!left) {
      fresh = ctx_.open_store(deadline.min(Deadline::after(5s)));
      store = fresh.get();
      channel(*store).leave(deadline);
    }
    if (ctx_.hosts_store) channel(*store).wait_for_goodbyes(lost_node, deadline);
  } catch (const Error& e) {
    spdlog::warn("leaving the rendezvous: {}", e.what());
  }
}

}  // namespace ddprun
