#include "common/deadline.hpp"

#include <fmt/format.h>

namespace ddprun {

Deadline Deadline::after(Clock::duration timeout) {
  if (timeout < Clock::duration::zero()) timeout = Clock::duration::zero();
  return Deadline(Clock::now() + timeout);
}

Deadline Deadline::never() {
  // A century: far enough to never fire, near enough not to overflow when added to.
  return Deadline(Clock::now() + std::chrono::hours(24 * 365 * 100));
}

Clock::duration Deadline::remaining() const {
  auto left = when_ - Clock::now();
  return left < Clock::duration::zero() ? Clock::duration::zero() : left;
}

Millis Deadline::remaining_ms() const {
  return std::chrono::duration_cast<Millis>(remaining());
}

std::string format_duration(Clock::duration d) {
  auto ms = std::chrono::duration_cast<Millis>(d).count();
  if (ms % 1000 == 0) return fmt::format("{}s", ms / 1000);
  return fmt::format("{:.3f}s", static_cast<double>(ms) / 1000.0);
}

Millis elapsed_since(Clock::time_point start) {
  return std::chrono::duration_cast<Millis>(Clock::now() - start);
}

}  // namespace ddprun
