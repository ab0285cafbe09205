#pragma once
// The TCP store client: synchronous, one request at a time (but for a get pipelined behind
// one, pipeline_get), every call bounded by its Deadline. Not thread-safe: give each thread its
// own client. interrupt() is the one call that may come from another thread.
//
// Blocking calls (get, multi_get, wait) are served by the server: the client sends the time it
// is willing to wait and the server answers when the keys appear or that time passes; the client
// itself only waits for the answer. After a timeout or a broken connection the socket is closed
// and the next call reconnects (retrying until its own deadline).

#include <cstdint>
#include <memory>
#include <string>

#include "store/protocol.hpp"
#include "store/store.hpp"

namespace ddprun::store {

struct StoreClientOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 29500;
  std::string run_id = "default";  // the key namespace on the server
  // The job's shared secret: proved to the server, and the server must prove it back (a
  // store without it is not trusted). Empty: none, for a server that asks for none.
  std::string secret;
  store::Limits limits;
  // Extra time allowed for the server's answer to a blocking request to arrive after its
  // timeout passed on the server (network latency).
  std::chrono::milliseconds reply_grace{2'000};
  // A ddprun store answers the handshake in milliseconds; a program on the port that accepts
  // the connection and stays silent this long is not one (reported, not retried until the
  // deadline).
  std::chrono::milliseconds handshake_timeout{10'000};
};

class TcpStoreClient final : public Store, public Pipelining {
 public:
  // Connects (with retries, backoff and jitter) until `connect_deadline`. Throws ConnectionError
  // or TimeoutError naming host:port, the attempts made and the last error; AuthError at once
  // when the two sides do not share the same secret (not retried).
  TcpStoreClient(StoreClientOptions options, Deadline connect_deadline);
  ~TcpStoreClient() override;

  void set(const std::string& key, const std::string& value, Deadline deadline) override;
  std::string get(const std::string& key, Deadline deadline) override;
  std::optional<std::string> try_get(const std::string& key, Deadline deadline) override;
  bool check(const std::vector<std::string>& keys, Deadline deadline) override;
  std::int64_t add(const std::string& key, std::int64_t delta, Deadline deadline) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired, Deadline deadline) override;
  bool erase(const std::string& key, Deadline deadline) override;
  std::vector<std::string> multi_get(const std::vector<std::string>& keys,
                                     Deadline deadline) override;
  void multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values,
                 Deadline deadline) override;
  void wait(const std::vector<std::string>& keys, Deadline deadline) override;
  Arrival arrive(const std::string& counter, std::int64_t total, const std::string& release,
                 const std::string& then_get, Deadline deadline) override;
  Pipelining* pipelining() override { return this; }
  // The get goes behind the next call's request, in the same write.
  bool pipeline_get(const std::string& key, Deadline deadline) override;
  std::int64_t num_keys(Deadline deadline) override;
  void ping(Deadline deadline) override;
  std::string describe() const override;
  void interrupt() override;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddprun::store
