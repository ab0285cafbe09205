#pragma once
// The rendezvous backend a LaunchConfig asks for, chosen in one place: which store (served by
// this agent, or joined, or etcd), and which RendezvousHandler runs over it.
//
//   static  the store is node 0's, at --master-addr:--master-port; node 0 serves it. With one
//           node (--standalone among them) nobody else would connect: the store is the
//           agent's memory, and no port is bound.
//   c10d    the store is at --rdzv-endpoint; the agent on the endpoint's host serves it
//           (is_host forces the choice); when several agents share that host, the first to
//           bind serves and the others join it.
//   etcd    the store is the etcd cluster at --rdzv-endpoint (a list); no agent serves
//           anything. The elastic rendezvous runs over it, with etcd leases for liveness
//           (EtcdSession) in place of the heartbeat ring.

#include <memory>
#include <optional>
#include <string>

#include "common/launch_config.hpp"
#include "etcd/etcd_store.hpp"
#include "rendezvous/elastic_rendezvous.hpp"
#include "rendezvous/etcd_session.hpp"
#include "rendezvous/rendezvous_handler.hpp"
#include "store/memory_store.hpp"
#include "store/store.hpp"
#include "store/tcp_store_client.hpp"
#include "store/tcp_store_server.hpp"

namespace ddprun {

class RendezvousBackend {
 public:
  // Binds the store's port now when this agent serves it (a taken port is reported before
  // anything else starts: ConnectionError) and then uses it in-process; otherwise connects
  // this agent's client by `deadline`.
  RendezvousBackend(const LaunchConfig& config, const std::string& host, Deadline deadline);
  ~RendezvousBackend();
  RendezvousBackend(const RendezvousBackend&) = delete;
  RendezvousBackend& operator=(const RendezvousBackend&) = delete;

  store::Store& store() { return *client_; }
  store::StoreOpener opener() const;
  RendezvousHandler& handler() { return *handler_; }
  bool serves_store() const { return server_ != nullptr || local_ != nullptr; }
  // Requests the store this agent serves over TCP has answered; nullopt when it serves none.
  std::optional<std::uint64_t> store_requests_served() const;
  // "store 127.0.0.1:29500, served by this agent", for the startup log.
  std::string describe() const;

 private:
  std::unique_ptr<store::TcpStoreServer> server_;
  std::unique_ptr<store::MemoryStore> local_;  // one static node: nobody else connects
  store::StoreClientOptions client_options_;
  std::optional<EtcdStoreOptions> etcd_;  // set for --rdzv-backend=etcd
  std::unique_ptr<store::Store> client_;
  std::unique_ptr<EtcdSession> session_;
  std::unique_ptr<RendezvousHandler> handler_;
};

// The handler `config` asks for, over `store` (this agent's connection) and `open_store` (more
// connections); `host` is this node's address as the others reach it. An elastic handler's
// members watch each other with `keep_alive` when given (etcd), else with the heartbeat ring.
std::unique_ptr<RendezvousHandler> make_rendezvous_handler(
    const LaunchConfig& config, store::Store& store, store::StoreOpener open_store, const std::string& host,
    ElasticRendezvous::KeepAliveSource* keep_alive = nullptr);

// Where a job's store is for a client anywhere: the etcd cluster, or the TCP store (static:
// --master-addr:--master-port; c10d: --rdzv-endpoint, port 29400 by default), with the run id
// and the job's secret. Throws ConfigError for an endpoint that cannot be parsed.
struct JobStoreAddress {
  std::optional<EtcdStoreOptions> etcd;  // set: an etcd job (`tcp` unused)
  store::StoreClientOptions tcp;
};
JobStoreAddress job_store_address(const LaunchConfig& config);
// Opens a new client of that store on each call (an agent's status records, a --hosts command's
// metrics, `ddprun status --rdzv-endpoint`).
store::StoreOpener job_store_opener(const LaunchConfig& config);

}  // namespace ddprun
