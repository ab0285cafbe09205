// The one table from ddprun's exceptions to its exit codes: what main returns for an error that
// escapes a mode, and what the agent reports as the end of its run.

#include <catch2/catch.hpp>

#include <stdexcept>

#include "common/error.hpp"
#include "common/exit_codes.hpp"

using namespace ddprun;

TEST_CASE("exit codes: usage, rendezvous and internal errors", "[common]") {
  CHECK(exit_code_for(classify(ConfigError("--nnodes=x"))) == kExitUsage);
  CHECK(exit_code_for(classify(TimeoutError("waited 600s"))) == kExitRendezvous);
  CHECK(exit_code_for(classify(ConnectionError("refused"))) == kExitRendezvous);
  CHECK(exit_code_for(classify(AuthError("authentication failed"))) == kExitRendezvous);
  CHECK(exit_code_for(classify(RendezvousError("duplicate node rank"))) == kExitRendezvous);
  CHECK(exit_code_for(classify(ProtocolError("bad frame"))) == kExitInternal);
  CHECK(exit_code_for(classify(Error("unexpected"))) == kExitInternal);
  CHECK(exit_code_for(classify(std::runtime_error("from a library"))) == kExitInternal);
  CHECK(exit_code_for(classify(InterruptedError("signal"))) == kExitInternal);
}
