// The launcher's end of a run: exit codes, the summary block and its JSON; and the progress
// clock that paces long waits.

#include <catch2/catch.hpp>

#include <signal.h>

#include <thread>

#include "common/exit_codes.hpp"
#include "common/progress.hpp"
#include "launcher/job_report.hpp"

using namespace ddprun;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

RunResult failed_after_restart() {
  RunResult r;
  r.end = RunResult::End::kFailed;
  r.host = "hostA";
  r.group_rank = 0;
  r.restarts = 1;
  r.max_restarts = 1;
  r.membership_changes = 1;
  r.seconds = 12.5;
  NodeRanks ranks;
  ranks.group_world_size = 2;
  ranks.local_world_size = 2;
  ranks.world_size = 3;
  r.attempts.push_back({0, 0, ranks, "re-formed: node hostC is waiting to join", 1.5});
  r.attempts.push_back({1, 0, ranks, "failed: rank 2 on hostB exited with 7", 3.25});
  r.attempts.push_back({2, 1, ranks, "failed: rank 2 on hostB exited with 7", 7.75});
  Failure f;
  f.host = "hostB";
  f.rank = 2;
  f.exit_code = 7;
  r.root_cause = f;
  return r;
}

}  // namespace

TEST_CASE("exit_code_of: one code per way a run ends", "[launcher][report]") {
  RunResult r;
  CHECK(exit_code_of(r) == 0);
  r = failed_after_restart();
  CHECK(exit_code_of(r) == 7);
  r.root_cause->exit_code = 0;  // a failure without a code is an internal error
  CHECK(exit_code_of(r) == kExitInternal);
  RunResult stopped;
  stopped.end = RunResult::End::kStopped;
  stopped.signal = SIGTERM;
  CHECK(exit_code_of(stopped) == 143);
  RunResult rendezvous;
  rendezvous.end = RunResult::End::kRendezvousFailed;
  CHECK(exit_code_of(rendezvous) == kExitRendezvous);
}

TEST_CASE("format_summary: one row per attempt, then the totals", "[launcher][report]") {
  auto text = format_summary(failed_after_restart());
  CHECK_THAT(text, Contains("Job summary for node hostA (group rank 0)"));
  CHECK_THAT(text, Contains("0..1 of 3"));
  CHECK_THAT(text, Contains("re-formed: node hostC is waiting to join"));
  CHECK_THAT(text, Contains("failed: rank 2 on hostB exited with 7"));
  CHECK_THAT(text, Contains("restarts 1 of 1, membership changes 1, total 12s"));
  // A header and three rows between the title and the totals.
  CHECK(std::count(text.begin(), text.end(), '\n') == 6);
  RunResult none;
  none.host = "spare";
  CHECK_THAT(format_summary(none), Contains("no worker was started on this node"));
}

TEST_CASE("summary_json: the same data for the events file", "[launcher][report]") {
  auto j = summary_json(failed_after_restart());
  CHECK(j.at("host") == "hostA");
  CHECK(j.at("exit_code") == 7);
  CHECK(j.at("restarts") == 1);
  CHECK(j.at("membership_changes") == 1);
  REQUIRE(j.at("attempts").size() == 3);
  CHECK(j.at("attempts")[2].at("restart_count") == 1);
  CHECK(j.at("attempts")[2].at("world_size") == 3);
  CHECK(j.at("attempts")[0].at("ended") == "re-formed: node hostC is waiting to join");
}

TEST_CASE("progress clock: slices end at the next line, intervals double up to the longest",
          "[common][progress]") {
  ProgressClock off(0ms);
  const auto far = Deadline::after(1h);
  CHECK(off.slice(far).when() == far.when());
  CHECK_FALSE(off.due());

  ProgressClock p(10ms, 40ms);
  CHECK(p.slice(far).when() < far.when());
  const auto near = Deadline::after(1ms);
  CHECK(p.slice(near).when() == near.when());  // the real deadline when it comes first
  // Each line is due once its slice has passed, and the next slice is twice as long (at most
  // the longest). The interval set by due() lies between the slice's end measured from just
  // before and from just after the call, whatever the scheduler does meanwhile.
  const std::chrono::milliseconds expected[] = {20ms, 40ms, 40ms};
  for (auto interval : expected) {
    std::this_thread::sleep_until(p.slice(far).when());  // time itself is what is tested
    const auto before = Clock::now();
    REQUIRE(p.due());
    const auto after = Clock::now();
    CHECK_FALSE(p.due());
    const auto next = p.slice(far).when();
    CHECK(next - before >= interval);
    CHECK(next - after <= interval);
  }
  CHECK_THAT(p.elapsed_of(1s), Contains("s of 1s"));
}
