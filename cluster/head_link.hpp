#pragma once
// The remote agent's side of the session with the command that started it (`ddprun --hosts`
// on another machine): the hello and the control lines arrive on stdin, reports leave on
// stdout. Once the workers may start, a thread watches stdin: "signal N" is delivered to this
// process as if it had received signal N (so the agent's usual signal path handles it), and a
// closed or silent connection (the command died, or its host is unreachable) counts as SIGTERM.
// The same thread sends the command a sign of life as often as the command pings, so that the
// command learns of a host gone silent whatever the remote shell.

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "cluster/session_protocol.hpp"
#include "common/deadline.hpp"

namespace ddprun {

class HeadLink {
 public:
  explicit HeadLink(int in_fd = 0, int out_fd = 1);
  ~HeadLink();  // stops the watcher
  HeadLink(const HeadLink&) = delete;
  HeadLink& operator=(const HeadLink&) = delete;

  // Throws Error when no hello arrives by the deadline, the input ends, or it is malformed.
  SessionHello read_hello(Deadline deadline);
  // One line on stdout, in one write.
  void report(const Report& report, const std::string& token);
  // Waits for "go" while pings keep arriving at most `silence` apart. False (with `why` set)
  // when the input ends or falls silent first: the command gave up on this job.
  bool wait_for_go(std::chrono::milliseconds silence, std::string* why);
  // Control lines ("go", "ping", "signal N") are also handed to this, as they arrive (tree
  // fan-out: the relay passes them on to the subtree). Set before wait_for_go.
  void forward_to(std::function<void(const std::string&)> forward) { forward_ = std::move(forward); }
  // Starts the watcher thread. Call after the signal handling is set up (the thread inherits
  // the blocked signal mask). `on_lost` is called once, with the reason, before SIGTERM.
  // `alive` (with the token) is reported at once, then every quarter of `silence`, until
  // stop(), the connection lost or not: a stdout that would block skips one.
  void watch(std::chrono::milliseconds silence, std::function<void(const std::string&)> on_lost,
             Report alive, std::string token);
  // Ends the watcher (the destructor does too). Call before what its callbacks use goes.
  void stop();

 private:
  enum class Got { kLine, kEnd, kTimeout };
  Got next_line(Deadline deadline, std::string* line);
  // Whether stop() was called, waiting for it until `until`.
  bool woken(Clock::time_point until);
  void watch_loop(std::chrono::milliseconds silence,
                  const std::function<void(const std::string&)>& on_lost, const Report& alive,
                  const std::string& token);

  int in_fd_;
  int out_fd_;
  int wake_[2] = {-1, -1};  // written by stop() to end the watcher
  // out_fd_'s pipe opened again, non-blocking, for the signs of life alone (-1: out_fd_ is not
  // a pipe); the agent's and its raw workers' writes stay blocking.
  int alive_fd_ = -1;
  bool out_is_socket_ = false;  // sends with MSG_DONTWAIT instead
  std::string buffer_;
  std::function<void(const std::string&)> forward_;
  std::thread watcher_;
};

}  // namespace ddprun
