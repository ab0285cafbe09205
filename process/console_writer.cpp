#include "process/console_writer.hpp"

#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include "common/progress.hpp"
#include "process/worker_output.hpp"

namespace ddprun {

namespace {

// Writes `data` to `fd` now if that cannot block: a regular file or a device that is not a
// terminal (/dev/null), or a pipe with room, for a batch it takes whole (PIPE_BUF). A
// terminal, which Ctrl-S stops, and a socket go through the writing thread. False: nothing
// written.
bool write_if_it_cannot_block(int fd, std::string_view data) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return false;
  const bool safe = S_ISREG(st.st_mode) || (S_ISCHR(st.st_mode) && !::isatty(fd)) ||
                    (S_ISFIFO(st.st_mode) && data.size() <= PIPE_BUF);
  return safe && try_write_all(fd, data);
}

}  // namespace

// Shared with the writing thread, which a console that never takes its write again may keep
// past the writer's end.
struct ConsoleWriter::State {
  struct Batch {
    int fd;
    std::string data;
  };

  State(boost::asio::any_io_executor e, WriteFn w, std::size_t backlog_limit)
      : executor(std::move(e)), write(std::move(w)), limit(backlog_limit) {}

  // On the writing thread, until the writer ends (or lets it go).
  void run() {
    std::unique_lock lock(mutex);
    while (true) {
      wake.wait(lock, [this] { return !queue.empty() || closing; });
      if (queue.empty()) return;
      // What came meanwhile for the same console goes in the same write: fewer writes when
      // many ranks print at once, each batch still whole.
      auto batch = std::move(queue.front());
      queue.pop_front();
      std::uint64_t batches = 1;
      while (!queue.empty() && queue.front().fd == batch.fd &&
             batch.data.size() + queue.front().data.size() <= kJoinedWrite) {
        batch.data += queue.front().data;
        queue.pop_front();
        ++batches;
      }
      in_flight = true;
      lock.unlock();
      write(batch.fd, batch.data);
      lock.lock();
      in_flight = false;
      queued_bytes -= batch.data.size();
      written += batches;
      if (abandoned) return;
      post_ready();
      progress.notify_all();
    }
  }

  // Posts the callbacks whose condition now holds. Under `mutex`.
  void post_ready() {
    if (queued_bytes <= limit / 2 && !room_waiters.empty()) {
      for (auto& fn : room_waiters) boost::asio::post(executor, std::move(fn));
      room_waiters.clear();
    }
    std::erase_if(written_waiters, [this](auto& w) {
      if (w.first > written) return false;
      boost::asio::post(executor, std::move(w.second));
      return true;
    });
  }

  static constexpr std::size_t kJoinedWrite = 64 * 1024;

  boost::asio::any_io_executor executor;
  WriteFn write;
  const std::size_t limit;
  std::mutex mutex;
  std::condition_variable wake;      // the writing thread: a batch, or the end
  std::condition_variable progress;  // the writer's end: a batch was written
  std::deque<Batch> queue;
  std::size_t queued_bytes = 0;  // not yet written, the batch being written included
  std::uint64_t queued = 0;      // batches queued, ever
  std::uint64_t written = 0;     // batches written, ever
  std::vector<std::function<void()>> room_waiters;
  std::vector<std::pair<std::uint64_t, std::function<void()>>> written_waiters;
  bool in_flight = false;  // the writing thread is in a write
  bool closing = false;    // the writer ends: write what is queued, then stop
  bool abandoned = false;  // the writer gave up on the console: post nothing, write no more
};

ConsoleWriter::ConsoleWriter(boost::asio::any_io_executor executor, WriteFn write,
                             std::size_t backlog_limit,
                             std::chrono::milliseconds final_silence)
    : state_(std::make_shared<State>(std::move(executor), std::move(write), backlog_limit)),
      final_silence_(final_silence),
      thread_([s = state_] { s->run(); }) {}

ConsoleWriter::~ConsoleWriter() {
  std::unique_lock lock(state_->mutex);
  state_->closing = true;
  state_->room_waiters.clear();
  state_->written_waiters.clear();
  state_->wake.notify_all();
  while (state_->queued_bytes > 0) {
    const auto before = state_->written;
    state_->progress.wait_for(lock, final_silence_,
                              [&] { return state_->written != before; });
    if (state_->written != before) continue;
    // Nothing taken for that long: whatever reads the console has stopped for good.
    const auto batches = state_->queued - state_->written;
    const auto bytes = state_->queued_bytes;
    state_->abandoned = true;
    state_->queue.clear();
    state_->executor = {};  // its context may end before the thread does
    lock.unlock();
    // The agent's log, not write_all: the thread let go holds the writers' lock.
    spdlog::warn("{} batch(es) of worker output ({} bytes) not shown: the console took "
                 "nothing for {}",
                 batches, bytes, format_duration(final_silence_));
    thread_.detach();
    return;
  }
  lock.unlock();
  thread_.join();
}

std::uint64_t ConsoleWriter::write(int fd, std::string data) {
  if (data.empty()) return 0;
  std::lock_guard lock(state_->mutex);
  // Nothing ahead of it: written here when that cannot block, which spares the writing
  // thread's wake-up per line (most lines, on a pipe or in a file).
  if (state_->queue.empty() && !state_->in_flight && !state_->abandoned &&
      write_if_it_cannot_block(fd, data)) {
    state_->written = ++state_->queued;
    state_->post_ready();
    return state_->queued;
  }
  state_->queued_bytes += data.size();
  state_->queue.push_back({fd, std::move(data)});
  state_->wake.notify_one();
  return ++state_->queued;
}

bool ConsoleWriter::backlogged() const {
  std::lock_guard lock(state_->mutex);
  return state_->queued_bytes > state_->limit;
}

void ConsoleWriter::when_room(std::function<void()> fn) {
  std::lock_guard lock(state_->mutex);
  state_->room_waiters.push_back(std::move(fn));
  state_->post_ready();
}

void ConsoleWriter::after_written(std::uint64_t batch, std::function<void()> fn) {
  std::lock_guard lock(state_->mutex);
  state_->written_waiters.emplace_back(batch, std::move(fn));
  state_->post_ready();
}

}  // namespace ddprun
