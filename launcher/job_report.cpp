#include "launcher/job_report.hpp"

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "agent/failure.hpp"
#include "common/deadline.hpp"
#include "common/exit_codes.hpp"
#include "rendezvous/rank_assignment.hpp"

namespace ddprun {

int exit_code_of(const RunResult& r) {
  switch (r.end) {
    case RunResult::End::kSucceeded:
      return kExitOk;
    case RunResult::End::kFailed:
      return r.root_cause && r.root_cause->exit_code != 0 ? r.root_cause->exit_code
                                                          : kExitInternal;
    case RunResult::End::kStopped:
      return 128 + r.signal;
    case RunResult::End::kRendezvousFailed:
      return kExitRendezvous;
    case RunResult::End::kInternalError:
      return kExitInternal;
    case RunResult::End::kNodeCheckRefused:
    case RunResult::End::kNodeCheckExcluded:
      return kExitNodeCheck;
  }
  return kExitInternal;
}

std::string format_summary(const RunResult& r) {
  std::string out = fmt::format("Job summary for node {}{}:\n", r.host,
                                r.group_rank >= 0 ? fmt::format(" (group rank {})", r.group_rank)
                                                  : std::string());
  if (r.attempts.empty()) {
    out += "  no worker was started on this node\n";
  } else {
    std::vector<std::string> ranks;
    std::size_t width = std::string_view("ranks").size();
    for (const auto& a : r.attempts) {
      ranks.push_back(ranks_text(a.ranks));
      width = std::max(width, ranks.back().size());
    }
    out += fmt::format("  {:<7} {:<8} {:<{}} {:<5} {:>7}  {}\n", "round", "restart", "ranks", width,
                       "nodes", "time", "ended");
    for (std::size_t i = 0; i < r.attempts.size(); ++i) {
      const auto& a = r.attempts[i];
      out += fmt::format("  {:<7} {:<8} {:<{}} {:<5} {:>7}  {}\n", a.round, a.restart_count,
                         ranks[i], width, a.ranks.group_world_size, format_elapsed(a.seconds),
                         a.ended);
    }
  }
  out += fmt::format("  restarts {} of {}, membership changes {}, total {}\n", r.restarts,
                     r.max_restarts, r.membership_changes, format_elapsed(r.seconds));
  return out;
}

namespace {

bool own_end(const RunResult& r) {
  switch (r.end) {
    case RunResult::End::kStopped:
    case RunResult::End::kRendezvousFailed:
    case RunResult::End::kInternalError:
      return true;
    case RunResult::End::kFailed:
      // A signal to this agent while its workers ran ends it as a failure of its own.
      return r.root_cause && r.root_cause->kind == Failure::Kind::kSignal &&
             r.root_cause->host == r.host;
    default:
      return false;
  }
}

}  // namespace

nlohmann::json summary_json(const RunResult& r) {
  auto attempts = nlohmann::json::array();
  for (const auto& a : r.attempts) {
    attempts.push_back({{"round", a.round},
                        {"restart_count", a.restart_count},
                        {"group_rank", a.ranks.group_rank},
                        {"nodes", a.ranks.group_world_size},
                        {"base_rank", a.ranks.base_rank},
                        {"local_world_size", a.ranks.local_world_size},
                        {"world_size", a.ranks.world_size},
                        {"ended", a.ended},
                        {"seconds", a.seconds}});
  }
  return {{"host", r.host},
          {"group_rank", r.group_rank},
          {"attempts", attempts},
          {"restarts", r.restarts},
          {"max_restarts", r.max_restarts},
          {"membership_changes", r.membership_changes},
          {"seconds", r.seconds},
          {"exit_code", exit_code_of(r)},
          // --node-check=exclude left this node out: the job goes on, or went on, without it.
          {"left_out", r.end == RunResult::End::kNodeCheckExcluded},
          // The end was this agent's own (a signal to it, its store or rendezvous, an error),
          // not one every agent of the job reaches (a failure, a refusal, the job's success).
          {"own_end", own_end(r)},
          {"reason", r.reason},
          {"world_size", r.world_size},
          {"root_cause", r.root_cause ? nlohmann::json::parse(r.root_cause->to_json())
                                      : nlohmann::json()}};
}

void report(const RunResult& r, const std::string& log_dir) {
  const int code = exit_code_of(r);
  // A quiet log (--log-level warn) keeps the summary of a job that went well to itself.
  if (code != 0 || spdlog::default_logger()->should_log(spdlog::level::info)) {
    std::fputs(format_summary(r).c_str(), stderr);
  }
  if (r.root_cause) {
    std::fputs(format_root_cause(*r.root_cause, r.world_size, log_dir).c_str(), stderr);
  }
  if (code == 0) {
    spdlog::info("job finished: {} ({} restart{})", r.reason, r.restarts,
                 r.restarts == 1 ? "" : "s");
  } else if (r.end == RunResult::End::kNodeCheckExcluded) {
    // The job goes on without this node: it is not the job that failed.
    spdlog::error("this node left the job (exit code {}): {}", code, r.reason);
  } else {
    spdlog::error("job failed (exit code {}): {}", code, r.reason);
  }
}

}  // namespace ddprun
