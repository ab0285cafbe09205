#include "store/store_handshake.hpp"

#include <utility>

#include <fmt/format.h>

#include "common/error.hpp"
#include "common/random.hpp"
#include "store/store_auth.hpp"

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

ClientHandshake::ClientHandshake(std::string secret, std::string run_id, std::string where)
    : secret_(std::move(secret)), run_id_(std::move(run_id)), where_(std::move(where)) {}

Request ClientHandshake::hello() {
  client_nonce_ = random_bytes(kNonceSize);
  Request hello;
  hello.command = Command::kHello;
  hello.run_id = run_id_;
  hello.nonce = client_nonce_;
  return hello;
}

std::optional<Request> ClientHandshake::on_hello_reply(const Response& reply) {
  if (const auto& host_job = reply.values.at(1); !host_job.empty() && host_job != run_id_) {
    throw ConnectionError(fmt::format(
        "the store at {} is hosted by the agent of another job (run id '{}', this one is "
        "'{}'): it ends when that job ends. Give this job its own port, or run a ddprun-store "
        "there for both",
        where_, host_job, run_id_));
  }
  const bool server_asks = reply.number != 0;
  if (!server_asks && secret_.empty()) return std::nullopt;
  if (!server_asks) {
    throw AuthError(fmt::format(
        "store at {} has no secret, but this agent was given one: not trusting it with the "
        "job (start every agent and ddprun-store with the same --token-file or DDPRUN_TOKEN)",
        where_));
  }
  if (secret_.empty()) {
    throw AuthError(fmt::format(
        "store at {} requires the job's secret and this agent has none: give it the same "
        "--token-file (or DDPRUN_TOKEN) as the store's",
        where_));
  }
  server_nonce_ = reply.values.at(0);
  Request auth;
  auth.command = Command::kAuth;
  auth.values = {client_proof(secret_, run_id_, client_nonce_, server_nonce_)};
  return auth;
}

void ClientHandshake::on_auth_reply(const Response& reply) const {
  if (!same_bytes(reply.values.at(0),
                  server_proof(secret_, run_id_, client_nonce_, server_nonce_))) {
    throw AuthError(fmt::format(
        "store at {} could not prove that it knows the job's secret: not trusting it", where_));
  }
}

}  // namespace ddprun::store
