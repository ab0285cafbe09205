// The client's and the server's halves of the store's handshake, run against each other with
// no socket between them: every combination of secrets, another job's store, a forged proof.

#include <catch2/catch.hpp>

#include <optional>
#include <string>

#include "common/error.hpp"
#include "store/store_auth.hpp"
#include "store/store_handshake.hpp"

using namespace ddprun;
using namespace ddprun::store;

namespace {

const std::string kSecret = "the-job-secret-0123456789";
const std::string kOtherSecret = "another-job-secret-98765";

// What the server answers to a request: through the codec both ways, as on the wire.
Response over_the_wire(ServerHandshake& server, const Request& request) {
  const std::string frame = encode_request(request);
  const Response reply = server.on_request(decode_request(frame.substr(kFrameHeaderSize)));
  const std::string answer = encode_response(request.command, reply);
  return decode_response(request.command, answer.substr(kFrameHeaderSize));
}

}  // namespace

TEST_CASE("store handshake: client and server halves agree", "[auth]") {
  const std::string served_for = "job";
  SECTION("neither has a secret: the hello is all") {
    const std::string none;
    ServerHandshake server(none, served_for);
    ClientHandshake client("", "job", "h:1");
    auto reply = over_the_wire(server, client.hello());
    CHECK(server.done());
    CHECK(client.on_hello_reply(reply) == std::nullopt);
    CHECK(server.run_id() == "job");
  }
  SECTION("both have the same secret: proofs both ways") {
    ServerHandshake server(kSecret, served_for);
    ClientHandshake client(kSecret, "job", "h:1");
    auto reply = over_the_wire(server, client.hello());
    CHECK_FALSE(server.done());
    auto auth = client.on_hello_reply(reply);
    REQUIRE(auth);
    auto proof = over_the_wire(server, *auth);
    CHECK(server.done());
    CHECK_NOTHROW(client.on_auth_reply(proof));
  }
  SECTION("different secrets: the server refuses the client's proof") {
    ServerHandshake server(kSecret, served_for);
    ClientHandshake client(kOtherSecret, "job", "h:1");
    auto auth = client.on_hello_reply(over_the_wire(server, client.hello()));
    REQUIRE(auth);
    CHECK_THROWS_WITH(over_the_wire(server, *auth), Catch::Contains("authentication failed"));
    CHECK_FALSE(server.done());
  }
  SECTION("a server that cannot prove the secret is not trusted") {
    ServerHandshake server(kSecret, served_for);
    ClientHandshake client(kSecret, "job", "h:1");
    auto auth = client.on_hello_reply(over_the_wire(server, client.hello()));
    REQUIRE(auth);
    Response forged;
    forged.values = {std::string(32, 'x')};
    CHECK_THROWS_AS(client.on_auth_reply(forged), AuthError);
    CHECK_THROWS_WITH(client.on_auth_reply(forged), Catch::Contains("store at h:1 could not prove"));
  }
  SECTION("only the client has a secret") {
    const std::string none;
    ServerHandshake server(none, served_for);
    ClientHandshake client(kSecret, "job", "h:1");
    auto reply = over_the_wire(server, client.hello());
    CHECK_THROWS_AS(client.on_hello_reply(reply), AuthError);
    CHECK_THROWS_WITH(client.on_hello_reply(reply), Catch::Contains("has no secret"));
  }
  SECTION("only the server has a secret") {
    ServerHandshake server(kSecret, served_for);
    ClientHandshake client("", "job", "h:1");
    auto reply = over_the_wire(server, client.hello());
    CHECK_THROWS_AS(client.on_hello_reply(reply), AuthError);
    CHECK_THROWS_WITH(client.on_hello_reply(reply), Catch::Contains("this agent has none"));
  }
  SECTION("a store hosted by another job's agent") {
    const std::string none;
    const std::string other_job = "other";
    ServerHandshake server(none, other_job);
    ClientHandshake client("", "job", "h:1");
    auto reply = over_the_wire(server, client.hello());
    CHECK_THROWS_AS(client.on_hello_reply(reply), ConnectionError);
    CHECK_THROWS_WITH(client.on_hello_reply(reply),
                      Catch::Contains("hosted by the agent of another job (run id 'other'"));
  }
}
