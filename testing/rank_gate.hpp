#pragma once
// Ranks that print together, as ranks do after a collective, for tests of what the console
// shows of many ranks.

#include <chrono>
#include <string>

#include "testing/test_util.hpp"

namespace ddprun::test {

// A sh script (`dir`/ranks.sh) whose workers each say they are ready with a file in the gate
// directory and wait for "go" (within 120 s, else exit 3), then run `body`.
class RankGate {
 public:
  RankGate(const TempDir& dir, const std::string& body);
  const std::string& script() const { return script_; }
  bool all_ready(int ranks) const;
  void open() const;
  // Lets them run once `ranks` ranks wait at the gate; false if they do not within `timeout`.
  bool open_when_ready(int ranks, std::chrono::milliseconds timeout) const;

 private:
  std::string gate_;
  std::string script_;
};

}  // namespace ddprun::test
