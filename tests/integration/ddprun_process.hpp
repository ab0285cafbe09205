#pragma once
// Runs the real ddprun binary as a child process for integration tests: its own process group,
// extra environment variables, output captured to a file, and a hard deadline.

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace ddprun::test {

class DdprunProcess {
 public:
  DdprunProcess(std::vector<std::string> args, std::map<std::string, std::string> env = {});
  ~DdprunProcess();  // SIGKILLs it if still running
  DdprunProcess(const DdprunProcess&) = delete;
  DdprunProcess& operator=(const DdprunProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Waits for exit; returns the shell-style exit code (128+N for signal N), or -1 on timeout.
  int wait(std::chrono::milliseconds timeout = std::chrono::seconds(60));
  // Everything it printed (stdout and stderr, interleaved as written).
  std::string output() const;
  // Waits until its output contains `text`; false when it exited or the timeout passed first.
  bool wait_for_output(const std::string& text, std::chrono::milliseconds timeout = std::chrono::seconds(60)) const;

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  std::string output_file_;
};

// KEY=VALUE lines of a file into a map.
std::map<std::string, std::string> read_env_file(const std::string& path);

}  // namespace ddprun::test
