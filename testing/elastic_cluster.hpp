#pragma once
// An elastic job on this machine for integration tests: agents started one by one against the
// same rendezvous (c10d or etcd), each writing --events-file; workers that wait at a gate until
// the test lets them finish, so a job runs for exactly as long as the test needs it to.

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "testing/ddprun_process.hpp"
#include "testing/test_util.hpp"

namespace ddprun::test {

class ElasticCluster {
 public:
  // `rendezvous`: the backend's flags (--rdzv-backend, --rdzv-endpoint); `extra_conf` is
  // appended to --rdzv-conf (",key=value...").
  ElasticCluster(std::string nnodes, std::vector<std::string> rendezvous,
                 std::string extra_conf = "")
      : nnodes_(std::move(nnodes)),
        rendezvous_(std::move(rendezvous)),
        conf_(std::move(extra_conf)) {}

  // Flags for every agent started from now on, and the workers' shell script in place of
  // kGateWorker.
  void set_extra(std::vector<std::string> args, std::string worker_script) {
    extra_ = std::move(args);
    worker_ = std::move(worker_script);
  }

  // A worker that waits at the cluster's gate, then succeeds.
  static constexpr const char* kGateWorker = "exec flock -s \"$DDPRUN_TEST_GATE\" true";

  std::unique_ptr<DdprunProcess> start(const std::string& name, std::string run_id = "elastic") {
    std::vector<std::string> args{"--nnodes=" + nnodes_};
    args.insert(args.end(), rendezvous_.begin(), rendezvous_.end());
    args.insert(args.end(), extra_.begin(), extra_.end());
    for (std::string arg :
         {"--rdzv-id=" + run_id, std::string("--local-addr=127.0.0.1"),
          "--rdzv-conf=last_call_timeout=1,keep_alive_interval=0.5,keep_alive_max_attempt=3,"
          "join_timeout=30" + conf_,
          std::string("--shutdown-timeout=2"), std::string("--events-file"), events(name),
          std::string("--no-python"), std::string("sh"), std::string("-c"), worker_}) {
      args.push_back(std::move(arg));
    }
    return std::make_unique<DdprunProcess>(
        args, std::map<std::string, std::string>{{"DDPRUN_TEST_GATE", gate_.path()}});
  }

  // Lets every worker, running or still to start, finish with exit 0.
  void release_workers() { gate_.open(); }

  std::string events(const std::string& name) const { return dir_.file(name + ".jsonl"); }

  std::vector<nlohmann::json> read(const std::string& name, const std::string& event) const {
    return read_events(events(name), event);
  }

  // The `event` records of an --events-file, in order (lines not yet whole are skipped).
  static std::vector<nlohmann::json> read_events(const std::string& path,
                                                 const std::string& event) {
    std::vector<nlohmann::json> out;
    for (const auto& line : read_lines(path)) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.value("event", "") == event) out.push_back(j);
    }
    return out;
  }

  // Waits until `name` has completed a rendezvous into a round of `world_size` workers (one
  // later than round `after`, when given).
  bool wait_for_round(const std::string& name, int world_size,
                      std::chrono::milliseconds timeout = std::chrono::seconds(40),
                      int after = -1) const {
    return wait_until(
        [&] {
          for (const auto& e : read(name, "rendezvous_completed")) {
            if (e.at("world_size") == world_size && e.at("round").get<int>() > after) return true;
          }
          return false;
        },
        timeout);
  }

  // The round of `name`'s latest completed rendezvous (-1 before the first).
  int last_round(const std::string& name) const {
    auto rounds = read(name, "rendezvous_completed");
    return rounds.empty() ? -1 : rounds.back().at("round").get<int>();
  }

 private:
  std::string nnodes_;
  std::vector<std::string> rendezvous_;
  std::string conf_;
  std::vector<std::string> extra_;
  std::string worker_ = kGateWorker;
  TempDir dir_;
  Gate gate_;
};

}  // namespace ddprun::test
