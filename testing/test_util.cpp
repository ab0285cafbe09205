#include "testing/test_util.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <thread>

namespace ddprun::test {

long rss_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

RawSocket::RawSocket(const std::string& host, std::uint16_t port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) {
    throw std::runtime_error("cannot resolve " + host);
  }
  fd_ = ::socket(res->ai_family, SOCK_STREAM, 0);
  int rc = ::connect(fd_, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  if (rc != 0) throw std::runtime_error("cannot connect raw socket");
}

RawSocket::~RawSocket() {
  if (fd_ >= 0) ::close(fd_);
}

void RawSocket::send(const std::string& bytes) {
  // MSG_NOSIGNAL: the server may already have closed us; that is what some tests expect.
  (void)::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
}

bool RawSocket::closed_by_peer_within(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[4096];
  while (std::chrono::steady_clock::now() < deadline) {
    auto left = std::chrono::duration_cast<std::chrono::microseconds>(
        deadline - std::chrono::steady_clock::now());
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(left.count() / 1'000'000);
    tv.tv_usec = static_cast<suseconds_t>(left.count() % 1'000'000);
    if (tv.tv_sec == 0 && tv.tv_usec == 0) tv.tv_usec = 1;
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    auto n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n == 0) return true;
    if (n < 0 && errno == ECONNRESET) return true;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
  }
  return false;
}

int wait_for_exit(pid_t pid, std::chrono::milliseconds timeout) {
  int status = 0;
  const auto first = waitpid(pid, &status, WNOHANG);
  if (first == pid) return status;
  if (first < 0) return -1;  // not a child of this process
  // The child's pidfd becomes readable when it exits: wait for that, not in a polling loop.
  const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd >= 0) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    pollfd p{fd, POLLIN, 0};
    int ready = 0;
    do {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      ready = poll(&p, 1, static_cast<int>(std::max<std::int64_t>(0, left.count())));
    } while (ready < 0 && errno == EINTR);
    close(fd);
  }
  const auto r = waitpid(pid, &status, WNOHANG);
  return r == pid ? status : -1;
}

namespace {

// What follows "pid (comm) " in a /proc stat file ("S 1234 ..."), empty when it cannot be
// read: the command may contain spaces and parentheses, the fields follow the last ')'.
std::string stat_fields(const std::string& path) {
  std::ifstream stat(path);
  std::string content;
  if (!std::getline(stat, content)) return {};
  const auto close = content.rfind(')');
  return close != std::string::npos && close + 2 < content.size() ? content.substr(close + 2)
                                                                  : std::string();
}

// The state letter of a /proc stat file, 0 when it cannot be read.
char stat_state(const std::string& path) {
  const auto fields = stat_fields(path);
  return fields.empty() ? 0 : fields[0];
}

}  // namespace

char process_state(pid_t pid) { return stat_state("/proc/" + std::to_string(pid) + "/stat"); }

pid_t parent_of(pid_t pid) {
  std::istringstream fields(stat_fields("/proc/" + std::to_string(pid) + "/stat"));
  char state = 0;
  pid_t parent = 0;
  return fields >> state >> parent ? parent : 0;
}

bool process_alive(pid_t pid) {
  const char state = process_state(pid);
  return state != 0 && state != 'Z';
}

bool process_stopped(pid_t pid) {
  std::error_code ec;
  int threads = 0;
  for (const auto& task :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    if (stat_state(task.path().string() + "/stat") != 'T') return false;
    ++threads;
  }
  return !ec && threads > 0;
}

bool wait_until_dead(const std::vector<std::string>& pids, std::chrono::milliseconds timeout) {
  return wait_until(
      [&] {
        for (const auto& pid : pids) {
          if (process_alive(std::stoi(pid))) return false;
        }
        return true;
      },
      timeout);
}

namespace {

// Binds `port` on 127.0.0.1 (0: the kernel's pick) and returns the port bound, 0 if none.
std::uint16_t bind_loopback(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  socklen_t len = sizeof(addr);
  const bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  if (fd >= 0) ::close(fd);
  return ok ? ntohs(addr.sin_port) : 0;
}

// Across the test processes that run at once (ctest -j): a port handed out in the last ten
// minutes, by any of them, is not handed out again. Each is a file of its name in a shared
// directory; without that directory the draw alone decides, as it would anyway.
bool reserve_across_processes(std::uint16_t port) {
  std::error_code ec;
  const auto dir = std::filesystem::temp_directory_path(ec) / "ddprun-test-ports";
  std::filesystem::create_directories(dir, ec);
  const auto path = (dir / std::to_string(port)).string();
  const auto claim = [&] {
    const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0666);
    if (fd >= 0) ::close(fd);
    return fd >= 0 ? 1 : errno == EEXIST ? 0 : -1;
  };
  const int got = claim();
  if (got != 0) return true;  // claimed here, or no list can be kept
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0 || std::time(nullptr) - st.st_mtime < 600) return false;
  ::unlink(path.c_str());  // handed out long ago: a test that still holds it would have bound it
  return claim() != 0;
}

}  // namespace

std::uint16_t free_port() {
  // Below the kernel's ephemeral range: a port it never hands out by itself (to a connection's
  // local end, or to a store that binds port 0, as the workers' store does), so that between
  // this look and the test's own bind only another test's free_port() could take it, one in
  // thousands. Never a port this process was given before: a test that takes several before
  // binding any (an etcd cluster's members) must not get one twice. The kernel's pick when
  // that range is too small to draw from.
  int low = 32768, high = 60999;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> low >> high;
  constexpr int kFirst = 10000;
  static std::mutex given_lock;
  static std::set<std::uint16_t> given;
  if (low - kFirst >= 1000) {
    thread_local std::mt19937 draw{std::random_device{}()};
    std::uniform_int_distribution<int> pick(kFirst, low - 1);
    for (int i = 0; i < 100; ++i) {
      const auto port = static_cast<std::uint16_t>(pick(draw));
      {
        std::lock_guard<std::mutex> hold(given_lock);
        if (!given.insert(port).second) continue;
      }
      if (!reserve_across_processes(port)) continue;
      if (bind_loopback(port)) return port;
    }
  }
  return bind_loopback(0);
}

int connect_loopback(std::uint16_t port, std::chrono::seconds receive_timeout) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  timeval tv{static_cast<time_t>(receive_timeout.count()), 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

std::string exchange(int fd, const std::string& request) {
  std::string answer;
  if (fd < 0) return answer;
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
      static_cast<ssize_t>(request.size())) {
    char buf[16384];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) answer.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return answer;
}

std::string http_get(std::uint16_t port, const std::string& target) {
  return exchange(connect_loopback(port),
                  "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
}

bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return done();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

pid_t this_thread_id() { return ::gettid(); }

bool thread_sleeping(pid_t tid) {
  return stat_state("/proc/self/task/" + std::to_string(tid) + "/stat") == 'S';
}

Gate::Gate() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/ddprun-test-gate-XXXXXX";
  fd_ = ::mkostemp(pattern.data(), O_CLOEXEC);  // children get no copy of the lock
  if (fd_ < 0) throw std::runtime_error("cannot create a gate file from " + pattern);
  path_ = pattern;
  if (::flock(fd_, LOCK_EX) != 0) throw std::runtime_error("cannot lock the gate " + path_);
}

Gate::~Gate() {
  open();
  ::unlink(path_.c_str());
}

void Gate::open() {
  if (fd_ < 0) return;
  ::flock(fd_, LOCK_UN);
  ::close(fd_);
  fd_ = -1;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool file_exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

TempDir::TempDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/ddprun-test-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw std::runtime_error("cannot create a temporary directory from " + pattern);
  }
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

int listen_on_loopback(std::uint16_t* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(fd, 16) != 0) {
    throw std::runtime_error(std::string("listen_on_loopback: ") + std::strerror(errno));
  }
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *port = ntohs(addr.sin_port);
  return fd;
}

}  // namespace ddprun::test
