// console_worker: the worker of Figure 14 (what the console shows of many ranks). Reads RANK
// and, by its flags:
//   --gate=FIFO --ready=DIR: opens FIFO for reading (the harness holds it open for writing),
//     writes DIR/<rank>, then waits for end of file there: every rank passes the gate at the
//     moment the harness closes it, as ranks leave a collective together;
//   --same=TEXT: prints TEXT;
//   --distinct=N: ranks below N then print a line of their own (a word made of the rank's
//     letters, so that no two differ only in numbers);
//   --lines=N --interval-us=U: prints N training-like lines, one every U microseconds (on an
//     absolute clock, so that printing takes nothing from the pace);
//   --hold-ms=M: then stays M milliseconds, as a rank goes on training after it printed (1,024
//     exits at once would compete with the lines for the agent's attention).
// One write per line, as `python -u` does. C library only.

#include <fcntl.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

void print(const std::string& line) {
  const std::string bytes = line + "\n";
  std::size_t done = 0;
  while (done < bytes.size()) {
    const auto n = write(STDOUT_FILENO, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(97);
    done += static_cast<std::size_t>(n);
  }
}

// "bcd...": the rank in base 26, letters only.
std::string letters(int rank) {
  std::string out;
  do {
    out.insert(out.begin(), static_cast<char>('a' + rank % 26));
    rank /= 26;
  } while (rank > 0);
  return out;
}

// Waits for the gate's end of file, at most 300 s. Opened without blocking: a harness that is
// gone leaves no writer, and the rank then passes at once instead of waiting forever.
void pass_gate(const char* fifo, const char* ready, int rank) {
  const int fd = open(fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    std::perror(fifo);
    _exit(98);
  }
  const std::string mark = std::string(ready) + "/" + std::to_string(rank);
  const int m = open(mark.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (m < 0) {
    std::perror(mark.c_str());
    _exit(98);
  }
  close(m);
  timespec start{};
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    poll(&p, 1, 1000);
    char byte;
    const auto n = read(fd, &byte, 1);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) break;  // the gate is open
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - start.tv_sec > 300) {
      std::fprintf(stderr, "console_worker: rank %d: the gate stayed shut for 300 s\n", rank);
      _exit(99);
    }
  }
  close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  const char* rank_text = std::getenv("RANK");
  const int rank = rank_text != nullptr ? std::atoi(rank_text) : 0;
  const char* gate = nullptr;
  const char* ready = nullptr;
  const char* same = nullptr;
  int distinct = 0;
  long lines = 0;
  long interval_us = 0;
  long hold_ms = 0;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (std::strncmp(a, "--gate=", 7) == 0) {
      gate = a + 7;
    } else if (std::strncmp(a, "--ready=", 8) == 0) {
      ready = a + 8;
    } else if (std::strncmp(a, "--same=", 7) == 0) {
      same = a + 7;
    } else if (std::strncmp(a, "--distinct=", 11) == 0) {
      distinct = std::atoi(a + 11);
    } else if (std::strncmp(a, "--lines=", 8) == 0) {
      lines = std::atol(a + 8);
    } else if (std::strncmp(a, "--interval-us=", 14) == 0) {
      interval_us = std::atol(a + 14);
    } else if (std::strncmp(a, "--hold-ms=", 10) == 0) {
      hold_ms = std::atol(a + 10);
    } else {
      std::fprintf(stderr, "console_worker: unknown argument %s\n", a);
      return 2;
    }
  }
  if ((gate == nullptr) != (ready == nullptr)) {
    std::fprintf(stderr, "console_worker: --gate and --ready go together\n");
    return 2;
  }
  if (gate != nullptr) pass_gate(gate, ready, rank);
  if (same != nullptr) print(same);
  if (rank < distinct) print("checkpoint shard " + letters(rank) + " written");
  timespec next{};
  clock_gettime(CLOCK_MONOTONIC, &next);
  for (long i = 0; i < lines; ++i) {
    char line[128];
    std::snprintf(line, sizeof line, "step %ld loss %.4f lr 0.001 grad norm %.3f", i,
                  0.7 + 0.0001 * ((i * 7 + rank * 13) % 100), 1.0 + 0.001 * ((i + rank) % 50));
    print(line);
    next.tv_nsec += interval_us * 1000;
    while (next.tv_nsec >= 1'000'000'000) {
      next.tv_nsec -= 1'000'000'000;
      ++next.tv_sec;
    }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, nullptr) == EINTR) {
    }
  }
  timespec hold{hold_ms / 1000, (hold_ms % 1000) * 1'000'000};
  while (nanosleep(&hold, &hold) != 0 && errno == EINTR) {
  }
  return 0;
}
