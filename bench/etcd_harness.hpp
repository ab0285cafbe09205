#pragma once
// --etcd-members for the bench programs: an etcd cluster on loopback, started with the tests'
// harness (tests/support/etcd_cluster.hpp) when the build has it (DDPRUN_TESTS=ON).

#include <memory>
#include <string>

#include "common/error.hpp"
#ifdef DDPRUN_BENCH_ETCD
#include "support/etcd_cluster.hpp"
#endif

namespace ddprun::bench {

#ifdef DDPRUN_BENCH_ETCD
using EtcdCluster = test::EtcdCluster;

inline std::unique_ptr<EtcdCluster> start_etcd(int members) {
  if (test::etcd_binary().empty()) throw Error("--etcd-members: etcd is not installed");
  return std::make_unique<EtcdCluster>(members);
}
#else
class EtcdCluster {
 public:
  std::string endpoints() const { return {}; }
  std::string log_tail(int) const { return {}; }
};

inline std::unique_ptr<EtcdCluster> start_etcd(int) {
  throw Error("--etcd-members: this build has no etcd harness (configure with DDPRUN_TESTS=ON)");
}
#endif

}  // namespace ddprun::bench
