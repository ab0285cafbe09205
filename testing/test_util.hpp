#pragma once
// Helpers shared by the tests and the benchmarks: raw sockets, process memory and state, ports,
// files, waits with a deadline.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
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

// Waits for a child (one the test forked itself; programs start as a Child, testing/child.hpp)
// until the timeout; returns its wait status, or -1 if it did not exit.
int wait_for_exit(pid_t pid, std::chrono::milliseconds timeout);
// The state letter of /proc/PID/stat ('R', 'S', 'Z' for exited but not reaped, ...); 0 when
// there is no such process.
char process_state(pid_t pid);
// The parent's pid from /proc/PID/stat; 0 when there is no such process.
pid_t parent_of(pid_t pid);
// True when a process with this pid exists (and is not a zombie).
bool process_alive(pid_t pid);
// True when every thread of the process is stopped (state T). kill(pid, SIGSTOP) returns
// before that: one thread takes the signal and stops the others, each when it next runs.
bool process_stopped(pid_t pid);
// Waits until none of these pids (decimal text, as pid files hold them) is alive.
bool wait_until_dead(const std::vector<std::string>& pids, std::chrono::milliseconds timeout);
// A listening TCP socket on 127.0.0.1, at a port the kernel picked (stored in *port). It is
// never accepted from unless the caller does: connections complete and then hear nothing.
// The caller closes it.
int listen_on_loopback(std::uint16_t* port);
// A TCP port that was free on 127.0.0.1 a moment ago, drawn at random below the kernel's
// ephemeral range, where nothing but another test's draw takes ports.
std::uint16_t free_port();
// A TCP connection to 127.0.0.1:port whose reads give up after `receive_timeout`; -1 when it
// cannot be made.
int connect_loopback(std::uint16_t port, std::chrono::seconds receive_timeout = std::chrono::seconds(30));
// Sends `request` on `fd` and reads until the peer closes (or a read times out); closes `fd`.
// Empty when `fd` is -1 or nothing came back.
std::string exchange(int fd, const std::string& request);
// One HTTP/1.1 GET of `target` from 127.0.0.1:port: the whole answer, headers and body.
std::string http_get(std::uint16_t port, const std::string& target);

// Polls `done` (every few milliseconds) until it returns true or the timeout passes; returns its
// last answer. For tests only, where a hard deadline keeps a short poll harmless.
bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout);
// The kernel's id of the calling thread, for thread_sleeping().
pid_t this_thread_id();
// True when thread `tid` of this process is asleep in the kernel (state S in
// /proc/self/task/TID/stat): blocked in a system call such as poll, recv or a timed wait. A test
// waits for this to know that another thread has made its blocking call (a store get, a
// connection attempt's backoff) before it acts on that call, instead of sleeping and hoping.
bool thread_sleeping(pid_t tid);

// A gate that other processes wait at, for as long as the test wants: `flock -s PATH true`
// blocks while the gate is closed and returns at once after open(). Workers that wait at a gate
// instead of running for a fixed time stay up until the test has seen what it was waiting for,
// however slow the machine is. The gate is closed from construction until open() or destruction.
class Gate {
 public:
  Gate();
  ~Gate();
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;

  const std::string& path() const { return path_; }
  void open();

 private:
  std::string path_;
  int fd_ = -1;
};

// The lines of a text file without their '\n' (empty if the file cannot be read).
std::vector<std::string> read_lines(const std::string& path);
// A file's bytes, exactly (empty if it cannot be read).
std::string read_file(const std::string& path);
// How many times `what` occurs in `text` (overlapping occurrences counted).
std::size_t count_of(const std::string& text, const std::string& what);
// True when the path exists.
bool file_exists(const std::string& path);

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // path() + "/" + name.
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace ddprun::test
