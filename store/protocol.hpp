#pragma once
// The store's wire protocol: pure functions from messages to bytes and back. No I/O here, so the
// codec is unit-tested and fuzzed without sockets; the TCP server and client both use it.
//
// Every message is a frame: an 8-byte big-endian body length, then the body. The length is
// checked against Limits::max_frame before anything is allocated (a peer claiming 2^62 bytes
// is refused on its 8 header bytes). Field encodings inside a body:
//   u8, u16, u32, i64    fixed width, big-endian
//   str                  u32 length, then that many bytes (keys: <= max_key; values: <= max_value)
//   list<str>            u32 count (<= max_keys), then count strs
//
// Request bodies (first byte: Command):
//   Hello       u32 magic 'DDPR' | u16 version | str run_id | str client nonce
//   Auth        str proof                         the client's answer (store/store_auth.hpp)
//   Set         str key | str value
//   Get         str key | u32 timeout_ms          blocks on the server until the key exists
//   TryGet      str key                           never blocks
//   Check       list<str> keys                    true when every key exists
//   Add         str key | i64 delta               atomic; a missing key counts as 0
//   CompareSet  str key | str expected | str desired
//   Erase       str key
//   MultiGet    list<str> keys | u32 timeout_ms   blocks until every key exists
//   MultiSet    list<str> keys | list<str> values
//   Wait        list<str> keys | u32 timeout_ms   blocks until every key exists
//   NumKeys     (nothing)
//   Ping        (nothing)
//   Arrive      str counter | i64 total | str release | str then_get | u32 timeout_ms
//                                             adds 1 to counter; the arrival that makes it total
//                                             sets release to "1"; then blocks until then_get
//                                             exists (a barrier's arrival and what the arriving
//                                             node waits for next, in one request)
//
// Response bodies: u8 Status, then
//   Ok:        Get/TryGet/CompareSet: str value; MultiGet: list<str> values; Add/NumKeys: i64;
//              Arrive: i64 the counter after this arrival | str then_get's value;
//              Check/Erase: u8 (0 or 1); Hello: u8 (1: Auth required) | str server nonce |
//              str the run id of the agent that hosts the store (empty: a ddprun-store);
//              Auth: str the server's proof; everything else: nothing
//   Missing:   nothing (TryGet of an absent key)
//   Timeout:   nothing (a blocking request's timeout passed on the server)
//   Error:     str message (the server refused the request; it closes the connection after it)
//
// Keys live in a namespace per run id (sent in Hello), so jobs sharing one store never mix.
// A server with a secret serves nothing but Auth until the client has proved it knows the
// secret; a client with a secret trusts no server that cannot prove the same.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::store {

inline constexpr std::uint32_t kMagic = 0x44445052;  // "DDPR"
inline constexpr std::uint16_t kProtocolVersion = 3;
inline constexpr std::size_t kFrameHeaderSize = 8;

enum class Command : std::uint8_t {
  kHello = 1,
  kSet = 2,
  kGet = 3,
  kTryGet = 4,
  kCheck = 5,
  kAdd = 6,
  kCompareSet = 7,
  kErase = 8,
  kMultiGet = 9,
  kMultiSet = 10,
  kWait = 11,
  kNumKeys = 12,
  kPing = 13,
  kAuth = 14,
  kArrive = 15,
};

enum class Status : std::uint8_t { kOk = 0, kMissing = 1, kTimeout = 2, kError = 3 };

const char* command_name(Command command);

// Whether the server may hold a request of this kind until keys exist (it carries timeout_ms).
inline bool may_block(Command command) {
  return command == Command::kGet || command == Command::kMultiGet || command == Command::kWait ||
         command == Command::kArrive;
}

// Hard limits, enforced by the decoder before any allocation. Both ends must agree.
struct Limits {
  std::size_t max_key = 4096;
  std::size_t max_value = 64 * 1024 * 1024;
  std::size_t max_keys = 1 << 16;
  std::size_t max_frame = 128 * 1024 * 1024;
};

struct Request {
  Command command = Command::kPing;
  std::vector<std::string> keys;
  std::vector<std::string> values;  // Set: [value]; CompareSet: [expected, desired]; MultiSet;
                                    // Auth: [proof]
  std::int64_t number = 0;          // Add: delta; Arrive: total
  std::uint32_t timeout_ms = 0;     // Get, MultiGet, Wait, Arrive
  // Arrive, on the server only (never sent): the counter after this request's arrival, once
  // it has arrived, so that running the request again after a wait does not arrive twice.
  std::optional<std::int64_t> arrived;
  // Hello only.
  std::uint32_t magic = kMagic;
  std::uint16_t version = kProtocolVersion;
  std::string run_id;
  std::string nonce;
};

// The keys a blocking request waits for: an Arrive waits for its last key only (its arrival
// does not wait), the others for all of theirs.
inline std::span<const std::string> keys_waited_for(const Request& request) {
  if (request.command == Command::kArrive) return {request.keys.data() + 2, 1};
  return request.keys;
}

struct Response {
  Status status = Status::kOk;
  std::vector<std::string> values;  // Get/TryGet/CompareSet: [value]; MultiGet: values;
                                    // Hello: [server nonce, host's run id]; Auth: [proof]
  std::int64_t number = 0;          // Add, NumKeys, Arrive; Check and Erase (0/1); Hello: auth
                                    // required
  std::string message;              // Error
};

// Encodes a whole frame (header and body). Throws ProtocolError if a field exceeds `limits`.
std::string encode_request(const Request& request, const Limits& limits = {});
std::string encode_response(Command command, const Response& response, const Limits& limits = {});
// The same into `frame`, whose storage is reused (a server's connection answers into one
// buffer). On a throw `frame` holds no valid frame.
void encode_response(std::string& frame, Command command, const Response& response,
                     const Limits& limits = {});

// Looks at the start of a receive buffer. Returns the size of the whole first frame once it has
// fully arrived, nullopt while more bytes are needed. Throws ProtocolError when the header
// announces a body larger than limits.max_frame (checked on the header bytes alone).
std::optional<std::size_t> complete_frame_size(std::string_view buffer, const Limits& limits);

// Decode one frame body (without the header). Throw ProtocolError on truncated input,
// trailing bytes, unknown commands or statuses, and fields over the limits.
Request decode_request(std::string_view body, const Limits& limits = {});
Response decode_response(Command command, std::string_view body, const Limits& limits = {});

}  // namespace ddprun::store
