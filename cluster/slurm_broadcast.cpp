#include "cluster/slurm_broadcast.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "cluster/session_protocol.hpp"
#include "common/error.hpp"
#include "common/failure_record.hpp"
#include "common/version.hpp"
#include "process/spawn.hpp"

namespace ddprun {

SlurmBroadcast::SlurmBroadcast(boost::asio::io_context& io, std::string self,
                               std::shared_ptr<const StagedBinary> binary,
                               Deadline deadline)
    : io_(io), self_(std::move(self)), binary_(std::move(binary)), deadline_(deadline),
      timer_(io) {}

SlurmBroadcast::~SlurmBroadcast() { cancel(); }

void SlurmBroadcast::request(const RemoteSession::BinaryReady& ready) {
  if (state_ == State::kFailed) return ready(binary_, "");
  if (state_ == State::kDone) return ready(broadcast_, "");
  waiting_.push_back(ready);
  if (state_ == State::kNotYet) start();
}

void SlurmBroadcast::release() {
  binary_.reset();
  broadcast_.reset();
}

void SlurmBroadcast::cancel() {
  if (pid_ > 0) ::kill(-pid_, SIGKILL);
}

void SlurmBroadcast::start() {
  state_ = State::kRunning;
  started_ = Clock::now();
  auto copy = std::make_shared<StagedBinary>(*binary_);
  copy->file_on_hosts = std::string(kBroadcastPrefix) + random_token();
  broadcast_ = copy;
  const auto sbcast = find_on_path("sbcast");
  if (sbcast.empty()) return done(false, "sbcast is not on PATH");
  if (deadline_.expired()) return done(false, "no time left for it, the first request came late");
  SpawnRequest request;
  request.path = sbcast;
  request.argv = {request.path, "--force", self_, copy->file_on_hosts};
  request.stdout_fd = STDERR_FILENO;  // its own words, if any, where the command's warnings go
  try {
    pid_ = spawn_process(request);
  } catch (const SpawnError& e) {
    return done(false, fmt::format("cannot start sbcast: {}", errno_message(e.error())));
  }
  exit_watch_ = std::make_unique<ExitWatch>(
      io_, pid_, [this](boost::system::error_code wait_error, int status) {
        if (wait_error == boost::asio::error::operation_aborted) return;
        pid_ = -1;
        timer_.cancel();
        const bool ok = !wait_error && WIFEXITED(status) && WEXITSTATUS(status) == 0;
        done(ok, timed_out_ ? fmt::format("sbcast did not finish within {}",
                                          format_duration(Clock::now() - started_))
                 : wait_error ? wait_error.message()
                 : WIFEXITED(status)
                     ? fmt::format("sbcast exited with {}", WEXITSTATUS(status))
                     : fmt::format("sbcast ended by {}", signal_name(WTERMSIG(status))));
      });
  timer_.expires_at(deadline_.when());
  timer_.async_wait([this](boost::system::error_code timer_error) {
    if (timer_error || pid_ <= 0) return;
    timed_out_ = true;
    ::kill(-pid_, SIGKILL);
  });
}

void SlurmBroadcast::done(bool ok, const std::string& why_not) {
  if (ok) {
    state_ = State::kDone;
    spdlog::info("sent ddprun {} to every node of the allocation with sbcast in {}",
                 ddprun_version(), format_duration(Clock::now() - started_));
  } else {
    state_ = State::kFailed;
    spdlog::warn("sbcast could not send ddprun to the nodes ({}): each node that lacks it gets "
                 "it through its srun instead", why_not);
  }
  auto waiting = std::move(waiting_);
  waiting_.clear();
  for (auto& ready : waiting) ready(ok ? broadcast_ : binary_, "");
}

}  // namespace ddprun
