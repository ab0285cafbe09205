// ConsoleWriter with a real pipe as the console: whole batches in order, a backlog that says
// when to stop feeding it, and an end that gives up on a console that takes nothing.

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include <boost/asio/io_context.hpp>

#include "common/deadline.hpp"
#include "process/console_writer.hpp"
#include "process/worker_output.hpp"

using namespace std::chrono_literals;
using ddprun::ConsoleWriter;

namespace {

constexpr auto kBound = 20s;  // catches hangs; each wait here takes milliseconds

struct Pipe {
  Pipe() {
    int fds[2];
    REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
    read_end = fds[0];
    write_end = fds[1];
  }
  ~Pipe() {
    if (read_end >= 0) ::close(read_end);
    ::close(write_end);
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;

  // Reads until `size` bytes came, or kBound passed.
  std::string read(std::size_t size) const {
    std::string text;
    const auto deadline = ddprun::Deadline::after(kBound);
    char buffer[64 * 1024];
    while (text.size() < size && !deadline.expired()) {
      pollfd p{read_end, POLLIN, 0};
      if (::poll(&p, 1, 100) != 1) continue;
      const auto n = ::read(read_end, buffer, std::min(sizeof(buffer), size - text.size()));
      if (n <= 0) break;
      text.append(buffer, static_cast<std::size_t>(n));
    }
    return text;
  }

  int read_end = -1;
  int write_end = -1;
};

// Runs `io`'s handlers until `done` or kBound.
template <typename Pred>
bool run_until(boost::asio::io_context& io, Pred done) {
  const auto deadline = ddprun::Deadline::after(kBound);
  while (!done() && !deadline.expired()) {
    io.restart();
    io.run_for(10ms);
  }
  return done();
}

}  // namespace

TEST_CASE("console writer: batches reach the console whole and in order, then after_written "
          "runs",
          "[console]") {
  Pipe console;
  boost::asio::io_context io;
  ConsoleWriter writer(io.get_executor(), ddprun::write_all);
  std::string expected;
  std::uint64_t last = 0;
  for (int i = 0; i < 100; ++i) {
    auto batch = "batch " + std::to_string(i) + "\n";
    expected += batch;
    last = writer.write(console.write_end, std::move(batch));
  }
  CHECK(last == 100);
  bool written = false;
  writer.after_written(last, [&] { written = true; });
  REQUIRE(run_until(io, [&] { return written; }));
  CHECK(console.read(expected.size()) == expected);
}

TEST_CASE("console writer: a console that takes nothing never blocks the caller - past the "
          "limit it is backlogged until read",
          "[console]") {
  Pipe console;
  boost::asio::io_context io;
  ConsoleWriter writer(io.get_executor(), ddprun::write_all, 256 * 1024);
  const std::string line(1000, 'x');
  // Far more than the pipe holds (64 KiB) and than the limit: every call returns at once.
  std::uint64_t last = 0;
  for (int i = 0; i < 400; ++i) last = writer.write(console.write_end, line + "\n");
  CHECK(writer.backlogged());
  bool room = false;
  bool first = false;
  bool written = false;
  writer.when_room([&] { room = true; });
  writer.after_written(1, [&] { first = true; });
  writer.after_written(last, [&] { written = true; });
  // The first batches go into the pipe while it has room; the rest wait for a reader.
  CHECK(run_until(io, [&] { return first; }));
  io.run_for(100ms);
  CHECK_FALSE(room);
  CHECK_FALSE(written);
  // Someone reads it: room first, then everything written.
  std::size_t read = 0;
  std::thread reader([&] { read = console.read(400 * 1001).size(); });
  const bool all = run_until(io, [&] { return room && written; });
  reader.join();
  CHECK(all);
  CHECK(read == 400 * 1001);
  CHECK_FALSE(writer.backlogged());
}

TEST_CASE("console writer: its end writes what is queued but gives up on a console that "
          "takes nothing",
          "[console]") {
  ::signal(SIGPIPE, SIG_IGN);  // the console closed at the end of this test
  boost::asio::io_context io;
  {
    Pipe console;
    const std::string expected(100 * 1024, 'y');
    std::string got;
    std::thread reader;
    {
      ConsoleWriter writer(io.get_executor(), ddprun::write_all);
      writer.write(console.write_end, expected);
      reader = std::thread([&] { got = console.read(expected.size()); });
    }  // waits for the reader to take it all
    reader.join();
    CHECK(got == expected);
  }
  // Never destroyed: the writing thread let go may still write to it after this test.
  auto* stuck = new Pipe;
  const auto began = ddprun::Clock::now();
  {
    ConsoleWriter writer(io.get_executor(), ddprun::write_all, ConsoleWriter::kBacklogLimit,
                         300ms);
    writer.write(stuck->write_end, std::string(200 * 1024, 'z'));
  }
  const auto took = ddprun::Clock::now() - began;
  CHECK(took >= 300ms);
  CHECK(took < kBound);
  // That thread ends once its write does: the console goes away.
  ::close(stuck->read_end);
  stuck->read_end = -1;
}
