#pragma once
// Runs the real ddprun binary for integration tests: a Child (testing/child.hpp) with extra
// environment variables and its output captured to a file.

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "testing/child.hpp"

namespace ddprun::test {

class DdprunProcess {
 public:
  // `wrapper`, when given, runs ddprun (for example setpriv, to run it as another user).
  DdprunProcess(std::vector<std::string> args, std::map<std::string, std::string> env = {},
                std::vector<std::string> wrapper = {});
  // SIGKILLs ddprun alone if it still runs, as a user's kill would: its guardian, not the test,
  // ends the workers.
  ~DdprunProcess();
  DdprunProcess(const DdprunProcess&) = delete;
  DdprunProcess& operator=(const DdprunProcess&) = delete;

  pid_t pid() const { return child_->pid(); }
  // Waits for exit; returns the shell-style exit code (128+N for signal N), or -1 on timeout.
  int wait(std::chrono::milliseconds timeout = std::chrono::seconds(60));
  // Everything it printed (stdout and stderr, interleaved as written).
  std::string output() const;
  // Waits until its output contains `text`; false when it exited or the timeout passed first.
  bool wait_for_output(const std::string& text, std::chrono::milliseconds timeout = std::chrono::seconds(60)) const;

 private:
  std::string output_file_;
  std::unique_ptr<Child> child_;
};

// Whether Debian's python3-torch (with torch.distributed) is installed, for the tests that run
// real PyTorch jobs.
bool torch_available();

// `a` then `b`: command lines built from common parts.
inline std::vector<std::string> operator+(std::vector<std::string> a,
                                          const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// KEY=VALUE lines of a file into a map.
std::map<std::string, std::string> read_env_file(const std::string& path);

}  // namespace ddprun::test
