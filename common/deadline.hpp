#pragma once
// Deadlines on the steady clock. Every blocking call in ddprun takes one.

#include <chrono>
#include <string>

namespace ddprun {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

class Deadline {
 public:
  // A deadline `timeout` from now. Negative timeouts are treated as zero.
  static Deadline after(Clock::duration timeout);
  static Deadline at(Clock::time_point when) { return Deadline(when); }

  Clock::time_point when() const { return when_; }
  bool expired() const { return Clock::now() >= when_; }
  // Time left, never negative.
  Clock::duration remaining() const;
  // The earlier of the two.
  Deadline min(const Deadline& other) const { return other.when_ < when_ ? other : *this; }

 private:
  explicit Deadline(Clock::time_point when) : when_(when) {}
  Clock::time_point when_;
};

// Seconds as a readable string: "0.250s", "30s".
std::string format_duration(Clock::duration d);
// An elapsed time for summaries: "7.21s" below ten seconds, "53s" from there.
std::string format_elapsed(double seconds);

}  // namespace ddprun
