#pragma once
// `ddprun status`: shows running jobs, from the control sockets of this user's agents and
// --hosts commands on this machine, or from any job's store (--rdzv-endpoint).

#include <string>
#include <vector>

namespace ddprun {

// `args` follow the word "status". Returns the exit code: 0 a running job was shown, 2 usage,
// 3 no such running job (none here, unknown, ended or unreachable).
int run_status(const std::vector<std::string>& args);

}  // namespace ddprun
