#include "integration/ddprun_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "support/test_util.hpp"

namespace ddprun::test {

DdprunProcess::DdprunProcess(std::vector<std::string> args,
                             std::map<std::string, std::string> env) {
  char tmpl[] = "/tmp/ddprun-test-out-XXXXXX";
  int fd = mkstemp(tmpl);
  if (fd < 0) throw std::runtime_error("mkstemp failed");
  output_file_ = tmpl;
  args.insert(args.begin(), DDPRUN_BINARY);
  pid_ = fork();
  if (pid_ == 0) {
    setpgid(0, 0);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(fd);
}

DdprunProcess::~DdprunProcess() {
  if (!reaped_ && pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  std::filesystem::remove(output_file_);
}

int DdprunProcess::wait(std::chrono::milliseconds timeout) {
  int status = wait_for_exit(pid_, timeout);
  if (status == -1) return -1;
  reaped_ = true;
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

std::string DdprunProcess::output() const {
  std::ifstream in(output_file_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool DdprunProcess::wait_for_output(const std::string& text,
                                    std::chrono::milliseconds timeout) const {
  auto printed = [&] { return output().find(text) != std::string::npos; };
  // An exited process prints nothing more: check once more and stop waiting.
  wait_until([&] { return printed() || reaped_ || !process_alive(pid_); }, timeout);
  return printed();
}

std::map<std::string, std::string> read_env_file(const std::string& path) {
  std::map<std::string, std::string> env;
  for (const auto& line : read_lines(path)) {
    auto eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

}  // namespace ddprun::test
