#include "common/random.hpp"

#include <sys/random.h>

#include <cerrno>

#include "common/error.hpp"

namespace ddprun {

void random_bytes(void* out, std::size_t size) {
  auto* p = static_cast<unsigned char*>(out);
  while (size > 0) {
    const ssize_t n = getrandom(p, size, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error("cannot read random bytes from the kernel: " + errno_message(errno));
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

std::string random_bytes(std::size_t size) {
  std::string out(size, '\0');
  random_bytes(out.data(), size);
  return out;
}

std::uint64_t random_u64() {
  std::uint64_t value = 0;
  random_bytes(&value, sizeof(value));
  return value;
}

std::string random_hex(std::size_t bytes) {
  constexpr char kDigits[] = "0123456789abcdef";
  const std::string raw = random_bytes(bytes);
  std::string hex;
  hex.reserve(2 * bytes);
  for (unsigned char b : raw) {
    hex.push_back(kDigits[b >> 4]);
    hex.push_back(kDigits[b & 0xf]);
  }
  return hex;
}

}  // namespace ddprun
