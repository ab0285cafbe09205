// ElasticAgent's conversations through the store: the static rendezvous and start barrier,
// the outcome watcher, the keep-alive, recording failures and agreeing on the root cause,
// announcing a signal, and leaving at the end.

#include "agent/elastic_agent.hpp"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "agent/elastic_rendezvous.hpp"
#include "common/error.hpp"

namespace ddprun {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Tells the other nodes, quickly and without blocking for long, that this agent stops on a
// signal: static jobs stop everywhere, elastic jobs re-form without this node.
void ElasticAgent::announce_signal(int sig) {
  if (rdzv_.ranks.group_world_size < 2 && config_.is_static()) return;
  Failure f = agent_failure(fmt::format("the agent on {} received {}", ctx_.host, signal_name(sig)));
  f.kind = config_.is_static() ? Failure::Kind::kSignal : Failure::Kind::kMembership;
  f.signal = sig;
  f.exit_code = 128 + sig;
  if (!config_.is_static()) {
    f.message = fmt::format("node {} left ({})", ctx_.host, signal_name(sig));
  }
  try {
    auto store = ctx_.open_store(Deadline::after(2s));
    store->compare_set(key("outcome"), "", f.to_json(), Deadline::after(2s));
  } catch (const std::exception& e) {
    spdlog::warn("could not tell the other nodes about {}: {}", signal_name(sig), e.what());
  }
}

void ElasticAgent::rendezvous() {
  StaticRendezvousOptions o;
  o.nnodes = config_.max_nodes;
  o.node_rank = config_.node_rank;
  o.self = NodeInfo{ctx_.host, config_.nproc_per_node, static_cast<int>(getpid())};
  o.join_timeout = config_.rdzv_conf.join_timeout;
  o.token = make_claim_token(o.self);
  emit("rendezvous_started", {{"node_rank", config_.node_rank}, {"nnodes", config_.max_nodes}});
  try {
    rdzv_ = static_rendezvous(*ctx_.store, o);
  } catch (const InterruptedError&) {
    // Give the node rank back, so that this node can be started again without a new store.
    try {
      auto store = ctx_.open_store(Deadline::after(2s));
      store->compare_set(owner_key(o.node_rank), o.token, "", Deadline::after(2s));
    } catch (const std::exception& e) {
      spdlog::warn("could not release node rank {}: {}", o.node_rank, e.what());
    }
    throw;
  }
  rendezvous_done_ = true;
  emit("rendezvous_completed", {{"world_size", rdzv_.ranks.world_size},
                                {"base_rank", rdzv_.ranks.base_rank},
                                {"local_world_size", rdzv_.ranks.local_world_size}});
}

// Every node arrives; the last one to arrive opens the gate. Node 0 publishes the workers'
// master port before it arrives, so it is there once the gate opens.
void ElasticAgent::start_barrier() {
  const auto deadline = Deadline::after(config_.rdzv_conf.join_timeout);
  auto arrived = ctx_.store->add(key("arrived"), 1, deadline);
  if (arrived == rdzv_.ranks.group_world_size) ctx_.store->set(key("go"), "1", deadline);
  try {
    ctx_.store->wait({key("go")}, deadline);
  } catch (const TimeoutError& e) {
    throw TimeoutError(fmt::format("attempt {}: not every node came back to start workers: {}",
                                   attempt_, e.what()));
  }
}

// Every local worker failure of this attempt goes on a list in the store; the root cause is the
// earliest of them, not merely the first one published (a peer of a crashed rank often fails
// within milliseconds, and its agent may win the race to the store).
void ElasticAgent::record_failure(const Failure& failure) {
  try {
    const auto op = Deadline::after(config_.rdzv_conf.read_timeout);
    auto n = ctx_.store->add(key("failures"), 1, op);
    ctx_.store->set(key(fmt::format("failure/{}", n)), failure.to_json(), op);
  } catch (const Error& e) {
    spdlog::warn("could not record the failure of rank {}: {}", failure.rank, e.what());
  }
}

// Once every node has stopped its workers and recorded its failures ("settled"), the agent whose
// failure ended the attempt picks the earliest recorded failure and publishes it; the others
// read it. Bounded: a node that died does not hold this up for longer than the shutdown timeout.
Failure ElasticAgent::resolve_root_cause(const Failure& first) {
  const auto deadline = Deadline::after(config_.shutdown_timeout + 10s);
  const auto op = [&] { return Deadline::after(config_.rdzv_conf.read_timeout); };
  try {
    auto settled = ctx_.store->add(key("settled"), 1, op());
    if (settled == rdzv_.ranks.group_world_size) ctx_.store->set(key("all_settled"), "1", op());
    if (!outcome_mine_) {
      // A little longer than the chooser may wait, so that its answer is not missed.
      return Failure::from_json(
          ctx_.store->get(key("root_cause"), Deadline::at(deadline.when() + 5s)));
    }
    try {
      ctx_.store->wait({key("all_settled")}, deadline);
    } catch (const TimeoutError&) {
      spdlog::warn("not every node reported its failures within {}; choosing among those that did",
                   format_duration(config_.shutdown_timeout + 10s));
    }
    Failure earliest = first;
    auto n = ctx_.store->add(key("failures"), 0, op());
    for (std::int64_t i = 1; i <= n; ++i) {
      auto text = ctx_.store->try_get(key(fmt::format("failure/{}", i)), op());
      if (!text) continue;
      auto f = Failure::from_json(*text);
      if (f.unix_time < earliest.unix_time) earliest = f;
    }
    ctx_.store->set(key("root_cause"), earliest.to_json(), op());
    return earliest;
  } catch (const Error& e) {
    spdlog::warn("could not agree on the root cause: {}; reporting the first failure published",
                 e.what());
    return first;
  }
}

// First writer wins: the value in the store after our compare_set is the job's outcome.
std::string ElasticAgent::publish_failure(const Failure& failure) {
  return ctx_.store->compare_set(key("outcome"), "", failure.to_json(),
                                 Deadline::after(config_.rdzv_conf.read_timeout));
}

ElasticAgent::Outcome ElasticAgent::decide(const std::string& value) {
  if (value == kSuccess) return Outcome{true, {}};
  return Outcome{false, Failure::from_json(value)};
}

// The watcher blocks in the store (server-side) until this attempt's outcome is decided by any
// node, so a failure elsewhere reaches this agent the moment it is published.
void ElasticAgent::start_watcher() {
  stop_watcher();
  std::unique_ptr<Store> store;
  try {
    store = ctx_.open_store(Deadline::after(config_.rdzv_conf.read_timeout));
  } catch (const Error& e) {
    throw ConnectionError(std::string("cannot open the outcome watcher's connection: ") +
                          e.what());
  }
  {
    std::lock_guard lock(watcher_mutex_);
    watcher_store_ = std::move(store);
  }
  watcher_ = std::thread([this, attempt = round_, outcome_key = key("outcome")] {
    AgentEvent e;
    e.attempt = attempt;
    try {
      // Re-armed every hour so that the wait is bounded like every other.
      while (true) {
        try {
          e.text = watcher_store_->get(outcome_key, Deadline::after(1h));
          e.kind = AgentEvent::Kind::kOutcome;
          break;
        } catch (const TimeoutError&) {
        }
      }
    } catch (const InterruptedError&) {
      return;
    } catch (const Error& ex) {
      e.kind = AgentEvent::Kind::kStoreLost;
      e.text = ex.what();
    }
    events_.push(e);
  });
}

void ElasticAgent::start_heartbeat() {
  if (rdzv_.ranks.group_world_size < 2) return;  // nobody to watch
  HeartbeatOptions o;
  o.prefix = prefix_;
  o.group_rank = rdzv_.ranks.group_rank;
  o.members = rdzv_.ranks.group_world_size;
  o.interval = config_.rdzv_conf.keep_alive_interval;
  o.max_attempts = config_.rdzv_conf.keep_alive_max_attempt;
  o.read_timeout = config_.rdzv_conf.read_timeout;
  const int attempt = round_;
  auto outcome_key = key("outcome");
  auto on_dead = [this, outcome_key](int group_rank, Store& store) {
    Failure f = agent_failure(fmt::format(
        "node {} ({}) stopped sending heartbeats", group_rank,
        group_rank < static_cast<int>(rdzv_.nodes.size()) ? rdzv_.nodes[static_cast<std::size_t>(group_rank)].host : "?"));
    // Elastic: the others re-form without it. Static: the node count is fixed, so the job
    // cannot go on; every node stops now instead of hanging in a collective.
    f.kind = config_.is_static() ? Failure::Kind::kAgent : Failure::Kind::kMembership;
    f.exit_code = kExitRendezvous;
    f.lost_node = group_rank;
    // On the heartbeat's own connection, which stopping the heartbeat can interrupt.
    store.compare_set(outcome_key, "", f.to_json(), Deadline::after(config_.rdzv_conf.read_timeout));
  };
  auto on_error = [this, attempt](std::string message) {
    AgentEvent e;
    e.kind = AgentEvent::Kind::kStoreLost;
    e.attempt = attempt;
    e.text = std::move(message);
    events_.push(e);
  };
  heartbeat_ = std::make_unique<Heartbeat>(
      ctx_.open_store(Deadline::after(config_.rdzv_conf.read_timeout)), o, on_dead, on_error);
}

void ElasticAgent::stop_watcher() {
  {
    std::lock_guard lock(watcher_mutex_);
    if (watcher_store_) watcher_store_->interrupt();
  }
  if (watcher_.joinable()) watcher_.join();
  std::lock_guard lock(watcher_mutex_);
  watcher_store_.reset();
}

// The end of the job: node 0 hosts the store, so it waits (bounded) until every node has read
// the outcome before the store goes away.
void ElasticAgent::leave() {
  try {
    std::unique_ptr<Store> fresh;
    Store* store = ctx_.store;
    if (signal_ != 0) {
      fresh = ctx_.open_store(Deadline::after(5s));
      store = fresh.get();
    }
    const auto deadline = Deadline::after(config_.rdzv_conf.close_timeout);
    // A node declared dead will not come to say goodbye: do not wait for it.
    auto left = store->add(key("left"), 1, deadline);
    if (left == rdzv_.ranks.group_world_size - lost_nodes_) store->set(key("all_left"), "1", deadline);
    if (ctx_.hosts_store) store->wait({key("all_left")}, deadline);
  } catch (const Error& e) {
    spdlog::warn("leaving the rendezvous: {}", e.what());
  }
}

}  // namespace ddprun
