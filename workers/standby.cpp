#include "workers/standby.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/error.hpp"

namespace ddprun::workers {
namespace {

// One line from `fd`, without its newline; nullopt at end of file.
std::optional<std::string> read_line(int fd) {
  std::string line;
  char c = 0;
  while (true) {
    const ssize_t n = ::read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error("warm standby: reading the agent's channel: " + errno_message(errno));
    if (n == 0) return std::nullopt;
    if (c == '\n') return line;
    line += c;
  }
}

}  // namespace

bool wait_for_start() {
  const char* named = std::getenv("DDPRUN_STANDBY_FD");
  if (named == nullptr) return true;
  const int fd = std::atoi(named);
  // The plan (what python would import) means nothing to a native worker: its libraries are
  // loaded, its options parsed and its model built by now.
  if (!read_line(fd)) return false;
  static constexpr char kReady[] = "ready\n";
  // A write that fails means the agent handed this standby over before it was ready, and
  // stopped listening: the handover is in the channel all the same.
  // No SIGPIPE for it either: MSG_NOSIGNAL.
  [[maybe_unused]] const ssize_t ignored = ::send(fd, kReady, sizeof kReady - 1, MSG_NOSIGNAL);
  const auto line = read_line(fd);
  if (!line) return false;
  ::close(fd);
  const auto go = nlohmann::json::parse(*line, nullptr, false);
  if (go.is_discarded() || !go.contains("env") || !go["env"].is_object()) {
    throw Error("warm standby: the agent's handover is not the expected JSON");
  }
  clearenv();
  for (const auto& [name, value] : go["env"].items()) {
    if (value.is_string()) ::setenv(name.c_str(), value.get<std::string>().c_str(), 1);
  }
  return true;
}

}  // namespace ddprun::workers
