#include "testing/rank_gate.hpp"

#include <filesystem>
#include <fstream>

namespace ddprun::test {

RankGate::RankGate(const TempDir& dir, const std::string& body)
    : gate_(dir.file("gate")), script_(dir.file("ranks.sh")) {
  std::filesystem::create_directories(gate_);
  std::ofstream(script_) << "#!/bin/sh\n"
                         << "touch '" << gate_ << "/ready.'$RANK\n"
                         << "i=0\n"
                         << "while [ ! -e '" << gate_ << "/go' ]; do\n"
                         << "  i=$((i + 1)); [ $i -gt 12000 ] && exit 3\n"
                         << "  sleep 0.01\n"
                         << "done\n"
                         << body;
}

bool RankGate::all_ready(int ranks) const {
  for (int rank = 0; rank < ranks; ++rank) {
    if (!file_exists(gate_ + "/ready." + std::to_string(rank))) return false;
  }
  return true;
}

void RankGate::open() const { std::ofstream(gate_ + "/go"); }

bool RankGate::open_when_ready(int ranks, std::chrono::milliseconds timeout) const {
  if (!wait_until([&] { return all_ready(ranks); }, timeout)) return false;
  open();
  return true;
}

}  // namespace ddprun::test
