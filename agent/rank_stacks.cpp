#include "agent/rank_stacks.hpp"

#include <algorithm>
#include <fstream>
#include <iterator>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/exit_codes.hpp"
#include "common/failure_record.hpp"
#include "common/progress.hpp"
#include "process/exit_watch.hpp"

namespace ddprun {

std::vector<RankWhere> take_stacks(ProcessRunner& runner, const LocalWorkers& workers,
                                   const AttemptDir& dir, const Round& round,
                                   const std::string& host, Deadline deadline) {
  std::vector<StackTarget> targets;
  std::vector<int> locals;
  std::vector<int> stops;  // the signal that stopped each target, or 0: read before gdb attaches
  for (std::size_t l = 0; l < workers.pids.size(); ++l) {
    if (workers.exited[l]) continue;
    targets.push_back({workers.pids[l], dir.stacks_file(static_cast<int>(l))});
    locals.push_back(static_cast<int>(l));
    stops.push_back(stop_signal(workers.pids[l]));
  }
  std::vector<RankWhere> where;
  const auto started = Clock::now();
  const auto captures = runner.capture_stacks(targets, deadline);
  for (std::size_t i = 0; i < captures.size(); ++i) {
    const auto& c = captures[i];
    std::string text;
    if (std::ifstream in(c.file); in) text.assign(std::istreambuf_iterator<char>(in), {});
    RankWhere r = locate(parse_gdb_output(text, c.pid));
    if (!c.ok) r.note = "no stack: " + c.error;
    // A stopped rank is where it is because of the stop: said first, and it sets it apart.
    if (stops[i] != 0) {
      r.where = fmt::format("stopped by {}{}", signal_name(stops[i]),
                            r.where.empty() ? std::string() : ", " + r.where);
    }
    r.local_rank = locals[i];
    r.rank = round.ranks.global_rank(locals[i]);
    r.pid = c.pid;
    where.push_back(std::move(r));
  }
  // The ranks of this node that failed on their own: whether their error came from inside a
  // collective tells a blocked peer from one out of step.
  for (std::size_t l = 0; l < workers.failed.size(); ++l) {
    if (!workers.failed[l]) continue;
    const auto& f = *workers.failed[l];
    RankWhere r;
    r.local_rank = static_cast<int>(l);
    r.rank = f.rank;
    r.pid = f.pid;
    r.note = f.signal ? killed_by(f.signal, f.out_of_memory)
                      : fmt::format("exited with code {}", f.exit_code);
    // Its traceback when it wrote one; else its last stderr lines (where Python prints it).
    std::string text = f.traceback;
    if (text.empty()) {
      for (const auto& line : f.stderr_tail) text += line + "\n";
    }
    r.in_collective = mentions_collective(f.message + "\n" + text);
    where.push_back(std::move(r));
  }
  for (auto& r : where) {
    r.host = host;
    r.node = round.ranks.group_rank;
  }
  const auto taken = static_cast<std::size_t>(
      std::count_if(captures.begin(), captures.end(), [](const StackCapture& c) { return c.ok; }));
  if (taken > 0) {
    spdlog::info("took the stacks of {} of {} live worker(s) in {}: {}/<local rank>/stacks.txt",
                 taken, targets.size(), format_duration(Clock::now() - started), dir.path());
  }
  // Said here, at the verdict: a reader of the root cause looks for stacks.txt.
  if (taken < captures.size()) {
    const auto failed = std::find_if(captures.begin(), captures.end(),
                                     [](const StackCapture& c) { return !c.ok; });
    spdlog::warn("no stacks of {} of {} live worker(s): {}", captures.size() - taken,
                 captures.size(), failed->error);
  }
  return where;
}

void explain_root_cause(Failure& f, const std::vector<RankWhere>& where, const Round& round,
                        const AttemptDir& dir, bool hang_exit_code) {
  // Only when some rank's stack was taken: failures alone are already in the report.
  if (std::none_of(where.begin(), where.end(), [](const RankWhere& r) { return !r.where.empty(); })) {
    return;
  }
  f.where = group_ranks(where, round.ranks.world_size);
  f.stacks = round.ranks.group_world_size > 1
                 ? fmt::format("attempt_{}/<local rank>/stacks.txt in each node's log directory "
                               "(this node's: {})", round.id, dir.path())
                 : fmt::format("{}/<local rank>/stacks.txt", dir.path());
  const auto out = ranks_out_of_step(where);
  if (out.empty()) return;
  const auto& who = *std::find_if(where.begin(), where.end(),
                                  [&](const RankWhere& r) { return r.rank == out.front(); });
  if (f.kind == Failure::Kind::kWorker) {
    // The first failure's own details go; the message keeps it.
    const auto first = fmt::format("rank {} on {} {}", f.rank, f.host,
                                   f.signal ? killed_by(f.signal, f.out_of_memory)
                                            : fmt::format("exited with code {}", f.exit_code));
    f.kind = Failure::Kind::kHang;
    // Without --hang-timeout the job ends with the failed worker's code, as it would have
    // without the stacks: only the explanation changes.
    if (hang_exit_code) {
      f.exit_code = kExitHang;
      f.signal = 0;
    }
    f.message = fmt::format("{} {} alive outside any collective ({}) while the other ranks "
                            "failed in one or wait in one; first failure: {}",
                            out.size() == 1 ? "rank" : "ranks", format_rank_list(out),
                            who.where, first);
    f.traceback.clear();
    f.stderr_tail.clear();
  } else if (f.rank < 0) {
    f.message += fmt::format("; out of step: {} {}", out.size() == 1 ? "rank" : "ranks",
                             format_rank_list(out));
  } else {
    return;  // a timer's rank stays the cause
  }
  f.rank = who.rank;
  f.local_rank = who.local_rank;
  f.pid = who.pid;
  f.host = who.host;
  f.node = who.node;
}

}  // namespace ddprun
