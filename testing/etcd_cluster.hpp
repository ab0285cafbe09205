#pragma once
// A real etcd cluster for tests: Debian's etcd binary, `members` members on 127.0.0.1 ports
// picked at start, each in the foreground with its data and log under a temporary directory,
// killed and removed at destruction.

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "testing/child.hpp"
#include "testing/test_util.hpp"

namespace ddprun::test {

// Where etcd is; empty when it is not installed.
std::string etcd_binary();
// Ends the test process with exit code 77 (ctest's SKIP_RETURN_CODE for these tests) and a
// message saying why, when etcd is not installed.
void skip_unless_etcd();

class EtcdCluster {
 public:
  // Starts the members and waits until every one answers with a leader (60 s at most; throws
  // std::runtime_error with the members' log tails otherwise). A member that cannot bind its
  // port (taken since it was picked) makes all start again on new ports, up to 4 times.
  explicit EtcdCluster(int members = 3);
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  int size() const { return static_cast<int>(members_.size()); }
  // "127.0.0.1:P1,127.0.0.1:P2,..." (all members, killed ones included).
  std::string endpoints() const;
  std::string endpoint(int member) const;
  // The endpoints with the leader first: the member a client uses first is the one killed when
  // a test kills the leader.
  std::string endpoints_leader_first() const;
  // Watchers open on a member now (etcd's etcd_debugging_mvcc_watcher_total), -1 if unreadable.
  int watchers(int member) const;
  // Watch streams a member has opened since it started (gRPC's grpc_server_started_total for
  // etcd's Watch; the JSON gateway opens one per HTTP watch), -1 if unreadable.
  int watch_streams_started(int member) const;
  // The member that leads now, asked of a live member; -1 when none answers with one.
  int leader() const;
  // SIGKILLs a member and reaps it.
  void kill(int member);
  bool alive(int member) const { return members_[static_cast<std::size_t>(member)] != nullptr; }
  // The member's process id, or -1 once it is killed (for a benchmark's CPU figures).
  pid_t pid(int member) const {
    const auto& m = members_[static_cast<std::size_t>(member)];
    return m ? m->pid() : -1;
  }
  // The last lines of a member's log, for failure messages.
  std::string log_tail(int member) const;

 private:
  // One try: "" when every member answers with a leader, else what went wrong.
  std::string start(int members);
  // The value of one series of a member's /metrics ("name{labels}" as etcd writes it), -1 if
  // unreadable.
  double metric(int member, const std::string& series) const;

  TempDir dir_;
  std::vector<std::uint16_t> client_ports_;
  std::vector<std::uint16_t> peer_ports_;
  std::vector<std::unique_ptr<Child>> members_;  // nullptr: killed, or ended while starting
};

}  // namespace ddprun::test
