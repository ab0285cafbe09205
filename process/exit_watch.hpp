#pragma once
// A child's exit, seen on an io_context the moment it happens (a pidfd; no polling, no
// SIGCHLD): the one way the worker runner, the --hosts head and its remote sessions wait for
// the processes they spawn. The io thread never blocks in it, even for a child that exited
// while a debugger traced it.

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/system/error_code.hpp>

namespace ddprun {

class ExitWatch {
 public:
  // `status` is the child's wait status (WIFEXITED, WTERMSIG, ...). `ec` is set when the wait
  // itself failed, and is operation_aborted when the watch is destroyed before the exit.
  using Handler = std::function<void(boost::system::error_code ec, int status)>;

  // What becomes of the exited child: reaped before the handler runs, or kept a zombie for
  // its owner to reap (reap_exited). A kept zombie keeps its pid, so that the number cannot
  // go to another process, nor its group's to another group, while the owner may still
  // signal the group (kill(-pid)).
  enum class Reap { kNow, kByOwner };

  // Starts waiting for child `pid` at once; `handler` runs on `io`'s thread. Throws
  // boost::system::system_error when the child cannot be watched (no pidfd for it).
  // Destroying the watch before the exit calls `handler` with operation_aborted, later, on
  // `io`'s thread.
  ExitWatch(boost::asio::io_context& io, pid_t pid, Handler handler, Reap reap = Reap::kNow);
  ~ExitWatch();
  ExitWatch(const ExitWatch&) = delete;
  ExitWatch& operator=(const ExitWatch&) = delete;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

// Reaps child `pid`, which has exited and was kept a zombie (ExitWatch::Reap::kByOwner).
void reap_exited(pid_t pid);

// Reaps child `pid`, which was sent SIGKILL: waits up to `limit` for it to exit, so that a
// process stuck in the kernel (state D) cannot hold the caller; it then stays a zombie of
// this process. True when it is gone (reaped here or before).
bool reap_within(pid_t pid, std::chrono::milliseconds limit);

// The signal that stopped child `pid` (SIGSTOP, SIGTSTP, ...) while it stays stopped; 0 when it
// runs, is gone, or is not this process's child. The stop is read, not consumed (WNOWAIT), so
// the exit watch above still sees the exit.
int stop_signal(pid_t pid);

// `program`'s path as exec would find it on PATH; empty when it is not there.
std::string find_on_path(const std::string& program);

}  // namespace ddprun
