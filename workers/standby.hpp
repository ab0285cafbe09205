#pragma once
// ddprun's warm standby protocol, the worker's side (process/standby.hpp is the agent's; the
// steps are in docs/workers.md). Started as a standby, ddp_resnet has libtorch loaded, its
// options parsed and its model built when it says "ready"; the handover brings the attempt's
// environment.

namespace ddprun::workers {

// Without DDPRUN_STANDBY_FD in the environment: returns true at once (a cold start). Otherwise
// says "ready" on that descriptor and blocks until the agent hands over a start: the process
// environment is replaced by the one it sent and true is returned. False: the agent let this
// standby go (its end closed), and the process should exit quietly. Throws Error on a message
// it cannot read.
bool wait_for_start();

}  // namespace ddprun::workers
