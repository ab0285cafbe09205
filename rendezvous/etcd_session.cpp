#include "rendezvous/etcd_session.hpp"

#include <algorithm>
#include <condition_variable>
#include <mutex>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/error.hpp"

namespace ddprun {

using json = nlohmann::json;

namespace {

// etcd 3.4 raises shorter TTLs to 1.5 x its election timeout, rounded up: 2 s by default.
constexpr std::int64_t kMinLeaseTtl = 2;
// The agent's last steps (its marker, the clean-up) wait at most this for etcd.
constexpr auto kEndTimeout = std::chrono::seconds(5);

const char* const kAgentsDir = "agents/";

}  // namespace

// Renews the lease every keep-alive interval (a third of the TTL at most, so that a renewal
// delayed by one slow answer still comes in time) on its own thread and connection. A renewal that
// fails, or an answer that the lease is gone, is reported once to the round's keep-alive (or,
// between rounds, to the next one that starts).
class EtcdSession::Renewer {
 public:
  Renewer(const EtcdStoreOptions& options, std::int64_t lease, std::chrono::seconds ttl,
          KeepAliveTiming timing)
      : client_(options.endpoints),
        lease_(lease),
        every_(std::min<std::chrono::milliseconds>(timing.interval, ttl / 3)),
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

  // Where a failure goes from now on (empty: nowhere yet; kept until one is set).
  void report_to(RendezvousHandler::ErrorCallback on_error) {
    std::unique_lock lock(mutex_);
    on_error_ = std::move(on_error);
    if (on_error_ && failure_) {
      auto report = std::move(on_error_);
      auto message = *failure_;
      on_error_ = nullptr;
      lock.unlock();
      report(message);
    }
  }

 private:
  void run() {
    while (true) {
      {
        std::unique_lock lock(mutex_);
        if (cv_.wait_for(lock, every_, [&] { return stop_; })) return;
      }
      std::string failure;
      try {
        auto answer = client_.call("/v3/lease/keepalive", {{"ID", std::to_string(lease_)}},
                                   Deadline::after(timing_.read_timeout));
        if (json_int(answer, "TTL") > 0) continue;
        failure = fmt::format("etcd {}: this agent's lease {:x} expired (no renewal reached etcd "
                              "within its TTL); the other agents count it as dead",
                              client_.describe(), lease_);
      } catch (const InterruptedError&) {
        return;
      } catch (const Error& e) {
        failure = fmt::format("cannot renew this agent's etcd lease: {}", e.what());
      }
      fail(failure);
      return;
    }
  }

  void fail(const std::string& message) {
    std::unique_lock lock(mutex_);
    failure_ = message;
    if (!on_error_) {
      spdlog::error("{}", message);
      return;
    }
    auto report = std::move(on_error_);
    on_error_ = nullptr;
    lock.unlock();
    report(message);
  }

  EtcdClient client_;
  std::int64_t lease_;
  std::chrono::milliseconds every_;
  KeepAliveTiming timing_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  RendezvousHandler::ErrorCallback on_error_;
  std::optional<std::string> failure_;
  std::thread thread_;
};

// Watches one member's liveness key on its own thread and connection: a delete (its lease
// expired) is a death; a "done" written in its place is a member that left on purpose.
class EtcdSession::Watch final : public KeepAlive {
 public:
  Watch(const EtcdStoreOptions& options, std::string key, int member, std::chrono::seconds ttl,
        KeepAliveTiming timing, Renewer& renewer, RendezvousHandler::LostCallback on_lost,
        RendezvousHandler::ErrorCallback on_error)
      : client_(options.endpoints),
        key_(std::move(key)),
        member_(member),
        ttl_(ttl),
        timing_(timing),
        renewer_(renewer),
        on_lost_(std::move(on_lost)),
        on_error_(std::move(on_error)) {
    renewer_.report_to(on_error_);
    thread_ = std::thread([this] { run(); });
  }

  ~Watch() override {
    renewer_.report_to(nullptr);
    client_.interrupt();
    thread_.join();
  }

 private:
  void run() {
    try {
      auto answer = client_.call("/v3/kv/range", {{"key", base64_encode(key_)}},
                                 Deadline::after(timing_.read_timeout));
      std::int64_t revision = json_int(answer.at("header"), "revision");
      std::optional<std::string> value;
      if (answer.contains("kvs") && !answer["kvs"].empty()) {
        value = parse_kv(answer["kvs"][0]).value;
      }
      if (!value) {
        // The member puts its key when its keep-alive starts, moments after the round closed;
        // one that does not within the lease's TTL is as silent as a dead one.
        bool appeared = false;
        try {
          client_.watch(key_, "", revision + 1, Deadline::after(ttl_), [&](const EtcdEvent& e) {
            if (e.deleted) return false;
            value = e.kv.value;
            revision = e.kv.mod_revision;
            appeared = true;
            return true;
          });
        } catch (const TimeoutError&) {
        }
        if (!appeared) {
          spdlog::warn("keep-alive: node {} never registered its etcd lease within {}", member_,
                       format_duration(ttl_));
          on_lost_(member_);
          return;
        }
      }
      if (value == kHeartbeatDone) return;
      // Re-armed every hour so that each wait is bounded like every other.
      bool done = false;
      while (!done) {
        try {
          client_.watch(key_, "", revision + 1, Deadline::after(std::chrono::hours(1)),
                        [&](const EtcdEvent& e) {
                          revision = e.kv.mod_revision;
                          if (e.deleted) {
                            spdlog::warn("keep-alive: node {}'s etcd lease expired (no renewal "
                                         "for {})",
                                         member_, format_duration(ttl_));
                            on_lost_(member_);
                            done = true;
                          } else if (e.kv.value == kHeartbeatDone) {
                            done = true;
                          }
                          return done;
                        });
        } catch (const TimeoutError&) {
        }
      }
    } catch (const InterruptedError&) {
    } catch (const Error& e) {
      on_error_(fmt::format("keep-alive: watching node {} in etcd: {}", member_, e.what()));
    }
  }

  EtcdClient client_;
  std::string key_;
  int member_;
  std::chrono::seconds ttl_;
  KeepAliveTiming timing_;
  Renewer& renewer_;
  RendezvousHandler::LostCallback on_lost_;
  RendezvousHandler::ErrorCallback on_error_;
  std::thread thread_;
};

EtcdSession::EtcdSession(EtcdStoreOptions options, std::string id, KeepAliveTiming timing,
                         Deadline deadline)
    : options_(std::move(options)), id_(std::move(id)), timing_(timing) {
  store_ = std::make_unique<EtcdStore>(options_, deadline);
  const auto wanted = std::chrono::ceil<std::chrono::seconds>(timing_.interval *
                                                              std::max(1, timing_.max_attempts));
  auto grant = store_->client().call(
      "/v3/lease/grant", {{"TTL", std::max<std::int64_t>(kMinLeaseTtl, wanted.count())}},
      deadline);
  lease_ = json_int(grant, "ID");
  ttl_ = json_int(grant, "TTL");
  if (lease_ == 0 || ttl_ <= 0) {
    throw ProtocolError(fmt::format("etcd {}: lease grant answered {}", store_->describe(),
                                    grant.dump()));
  }
  if (ttl_ != wanted.count()) {
    spdlog::info("etcd: lease TTL {} s (keep-alive {} x {} asks for {} s; etcd's minimum is {} s)",
                 ttl_, format_duration(timing_.interval), timing_.max_attempts, wanted.count(),
                 kMinLeaseTtl);
  }

  // Keys without a running agent were left by an earlier job with this run id (its last agents
  // were killed): removed before this agent registers, in one transaction that does nothing as
  // soon as any agent has registered, so a running job's keys are never touched.
  if (auto stale = store_->erase_run_unless(kAgentsDir, deadline); stale && *stale > 0) {
    spdlog::warn("etcd: removed {} keys under {} that an earlier job with the same run id left "
                 "(no agent of it is running)",
                 *stale, store_->full_key(""));
  }
  store_->put(kAgentsDir + id_, std::to_string(lease_), lease_, deadline);
  renewer_ = std::make_unique<Renewer>(options_, lease_, std::chrono::seconds(ttl_), timing_);
}

EtcdSession::~EtcdSession() {
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

std::unique_ptr<KeepAlive> EtcdSession::keep_alive(const Round& round,
                                                   RendezvousHandler::LostCallback on_lost,
                                                   RendezvousHandler::ErrorCallback on_error) {
  if (round.ranks.group_world_size < 2) return nullptr;
  const int rank = round.ranks.group_rank;
  store_->put(beat_key(round.prefix, rank), "alive", lease_,
              Deadline::after(timing_.read_timeout));
  const int successor = (rank + 1) % round.ranks.group_world_size;
  return std::make_unique<Watch>(options_, store_->full_key(beat_key(round.prefix, successor)),
                                 successor, std::chrono::seconds(ttl_), timing_, *renewer_,
                                 std::move(on_lost), std::move(on_error));
}

}  // namespace ddprun
