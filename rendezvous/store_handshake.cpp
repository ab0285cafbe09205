#include "rendezvous/store_handshake.hpp"

#include <fmt/format.h>

#include "common/error.hpp"
#include "rendezvous/store_auth.hpp"

namespace ddprun::store {

Response ServerHandshake::on_request(const Request& request) {
  if (stage_ == Stage::kDone) throw ProtocolError("the handshake is over");
  if (stage_ == Stage::kHello) {
    if (request.command != Command::kHello) {
      throw ProtocolError(fmt::format("expected hello first, got {}",
                                      command_name(request.command)));
    }
    if (request.magic != kMagic) {
      throw ProtocolError(fmt::format("wrong magic 0x{:08x} (expected 0x{:08x})", request.magic,
                                      kMagic));
    }
    if (request.version != kProtocolVersion) {
      throw ProtocolError(fmt::format("protocol version {} not supported (server speaks {})",
                                      request.version, kProtocolVersion));
    }
    run_id_ = request.run_id;
    Response reply;
    if (secret_.empty()) {
      stage_ = Stage::kDone;
    } else {
      if (request.nonce.size() < kNonceSize) {
        throw ProtocolError(fmt::format("hello with a {}-byte nonce (at least {})",
                                        request.nonce.size(), kNonceSize));
      }
      client_nonce_ = request.nonce;
      server_nonce_ = random_bytes(kNonceSize);
      reply.number = 1;
      stage_ = Stage::kAuth;
    }
    reply.values = {server_nonce_, served_for_};
    return reply;
  }
  if (request.command != Command::kAuth) {
    throw ProtocolError(fmt::format("this store needs the job's secret: expected auth, got {}",
                                    command_name(request.command)));
  }
  if (!same_bytes(request.values.at(0),
                  client_proof(secret_, run_id_, client_nonce_, server_nonce_))) {
    throw ProtocolError("authentication failed: wrong proof of the job's secret");
  }
  stage_ = Stage::kDone;
  Response reply;
  reply.values = {server_proof(secret_, run_id_, client_nonce_, server_nonce_)};
  return reply;
}

}  // namespace ddprun::store
