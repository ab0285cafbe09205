#include "process/exit_watch.hpp"

#include <poll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "process/boost_process.hpp"

namespace ddprun {

namespace asio = boost::asio;
namespace bp = boost::process::v2;

// A pidfd, waited on by the io_context, then a non-blocking wait for the child. Boost.Process's
// own handle waits for the child with a blocking waitpid once its pidfd is readable; a child
// that exited while traced (a debugger attached to a worker) is a zombie only its tracer may
// collect, so that waitpid would hold the io thread, and everything on it, until the tracer
// lets go. Here such a child is asked for again on a timer instead.
struct ExitWatch::State {
  State(asio::io_context& io, pid_t p, int pidfd, Handler h, Reap r)
      : fd(io, pidfd), retry(io), pid(p), handler(std::move(h)), reap(r) {}
  asio::posix::stream_descriptor fd;
  asio::steady_timer retry;
  std::chrono::milliseconds retry_after{10};
  pid_t pid;
  Handler handler;
  Reap reap;
  bool cancelled = false;  // the watch was destroyed: a retry already due must not reap
};

namespace {

using State = ExitWatch::State;

void try_reap(const std::shared_ptr<State>& s);

// The handler runs once, and lets go of what it holds (a session that holds this watch).
void finish(const std::shared_ptr<State>& s, boost::system::error_code ec, int status) {
  auto handler = std::move(s->handler);
  if (handler) handler(ec, status);
}

void wait_readable(const std::shared_ptr<State>& s) {
  s->fd.async_wait(asio::posix::descriptor_base::wait_read,
                   [s](boost::system::error_code ec) {
                     if (ec) {
                       finish(s, ec, 0);
                     } else {
                       try_reap(s);
                     }
                   });
}

// waitpid(pid, status, WNOHANG) that leaves the child a zombie: its pid, 0 while it may not
// be collected yet, -1 when the wait failed (errno).
pid_t peek_exit(pid_t pid, int* status) {
  siginfo_t info{};
  if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
    return -1;
  }
  switch (info.si_code) {
    case CLD_EXITED:
      *status = (info.si_status & 0xff) << 8;
      break;
    case CLD_DUMPED:
      *status = info.si_status | 0x80;  // WCOREDUMP's flag
      break;
    default:
      *status = info.si_status;  // killed by that signal
  }
  return info.si_pid;
}

void try_reap(const std::shared_ptr<State>& s) {
  int status = 0;
  pid_t got;
  while ((got = s->reap == ExitWatch::Reap::kByOwner ? peek_exit(s->pid, &status)
                                                      : ::waitpid(s->pid, &status, WNOHANG)) < 0 &&
         errno == EINTR) {
  }
  if (got == s->pid) {
    finish(s, {}, status);
  } else if (got < 0) {
    finish(s, boost::system::error_code(errno, boost::system::system_category()), 0);
  } else {
    // Exited but not ours to collect yet (see State): the pidfd stays readable, so waiting on
    // it again would spin.
    s->retry.expires_after(s->retry_after);
    s->retry_after = std::min(s->retry_after * 2, std::chrono::milliseconds(1000));
    s->retry.async_wait([s](boost::system::error_code ec) {
      if (s->cancelled) {
        finish(s, asio::error::operation_aborted, 0);
      } else if (ec) {
        finish(s, ec, 0);
      } else {
        try_reap(s);
      }
    });
  }
}

}  // namespace

ExitWatch::ExitWatch(asio::io_context& io, pid_t pid, Handler handler, Reap reap) {
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    throw boost::system::system_error(errno, boost::system::system_category(),
                                      "pidfd_open for pid " + std::to_string(pid));
  }
  try {
    state_ = std::make_shared<State>(io, pid, pidfd, std::move(handler), reap);
  } catch (...) {
    ::close(pidfd);
    throw;
  }
  wait_readable(state_);
}

ExitWatch::~ExitWatch() {
  // The pending wait completes with operation_aborted; it holds the state until then.
  state_->cancelled = true;
  boost::system::error_code ignored;
  state_->fd.close(ignored);
  state_->retry.cancel();
}

void reap_exited(pid_t pid) {
  while (::waitpid(pid, nullptr, WNOHANG) < 0 && errno == EINTR) {
  }
}

bool reap_within(pid_t pid, std::chrono::milliseconds limit) {
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd >= 0) {
    pollfd p{fd, POLLIN, 0};
    while (::poll(&p, 1, static_cast<int>(limit.count())) < 0 && errno == EINTR) {
    }
    ::close(fd);
  }
  const pid_t got = ::waitpid(pid, nullptr, WNOHANG);
  return got == pid || (got < 0 && errno == ECHILD);  // ECHILD: already collected
}

int stop_signal(pid_t pid) {
  siginfo_t info{};
  if (::waitid(P_PID, static_cast<id_t>(pid), &info, WSTOPPED | WNOHANG | WNOWAIT) != 0) return 0;
  return info.si_pid == pid && info.si_code == CLD_STOPPED ? info.si_status : 0;
}

std::string find_on_path(const std::string& program) {
  return bp::environment::find_executable(program).string();
}

}  // namespace ddprun
