#include "store/store_auth.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "common/error.hpp"
#include "common/random.hpp"
#include "common/libcrypto.hpp"

namespace ddprun::store {
namespace {

// Length-prefixed fields: "ab"+"c" and "a"+"bc" must not give the same message.
std::string proof_message(std::string_view role, std::string_view run_id,
                          std::string_view client_nonce, std::string_view server_nonce) {
  std::string message = "ddprun-store/2 ";
  for (auto field : {role, run_id, client_nonce, server_nonce}) {
    message += fmt::format("{}:", field.size());
    message += field;
  }
  return message;
}

}  // namespace

std::string read_secret(const std::string& token_file, const std::string& label,
                        const std::map<std::string, std::string>& env,
                        std::vector<std::string>& warnings) {
  std::string secret;
  std::string where;
  if (!token_file.empty()) {
    where = fmt::format("{}={}", label, token_file);
    std::ifstream in(token_file, std::ios::binary);
    if (!in) throw ConfigError(fmt::format("{}: cannot read it: {}", where, errno_message(errno)));
    secret.assign(std::istreambuf_iterator<char>(in), {});
    if (secret.ends_with('\n')) secret.pop_back();
    if (secret.ends_with('\r')) secret.pop_back();
    struct stat st {};
    if (::stat(token_file.c_str(), &st) == 0 && (st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
      warnings.push_back(fmt::format("{} can be read by other users (mode {:o}), who could then "
                                     "join or take over the job's store: chmod 600 it",
                                     where, st.st_mode & 0777));
    }
  } else if (auto it = env.find(kTokenEnv); it != env.end() && !it->second.empty()) {
    where = kTokenEnv;
    secret = it->second;
  } else {
    return {};
  }
  if (secret.size() < kMinSecretSize) {
    throw ConfigError(fmt::format(
        "{}: the secret has {} bytes, at least {} are needed (e.g. head -c 32 /dev/urandom | "
        "base64 > FILE)",
        where, secret.size(), kMinSecretSize));
  }
  return secret;
}

// From the kernel's generator, not OpenSSL's RAND_bytes: the first RAND_bytes call sets up
// OpenSSL's providers and DRBG, which a job without a secret does not otherwise load.
std::string random_secret() { return random_hex(32); }

std::string hmac_sha256(std::string_view key, std::string_view data) {
  const auto& crypto = libcrypto();
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (crypto.hmac(crypto.evp_sha256(), key.data(), static_cast<int>(key.size()),
                  reinterpret_cast<const unsigned char*>(data.data()), data.size(), out,
                  &size) == nullptr) {
    throw Error(fmt::format("HMAC-SHA256 failed: OpenSSL error {}", crypto.err_get_error()));
  }
  return std::string(reinterpret_cast<const char*>(out), size);
}

bool same_bytes(std::string_view a, std::string_view b) {
  return a.size() == b.size() && libcrypto().crypto_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string client_proof(std::string_view secret, std::string_view run_id,
                         std::string_view client_nonce, std::string_view server_nonce) {
  return hmac_sha256(secret, proof_message("client", run_id, client_nonce, server_nonce));
}

std::string server_proof(std::string_view secret, std::string_view run_id,
                         std::string_view client_nonce, std::string_view server_nonce) {
  return hmac_sha256(secret, proof_message("server", run_id, client_nonce, server_nonce));
}

}  // namespace ddprun::store
