#include "process/exit_watch.hpp"

#include <sys/wait.h>

#include "process/boost_process.hpp"

namespace ddprun {

namespace bp = boost::process::v2;

struct ExitWatch::Impl {
  Impl(boost::asio::io_context& io, pid_t pid) : handle(io.get_executor(), pid) {}
  bp::process::handle_type handle;
};

ExitWatch::ExitWatch(boost::asio::io_context& io, pid_t pid, Handler handler)
    : impl_(std::make_unique<Impl>(io, pid)) {
  impl_->handle.async_wait(
      [handler = std::move(handler)](bp::error_code ec, int status) { handler(ec, status); });
}

ExitWatch::~ExitWatch() = default;

int stop_signal(pid_t pid) {
  siginfo_t info{};
  if (::waitid(P_PID, static_cast<id_t>(pid), &info, WSTOPPED | WNOHANG | WNOWAIT) != 0) return 0;
  return info.si_pid == pid && info.si_code == CLD_STOPPED ? info.si_status : 0;
}

std::string find_on_path(const std::string& program) {
  return bp::environment::find_executable(program).string();
}

}  // namespace ddprun
