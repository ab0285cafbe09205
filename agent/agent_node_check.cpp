// The agent's --node-check: the first round's members look at themselves and each other and
// reach one verdict (check_nodes); a node that comes after the first round looks at itself
// against what the first round's members saw, before it asks to join (check_late_node), or
// before its workers start when it joined a later round without looking (check_joined_late).

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "agent/agent.hpp"
#include "agent/attempt.hpp"
#include "agent/link_check.hpp"
#include "agent/node_check.hpp"
#include "agent/node_check_table.hpp"
#include "agent/round_channel.hpp"
#include "common/error.hpp"
#include "common/exit_codes.hpp"

namespace ddprun {

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

ProbeInputs Agent::probe_inputs(int node, int workers) const {
  ProbeInputs inputs;
  inputs.node = node;
  inputs.host = ctx_.host;
  inputs.log_dir = ctx_.log_dir;
  inputs.log_dir_is_scratch = ctx_.log_dir_is_scratch;
  inputs.program_dir = program_dir(config_);
  inputs.workers = workers;
  if (const auto visible = ctx_.base_env.find("CUDA_VISIBLE_DEVICES");
      visible != ctx_.base_env.end()) {
    inputs.cuda_visible_devices = visible->second;
  }
  return inputs;
}

// Every node of the job's first round looks at itself and publishes it; every node judges all
// of them by the same rules and reaches the same verdict. Group rank 0 names every finding,
// each other node its own, so that the console of any node says why the job did not start.
Agent::NodeCheckOutcome Agent::check_nodes() {
  const auto started = Clock::now();
  NodeProbe mine = probe_node(probe_inputs(round_->ranks.group_rank,
                                           round_->ranks.local_world_size));
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
  // This node's links, both ways: every node's event file has the figures of its own.
  auto own_links = nlohmann::json::array();
  for (const auto& l : measured) {
    if (l.from == me || l.to == me) own_links.push_back(to_json(l));
  }
  nlohmann::json event{{"figures", to_json(mine)}, {"links", std::move(own_links)},
                       {"findings", to_json(findings)}, {"seconds", seconds}};
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

// A node that comes after the job's first round has nobody to measure links or clocks with: the
// first round's members are running the job. It looks at itself and is judged as one more
// member of that round, by the same rules, against what the members saw, before it asks to
// join: under refuse and exclude a node named stays out, and the job runs on undisturbed
// (asking to join would have ended its round).
std::optional<RunResult> Agent::check_late_node(const FirstRound& first, Deadline reports_by) {
  const auto started = Clock::now();
  // Numbered after the members, as one more of them.
  NodeProbe mine = probe_node(probe_inputs(first.members, config_.nproc_per_node));
  mine.serves_store = ctx_.hosts_store;
  mine.min_nodes = config_.min_nodes;
  auto [findings, compared] =
      judge_late(read_probes(*ctx_.store, first.prefix, first.members, reports_by,
                             config_.rdzv_conf.read_timeout),
                 mine);
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  emit("node_check", {{"figures", to_json(mine)},
                      {"links", nlohmann::json::array()},
                      {"findings", to_json(findings)},
                      {"seconds", seconds},
                      {"late", true},
                      {"compared_with", compared}});
  if (findings.empty()) {
    spdlog::info("node check: this node comes after the job's first round; nothing found, "
                 "against {} of that round's {} node(s) ({:.0f} ms)",
                 compared, first.members, seconds * 1e3);
    return std::nullopt;
  }
  for (const auto& f : findings) {
    spdlog::warn("node check: this node ({}): {}", f.host, f.what);
  }
  if (config_.node_check == NodeCheck::kWarn) {
    spdlog::warn("node check: {} finding(s) on this node; joining the job anyway "
                 "(--node-check=warn)",
                 findings.size());
    return std::nullopt;
  }
  if (mine.serves_store) {
    // Staying out would end the job: its store goes with this agent.
    spdlog::warn("node check: {} finding(s) on this node, which serves the job's rendezvous "
                 "store and cannot stay out without ending the job; joining it (--node-check={})",
                 findings.size(), to_string(config_.node_check));
    return std::nullopt;
  }
  return result(RunResult::End::kNodeCheckExcluded,
                fmt::format("--node-check={}: this node came after the job's first round and "
                            "stays out of it: {}",
                            to_string(config_.node_check), findings.front().what));
}

// A node that found the first round still open but was not taken into it (a spare while the
// round was full, or one that came as it closed) is a member of a later round before it looks.
// It looks now, before its own workers start. One that stays out leaves the round as a node
// that stops does: its outcome, a change of members, has the others re-form without it,
// spending no restart.
std::optional<RunResult> Agent::check_joined_late() {
  const auto first = ctx_.rendezvous->closed_first_round();
  if (!first) {
    spdlog::info("node check: not run: this node joined the job at round {}, after its first",
                 round_->id);
    return std::nullopt;
  }
  // The first round's members published their reports before any later round formed; one
  // missing is a member that died first. The others watch this node's keep-alive meanwhile,
  // which beats only once its workers start: the look and any wait for a report that may never
  // come take no longer than one beat.
  auto end = check_late_node(*first, Deadline::after(config_.rdzv_conf.keep_alive_interval));
  if (!end) return std::nullopt;
  announce_leaving(ctx_, *round_,
                   agent_failure(ctx_.host, round_->ranks.group_rank, round_->restart_count,
                                 Failure::Kind::kMembership, kExitNodeCheck,
                                 fmt::format("node {} ({}) left: {}", round_->ranks.group_rank,
                                             ctx_.host, end->reason)),
                   "its leaving");
  ctx_.rendezvous->job_ended();
  return end;
}

// Every node ends with kExitNodeCheck. The round's outcome says why, for the nodes that were
// not in it (an elastic job's spares, a node that came late): they end with the same code
// instead of waiting for a round.
RunResult Agent::refuse(std::string reason) {
  auto refused = result(RunResult::End::kNodeCheckRefused, std::move(reason));
  publish_check_outcome(Failure::Kind::kAgent, kExitNodeCheck, refused.reason, "the refusal");
  ctx_.rendezvous->job_ended();
  ctx_.rendezvous->record_job_end("refused by the node check", end_record_deadline());
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
  publish_check_outcome(Failure::Kind::kMembership, kExitNodeCheck,
                        "--node-check=exclude left out " + names, "the exclusion");
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

}  // namespace ddprun
