#pragma once
// Errors of the training worker. Every failing c10d, Gloo, NCCL or CUDA call is rethrown as a
// WorkerError whose message names the host, the rank, the call site (file:line) and the
// library's own message (c10's text without its C++ backtrace, which includes NCCL's or CUDA's
// error string), e.g.
//   "allreduce of gradient bucket 3 (6.1 MiB) failed on host node1, rank 2 (ddp_engine.cpp:142):
//    [../third_party/gloo/...] Connection closed by peer [127.0.0.1]:4021"

#include <exception>
#include <source_location>
#include <string>
#include <string_view>
#include <utility>

#include "common/error.hpp"

namespace ddprun::workers {

class WorkerError : public Error {
 public:
  explicit WorkerError(const std::string& what);
  // When the failure happened (wall clock, seconds): taken at construction, before unwinding
  // tears down the process group and peers start failing too.
  double unix_time() const { return unix_time_; }

 private:
  double unix_time_;
};

// --verify_sync found parameters that differ between ranks.
class OutOfSyncError : public WorkerError {
 public:
  using WorkerError::WorkerError;
};

// --fail_at_step: the failure a test or the demo asked for.
class InjectedFailure : public WorkerError {
 public:
  using WorkerError::WorkerError;
};

// Writes torchrun's error file ($TORCHELASTIC_ERROR_FILE, if set) once per process:
// {"message": {"message": "<type>: <text>", "extraInfo": {"py_callstack": "", "timestamp":
// "<unix seconds>"}}}. The agent reads it to name the root cause, and uses the timestamp to
// tell the first failure from the knock-on failures of its peers. Later calls do nothing.
void write_error_file(const std::string& type, const std::string& message, double unix_time);

// Who this process is, for every error message. Set once, early in main; until then messages
// say "rank ?" and the host name. Not thread-safe to set; safe to read.
void set_error_context(std::string host, int rank);
// "host node1, rank 2"
std::string error_context();

// The text of an exception; for c10::Error the message without its backtrace.
std::string describe(const std::exception& e);

// "<what> failed on host H, rank R (file.cpp:line): <cause>"
[[noreturn]] void throw_worker_error(std::string_view what, std::string_view cause,
                                     const std::source_location& where);

// Runs `call`; any exception that is not already a WorkerError comes out as one that says what
// was being done and where. Usage: `auto work = checked("allreduce", [&] { return pg->...; });`
template <class Call>
auto checked(std::string_view what, Call&& call,
             const std::source_location& where = std::source_location::current())
    -> decltype(std::forward<Call>(call)()) {
  try {
    return std::forward<Call>(call)();
  } catch (const WorkerError&) {
    throw;
  } catch (const std::exception& e) {
    throw_worker_error(what, describe(e), where);
  }
}

}  // namespace ddprun::workers
