#pragma once
// Where each rank of a failed round was, and what that says about the root cause. Each node
// takes the stacks of its live workers (after a hang at once; after a worker failure with
// --hang-timeout, of the peers still alive after a grace) and shares them, with how its failed
// ranks ended, through the round's news; the node that chooses the root cause reads every
// node's and explains the cause by them (RoundChannel::resolve_root_cause's refine step).

#include <string>
#include <vector>

#include "agent/local_workers.hpp"
#include "agent/stack_report.hpp"
#include "agent/worker_launch.hpp"
#include "common/deadline.hpp"
#include "common/failure_record.hpp"
#include "process/process_runner.hpp"
#include "rendezvous/rendezvous_handler.hpp"

namespace ddprun {

// Where this node's ranks were: a stack for each worker still alive (written to its
// stacks.txt, all within `deadline`), and for each that failed on its own, how it ended and
// whether its error came from inside a collective. Logs where the stacks went.
std::vector<RankWhere> take_stacks(ProcessRunner& runner, const LocalWorkers& workers,
                                   const AttemptDir& dir, const Round& round,
                                   const std::string& host, Deadline deadline);

// The chooser's root cause, explained by `where` (every node's records): the ranks grouped by
// where they were, where the stacks are, and, when a worker failed and another rank stayed
// alive outside any collective while the rest failed or waited in one, that rank as the cause
// (the others only timed out waiting for it), with the hang's exit code (122) when
// `hang_exit_code` (--hang-timeout), else the failed worker's. Unchanged when no rank's stack
// was taken.
void explain_root_cause(Failure& root_cause, const std::vector<RankWhere>& where,
                        const Round& round, const AttemptDir& dir, bool hang_exit_code);

}  // namespace ddprun
