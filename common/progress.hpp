#pragma once
// When a long wait says how far it got: first after `first` (10 s by default), then at doubling
// intervals up to `longest` (a minute), so a person watching a slow start sees it move and a
// long one does not flood the log. A wait is cut into slices that end at the next progress
// line (or at the real deadline, whichever comes first).
//
//   ProgressClock progress(config.progress_interval);
//   while (true) {
//     try { store.wait(keys, progress.slice(deadline)); break; }
//     catch (const TimeoutError&) { if (deadline.expired()) throw ...; }
//     if (progress.due()) spdlog::info("...; {}", progress.elapsed_of(timeout));
//   }

#include <algorithm>
#include <chrono>
#include <string>

#include "common/deadline.hpp"

namespace ddprun {

// The pace of what a wait repairs besides saying how far it got (a record a lost node left
// half-written): the progress lines' own, but never slower than their default, so that a
// quiet wait is not an unrepaired one.
inline std::chrono::milliseconds repair_pace(std::chrono::milliseconds progress_interval) {
  const std::chrono::milliseconds most = std::chrono::seconds(10);
  return progress_interval.count() > 0 ? std::min(progress_interval, most) : most;
}

class ProgressClock {
 public:
  // `first` of zero turns progress lines off: slice() is then the deadline itself.
  explicit ProgressClock(std::chrono::milliseconds first,
                         std::chrono::milliseconds longest = std::chrono::minutes(1));
  // Due every `interval`, never further apart: for what a wait repairs as it goes.
  static ProgressClock every(std::chrono::milliseconds interval) {
    return ProgressClock(interval, interval);
  }

  // The earlier of `deadline` and the next progress line.
  Deadline slice(Deadline deadline) const;
  // True (once per line) when a progress line is due now; moves on to the next one.
  bool due();
  // Time since the wait began.
  Clock::duration elapsed() const { return Clock::now() - start_; }
  // "30s of 600s": the time waited, in whole seconds, against the wait's limit.
  std::string elapsed_of(Clock::duration limit) const;

 private:
  Clock::time_point start_;
  Clock::time_point next_;
  std::chrono::milliseconds interval_;
  std::chrono::milliseconds longest_;
  bool enabled_;
};

}  // namespace ddprun
