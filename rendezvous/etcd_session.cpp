#include "rendezvous/etcd_session.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/error.hpp"
#include "etcd/etcd_lease.hpp"

namespace ddprun {

namespace {

// etcd 3.4 raises shorter TTLs to 1.5 x its election timeout, rounded up: 2 s by default.
constexpr std::int64_t kMinLeaseTtl = 2;
// The agent's last steps (its marker, the clean-up) wait at most this for etcd.
constexpr auto kEndTimeout = std::chrono::seconds(5);

const char* const kAgentsDir = "agents/";

// Grants a lease of `ttl` and puts the agent's marker (`marker`, a full key) on it.
EtcdLease register_agent(EtcdClient& client, const std::string& marker, std::chrono::seconds ttl,
                         Deadline deadline) {
  const auto lease = grant_lease(client, ttl, deadline);
  put_on_lease(client, marker, std::to_string(lease.id), lease.id, deadline);
  return lease;
}

}  // namespace

// Renews the lease every keep-alive interval (a third of the TTL at most, so that a renewal
// delayed by one slow answer still comes in time; each try on a member is bounded by that
// period too) on its own thread and connection, for the agent's whole life.
//   - A renewal that fails (etcd unreachable or without quorum for read_timeout) is reported
//     to the round's keep-alive, or to the next one that starts; renewing goes on, and a
//     success clears the failure.
//   - A lease that expired all the same (the others took this agent for dead and re-formed
//     without it, as after a pause) is replaced: a new lease, and the agent's marker put again
//     on it. The agent learns of the new round from the round's outcome, and rejoins.
class EtcdSession::Renewer {
 public:
  Renewer(const EtcdStoreOptions& options, std::string marker, std::int64_t lease,
          std::chrono::seconds ttl, KeepAliveTiming timing)
      : every_(std::max<std::chrono::milliseconds>(
            std::chrono::milliseconds(100),
            std::min<std::chrono::milliseconds>(timing.interval,
                                                std::chrono::milliseconds(ttl) / 3))),
        client_(options.endpoints, every_),
        marker_(std::move(marker)),
        lease_(lease),
        ttl_(ttl),
        timing_(timing) {
    thread_ = std::thread([this] { run(); });
  }

  ~Renewer() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    client_.interrupt();
    thread_.join();
  }

  std::int64_t lease() const { return lease_.load(); }

  // Where a failure goes from now on (nullptr: nowhere; a failure is kept until it is
  // reported or renewing works again). Returns once no report to the previous one is running.
  void report_to(RendezvousHandler::ErrorCallback on_error) {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return !reporting_; });
    on_error_ = std::move(on_error);
    if (on_error_ && failure_) deliver(lock);
  }

 private:
  void run() {
    while (true) {
      {
        std::unique_lock lock(mutex_);
        if (cv_.wait_for(lock, every_, [&] { return stop_; })) return;
      }
      try {
        if (!renew_lease(client_, lease(), Deadline::after(timing_.read_timeout))) {
          register_again();
        }
        std::lock_guard lock(mutex_);
        failure_.reset();
      } catch (const InterruptedError&) {
        return;
      } catch (const std::exception& e) {
        fail(fmt::format("cannot renew this agent's etcd lease: {}", e.what()));
      }
    }
  }

  void register_again() {
    spdlog::warn("etcd: this agent's lease {:x} expired (no renewal reached etcd within {} s): "
                 "the other agents took it for dead; registering again with a new lease",
                 lease(), ttl_.count());
    lease_ = register_agent(client_, marker_, ttl_, Deadline::after(timing_.read_timeout)).id;
  }

  void fail(const std::string& message) {
    std::unique_lock lock(mutex_);
    const bool first = !failure_;
    failure_ = message;
    if (on_error_) {
      deliver(lock);
    } else if (first) {
      spdlog::error("{}", message);
    }
  }

  // Hands the failure to the callback, outside the lock; report_to waits for it to return.
  void deliver(std::unique_lock<std::mutex>& lock) {
    auto report = std::move(on_error_);
    on_error_ = nullptr;
    const auto message = *failure_;
    reporting_ = true;
    lock.unlock();
    report(message);
    lock.lock();
    reporting_ = false;
    cv_.notify_all();
  }

  std::chrono::milliseconds every_;
  EtcdClient client_;
  std::string marker_;  // the agent's marker, full key
  std::atomic<std::int64_t> lease_;
  std::chrono::seconds ttl_;
  KeepAliveTiming timing_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool reporting_ = false;
  RendezvousHandler::ErrorCallback on_error_;
  std::optional<std::string> failure_;
  std::thread thread_;
};

// One attempt's keep-alive: its callbacks attached to the ring's watch (RingListeners) and
// to the lease's renewer for as long as it lives.
class EtcdSession::Handle final : public KeepAlive {
 public:
  Handle(std::shared_ptr<RingListeners> listeners, std::uint64_t attached, Renewer& renewer,
         RendezvousHandler::ErrorCallback on_error)
      : listeners_(std::move(listeners)), attached_(attached), renewer_(renewer) {
    renewer_.report_to(std::move(on_error));
  }
  ~Handle() override {
    renewer_.report_to(nullptr);
    listeners_->detach(attached_);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

 private:
  std::shared_ptr<RingListeners> listeners_;
  std::uint64_t attached_;
  Renewer& renewer_;
};

// Watches one member's liveness key on its own thread and connection: a delete (its lease
// expired) is a death; a "done" written in its place is a member that left on purpose.
class EtcdSession::Watch {
 public:
  Watch(const EtcdStoreOptions& options, std::string key, int member, std::chrono::seconds ttl,
        KeepAliveTiming timing, std::shared_ptr<RingListeners> listeners)
      : client_(options.endpoints),
        key_(std::move(key)),
        member_(member),
        ttl_(ttl),
        timing_(timing),
        listeners_(std::move(listeners)) {
    thread_ = std::thread([this] { run(); });
  }

  ~Watch() {
    client_.interrupt();
    thread_.join();
  }
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;

 private:
  void run() {
    try {
      auto now = read();
      if (!now.value) {
        auto registered = wait_for_registration(now.revision);
        if (!registered) return;
        now = *registered;
      }
      if (now.value == kHeartbeatDone) {
        listeners_->ended();
        return;
      }
      follow(now.revision);
    } catch (const InterruptedError&) {
    } catch (const std::exception& e) {
      listeners_->error(fmt::format("keep-alive: watching node {} in etcd: {}", member_, e.what()));
    }
  }

  // The member puts its key when its keep-alive starts, moments after the round closed; one
  // that has not within the lease's TTL is as silent as a dead one, with two allowances for an
  // etcd member's death at that moment: a put already sent to a member that lost its leader
  // waits out one try (kEtcdAttemptTimeout) before it goes to another, and while etcd has no
  // leader (the election) nobody can register, just as no lease can expire, so that time does
  // not count. Returns the key as it appeared; nullopt once the member was reported lost, or
  // the wait failed.
  std::optional<EtcdRead> wait_for_registration(std::int64_t revision) {
    auto since = revision + 1;
    std::optional<EtcdRead> appeared;
    std::chrono::milliseconds budget = ttl_ + kEtcdAttemptTimeout;
    const auto limit = budget + timing_.read_timeout;
    const auto give_up = Deadline::after(limit);
    while (!appeared && budget.count() > 0) {
      if (give_up.expired()) {
        listeners_->error(fmt::format("keep-alive: etcd had no leader for most of {} while node "
                                      "{} was to register its lease",
                                      format_duration(limit), member_));
        return std::nullopt;
      }
      const auto slice = std::min<std::chrono::milliseconds>(budget, std::chrono::seconds(1));
      const auto started = std::chrono::steady_clock::now();
      try {
        client_.watch(key_, since, Deadline::after(slice), [&](const EtcdEvent& e) {
          if (e.deleted) return false;
          appeared = EtcdRead{e.kv.mod_revision, e.kv.value};
          return true;
        });
      } catch (const TimeoutError&) {
      } catch (const EtcdError& e) {
        // The history since the first look is compacted away (the key may have come and gone
        // in it): the key as it is now.
        if (e.code() != kEtcdCompacted) throw;
        auto now = read();
        since = now.revision + 1;
        if (now.value) appeared = now;
      }
      if (!appeared && etcd_has_leader(client_, Deadline::after(timing_.interval))) {
        budget -= std::chrono::duration_cast<std::chrono::milliseconds>(
            std::chrono::steady_clock::now() - started);
      }
    }
    if (!appeared) {
      spdlog::warn("keep-alive: node {} never registered its etcd lease within {}", member_,
                   format_duration(ttl_ + kEtcdAttemptTimeout));
      listeners_->lost(member_);
    }
    return appeared;
  }

  // Follows the registered key from `revision` until it is deleted (the lease expired: the
  // member is lost) or "done" is written in its place (it left on purpose). Re-armed every
  // hour so that each wait is bounded like every other. A kept ring's watch lives as long as
  // its members do, and etcd may compact the history it would resume from: after an hour of
  // silence, or when etcd says so, it starts again from the key as it is now.
  void follow(std::int64_t revision) {
    bool done = false;
    const auto lost = [&] {
      spdlog::warn("keep-alive: node {}'s etcd lease expired (no renewal for {})", member_,
                   format_duration(ttl_));
      listeners_->lost(member_);
      done = true;
    };
    while (!done) {
      try {
        client_.watch(key_, revision + 1, Deadline::after(std::chrono::hours(1)),
                      [&](const EtcdEvent& e) {
                        revision = e.kv.mod_revision;
                        if (e.deleted) {
                          lost();
                        } else if (e.kv.value == kHeartbeatDone) {
                          listeners_->ended();
                          done = true;
                        }
                        return done;
                      });
        continue;
      } catch (const TimeoutError&) {
      } catch (const EtcdError& e) {
        if (e.code() != kEtcdCompacted) throw;
      }
      auto now = read();
      revision = now.revision;
      if (!now.value) {
        lost();
      } else if (*now.value == kHeartbeatDone) {
        listeners_->ended();
        done = true;
      }
    }
  }

  EtcdRead read() { return read_key(client_, key_, Deadline::after(timing_.read_timeout)); }

  EtcdClient client_;
  std::string key_;
  int member_;
  std::chrono::seconds ttl_;
  KeepAliveTiming timing_;
  std::shared_ptr<RingListeners> listeners_;
  std::thread thread_;
};

// The ring this node takes part in, and the lease its own key hangs on.
struct EtcdSession::Ring {
  std::string prefix;
  int group_rank = 0;
  int members = 0;
  std::int64_t lease = 0;
  std::shared_ptr<RingListeners> listeners;
  std::unique_ptr<Watch> watch;
};

EtcdSession::EtcdSession(EtcdStoreOptions options, std::string id, KeepAliveTiming timing,
                         Deadline deadline)
    : options_(std::move(options)), id_(std::move(id)), timing_(timing) {
  store_ = std::make_unique<EtcdStore>(options_, deadline);
  const auto wanted = std::chrono::ceil<std::chrono::seconds>(timing_.interval *
                                                              std::max(1, timing_.max_attempts));
  // Keys without a running agent were left by an earlier job with this run id (its last agents
  // were killed): removed before this agent registers, in one transaction that does nothing as
  // soon as any agent has registered, so a running job's keys are never touched.
  if (auto stale = store_->erase_run_unless(kAgentsDir, deadline); stale && *stale > 0) {
    spdlog::warn("etcd: removed {} keys under {} that an earlier job with the same run id left "
                 "(no agent of it is running)",
                 *stale, store_->full_key(""));
  }
  const auto marker = store_->full_key(kAgentsDir + id_);
  const auto registered =
      register_agent(store_->client(), marker,
                     std::chrono::seconds(std::max<std::int64_t>(kMinLeaseTtl, wanted.count())),
                     deadline);
  ttl_ = registered.ttl.count();
  if (ttl_ != wanted.count()) {
    spdlog::info("etcd: lease TTL {} s (keep-alive {} x {} asks for {} s; etcd's minimum is {} s)",
                 ttl_, format_duration(timing_.interval), timing_.max_attempts, wanted.count(),
                 kMinLeaseTtl);
  }
  renewer_ = std::make_unique<Renewer>(options_, marker, registered.id,
                                       std::chrono::seconds(ttl_), timing_);
}

EtcdSession::~EtcdSession() {
  ring_.reset();
  renewer_.reset();
  try {
    const auto deadline = Deadline::after(kEndTimeout);
    store_->erase(kAgentsDir + id_, deadline);
    if (auto removed = store_->erase_run_unless(kAgentsDir, deadline)) {
      spdlog::debug("etcd: the run's last agent out: removed its {} keys", *removed);
    }
  } catch (const Error& e) {
    spdlog::warn("etcd: could not remove this run's keys at the end: {} (they stay until an "
                 "agent with the same run id starts)",
                 e.what());
  }
}

void EtcdSession::stop() { ring_.reset(); }

std::unique_ptr<KeepAlive> EtcdSession::keep_alive(const Round& round,
                                                   RendezvousHandler::LostCallback on_lost,
                                                   RendezvousHandler::ErrorCallback on_error) {
  if (round.ranks.group_world_size < 2) {
    ring_.reset();
    return nullptr;
  }
  const auto& prefix = round.keep_alive_prefix();
  const int rank = round.ranks.group_rank;
  const int members = round.ranks.group_world_size;
  const bool same_ring = ring_ && ring_->prefix == prefix && ring_->group_rank == rank &&
                         ring_->members == members;
  if (!same_ring) ring_.reset();  // another ring: what the old watch saw is about other members
  // This member's key hangs on the lease: put once per ring, and again when the renewer had to
  // take a new lease (the old one expired, and its key with it).
  const auto lease = renewer_->lease();
  if (!ring_ || ring_->lease != lease) {
    store_->put(beat_key(prefix, rank), "alive", lease, Deadline::after(timing_.read_timeout));
  }
  if (!ring_) {
    ring_ = std::make_unique<Ring>();
    ring_->prefix = prefix;
    ring_->group_rank = rank;
    ring_->members = members;
  }
  ring_->lease = lease;
  auto attached =
      RingListeners::attach_kept(ring_->watch ? ring_->listeners : nullptr, on_lost, on_error);
  if (attached.renewed) {
    ring_->watch.reset();
    ring_->listeners = attached.listeners;
    const int successor = (rank + 1) % members;
    ring_->watch = std::make_unique<Watch>(options_, store_->full_key(beat_key(prefix, successor)),
                                           successor, std::chrono::seconds(ttl_), timing_,
                                           ring_->listeners);
  }
  return std::make_unique<Handle>(ring_->listeners, attached.number, *renewer_,
                                  std::move(on_error));
}

}  // namespace ddprun
