// libFuzzer target for the workers' store's reading of torch's TCPStore queries: any bytes read
// from a new connection must give queries or a ProtocolError; never crash, hang or allocate past
// the limits, and every query read must be written back as the very bytes it was read from.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/error.hpp"
#include "store/torch_protocol.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ddprun::store;
  static const TorchLimits limits = [] {
    TorchLimits l;
    l.max_value = 1 << 19;
    l.max_keys = 1 << 10;
    return l;
  }();
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto dialect = TorchDialect::kUnknown;
  try {
    while (auto parsed = parse_torch_query(bytes, dialect, limits)) {
      if (parsed->size == 0 || parsed->size > bytes.size()) __builtin_trap();
      if (encode_torch_query(parsed->query, dialect) != bytes.substr(0, parsed->size)) {
        __builtin_trap();
      }
      bytes.remove_prefix(parsed->size);
    }
  } catch (const ddprun::ProtocolError&) {
  }
  return 0;
}
