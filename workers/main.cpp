// ddp_resnet: ResNet training with distributed data parallelism, started by ddprun or torchrun.
// main() only parses, runs, and turns exceptions into exit codes (see options.hpp).

#include <cstdio>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/failure_record.hpp"
#include "workers/dist_env.hpp"
#include "workers/distributed.hpp"
#include "workers/options.hpp"
#include "workers/standby.hpp"
#include "workers/trainer.hpp"
#include "workers/worker_error.hpp"

int main(int argc, char** argv) {
  using namespace ddprun::workers;
  const std::vector<std::string> args(argv + 1, argv + argc);
  const ParseOutcome parsed = parse_options(args, built_with_cuda());
  if (!parsed.options) {
    std::fprintf(parsed.exit_code == 0 ? stdout : stderr, "%s\n", parsed.message.c_str());
    return parsed.exit_code;
  }
  try {
    ResNet model = build_model(*parsed.options);
    if (!wait_for_start()) return 0;  // a warm standby the agent no longer needs
    const DistEnv env = read_dist_env(process_env());
    run_training(*parsed.options, env, std::move(model));
    return 0;
  } catch (const InjectedFailure& e) {
    std::fprintf(stderr, "ddp_resnet: %s\n", e.what());
    write_error_file("InjectedFailure", e.what(), e.unix_time());
    return kExitInjectedFailure;
  } catch (const OutOfSyncError& e) {
    std::fprintf(stderr, "ddp_resnet: %s\n", e.what());
    write_error_file("OutOfSyncError", e.what(), e.unix_time());
    return kExitOutOfSync;
  } catch (const ddprun::ConfigError& e) {
    std::fprintf(stderr, "ddp_resnet: %s (%s)\n", e.what(), error_context().c_str());
    return kExitUsage;
  } catch (const WorkerError& e) {  // already says where
    std::fprintf(stderr, "ddp_resnet: %s\n", e.what());
    write_error_file("WorkerError", e.what(), e.unix_time());
    return kExitWorkerError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp_resnet: error on %s: %s\n", error_context().c_str(), describe(e).c_str());
    write_error_file("Error", error_context() + ": " + describe(e), ddprun::unix_seconds());
    return kExitWorkerError;
  }
}
