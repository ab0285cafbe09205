// libFuzzer target for the store's frame decoder: any bytes must either decode or throw
// ProtocolError; never crash, hang or allocate past the limits.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/error.hpp"
#include "store/protocol.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ddprun::store;
  static const Limits limits = [] {
    Limits l;
    l.max_frame = 1 << 20;
    l.max_value = 1 << 19;
    return l;
  }();
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    auto frame = complete_frame_size(bytes, limits);
    if (!frame) return 0;
    auto body = bytes.substr(kFrameHeaderSize, *frame - kFrameHeaderSize);
    auto request = decode_request(body, limits);
    // A decoded request must encode back to the same body.
    auto again = encode_request(request, limits);
    if (std::string_view(again).substr(kFrameHeaderSize) != body) __builtin_trap();
    for (auto c : {Command::kGet, Command::kMultiGet, Command::kAdd, Command::kPing,
                   Command::kArrive}) {
      (void)decode_response(c, body, limits);
    }
  } catch (const ddprun::ProtocolError&) {
  }
  return 0;
}
