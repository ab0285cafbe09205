#pragma once
// --etcd-members for the bench programs: an etcd cluster on loopback (testing/etcd_cluster.hpp).

#include <memory>

#include "common/error.hpp"
#include "testing/etcd_cluster.hpp"

namespace ddprun::bench {

using test::EtcdCluster;

inline std::unique_ptr<EtcdCluster> start_etcd(int members) {
  if (test::etcd_binary().empty()) throw Error("--etcd-members: etcd is not installed");
  return std::make_unique<EtcdCluster>(members);
}

}  // namespace ddprun::bench
