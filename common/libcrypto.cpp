#include "common/libcrypto.hpp"

#include <dlfcn.h>

#include <string>

#include <fmt/format.h>
#include <openssl/opensslv.h>

#include "common/error.hpp"

namespace ddprun {
namespace {

constexpr const char* kSoname = "libcrypto.so." OPENSSL_MSTR(OPENSSL_SHLIB_VERSION);

template <typename Fn>
void resolve(void* handle, Fn& fn, const char* name) {
  void* symbol = dlsym(handle, name);
  if (symbol == nullptr) {
    throw Error(fmt::format("{} has no {}: {}", kSoname, name, dlerror()));
  }
  fn = reinterpret_cast<Fn>(symbol);
}

LibCrypto load() {
  // Never closed: the functions stay in use until the process exits.
  void* handle = dlopen(kSoname, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    throw Error(fmt::format("cannot load {} (OpenSSL, Debian package libssl3), needed for the "
                            "store's authentication, for etcd and to stage ddprun on hosts: {}",
                            kSoname, dlerror()));
  }
  LibCrypto lib;
  resolve(handle, lib.hmac, "HMAC");
  resolve(handle, lib.evp_sha256, "EVP_sha256");
  resolve(handle, lib.evp_digest, "EVP_Digest");
  resolve(handle, lib.crypto_memcmp, "CRYPTO_memcmp");
  resolve(handle, lib.err_get_error, "ERR_get_error");
  resolve(handle, lib.evp_encode_block, "EVP_EncodeBlock");
  resolve(handle, lib.evp_decode_block, "EVP_DecodeBlock");
  return lib;
}

}  // namespace

const LibCrypto& libcrypto() {
  // A failed load throws out of the initialiser, so the next call tries again.
  static const LibCrypto lib = load();
  return lib;
}

}  // namespace ddprun
