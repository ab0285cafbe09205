#include "testing/ddprun_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "testing/test_util.hpp"

namespace ddprun::test {

bool torch_available() {
  return std::system("/usr/bin/python3 -c 'import torch.distributed' >/dev/null 2>&1") == 0;
}

DdprunProcess::DdprunProcess(std::vector<std::string> args,
                             std::map<std::string, std::string> env,
                             std::vector<std::string> wrapper) {
  char tmpl[] = "/tmp/ddprun-test-out-XXXXXX";
  const int fd = mkstemp(tmpl);
  if (fd < 0) throw std::runtime_error("mkstemp failed");
  close(fd);
  output_file_ = tmpl;
  SpawnSpec spec;
  spec.argv = std::move(args);
  spec.argv.insert(spec.argv.begin(), DDPRUN_BINARY);
  spec.argv.insert(spec.argv.begin(), wrapper.begin(), wrapper.end());
  spec.env.assign(env.begin(), env.end());
  spec.output = output_file_;
  child_ = std::make_unique<Child>(spec);
}

DdprunProcess::~DdprunProcess() {
  if (!child_->exited()) {
    child_->signal(SIGKILL);
    child_->wait_for(std::chrono::seconds(30));
  }
  child_.reset();
  std::filesystem::remove(output_file_);
}

int DdprunProcess::wait(std::chrono::milliseconds timeout) {
  const auto status = child_->wait_for(timeout);
  return status ? exit_code(*status) : -1;
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
  wait_until([&] { return printed() || child_->exited() || !process_alive(pid()); }, timeout);
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
