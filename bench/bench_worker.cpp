// bench_worker: the trivial worker the launcher benchmarks start, under ddprun and torchrun
// alike. It reads only torchrun's environment (RANK, TORCHELASTIC_RESTART_COUNT) and:
//   - when BENCH_STAMP_DIR is set, writes CLOCK_MONOTONIC seconds at its start to
//     $BENCH_STAMP_DIR/start.<restart count>.<rank> (and to exit.<restart>.<rank> just before a
//     failing exit), so that both launchers are timed from the workers' side the same way;
//   - --sleep=S: sleeps S seconds;
//   - --fail-once-rank=R: exits 3 when RANK is R on the first attempt (restart count 0);
//   - --fail-when-opened=FIFO: that failing rank first blocks opening FIFO for reading, so
//     the harness chooses the moment of the failure by opening it for writing (it sleeps no
//     longer then: the failure is the only thing it waits for).
// Then exits 0. C library only, so that it starts as fast as `true`.

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

double mono_now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

void stamp(const char* what, int restart, int rank) {
  const char* dir = std::getenv("BENCH_STAMP_DIR");
  if (dir == nullptr || *dir == '\0') return;
  const double now = mono_now();
  char path[4096];
  std::snprintf(path, sizeof(path), "%s/%s.%d.%d", dir, what, restart, rank);
  char text[64];
  const int n = std::snprintf(text, sizeof(text), "%.9f\n", now);
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || write(fd, text, static_cast<std::size_t>(n)) != n) {
    std::perror(path);
    _exit(98);
  }
  close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  const int rank = env_int("RANK", 0);
  const int restart = env_int("TORCHELASTIC_RESTART_COUNT", 0);
  stamp("start", restart, rank);
  double sleep_s = 0;
  int fail_rank = -1;
  const char* fail_fifo = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--sleep=", 8) == 0) {
      sleep_s = std::atof(argv[i] + 8);
    } else if (std::strncmp(argv[i], "--fail-once-rank=", 17) == 0) {
      fail_rank = std::atoi(argv[i] + 17);
    } else if (std::strncmp(argv[i], "--fail-when-opened=", 19) == 0) {
      fail_fifo = argv[i] + 19;
    } else {
      std::fprintf(stderr, "bench_worker: unknown argument %s\n", argv[i]);
      return 99;
    }
  }
  const bool failing = rank == fail_rank && restart == 0;
  if (failing && fail_fifo != nullptr) {
    const int fd = open(fail_fifo, O_RDONLY | O_CLOEXEC);  // returns once a writer opens it
    if (fd < 0) {
      std::perror(fail_fifo);
      return 97;
    }
    close(fd);
    sleep_s = 0;
  }
  if (sleep_s > 0) {
    timespec ts{};
    ts.tv_sec = static_cast<time_t>(sleep_s);
    ts.tv_nsec = static_cast<long>((sleep_s - static_cast<double>(ts.tv_sec)) * 1e9);
    while (nanosleep(&ts, &ts) != 0) {
    }
  }
  if (failing) {
    stamp("exit", restart, rank);
    return 3;
  }
  return 0;
}
