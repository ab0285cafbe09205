#include "launcher/job_report.hpp"

#include <cstdio>

#include <spdlog/spdlog.h>

#include "agent/failure.hpp"
#include "common/exit_codes.hpp"

namespace ddprun {

int exit_code_of(const RunResult& r) {
  switch (r.end) {
    case RunResult::End::kSucceeded:
      return kExitOk;
    case RunResult::End::kFailed:
      return r.root_cause && r.root_cause->exit_code != 0 ? r.root_cause->exit_code
                                                          : kExitInternal;
    case RunResult::End::kStopped:
      return 128 + r.signal;
    case RunResult::End::kRendezvousFailed:
      return kExitRendezvous;
    case RunResult::End::kInternalError:
      return kExitInternal;
  }
  return kExitInternal;
}

void report(const RunResult& r) {
  if (r.root_cause) std::fputs(format_root_cause(*r.root_cause, r.world_size).c_str(), stderr);
  const int code = exit_code_of(r);
  if (code == 0) {
    spdlog::info("job finished: {} ({} restart{})", r.reason, r.restarts,
                 r.restarts == 1 ? "" : "s");
  } else {
    spdlog::error("job failed (exit code {}): {}", code, r.reason);
  }
}

}  // namespace ddprun
