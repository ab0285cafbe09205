#pragma once
// --hang-timeout and torchrun's FileTimer for one attempt. The hang verdict is the job's: each
// node tells the others through the store when its own workers have shown no progress for the
// timeout (its vote that it is idle), takes the vote back when they move, and the node whose
// vote makes every node idle at once declares the hang. A FileTimer that expires is that
// rank's own hang, decided on its node alone.
//
// The attempt asks when to wake (due), and publishes the failure any of these returns as the
// round's outcome.

#include <optional>
#include <string>

#include "agent/event_queue.hpp"
#include "agent/local_workers.hpp"
#include "agent/round_channel.hpp"
#include "agent/worker_progress.hpp"
#include "common/deadline.hpp"
#include "common/failure_record.hpp"
#include "common/launch_config.hpp"
#include "rendezvous/rendezvous_handler.hpp"

namespace ddprun {

class FileTimerServer;

class HangWatch {
 public:
  // `timers` is null without a FileTimer server. All references must outlive the watch.
  HangWatch(const LaunchConfig& config, const Round& round, std::string host,
            RoundChannel& channel, WorkerProgress& progress, FileTimerServer* timers,
            RendezvousHandler::EventSink emit);

  // When the attempt's loop must wake to check for a hang; nullopt while there is nothing to
  // check (no --hang-timeout, this node already voted, or no worker runs: the next progress
  // comes as an event).
  std::optional<Deadline> due(const LocalWorkers& workers) const;

  // Each returns the hang when this node declares it, nullopt otherwise.
  std::optional<Failure> check(const LocalWorkers& workers);
  // This node's workers all succeeded: they make no more progress, so this node is idle.
  std::optional<Failure> workers_done(const LocalWorkers& workers);
  // A worker's FileTimer expired (an AgentEvent::kTimerExpired).
  std::optional<Failure> timer_expired(const AgentEvent& event, const LocalWorkers& workers);

  // The workers moved after this node voted: the vote is taken back.
  void on_progress(const LocalWorkers& workers);

 private:
  bool enabled() const { return config_.hang_timeout.count() > 0; }
  std::optional<Failure> vote_idle(Clock::time_point last_progress, const LocalWorkers& workers);
  Failure hang(const std::string& message) const;

  const LaunchConfig& config_;
  const Round& round_;
  std::string host_;
  RoundChannel& channel_;
  WorkerProgress& progress_;
  FileTimerServer* timers_;
  RendezvousHandler::EventSink emit_;
  bool idle_voted_ = false;  // this node told the others its workers show no progress
  std::optional<Clock::time_point> vote_retry_;  // a vote the store refused, tried again then
};

}  // namespace ddprun
