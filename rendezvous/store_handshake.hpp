#pragma once
// The server's side of a connection's handshake, as a state machine without I/O: hello (magic,
// version, run id), then, when the server has a secret, the client's proof of it
// (rendezvous/store_auth.hpp). Used by each store connection; unit-tested and fuzzed alone.

#include <string>

#include "rendezvous/protocol.hpp"

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

}  // namespace ddprun::store
