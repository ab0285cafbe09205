#pragma once
// OpenSSL's libcrypto, loaded when first needed instead of at every start.
//
// The agent needs libcrypto only for a job with a secret (HMAC-SHA256 in the store's
// handshake), for the etcd backend (base64) and to send itself to hosts that lack it (SHA-256).
// Linked as a dependency, the dynamic loader maps and relocates it in every agent, store and
// command before main, a sizeable part of a one-node launch. Here it is dlopen-ed on the first
// call instead, once per process, and the few functions used are looked up by name.

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

namespace ddprun {

struct LibCrypto {
  decltype(&::HMAC) hmac = nullptr;
  decltype(&::EVP_sha256) evp_sha256 = nullptr;
  decltype(&::EVP_Digest) evp_digest = nullptr;
  decltype(&::CRYPTO_memcmp) crypto_memcmp = nullptr;
  decltype(&::ERR_get_error) err_get_error = nullptr;
  decltype(&::EVP_EncodeBlock) evp_encode_block = nullptr;
  decltype(&::EVP_DecodeBlock) evp_decode_block = nullptr;
};

// The functions above, from the libcrypto these headers belong to (libcrypto.so.3 for
// OpenSSL 3). Thread-safe; loads on the first call. Throws ddprun::Error naming the library
// and the loader's reason when it cannot be loaded or lacks a function.
const LibCrypto& libcrypto();

}  // namespace ddprun
