#include "testing/rank_gate.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace ddprun::test {

RankGate::RankGate(const TempDir& dir, const std::string& body)
    : ready_(dir.file("ready")), script_(dir.file("ranks.sh")) {
  const auto fifo = dir.file("gate");
  std::filesystem::create_directories(ready_);
  // Read and write: opening never blocks, and the ranks' opens for reading do not either.
  if (mkfifo(fifo.c_str(), 0600) != 0 ||
      (fd_ = ::open(fifo.c_str(), O_RDWR | O_CLOEXEC)) < 0) {
    throw std::runtime_error("cannot make the gate " + fifo);
  }
  std::ofstream(script_) << "#!/bin/sh\n"
                         << "exec 3< '" << fifo << "'\n"
                         << "touch '" << ready_ << "/'$RANK\n"
                         << "read -r _ <&3 || true\n"
                         << "exec 3<&-\n"
                         << body;
}

RankGate::~RankGate() { open(); }

bool RankGate::all_ready(int ranks) const {
  for (int rank = 0; rank < ranks; ++rank) {
    if (!file_exists(ready_ + "/" + std::to_string(rank))) return false;
  }
  return true;
}

void RankGate::open() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool RankGate::open_when_ready(int ranks, std::chrono::milliseconds timeout) {
  if (!wait_until([&] { return all_ready(ranks); }, timeout)) return false;
  open();
  return true;
}

}  // namespace ddprun::test
