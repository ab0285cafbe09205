// libFuzzer target for the store server's state machine: a sequence of frames from up to four
// clients, each through its own handshake (store/store_handshake.hpp; the first input
// byte says whether the server has a secret) and then against one shared StoreState, as the
// TCP server runs them. Any input must end in replies or refusals: never a crash or a hang,
// and with a secret never a served request (nobody here knows the secret, so a finished
// handshake would be a forged one).
//
// Input: [flags] then repeated [client index][frame]. A refused client is closed, as the server
// closes it; its later frames are ignored.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.hpp"
#include "store/protocol.hpp"
#include "store/store_handshake.hpp"
#include "store/store_state.hpp"

namespace {

using namespace ddprun::store;

struct Client {
  Client(const std::string& secret, const std::string& served_for)
      : handshake(secret, served_for) {}
  ServerHandshake handshake;
  bool open = true;
  StoreState::WaiterId waiter = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const Limits limits = [] {
    Limits l;
    l.max_frame = 1 << 20;
    l.max_value = 1 << 19;
    return l;
  }();
  static const std::string secret = "fuzz-secret-0123456789";
  static const std::string none;
  static const std::string served_for = "job";
  if (size < 1) return 0;
  const bool with_secret = (data[0] & 1) != 0;
  const std::string& key = with_secret ? secret : none;
  StoreState state;
  std::array<Client, 4> clients{Client(key, served_for), Client(key, served_for),
                                Client(key, served_for), Client(key, served_for)};
  auto close = [&](Client& c) {
    c.open = false;
    if (c.waiter != 0) state.cancel(c.waiter);
    c.waiter = 0;
  };
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::size_t pos = 1;
  while (pos + 1 < input.size()) {
    Client& c = clients[static_cast<std::uint8_t>(input[pos]) % clients.size()];
    ++pos;
    const auto rest = input.substr(pos);
    std::size_t frame = 0;
    try {
      const auto complete = complete_frame_size(rest, limits);
      if (!complete) break;
      frame = *complete;
    } catch (const ddprun::ProtocolError&) {
      close(c);
      break;  // the server cannot find the next frame's start either
    }
    pos += frame;
    if (!c.open) continue;
    try {
      // Not const: the state marks an Arrive that arrived (Request::arrived).
      auto request = decode_request(rest.substr(kFrameHeaderSize, frame - kFrameHeaderSize),
                                    limits);
      if (!c.handshake.done()) {
        (void)c.handshake.on_request(request);
        if (with_secret && c.handshake.done()) __builtin_trap();  // a forged proof passed
        continue;
      }
      if (request.command == Command::kHello || request.command == Command::kAuth) {
        throw ddprun::ProtocolError("handshake request after the handshake");
      }
      // The server reads a client's next request only after the previous one was answered:
      // one that arrives while it waits stands for the wait's timeout.
      if (c.waiter != 0) {
        state.cancel(c.waiter);
        c.waiter = 0;
      }
      StoreState::WaiterId waiter = 0;
      if (!state.execute(c.handshake.run_id(), request, [] {}, waiter)) c.waiter = waiter;
    } catch (const ddprun::Error&) {
      close(c);
    }
  }
  for (auto& c : clients) close(c);
  return 0;
}
