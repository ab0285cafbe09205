#include "bench/sys_util.hpp"

#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "common/error.hpp"

namespace ddprun::bench {

namespace fs = std::filesystem;

std::uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw Error("socket: " + errno_message(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    int err = errno;
    ::close(fd);
    throw Error("cannot find a free port: " + errno_message(err));
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

long raise_nofile(long wanted) {
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  const auto want = static_cast<rlim_t>(wanted);
  if (lim.rlim_cur < want) {
    // Above the hard limit only with CAP_SYS_RESOURCE (root); otherwise up to the hard limit.
    rlimit raised{want, std::max(want, lim.rlim_max)};
    if (setrlimit(RLIMIT_NOFILE, &raised) != 0) {
      lim.rlim_cur = std::min(want, lim.rlim_max);
      setrlimit(RLIMIT_NOFILE, &lim);
    }
    getrlimit(RLIMIT_NOFILE, &lim);
  }
  return static_cast<long>(lim.rlim_cur);
}

TempDir::TempDir(const std::string& tag) {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base && *base ? base : "/tmp") + "/ddprun-bench-" + tag + "-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    throw Error("mkdtemp " + pattern + ": " + errno_message(errno));
  }
  path_ = pattern;
}

TempDir::~TempDir() {
  if (keep_) return;
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<nlohmann::json> read_json_lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded()) out.push_back(std::move(j));
  }
  return out;
}

std::vector<nlohmann::json> events_named(const std::string& path, const std::string& event) {
  std::vector<nlohmann::json> out;
  for (auto& j : read_json_lines(path)) {
    if (j.is_object() && j.value("event", "") == event) out.push_back(std::move(j));
  }
  return out;
}

nlohmann::json await_event(const std::string& path, const std::string& event,
                           const std::function<bool(const nlohmann::json&)>& pred,
                           std::chrono::milliseconds timeout, const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    for (const auto& e : events_named(path, event)) {
      if (pred(e)) return e;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  throw TimeoutError(fmt::format("no {} in {} after {} ms ({})", event, path, timeout.count(), what));
}

std::vector<double> read_stamps(const std::string& dir, const std::string& prefix) {
  std::vector<double> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().filename().string().rfind(prefix, 0) != 0) continue;
    auto text = read_text(entry.path().string());
    if (!text.empty()) out.push_back(std::strtod(text.c_str(), nullptr));
  }
  return out;
}

std::string tail(const std::string& path, int lines) {
  std::vector<std::string> all;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) all.push_back(line);
  std::string out;
  const auto first = all.size() > static_cast<std::size_t>(lines) ? all.size() - lines : 0;
  for (auto i = first; i < all.size(); ++i) out += all[i] + "\n";
  return out;
}

long status_kib(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  const std::string prefix = field + ":";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) return std::strtol(line.c_str() + prefix.size(), nullptr, 10);
  }
  return -1;
}

std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& task : fs::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::ifstream in(task.path() / "children");
    long child = 0;
    while (in >> child) out.push_back(static_cast<pid_t>(child));
  }
  return out;
}

std::string comm_of(pid_t pid) {
  auto text = read_text("/proc/" + std::to_string(pid) + "/comm");
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return text;
}

double process_cpu_s(pid_t pid) {
  std::uint64_t ns = 0;
  std::error_code ec;
  for (const auto& task :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    auto text = read_text((task.path() / "schedstat").string());
    ns += std::strtoull(text.c_str(), nullptr, 10);
  }
  return static_cast<double>(ns) * 1e-9;
}

}  // namespace ddprun::bench
