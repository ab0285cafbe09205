// What the kernel says of a thread of this process, for a thread that does not answer.

#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <future>
#include <thread>

#include <fmt/format.h>

#include "process/thread_state.hpp"
#include "testing/test_util.hpp"

using ddprun::thread_whereabouts;
using namespace std::chrono_literals;

TEST_CASE("thread state: a running thread and a waiting one, by their tid", "[process]") {
  const pid_t self = gettid();
  CHECK_THAT(thread_whereabouts(self), Catch::StartsWith(fmt::format("tid {}, state R", self)));
  std::promise<void> release;
  std::atomic<pid_t> tid{0};
  std::thread waiting([&, done = release.get_future()] {
    tid = gettid();
    done.wait();
  });
  REQUIRE(ddprun::test::wait_until([&] { return tid != 0; }, 30s));
  // Asleep once it is in its wait: the kernel says so (and where, where it may).
  const auto asleep = fmt::format("tid {}, state S", tid.load());
  CHECK(ddprun::test::wait_until([&] { return thread_whereabouts(tid).starts_with(asleep); },
                                 30s));
  release.set_value();
  waiting.join();
  // Gone: nothing to read.
  CHECK(thread_whereabouts(tid) == fmt::format("tid {}, state ?", tid.load()));
  CHECK(thread_whereabouts(0) == "not started");
}
