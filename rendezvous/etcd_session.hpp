#pragma once
// An agent's life in an etcd rendezvous (--rdzv-backend=etcd): liveness by etcd leases rather
// than by the heartbeat ring, and the run's keys removed when the job ends.
//
// The session grants one lease (TTL = keep-alive interval x max attempts, at least etcd's
// minimum of 2 s) and renews it every keep-alive interval (at most a third of the TTL) on a
// thread of its own. Two kinds of
// keys hang on it:
//   agents/<id>           "this agent is running"; removed by the agent at its end.
//   <ring>/hb/<rank>      this member's liveness in its ring, under the round's
//                         keep_alive_prefix (the same key the heartbeat ring uses, so that
//                         leave_early's "done" works for both).
// An agent that dies stops renewing; etcd expires the lease and deletes its keys, and the member
// watching it (its successor in group-rank order, like the ring) learns from its watch at once:
// death is judged within the lease's TTL (+ etcd's 0.5 s expiry check), never polled.
//
// The ring is kept from one round to the next while it is the same ring (the round's
// keep_alive_prefix, this node's place and the member count: an elastic round with the last
// round's members keeps its keys), as the heartbeat ring is (RingKeeper): a recovery after a
// worker failure then puts no key and opens no watch, each of which costs the agent a
// connection of its own (etcd's JSON gateway carries one watch per HTTP stream). Each attempt
// attaches its callbacks to the kept watch; a watch that has reported (or ended) is formed again
// at the next attach, on the same keys; a report while no attempt is attached is not kept.
//
// At its end an agent removes its marker; when no other agent's marker is left, it removes
// every key of the run. An agent that starts and finds the run's keys but no running agent
// removes them first (left by a job whose last agents were killed), so a run id can be used
// again. Both removals are one transaction conditional on "no marker under agents/", so they
// can never take keys from under an agent that registered.

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "etcd/etcd_store.hpp"
#include "rendezvous/elastic_rendezvous.hpp"
#include "rendezvous/heartbeat.hpp"
#include "rendezvous/rendezvous_handler.hpp"

namespace ddprun {

class EtcdSession final : public ElasticRendezvous::KeepAliveSource {
 public:
  // Grants the lease and registers the agent (`id`: "host:pid") by `deadline`.
  EtcdSession(EtcdStoreOptions options, std::string id, KeepAliveTiming timing,
              Deadline deadline);
  // Stops renewing, removes the agent's marker and, when it was the last, the run's keys.
  ~EtcdSession() override;
  EtcdSession(const EtcdSession&) = delete;
  EtcdSession& operator=(const EtcdSession&) = delete;

  // The lease keep-alive of `round`: puts this member's key on the lease and watches its
  // successor's, unless the ring is the one already kept (see above) and its key still hangs on
  // the lease in use. nullptr for a round of one node.
  std::unique_ptr<KeepAlive> keep_alive(const Round& round, RendezvousHandler::LostCallback on_lost,
                                        RendezvousHandler::ErrorCallback on_error) override;
  // Drops the kept ring: its watch, and what it would still report.
  void stop() override;

 private:
  class Renewer;
  class Watch;
  class Handle;
  struct Ring;

  EtcdStoreOptions options_;
  std::string id_;
  KeepAliveTiming timing_;
  std::unique_ptr<EtcdStore> store_;  // this thread's connection (start and end)
  std::int64_t ttl_ = 0;  // seconds, as etcd granted the lease (the renewer holds the lease)
  std::unique_ptr<Renewer> renewer_;
  std::unique_ptr<Ring> ring_;  // the ring kept from the last round, if any
};

}  // namespace ddprun
