#include "cluster/cluster_report.hpp"

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "agent/failure.hpp"
#include "common/deadline.hpp"
#include "common/exit_codes.hpp"
#include "rendezvous/rank_assignment.hpp"

namespace ddprun {

namespace {

using nlohmann::json;

// The host whose result carries the job's root cause: the earliest failure in time.
const HostOutcome* root_cause_host(const ClusterResult& r) {
  const HostOutcome* best = nullptr;
  double best_time = 0;
  for (const auto& h : r.hosts) {
    if (!h.result || !h.result->contains("root_cause") || (*h.result)["root_cause"].is_null()) {
      continue;
    }
    // Once this command stopped the others for a host that left, their signal is not a cause.
    if (r.stopped_for >= 0 && (*h.result)["root_cause"].value("kind", 0) ==
                                  static_cast<int>(Failure::Kind::kSignal)) {
      continue;
    }
    const double t = (*h.result)["root_cause"].value("unix_time", 0.0);
    if (best == nullptr || t < best_time) {
      best = &h;
      best_time = t;
    }
  }
  return best;
}

int result_code(const HostOutcome& h) { return h.result ? h.result->value("exit_code", 0) : -1; }

// "0..1 of 4" from an agent summary's last attempt.
std::string last_ranks_text(const json& summary) {
  const auto& attempts = summary.value("attempts", json::array());
  if (attempts.empty()) return "-";
  const auto& a = attempts.back();
  NodeRanks ranks;
  ranks.base_rank = a.value("base_rank", 0);
  ranks.local_world_size = a.value("local_world_size", 0);
  ranks.world_size = a.value("world_size", 0);
  return ranks_text(ranks);
}

std::string ended_text(const HostOutcome& h) {
  if (!h.result) return h.problem.empty() ? "no result" : h.problem;
  const auto& attempts = h.result->value("attempts", json::array());
  if (!attempts.empty()) return attempts.back().value("ended", std::string());
  return h.result->value("reason", std::string());
}

}  // namespace

int exit_code_of(const ClusterResult& r) {
  if (r.preflight_failed) return kExitHosts;
  if (r.signal != 0) return 128 + r.signal;
  if (const auto* h = root_cause_host(r)) {
    const int code = (*h->result)["root_cause"].value("exit_code", 0);
    return code != 0 ? code : kExitInternal;
  }
  if (r.stopped_for >= 0) {
    // The host that left is the job's end, not the others this command stopped after it.
    const int code = result_code(r.hosts.at(static_cast<std::size_t>(r.stopped_for)));
    return code > 0 ? code : kExitHosts;
  }
  bool lost = false;
  bool succeeded = false;
  for (const auto& h : r.hosts) {
    // A node --node-check=exclude left out ended with 120 before the job began without it.
    if (!h.result || h.result->value("left_out", false)) {
      lost = true;
    } else if (result_code(h) != 0) {
      return result_code(h);
    } else {
      succeeded = true;
    }
  }
  // Elastic: the survivors finishing the job is a success, whoever was lost on the way.
  if (lost && !(r.elastic && succeeded)) return kExitHosts;
  return kExitOk;
}

std::string format_check_failures(const ClusterResult& r) {
  std::size_t failing = 0;
  std::size_t width = 4;
  for (const auto& h : r.hosts) {
    if (!h.problem.empty()) ++failing;
    width = std::max(width, h.spec.host.size());
  }
  std::string out = fmt::format("ddprun: cannot start the job: {} of {} host(s) could not be "
                                "started or failed their checks; nothing was started:\n",
                                failing, r.hosts.size());
  for (const auto& h : r.hosts) {
    if (h.problem.empty()) continue;
    out += fmt::format("  {:<{}}  node {}: {}\n", h.spec.host, width, h.node, h.problem);
  }
  return out;
}

std::string format_cluster_summary(const ClusterResult& r) {
  std::vector<std::string> ranks;
  std::size_t host_width = 4;
  std::size_t rank_width = 5;
  for (const auto& h : r.hosts) {
    ranks.push_back(h.result ? last_ranks_text(*h.result) : std::string("-"));
    host_width = std::max(host_width, h.spec.host.size());
    rank_width = std::max(rank_width, ranks.back().size());
  }
  std::string out = fmt::format("Job summary ({} hosts, run id {}):\n", r.hosts.size(), r.run_id);
  out += fmt::format("  {:<4}  {:<{}}  {:<{}}  {:>8}  {:>7}  {}\n", "node", "host", host_width,
                     "ranks", rank_width, "attempts", "time", "ended");
  int restarts = 0;
  int max_restarts = 0;
  int changes = 0;
  for (std::size_t i = 0; i < r.hosts.size(); ++i) {
    const auto& h = r.hosts[i];
    const auto attempts =
        h.result ? std::to_string(h.result->value("attempts", json::array()).size()) : "-";
    const auto time = h.result ? format_elapsed(h.result->value("seconds", 0.0)) : "-";
    out += fmt::format("  {:<4}  {:<{}}  {:<{}}  {:>8}  {:>7}  {}\n", h.node, h.spec.host,
                       host_width, ranks[i], rank_width, attempts, time, ended_text(h));
    if (h.result) {
      restarts = std::max(restarts, h.result->value("restarts", 0));
      max_restarts = std::max(max_restarts, h.result->value("max_restarts", 0));
      changes = std::max(changes, h.result->value("membership_changes", 0));
    }
  }
  out += fmt::format("  restarts {} of {}, membership changes {}, total {}\n", restarts,
                     max_restarts, changes, format_elapsed(r.seconds));
  return out;
}

json cluster_summary_json(const ClusterResult& r) {
  auto hosts = json::array();
  for (const auto& h : r.hosts) {
    hosts.push_back({{"host", h.spec.host},
                     {"node", h.node},
                     {"problem", h.problem},
                     {"exit_code", h.code},
                     {"agent", h.result ? *h.result : json()}});
  }
  return {{"hosts", hosts}, {"run_id", r.run_id}, {"seconds", r.seconds},
          {"exit_code", exit_code_of(r)}, {"signal", r.signal}};
}

void report_cluster(const ClusterResult& r) {
  const int code = exit_code_of(r);
  if (r.preflight_failed) {
    std::fputs(format_check_failures(r).c_str(), stderr);
    return;
  }
  if (code != 0 || spdlog::default_logger()->should_log(spdlog::level::info)) {
    std::fputs(format_cluster_summary(r).c_str(), stderr);
  }
  const auto* cause = root_cause_host(r);
  if (cause != nullptr) {
    auto failure = Failure::from_json((*cause->result)["root_cause"].dump());
    std::fputs(format_root_cause(failure, cause->result->value("world_size", 0)).c_str(), stderr);
  }
  if (code == 0) {
    spdlog::info("job finished on {} hosts: every worker succeeded", r.hosts.size());
    return;
  }
  std::string reason;
  if (r.signal != 0) {
    reason = fmt::format("stopped by {}", signal_name(r.signal));
  } else if (cause != nullptr) {
    reason = cause->result->value("reason", std::string());
  } else if (r.stopped_for >= 0) {
    const auto& h = r.hosts.at(static_cast<std::size_t>(r.stopped_for));
    reason = fmt::format("host {} (node {}) left the job, which could not go on without it: {}",
                         h.spec.host, h.node,
                         h.result ? h.result->value("reason", std::string()) : h.problem);
  } else {
    for (const auto& h : r.hosts) {
      if (!h.problem.empty()) {
        reason = fmt::format("host {} (node {}): {}", h.spec.host, h.node, h.problem);
        break;
      }
      if (h.result && result_code(h) != 0) {
        reason = fmt::format("host {} (node {}): {}", h.spec.host, h.node,
                             h.result->value("reason", std::string()));
        break;
      }
    }
  }
  spdlog::error("job failed (exit code {}): {}", code, reason);
}

}  // namespace ddprun
