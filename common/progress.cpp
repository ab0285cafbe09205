#include "common/progress.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace ddprun {

ProgressClock::ProgressClock(std::chrono::milliseconds first, std::chrono::milliseconds longest)
    : start_(Clock::now()),
      next_(start_ + first),
      interval_(first),
      longest_(std::max(first, longest)),
      enabled_(first.count() > 0) {}

Deadline ProgressClock::slice(Deadline deadline) const {
  if (!enabled_) return deadline;
  return deadline.min(Deadline::at(next_));
}

std::string ProgressClock::elapsed_of(Clock::duration limit) const {
  using std::chrono::duration_cast;
  using std::chrono::seconds;
  const auto waited = elapsed();
  // Whole seconds, but tenths while it is short (a progress interval set for a test, say).
  const auto text = waited < seconds(10)
                        ? fmt::format("{:.1f}s", std::chrono::duration<double>(waited).count())
                        : fmt::format("{}s", duration_cast<seconds>(waited).count());
  return fmt::format("{} of {}", text, format_duration(limit));
}

bool ProgressClock::due() {
  if (!enabled_ || Clock::now() < next_) return false;
  interval_ = std::min(interval_ * 2, longest_);
  // From now, not from the missed mark: a line that came late does not make the next one early.
  next_ = Clock::now() + interval_;
  return true;
}

}  // namespace ddprun
