#pragma once
// ddprun's exit codes, and the one table from its exceptions to them. A failed job exits with
// its root cause's code (the worker's exit code, or 128+N for signal N); these are the
// launcher's own (docs/reference.md, "Exit codes").

#include <exception>

namespace ddprun {

inline constexpr int kExitOk = 0;
inline constexpr int kExitUsage = 2;         // invalid flag, value or combination
inline constexpr int kExitNoJob = 3;         // `ddprun status`: no such running job (unknown, ended, unreachable)
// A worker could not be started because the node had no room for another process (fork
// failed: a pids limit, a process limit, memory); the job restarts while restarts are left.
inline constexpr int kExitNoResources = 121;
inline constexpr int kExitNodeCheck = 120;   // --node-check=refuse: a node failed the checks
inline constexpr int kExitHang = 122;       // the job hung (--hang-timeout, a FileTimer) and no restart was left
inline constexpr int kExitHosts = 123;       // --hosts: a host unreachable, failed its checks, or lost
inline constexpr int kExitRendezvous = 124;  // rendezvous timed out or failed, store lost
inline constexpr int kExitInternal = 125;    // a bug or an unexpected system error
inline constexpr int kExitCannotStart = 126; // a worker program is not executable
inline constexpr int kExitNotFound = 127;    // a worker program does not exist

// What an exception that ends a run says about it.
enum class ErrorClass {
  kUsage,       // ConfigError: the flags or environment are invalid
  kRendezvous,  // TimeoutError, ConnectionError, RendezvousError: the nodes could not meet
  kInternal,    // anything else: a bug or an unexpected system error
};

ErrorClass classify(const std::exception& e);
int exit_code_for(ErrorClass c);

}  // namespace ddprun
