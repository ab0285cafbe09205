#include "process/oom.hpp"

#include <fstream>
#include <sstream>

namespace ddprun {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return in ? text.str() : std::string();
}

// The value of "oom_kill N" in a memory.events or memory.oom_control file.
std::optional<long> oom_kill_field(const std::string& path) {
  std::ifstream in(path);
  std::string key;
  long value = 0;
  while (in >> key >> value) {
    if (key == "oom_kill") return value;
  }
  return std::nullopt;
}

}  // namespace

std::optional<long> oom_kill_count(const std::string& proc_cgroup, const std::string& root) {
  std::istringstream lines(proc_cgroup);
  std::string line;
  std::optional<long> unified;
  while (std::getline(lines, line)) {
    // "hierarchy-id:controllers:path"
    const auto first = line.find(':');
    const auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const auto controllers = line.substr(first + 1, second - first - 1);
    const auto path = line.substr(second + 1);
    if (controllers.empty()) {  // v2, mounted at the root or (hybrid) at unified/
      for (const char* mount : {"", "/unified"}) {
        if (auto n = oom_kill_field(root + mount + path + "/memory.events")) unified = n;
        if (unified) break;
      }
      continue;
    }
    std::istringstream names(controllers);
    std::string name;
    while (std::getline(names, name, ',')) {
      if (name == "memory") return oom_kill_field(root + "/memory" + path + "/memory.oom_control");
    }
  }
  return unified;
}

std::optional<long> oom_kill_count() {
  return oom_kill_count(read_all("/proc/self/cgroup"), "/sys/fs/cgroup");
}

}  // namespace ddprun
