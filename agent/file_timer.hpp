#pragma once
// torchrun's FileTimer server, for scripts that use torch.distributed.elastic.timer's
// FileTimerClient: with TORCHELASTIC_ENABLE_FILE_TIMER=1 the agent makes a FIFO (at
// TORCHELASTIC_TIMER_FILE, or in the job's log directory) and gives its path to the workers in
// TORCHELASTIC_TIMER_FILE. A worker writes one JSON line per request:
//   {"version": 1, "pid": P, "scope_id": S, "expiration_time": T, "signal": N}
// (T in unix seconds; T < 0 releases the scope). A timer that expires becomes an event for the
// agent, which treats it as that rank's hang. Every request also counts as the worker's
// progress for --hang-timeout.

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "agent/event_queue.hpp"

namespace ddprun {

struct TimerRequest {
  int pid = 0;
  std::string scope;
  double expiration = 0;  // unix seconds; < 0: release
  int signal = 0;
};
// One request line as FileTimerClient writes it; nullopt when it is not one (logged by the
// caller, never fatal: a worker cannot stop the server with a bad line).
std::optional<TimerRequest> parse_timer_request(const std::string& line);

// The timers of the workers, keyed by (pid, scope) as torchrun keys them. Pure logic.
class TimerTable {
 public:
  void apply(const TimerRequest& request);
  // The earliest expiration, if any.
  std::optional<double> next_expiry() const;
  // Removes and returns the timers that expired at `now`, earliest first.
  std::vector<TimerRequest> take_expired(double now);
  // A worker's timers end with it.
  void forget_pid(int pid);
  bool has_pid(int pid) const;

 private:
  std::map<std::pair<int, std::string>, TimerRequest> timers_;
};

class FileTimerServer {
 public:
  // Creates the FIFO at `path` (replacing a FIFO left there, refusing anything else) and starts
  // serving it. `on_request` runs on the server's thread for every request (progress).
  // Throws Error when the FIFO cannot be made.
  FileTimerServer(std::string path, EventQueue& events, std::function<void(int pid)> on_request);
  ~FileTimerServer();  // stops the thread and removes the FIFO
  FileTimerServer(const FileTimerServer&) = delete;
  FileTimerServer& operator=(const FileTimerServer&) = delete;

  const std::string& path() const { return path_; }
  // Forget every timer of these processes (an attempt ended).
  void forget(const std::vector<int>& pids);
  // Whether any of these processes has a timer running (not yet expired).
  bool pending(const std::vector<int>& pids);

 private:
  void serve();
  void handle_line(const std::string& line);

  std::string path_;
  EventQueue& events_;
  std::function<void(int)> on_request_;
  int fifo_ = -1;        // read end
  int keep_open_ = -1;   // a write end of our own: readers never see end of file
  int wake_ = -1;        // eventfd: stop, or the table changed
  std::mutex mutex_;
  TimerTable table_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ddprun
