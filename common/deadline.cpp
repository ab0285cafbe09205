#include "common/deadline.hpp"

#include <fmt/format.h>

namespace ddprun {

Deadline Deadline::after(Clock::duration timeout) {
  if (timeout < Clock::duration::zero()) timeout = Clock::duration::zero();
  return Deadline(Clock::now() + timeout);
}

Clock::duration Deadline::remaining() const {
  auto left = when_ - Clock::now();
  return left < Clock::duration::zero() ? Clock::duration::zero() : left;
}

std::string format_duration(Clock::duration d) {
  auto ms = std::chrono::duration_cast<Millis>(d).count();
  if (ms % 1000 == 0) return fmt::format("{}s", ms / 1000);
  return fmt::format("{:.3f}s", static_cast<double>(ms) / 1000.0);
}

std::string format_elapsed(double seconds) {
  return seconds < 10 ? fmt::format("{:.2f}s", seconds) : fmt::format("{:.0f}s", seconds);
}

}  // namespace ddprun
