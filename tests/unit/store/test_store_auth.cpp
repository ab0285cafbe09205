#include <sys/stat.h>

#include <fstream>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "common/error.hpp"
#include "common/random.hpp"
#include "store/store_auth.hpp"
#include "store/store_handshake.hpp"
#include "testing/test_util.hpp"

using namespace ddprun;
using namespace ddprun::store;

namespace {

std::string hex(const std::string& bytes) {
  std::string out;
  for (unsigned char c : bytes) out += fmt::format("{:02x}", c);
  return out;
}

void write_file(const std::string& path, const std::string& contents, mode_t mode) {
  std::ofstream(path, std::ios::binary) << contents;
  REQUIRE(::chmod(path.c_str(), mode) == 0);
}

}  // namespace

TEST_CASE("HMAC-SHA256 gives RFC 4231's published value", "[auth]") {
  // RFC 4231, test case 2.
  CHECK(hex(hmac_sha256("Jefe", "what do ya want for nothing?")) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST_CASE("proofs depend on the role, the secret, the run id and both nonces", "[auth]") {
  const std::string secret = "0123456789abcdef0123";
  const std::string a = random_bytes(kNonceSize);
  const std::string b = random_bytes(kNonceSize);
  REQUIRE(a != b);
  const auto proof = client_proof(secret, "job", a, b);
  CHECK(proof.size() == 32);
  CHECK(same_bytes(proof, client_proof(secret, "job", a, b)));
  CHECK_FALSE(same_bytes(proof, server_proof(secret, "job", a, b)));
  CHECK_FALSE(same_bytes(proof, client_proof(secret + "x", "job", a, b)));
  CHECK_FALSE(same_bytes(proof, client_proof(secret, "job2", a, b)));
  CHECK_FALSE(same_bytes(proof, client_proof(secret, "job", b, a)));
  // Fields are length-prefixed: moving a byte from one field to the next changes the proof.
  CHECK_FALSE(same_bytes(client_proof(secret, "jo", "b" + a, b), client_proof(secret, "job", a, b)));
  CHECK_FALSE(same_bytes(proof, proof.substr(0, 31)));
  CHECK(random_secret().size() == 64);
  CHECK(random_secret() != random_secret());
}

TEST_CASE("the secret comes from --token-file, else DDPRUN_TOKEN", "[auth]") {
  test::TempDir dir;
  std::vector<std::string> notes;
  const std::map<std::string, std::string> env{{kTokenEnv, "from-the-environment-0123"}};

  write_file(dir.file("token"), "0123456789abcdef0123\n", 0600);
  CHECK(read_secret(dir.file("token"), "--token-file", env, notes) == "0123456789abcdef0123");
  CHECK(notes.empty());
  CHECK(read_secret("", "--token-file", env, notes) == "from-the-environment-0123");
  CHECK(read_secret("", "--token-file", {}, notes).empty());

  write_file(dir.file("shared"), "0123456789abcdef0123", 0644);
  CHECK(read_secret(dir.file("shared"), "--token-file", {}, notes) == "0123456789abcdef0123");
  REQUIRE(notes.size() == 1);
  CHECK_THAT(notes[0], Catch::Contains("can be read by other users (mode 644)"));

  write_file(dir.file("short"), "short\n", 0600);
  CHECK_THROWS_WITH(read_secret(dir.file("short"), "--token-file", {}, notes),
                    Catch::Contains("the secret has 5 bytes, at least 16"));
  CHECK_THROWS_WITH(read_secret("", "--token-file", {{kTokenEnv, "tiny"}}, notes),
                    Catch::StartsWith("DDPRUN_TOKEN: the secret has 4 bytes"));
  CHECK_THROWS_AS(read_secret(dir.file("missing"), "--token-file", {}, notes), ConfigError);
  CHECK_THROWS_WITH(read_secret(dir.file("missing"), "--token-file", {}, notes),
                    Catch::Contains("cannot read it: No such file"));
}

namespace {

Request hello_with(std::string nonce, std::uint16_t version = kProtocolVersion) {
  Request r;
  r.command = Command::kHello;
  r.version = version;
  r.run_id = "job";
  r.nonce = std::move(nonce);
  return r;
}

Request with_proof(std::string proof) {
  Request r;
  r.command = Command::kAuth;
  r.values = {std::move(proof)};
  return r;
}

}  // namespace

TEST_CASE("the server's handshake: hello, then the proof when there is a secret", "[auth]") {
  const std::string served_for = "job";
  const std::string none;
  SECTION("without a secret, hello is all") {
    ServerHandshake h(none, served_for);
    Request set;
    set.command = Command::kSet;
    CHECK_THROWS_WITH(ServerHandshake(none, served_for).on_request(set),
                      Catch::Contains("expected hello first, got set"));
    CHECK_THROWS_WITH(h.on_request(hello_with("", 1)), Catch::Contains("protocol version 1"));
    ServerHandshake fresh(none, served_for);
    auto reply = fresh.on_request(hello_with(""));
    CHECK(fresh.done());
    CHECK(reply.number == 0);
    CHECK(reply.values.at(1) == "job");
    CHECK(fresh.run_id() == "job");
  }
  SECTION("with a secret, the right proof and only it finishes the handshake") {
    const std::string secret = "the-job-secret-0123456789";
    const std::string client_nonce = random_bytes(kNonceSize);
    ServerHandshake h(secret, served_for);
    CHECK_THROWS_WITH(ServerHandshake(secret, served_for).on_request(hello_with("short")),
                      Catch::Contains("5-byte nonce"));
    auto challenge = h.on_request(hello_with(client_nonce));
    CHECK_FALSE(h.done());
    CHECK(h.waiting_for() == std::string("auth"));
    REQUIRE(challenge.number == 1);
    const auto server_nonce = challenge.values.at(0);
    CHECK(server_nonce.size() == kNonceSize);

    ServerHandshake other(secret, served_for);
    (void)other.on_request(hello_with(client_nonce));
    // A proof made for another server nonce (a replay) or with another secret fails.
    CHECK_THROWS_WITH(other.on_request(with_proof(client_proof(secret, "job", client_nonce,
                                                               server_nonce))),
                      Catch::Contains("authentication failed"));
    CHECK_THROWS_WITH(h.on_request(with_proof(client_proof(secret + "!", "job", client_nonce,
                                                           server_nonce))),
                      Catch::Contains("authentication failed"));
    CHECK_FALSE(h.done());
    auto done = h.on_request(with_proof(client_proof(secret, "job", client_nonce, server_nonce)));
    CHECK(h.done());
    CHECK(same_bytes(done.values.at(0), server_proof(secret, "job", client_nonce, server_nonce)));
  }
}
