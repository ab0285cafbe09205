#pragma once
// Warm standby workers (--warm-standby): for each local rank, a Python interpreter that has
// already started and imported the slow modules (torch) and waits on a channel to the agent. A
// (re)start hands it the attempt's environment and it runs the program as a cold start would.
//
// The channel is a Unix socket pair; the standby's end is descriptor 3, named by
// DDPRUN_STANDBY_FD. One JSON line each way, in this order:
//
//   agent -> standby   {"args": [...], "modules": [...], "optional": bool}
//                      args: what follows `python -u` ([script, args...] or ["-m", module, ...]),
//                      or a native program's own arguments
//   standby -> agent   "ready" (imports done), or "failed <why>": the agent ends a standby
//                      that failed; one already handed over runs the program all the same,
//                      which imports what it needs itself, as a cold start would
//   agent -> standby   {"env": {...}, "orig_argv": [...]}  (the handover; EOF: exit quietly)
//   standby closes its end: it begins the program.
//
// A standby starts with the worker's environment less the attempt's own variables (its rank,
// the master's address, the restart count, ...), so nothing it imports can read a stale value.

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "process/process_runner.hpp"

namespace ddprun {

struct StandbyOptions {
  // Imported before the handover. Empty: torch, when it can be imported.
  std::vector<std::string> modules;
  // The variables that differ from one attempt to the next: a standby starts without them and
  // gets them at the handover; any other difference between the environment it started with
  // and the attempt's means a cold start.
  std::vector<std::string> attempt_variables;
  // The program itself speaks this protocol (--no-python: ddp_resnet does); it is started as
  // it is, not through the Python bootstrap.
  bool native = false;
  // A standby not ready by then is reported, ended and replaced.
  std::chrono::milliseconds ready_timeout{std::chrono::minutes(5)};
};

// The interpreter flag every Python worker is started with (launcher/config_builder.cpp).
inline constexpr const char* kUnbufferedFlag = "-u";

// The standby's program, for `python -u -c`.
const char* standby_bootstrap();

// The launch a standby for `launch` starts with (the attempt's variables taken out of its
// environment; for Python, argv replaced by the bootstrap), or nullopt when the options are not
// native and `launch` is not a Python worker (`python -u ...`) or runs what the bootstrap does
// not (a directory, a zip archive, a .pyc file).
std::optional<WorkerLaunch> standby_launch(const WorkerLaunch& launch,
                                           const StandbyOptions& options);

// What must be equal for a standby made from `a` to serve `b`: the same command line,
// placement, output plumbing and environment except the attempt's variables.
bool standby_serves(const WorkerLaunch& a, const WorkerLaunch& b, const StandbyOptions& options);

// The channel's messages (one line each, newline included).
std::string standby_plan_message(const WorkerLaunch& launch, const StandbyOptions& options);
std::string standby_handover_message(const std::vector<std::string>& env,
                                     const std::vector<std::string>& orig_argv);

}  // namespace ddprun
