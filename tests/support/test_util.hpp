#pragma once
// Helpers shared by the integration tests: raw sockets, process memory, child processes.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ddprun::test {

// Resident set size of this process in KiB (from /proc/self/status).
long rss_kib();

// A blocking TCP connection with a receive timeout, for sending hand-made bytes.
class RawSocket {
 public:
  RawSocket(const std::string& host, std::uint16_t port);
  ~RawSocket();
  RawSocket(const RawSocket&) = delete;
  RawSocket& operator=(const RawSocket&) = delete;

  void send(const std::string& bytes);
  // True when the peer closed the connection within `timeout` (reads and discards data).
  bool closed_by_peer_within(std::chrono::milliseconds timeout);

 private:
  int fd_ = -1;
};

// Starts a program with arguments; returns its pid. The child gets its own process group.
pid_t spawn(const std::vector<std::string>& argv);
// Waits for a child until the timeout; returns its wait status, or -1 if it did not exit.
int wait_for_exit(pid_t pid, std::chrono::milliseconds timeout);
// True when a process with this pid exists (and is not a zombie).
bool process_alive(pid_t pid);
// A TCP port that was free on 127.0.0.1 a moment ago.
std::uint16_t free_port();

}  // namespace ddprun::test
