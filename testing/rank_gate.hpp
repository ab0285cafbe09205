#pragma once
// Ranks that print together, as ranks do after a collective, for tests of what the console
// shows of many ranks.

#include <chrono>
#include <string>

#include "testing/test_util.hpp"

namespace ddprun::test {

// A sh script (`dir`/ranks.sh) whose workers each open the gate (a FIFO this object holds open
// for writing), say they are ready with a file, and wait for its end of file, then run `body`.
// Closing it lets every waiting rank go at once, without any polling; so does the destructor.
// Open it only once they all wait: a rank that comes to a gate already open finds no writer,
// and its open blocks.
class RankGate {
 public:
  RankGate(const TempDir& dir, const std::string& body);
  ~RankGate();
  RankGate(const RankGate&) = delete;
  RankGate& operator=(const RankGate&) = delete;

  const std::string& script() const { return script_; }
  bool all_ready(int ranks) const;
  void open();
  // Lets them run once `ranks` ranks wait at the gate; false if they do not within `timeout`.
  bool open_when_ready(int ranks, std::chrono::milliseconds timeout);

 private:
  std::string ready_;
  std::string script_;
  int fd_ = -1;
};

}  // namespace ddprun::test
