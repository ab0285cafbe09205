#pragma once
// A connection's handshake, both sides, as state machines without I/O: the client's hello
// (magic, version, run id, nonce), then, when the server has a secret, the proofs of it both
// ways (store/store_auth.hpp). The server's side runs in each store connection, the client's in
// TcpStoreClient; they are unit-tested against each other, and the server's is fuzzed.

#include <optional>
#include <string>

#include "store/protocol.hpp"

namespace ddprun::store {

class ServerHandshake {
 public:
  // `secret`: empty for none. `served_for`: the hosting agent's run id, told to every client.
  ServerHandshake(const std::string& secret, const std::string& served_for)
      : secret_(secret), served_for_(served_for) {}

  // The reply to a request that arrived before the handshake was done. Throws ProtocolError
  // (a refusal, with the reason to send back) for anything but the expected step.
  Response on_request(const Request& request);

  bool done() const { return stage_ == Stage::kDone; }
  // Which step it waits for: "hello" or "auth" (for messages).
  const char* waiting_for() const { return stage_ == Stage::kHello ? "hello" : "auth"; }
  // The run id the client named (its key namespace), once it sent a hello.
  const std::string& run_id() const { return run_id_; }

 private:
  enum class Stage { kHello, kAuth, kDone };
  const std::string& secret_;
  const std::string& served_for_;
  Stage stage_ = Stage::kHello;
  std::string run_id_;
  std::string client_nonce_;
  std::string server_nonce_;
};

// The client's side: hello() is sent first; the server's reply says whether it wants the
// secret's proof (on_hello_reply returns the auth request to send) or not (nullopt: done); the
// reply to the auth carries the server's own proof (on_auth_reply checks it). A refusal is
// final: retrying the connection would not change it.
class ClientHandshake {
 public:
  // `secret`: empty for none. `run_id`: the client's key namespace. `where`: the server's
  // address, for messages.
  ClientHandshake(std::string secret, std::string run_id, std::string where);

  // The hello, with a fresh nonce.
  Request hello();
  // Throws ConnectionError when the store is hosted by another job's agent, and AuthError when
  // only one side has a secret.
  std::optional<Request> on_hello_reply(const Response& reply);
  // Throws AuthError when the server's proof is not that of the job's secret.
  void on_auth_reply(const Response& reply) const;

 private:
  std::string secret_;
  std::string run_id_;
  std::string where_;
  std::string client_nonce_;
  std::string server_nonce_;
};

}  // namespace ddprun::store
