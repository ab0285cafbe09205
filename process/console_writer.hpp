#pragma once
// The workers' console lines, written without ever blocking the caller: at once when that
// cannot block (a file, a pipe with room), else on a thread of their own. A console that takes
// nothing (stdout piped into a pager nobody scrolls, a terminal paused with Ctrl-S) then holds
// up only that thread, never the runner's, which must go on noticing exits, stopping workers
// and answering the agent. The runner stops reading the workers' pipes while the backlog is
// large (backlogged, when_room): a worker then waits in its own write, as it would under
// torchrun, and nothing is dropped.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include <boost/asio/any_io_executor.hpp>

namespace ddprun {

class ConsoleWriter {
 public:
  // Writes one batch whole, blocking as long as the console does (write_all).
  using WriteFn = std::function<void(int fd, std::string_view data)>;

  // Callbacks (when_room, after_written) are posted to `executor`.
  ConsoleWriter(boost::asio::any_io_executor executor, WriteFn write,
                std::size_t backlog_limit = kBacklogLimit,
                std::chrono::milliseconds final_silence = kFinalSilence);
  // Writes what is still queued while the console takes it. When it has taken nothing for
  // `final_silence`, says in the log how much was not shown and lets the writing thread go
  // (it ends when its write does).
  ~ConsoleWriter();
  ConsoleWriter(const ConsoleWriter&) = delete;
  ConsoleWriter& operator=(const ConsoleWriter&) = delete;

  // Queues `data` for `fd`, written whole and in order with every other batch. Never blocks.
  // Returns the batch's number, for after_written (0: nothing was queued).
  std::uint64_t write(int fd, std::string data);
  // More is queued than `backlog_limit`: the console does not keep up, stop feeding it.
  bool backlogged() const;
  // `fn` runs once the backlog fell to half its limit (posted at once when it already has).
  void when_room(std::function<void()> fn);
  // `fn` runs once batch `batch` and those before it are written (posted at once when they
  // are).
  void after_written(std::uint64_t batch, std::function<void()> fn);

  static constexpr std::size_t kBacklogLimit = 1 << 20;
  static constexpr std::chrono::milliseconds kFinalSilence{10'000};

  struct State;

 private:
  std::shared_ptr<State> state_;
  std::chrono::milliseconds final_silence_;
  std::thread thread_;  // after state_, which it shares
};

}  // namespace ddprun
