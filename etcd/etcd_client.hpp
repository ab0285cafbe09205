#pragma once
// A client for etcd's v3 API through its JSON gateway (HTTP/1.1 POST to /v3/..., keys and values
// base64, 64-bit integers as strings), over Boost.Beast. etcd 3.4 serves the gateway on its
// client port next to gRPC, so the same endpoints work for both.
//
// Synchronous and bounded: every call takes a Deadline. A call that cannot reach the endpoint
// in use, or that the member answers with "unavailable" (no leader, stopping, leader changed),
// moves to the next endpoint and tries again until its deadline; the TimeoutError then names
// every endpoint and the last error of each. Other errors (a bad request, a compacted
// revision) are not retried: EtcdError carries etcd's code and message.
//
// Not thread-safe; interrupt() is the one call that may come from another thread.
//
// A call whose request reached a member whose answer was then lost (the connection broke) is
// sent again to the next endpoint; etcd may have applied it once already. Puts and reads are
// idempotent; the callers' transactions compare revisions, so a repeated one fails its compare
// instead of applying twice, with one exception written where it matters (EtcdStore::add).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/deadline.hpp"
#include "common/error.hpp"

namespace ddprun {

struct EtcdEndpoint {
  std::string host;
  std::uint16_t port = 2379;

  std::string text() const;  // "127.0.0.1:2379"
};

// "10.0.0.5:2379,10.0.0.6:2379" (an http:// scheme is accepted and dropped; the port defaults to
// 2379). Throws ConfigError naming `label` on an empty list, a bad port or https:// (TLS is not
// supported: reach etcd over a trusted network, or through a local TLS proxy).
std::vector<EtcdEndpoint> parse_etcd_endpoints(const std::string& text, const std::string& label);

// etcd's own answer to a request: gRPC status code and message ("etcdserver: no leader").
// etcd serves only the rendezvous, so its refusals are rendezvous failures (exit 124).
class EtcdError : public RendezvousError {
 public:
  EtcdError(int code, const std::string& message);
  int code() const { return code_; }

 private:
  int code_;
};

// etcd's code for a watch whose start revision it compacted away (gRPC OUT_OF_RANGE).
inline constexpr int kEtcdCompacted = 11;

// No endpoint could serve a call before its deadline: the message names every endpoint and its
// last error, and says when the cluster has no quorum.
class EtcdUnavailable : public TimeoutError {
 public:
  using TimeoutError::TimeoutError;
};

std::string base64_encode(const std::string& bytes);
// Throws ProtocolError on text that is not base64.
std::string base64_decode(const std::string& text);

// A stored key as the API returns it (decoded).
struct EtcdKv {
  std::string key;
  std::string value;
  std::int64_t create_revision = 0;
  std::int64_t mod_revision = 0;
  std::int64_t version = 0;  // puts since the key was created
  std::int64_t lease = 0;
};

// Reads the JSON gateway's forms: int64 fields are strings ("5"), absent when zero.
std::int64_t json_int(const nlohmann::json& object, const char* field);
EtcdKv parse_kv(const nlohmann::json& kv);

// One event of a watch: a put (with the new value) or a delete.
struct EtcdEvent {
  bool deleted = false;
  EtcdKv kv;
};

// The default bound on one try on one endpoint (EtcdClient's attempt_timeout).
inline constexpr std::chrono::milliseconds kEtcdAttemptTimeout = std::chrono::seconds(5);

class EtcdClient {
 public:
  // One try on one endpoint is bounded by `attempt_timeout` even when the call's deadline is
  // later, so that a member that accepts requests and never answers them (stopped, or cut off
  // from the others without noticing yet) costs this long before the next endpoint is tried.
  explicit EtcdClient(std::vector<EtcdEndpoint> endpoints,
                      std::chrono::milliseconds attempt_timeout = kEtcdAttemptTimeout);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // POSTs `body` to `path` ("/v3/kv/range") and returns the answer (a streamed answer's first
  // "result"). Throws TimeoutError, EtcdError, InterruptedError.
  nlohmann::json call(const std::string& path, const nlohmann::json& body, Deadline deadline);

  // Watches `key` from `start_revision`, calling `on_event` for each event until it returns
  // true. A broken stream is re-opened on the next endpoint from the revision after the last
  // event seen. Throws TimeoutError at the deadline, EtcdError when etcd cancels the watch for
  // good (e.g. the start revision was compacted).
  void watch(const std::string& key, std::int64_t start_revision, Deadline deadline,
             const std::function<bool(const EtcdEvent&)>& on_event);
  // The same over every key starting with `prefix`.
  void watch_prefix(const std::string& prefix, std::int64_t start_revision, Deadline deadline,
                    const std::function<bool(const EtcdEvent&)>& on_event);

  // Thread-safe and final: the call in progress and every later call throw InterruptedError.
  void interrupt();

  // "127.0.0.1:2379,127.0.0.1:2381": the endpoints, for messages.
  std::string describe() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// The range_end that selects every key starting with `prefix` (etcd's "prefix end").
std::string prefix_range_end(const std::string& prefix);
// {"key", "range_end"} of a request or compare that covers every key starting with `prefix`.
nlohmann::json prefix_range(const std::string& prefix);
// {"key"} of a request or compare that covers `key` alone.
nlohmann::json key_only(const std::string& key);
// A PutRequest: on its own (/v3/kv/put) or as a transaction's "request_put"; lease 0: none.
nlohmann::json put_request(const std::string& key, const std::string& value,
                           std::int64_t lease = 0);

}  // namespace ddprun
