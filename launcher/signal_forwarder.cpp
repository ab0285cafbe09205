#include "launcher/signal_forwarder.hpp"

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/failure_record.hpp"

namespace ddprun {

struct SignalForwarder::State {
  std::mutex mutex;
  std::function<void(int)> target;
  bool done = false;  // detached: later signals are noted, not acted on
};

SignalForwarder::SignalForwarder(const std::vector<int>& signals)
    : state_(std::make_shared<State>()) {
  sigset_t set;
  sigemptyset(&set);
  for (int s : signals) sigaddset(&set, s);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set, state = state_] {
    while (true) {
      int signo = 0;
      if (sigwait(&set, &signo) != 0) continue;
      // The lock keeps the target alive while it runs: detach() takes the same lock.
      std::lock_guard lock(state->mutex);
      if (state->target) {
        state->target(signo);
      } else if (state->done) {
        spdlog::info("received {} while shutting down; already stopping", signal_name(signo));
      } else {
        // No workers exist yet and nothing needs saying: leave at once.
        std::fprintf(stderr, "[ddprun] received %s before the agent started; exiting\n",
                     signal_name(signo).c_str());
        std::_Exit(128 + signo);
      }
    }
  }).detach();
}

SignalForwarder::~SignalForwarder() { detach(); }

void SignalForwarder::attach(std::function<void(int)> target) {
  std::lock_guard lock(state_->mutex);
  state_->target = std::move(target);
}

void SignalForwarder::detach() {
  std::lock_guard lock(state_->mutex);
  state_->target = nullptr;
  state_->done = true;
}

}  // namespace ddprun
