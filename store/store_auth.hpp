#pragma once
// The store's challenge-response: a client and a server that share a job's secret prove it to
// each other without sending it. Both pick a random nonce; the client answers with
// HMAC-SHA256(secret, "client" | run id | client nonce | server nonce), the server with the
// same over "server". A listener on the wire learns neither the secret nor an answer it could
// replay (the other side's nonce is new each time). Proofs are compared in constant time.

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::store {

inline constexpr std::size_t kNonceSize = 32;
// A secret shorter than this is refused: an observer of one handshake could try every
// shorter one offline.
inline constexpr std::size_t kMinSecretSize = 16;

// The environment variable that hands an agent or ddprun-store the secret itself (launchers
// that start agents set it; workers never see it).
inline constexpr const char* kTokenEnv = "DDPRUN_TOKEN";

// The job's secret: the contents of `token_file` without a final newline, else $DDPRUN_TOKEN
// from `env`, else empty (none). `label` names the flag in messages. Throws ConfigError for an
// unreadable file or a secret shorter than kMinSecretSize; a file that other users can read
// adds a line to `warnings` (a secret others can read lets them join or take over the store).
std::string read_secret(const std::string& token_file, const std::string& label,
                        const std::map<std::string, std::string>& env,
                        std::vector<std::string>& warnings);

// A fresh secret for one job, as 64 hex digits (what `ddprun --hosts` hands its agents).
std::string random_secret();

std::string hmac_sha256(std::string_view key, std::string_view data);
// Constant time in the contents (the lengths are not secret).
bool same_bytes(std::string_view a, std::string_view b);

std::string client_proof(std::string_view secret, std::string_view run_id,
                         std::string_view client_nonce, std::string_view server_nonce);
std::string server_proof(std::string_view secret, std::string_view run_id,
                         std::string_view client_nonce, std::string_view server_nonce);

}  // namespace ddprun::store
