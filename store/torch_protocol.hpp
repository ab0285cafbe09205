#pragma once
// torch's c10d TCPStore wire protocol, the server's half: what the workers' store
// (torch_store_server.hpp) reads from torch's own clients and what it answers. Pure functions,
// no I/O, so every version's bytes are unit-tested without sockets.
//
// A query is one command byte, then its fields, each in the client's host order (little-endian
// on every machine torch runs on): an integer as its raw bytes, a string or value as a u64
// length and that many bytes, a list as a u64 count and its strings. Nothing frames a query:
// its fields say where it ends. The numbering of the commands changed twice:
//   torch 1.13, 2.0     SET=0 COMPARE_SET GET ADD CHECK WAIT GETNUMKEYS WATCH_KEY=7 DELETE_KEY=8
//   torch 2.1           ... GETNUMKEYS=6 DELETE_KEY=7 APPEND MULTI_GET MULTI_SET CANCEL_WAIT=11
//   torch 2.2 and on    VALIDATE=0 SET=1 ... GETNUMKEYS=7 DELETE_KEY=8 APPEND MULTI_GET MULTI_SET
//                       CANCEL_WAIT=12 PING=13 (2.5) QUEUE_PUSH QUEUE_POP QUEUE_LEN (2.8) LIST=17
// A client of 2.2 or later opens every connection with VALIDATE and its magic number, which no
// older query can start with (SET's key length would be at least 1e9 bytes); a connection that
// opens with anything else speaks the older numbering. There, 7 and 8 are read as torch 1.13's
// (WATCH_KEY, DELETE_KEY): torch 2.1's DELETE_KEY and APPEND cannot be told from them.
//
// Answers: SET, MULTI_SET, APPEND and VALIDATE get none. GET and COMPARE_SET a value; MULTI_GET
// one value per key; ADD, GETNUMKEYS and DELETE_KEY an i64; CHECK a byte (READY=0,
// NOT_READY=1); WAIT the byte STOP_WAITING=0 once every key exists; CANCEL_WAIT the byte
// WAIT_CANCELED=1, always; PING its u32 back; LIST an i64 count and the keys.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::store {

enum class TorchCommand : std::uint8_t {
  kValidate,
  kSet,
  kCompareSet,
  kGet,
  kAdd,
  kCheck,
  kWait,
  kNumKeys,
  kWatchKey,
  kDeleteKey,
  kAppend,
  kMultiGet,
  kMultiSet,
  kCancelWait,
  kPing,
  kQueuePush,
  kQueuePop,
  kQueueLen,
  kList,
};

const char* torch_command_name(TorchCommand command);

// Which numbering a connection speaks: decided by its first query, then kept.
enum class TorchDialect : std::uint8_t {
  kUnknown,    // nothing read yet
  kLegacy,     // torch 1.13 to 2.1
  kValidated,  // torch 2.2 and later: the connection opened with VALIDATE
};

inline constexpr std::uint32_t kTorchValidationMagic = 0x3C85F7CE;
inline constexpr std::uint8_t kTorchReady = 0;
inline constexpr std::uint8_t kTorchNotReady = 1;
inline constexpr std::uint8_t kTorchStopWaiting = 0;
inline constexpr std::uint8_t kTorchWaitCanceled = 1;

// What the server accepts before it reads a field's bytes. torch's newest server refuses keys
// over 8 KiB, values over 8 MiB and more than 131,072 keys in one query; older clients send
// larger values, so values may be as large as the agents' own store takes.
struct TorchLimits {
  std::size_t max_key = 8 * 1024;
  std::size_t max_value = 64 * 1024 * 1024;
  std::size_t max_keys = 128 * 1024;
  std::size_t max_query = 128 * 1024 * 1024;  // all of one query's bytes
};

struct TorchQuery {
  TorchCommand command = TorchCommand::kPing;
  std::vector<std::string> keys;
  std::vector<std::string> values;  // SET, APPEND: [value]; COMPARE_SET: [expected, desired];
                                    // MULTI_SET: one per key
  std::int64_t delta = 0;           // ADD
  std::uint32_t number = 0;         // VALIDATE: the magic; PING: the nonce
};

// Reads the first query of `buffer`. Returns it and the bytes it took once all of them have
// arrived, nullopt while more are needed: then `*needed`, when given, is how many bytes the
// buffer must hold at least before a call can return more (no field is copied before the
// whole query is there, so a large query costs one copy however it arrives). A length is
// checked against the limits before its bytes are waited for. The first query of a
// connection settles `dialect`. Throws ProtocolError on an unknown command, a wrong magic
// number, or a field or the whole query over the limits.
struct TorchParsed {
  TorchQuery query;
  std::size_t size = 0;
};
std::optional<TorchParsed> parse_torch_query(std::string_view buffer, TorchDialect& dialect,
                                             const TorchLimits& limits = {},
                                             std::size_t* needed = nullptr);

// Answers, appended to `out` as the client reads them.
void put_torch_byte(std::string& out, std::uint8_t value);
void put_torch_u32(std::string& out, std::uint32_t value);
void put_torch_i64(std::string& out, std::int64_t value);
void put_torch_value(std::string& out, std::string_view value);

// A client's query as torch's client writes it, for tests and benchmarks that play one.
std::string encode_torch_query(const TorchQuery& query, TorchDialect dialect);

}  // namespace ddprun::store
