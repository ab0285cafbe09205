// spawn_floor N PROGRAM: figure 1's floor. posix_spawn N copies of PROGRAM (no arguments, this
// environment), one after the other, then wait for all of them; exit 0 when every one exited 0.
// C library only, so that it costs what no launcher can go below: one exec of a small binary,
// N spawns, N waits.

#include <spawn.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>

extern char** environ;

int main(int argc, char** argv) {
  if (argc != 3 || std::atoi(argv[1]) < 1) {
    std::fprintf(stderr, "usage: spawn_floor N PROGRAM\n");
    return 2;
  }
  const int n = std::atoi(argv[1]);
  char* child_argv[] = {argv[2], nullptr};
  for (int i = 0; i < n; ++i) {
    pid_t pid = 0;
    if (const int err = posix_spawnp(&pid, argv[2], nullptr, nullptr, child_argv, environ);
        err != 0) {
      std::fprintf(stderr, "spawn_floor: cannot start %s: error %d\n", argv[2], err);
      return 1;
    }
  }
  int failed = 0;
  for (int status = 0; wait(&status) > 0;) {
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
  }
  return failed;
}
