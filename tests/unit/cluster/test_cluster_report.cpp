// The one exit code of a job started with --hosts, from the agents' result reports.

#include <catch2/catch.hpp>

#include "cluster/cluster_report.hpp"
#include "cluster/remote_session.hpp"
#include "common/failure_record.hpp"
#include "common/exit_codes.hpp"

using namespace ddprun;

namespace {

HostOutcome host(int node, int exit_code, bool left_out = false) {
  HostOutcome h;
  h.spec.host = "host" + std::to_string(node);
  h.node = node;
  h.ready = true;
  h.result = nlohmann::json{{"exit_code", exit_code}, {"left_out", left_out}};
  h.code = exit_code;
  return h;
}

}  // namespace

TEST_CASE("cluster: a node --node-check=exclude left out does not fail the job that went on "
          "without it", "[cluster]") {
  ClusterResult r;
  r.elastic = true;
  r.hosts = {host(0, 0), host(1, kExitNodeCheck, true), host(2, 0)};
  CHECK(exit_code_of(r) == kExitOk);
  // The others failing is still the job's failure...
  r.hosts[2] = host(2, 3);
  CHECK(exit_code_of(r) == 3);
  // ...and a refusal, which every node reports without being left out, is the job's code.
  r.hosts = {host(0, kExitNodeCheck), host(1, kExitNodeCheck), host(2, kExitNodeCheck)};
  CHECK(exit_code_of(r) == kExitNodeCheck);
  // Left out, and nobody went on: nothing succeeded.
  r.hosts = {host(0, kExitNodeCheck, true)};
  CHECK(exit_code_of(r) == kExitHosts);
}

TEST_CASE("cluster: the host that left an elastic job under its minimum is the job's exit "
          "code, not the others stopped after it", "[cluster]") {
  ClusterResult r;
  r.elastic = true;
  r.hosts = {host(0, 128 + 15), host(1, 7), host(2, 128 + 15)};
  // The stopped agents name their signal as the root cause.
  (*r.hosts[0].result)["root_cause"] = {{"exit_code", 128 + 15}, {"unix_time", 1.0},
                                        {"kind", static_cast<int>(Failure::Kind::kSignal)}};
  r.stopped_for = 1;
  CHECK(exit_code_of(r) == 7);
  // A worker's failure at the same moment is still the job's root cause.
  (*r.hosts[2].result)["root_cause"] = {{"exit_code", 3}, {"unix_time", 2.0},
                                        {"kind", static_cast<int>(Failure::Kind::kWorker)}};
  CHECK(exit_code_of(r) == 3);
  (*r.hosts[2].result)["root_cause"] = nullptr;
  // Without a result of its own (killed, its connection lost): a lost host.
  r.hosts[1].result.reset();
  r.hosts[1].problem = "its agent ended without a result (exit code 137)";
  CHECK(exit_code_of(r) == kExitHosts);
  // Without the stop, the first non-zero code in node order would have been a stopped one.
  r.stopped_for = -1;
  CHECK(exit_code_of(r) == 128 + 15);
  (*r.hosts[0].result)["root_cause"] = nullptr;
  CHECK(exit_code_of(r) == 128 + 15);
}

TEST_CASE("cluster: why a host ended before its checks, from its code and its last line",
          "[cluster]") {
  CHECK(early_end_reason(255, {"ssh: connect to host a port 22: Connection refused"}, "/x") ==
        "cannot connect: ssh: connect to host a port 22: Connection refused");
  CHECK(early_end_reason(127, {}, "/opt/ddprun") ==
        "/opt/ddprun not found there (see --remote-ddprun)");
  // The staging script and the agent's own internal error share exit code 125.
  CHECK(early_end_reason(125, {"ddprun: cannot stage ddprun 1.0 on a: no room"}, "/x") ==
        "not staged: ddprun: cannot stage ddprun 1.0 on a: no room");
  // srun says a line of its own after the task's.
  CHECK(early_end_reason(125, {"ddprun: cannot stage ddprun 1.0 on a: no room",
                               "srun: error: a: task 0: Exited with exit code 125"}, "/x") ==
        "not staged: ddprun: cannot stage ddprun 1.0 on a: no room");
  CHECK(early_end_reason(kExitInternal, {"ddprun@a: internal error: oops"}, "/x") ==
        "ended with exit code 125 before its checks: ddprun@a: internal error: oops");
}
