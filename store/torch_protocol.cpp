#include "store/torch_protocol.hpp"

#include <array>

#include <fmt/format.h>

#include "common/error.hpp"

namespace ddprun::store {
namespace {

using C = TorchCommand;

// The commands in the order of their byte, per numbering.
constexpr std::array kLegacyCommands{C::kSet,     C::kCompareSet, C::kGet,      C::kAdd,
                                     C::kCheck,   C::kWait,       C::kNumKeys,  C::kWatchKey,
                                     C::kDeleteKey, C::kMultiGet, C::kMultiSet, C::kCancelWait};
constexpr std::array kValidatedCommands{
    C::kValidate,  C::kSet,       C::kCompareSet, C::kGet,        C::kAdd,      C::kCheck,
    C::kWait,      C::kNumKeys,   C::kDeleteKey,  C::kAppend,     C::kMultiGet, C::kMultiSet,
    C::kCancelWait, C::kPing,     C::kQueuePush,  C::kQueuePop,   C::kQueueLen, C::kList};

template <std::size_t N>
std::optional<std::uint8_t> byte_of(const std::array<TorchCommand, N>& commands, TorchCommand c) {
  for (std::size_t i = 0; i < N; ++i) {
    if (commands[i] == c) return static_cast<std::uint8_t>(i);
  }
  return std::nullopt;
}

// Reads fields off the front of a buffer. Each read returns false when the buffer ends first:
// the query has not fully arrived, and is read again from its start once more bytes have
// (`needed()` says how many at least). A measuring reader copies nothing: a query is measured
// until it is whole, then read once.
class Reader {
 public:
  Reader(std::string_view buffer, const TorchLimits& limits, bool measure)
      : in_(buffer), limits_(limits), measure_(measure) {}

  std::size_t taken() const { return at_; }
  std::size_t needed() const { return needed_; }

  bool u32(std::uint32_t& v) {
    std::uint64_t wide = 0;
    if (!little_endian(wide, 4)) return false;
    v = static_cast<std::uint32_t>(wide);
    return true;
  }
  bool u64(std::uint64_t& v) { return little_endian(v, 8); }
  bool i64(std::int64_t& v) {
    std::uint64_t raw = 0;
    if (!little_endian(raw, 8)) return false;
    v = static_cast<std::int64_t>(raw);
    return true;
  }
  bool key(std::vector<std::string>& into) { return string(into, limits_.max_key, "key"); }
  bool value(std::vector<std::string>& into) { return string(into, limits_.max_value, "value"); }
  // A u64 count, then that many keys (CHECK, WAIT, MULTI_GET).
  bool keys(std::vector<std::string>& into) {
    std::uint64_t n = 0;
    if (!count(n)) return false;
    for (std::uint64_t i = 0; i < n; ++i) {
      if (!key(into)) return false;
    }
    return true;
  }
  bool count(std::uint64_t& n) {
    if (!u64(n)) return false;
    if (n > limits_.max_keys) {
      throw ProtocolError(fmt::format("a query names {} keys, more than the {} allowed", n,
                                      limits_.max_keys));
    }
    return true;
  }

 private:
  bool little_endian(std::uint64_t& v, int bytes) {
    if (!have(static_cast<std::size_t>(bytes))) return false;
    v = 0;
    for (int i = bytes - 1; i >= 0; --i) {
      v = (v << 8) | static_cast<std::uint8_t>(in_[at_ + static_cast<std::size_t>(i)]);
    }
    at_ += static_cast<std::size_t>(bytes);
    return true;
  }
  bool string(std::vector<std::string>& into, std::size_t limit, const char* what) {
    std::uint64_t n = 0;
    if (!u64(n)) return false;
    if (n > limit) {
      throw ProtocolError(fmt::format("a {} of {} bytes, more than the {} allowed", what, n,
                                      limit));
    }
    if (!have(n)) return false;
    if (!measure_) into.emplace_back(in_.substr(at_, n));
    at_ += n;
    return true;
  }
  // Whether the next n bytes are in the buffer; if not, notes that they are needed.
  bool have(std::size_t n) {
    if (at_ + n > limits_.max_query) {
      throw ProtocolError(fmt::format("a query of more than {} bytes, the most one may take",
                                      limits_.max_query));
    }
    if (in_.size() - at_ >= n) return true;
    needed_ = at_ + n;
    return false;
  }

  std::string_view in_;
  const TorchLimits& limits_;
  bool measure_;
  std::size_t at_ = 0;
  std::size_t needed_ = 0;
};

bool read_fields(Reader& r, TorchQuery& q) {
  switch (q.command) {
    case C::kValidate:
    case C::kPing:
      return r.u32(q.number);
    case C::kSet:
    case C::kAppend:
    case C::kQueuePush:
      return r.key(q.keys) && r.value(q.values);
    case C::kCompareSet:
      return r.key(q.keys) && r.value(q.values) && r.value(q.values);
    case C::kGet:
    case C::kWatchKey:
    case C::kDeleteKey:
    case C::kQueuePop:
    case C::kQueueLen:
      return r.key(q.keys);
    case C::kAdd:
      return r.key(q.keys) && r.i64(q.delta);
    case C::kCheck:
    case C::kWait:
    case C::kMultiGet:
      return r.keys(q.keys);
    case C::kMultiSet: {
      std::uint64_t n = 0;
      if (!r.count(n)) return false;
      for (std::uint64_t i = 0; i < n; ++i) {
        if (!r.key(q.keys) || !r.value(q.values)) return false;
      }
      return true;
    }
    case C::kNumKeys:
    case C::kCancelWait:
    case C::kList:
      return true;
  }
  return true;
}

void put_little_endian(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

}  // namespace

const char* torch_command_name(TorchCommand command) {
  switch (command) {
    case C::kValidate: return "VALIDATE";
    case C::kSet: return "SET";
    case C::kCompareSet: return "COMPARE_SET";
    case C::kGet: return "GET";
    case C::kAdd: return "ADD";
    case C::kCheck: return "CHECK";
    case C::kWait: return "WAIT";
    case C::kNumKeys: return "GETNUMKEYS";
    case C::kWatchKey: return "WATCH_KEY";
    case C::kDeleteKey: return "DELETE_KEY";
    case C::kAppend: return "APPEND";
    case C::kMultiGet: return "MULTI_GET";
    case C::kMultiSet: return "MULTI_SET";
    case C::kCancelWait: return "CANCEL_WAIT";
    case C::kPing: return "PING";
    case C::kQueuePush: return "QUEUE_PUSH";
    case C::kQueuePop: return "QUEUE_POP";
    case C::kQueueLen: return "QUEUE_LEN";
    case C::kList: return "LIST";
  }
  return "unknown";
}

std::optional<TorchParsed> parse_torch_query(std::string_view buffer, TorchDialect& dialect,
                                             const TorchLimits& limits, std::size_t* needed) {
  if (needed != nullptr) *needed = 1;
  if (buffer.empty()) return std::nullopt;
  const auto code = static_cast<std::uint8_t>(buffer[0]);
  auto speaks = dialect;
  if (speaks == TorchDialect::kUnknown) {
    if (code != 0) {
      speaks = TorchDialect::kLegacy;
    } else if (buffer.size() < 5) {
      // VALIDATE's magic, or the start of an older SET's key length.
      if (needed != nullptr) *needed = 5;
      return std::nullopt;
    } else {
      std::uint32_t magic = 0;
      Reader(buffer.substr(1), limits, true).u32(magic);
      speaks = magic == kTorchValidationMagic ? TorchDialect::kValidated : TorchDialect::kLegacy;
    }
  }
  TorchParsed parsed;
  if (speaks == TorchDialect::kLegacy) {
    if (code >= kLegacyCommands.size()) {
      throw ProtocolError(fmt::format("unknown command byte {} (torch 1.13 to 2.1 numbering)",
                                      code));
    }
    parsed.query.command = kLegacyCommands[code];
  } else {
    if (code >= kValidatedCommands.size()) {
      throw ProtocolError(fmt::format("unknown command byte {} (torch 2.2 and later numbering)",
                                      code));
    }
    parsed.query.command = kValidatedCommands[code];
  }
  Reader measure(buffer.substr(1), limits, true);
  if (!read_fields(measure, parsed.query)) {
    if (needed != nullptr) *needed = 1 + measure.needed();
    return std::nullopt;
  }
  Reader r(buffer.substr(1), limits, false);
  read_fields(r, parsed.query);
  if (parsed.query.command == C::kValidate && parsed.query.number != kTorchValidationMagic) {
    throw ProtocolError(fmt::format("VALIDATE with the magic number {:#x}, not torch's {:#x}",
                                    parsed.query.number, kTorchValidationMagic));
  }
  parsed.size = 1 + r.taken();
  dialect = speaks;
  return parsed;
}

void put_torch_byte(std::string& out, std::uint8_t value) {
  out.push_back(static_cast<char>(value));
}
void put_torch_u32(std::string& out, std::uint32_t value) { put_little_endian(out, value, 4); }
void put_torch_i64(std::string& out, std::int64_t value) {
  put_little_endian(out, static_cast<std::uint64_t>(value), 8);
}
void put_torch_value(std::string& out, std::string_view value) {
  put_little_endian(out, value.size(), 8);
  out.append(value);
}

std::string encode_torch_query(const TorchQuery& q, TorchDialect dialect) {
  const auto code = dialect == TorchDialect::kValidated ? byte_of(kValidatedCommands, q.command)
                                                        : byte_of(kLegacyCommands, q.command);
  if (!code) {
    throw ProtocolError(fmt::format("{} has no byte in this numbering",
                                    torch_command_name(q.command)));
  }
  std::string out;
  put_torch_byte(out, *code);
  switch (q.command) {
    case C::kValidate:
    case C::kPing:
      put_torch_u32(out, q.number);
      break;
    case C::kAdd:
      put_torch_value(out, q.keys.at(0));
      put_torch_i64(out, q.delta);
      break;
    case C::kCheck:
    case C::kWait:
    case C::kMultiGet:
      put_torch_i64(out, static_cast<std::int64_t>(q.keys.size()));
      for (const auto& k : q.keys) put_torch_value(out, k);
      break;
    case C::kMultiSet:
      put_torch_i64(out, static_cast<std::int64_t>(q.keys.size()));
      for (std::size_t i = 0; i < q.keys.size(); ++i) {
        put_torch_value(out, q.keys[i]);
        put_torch_value(out, q.values.at(i));
      }
      break;
    default:
      // A key, if any, then the values: SET, APPEND, COMPARE_SET, GET, DELETE_KEY, ...
      for (const auto& k : q.keys) put_torch_value(out, k);
      for (const auto& v : q.values) put_torch_value(out, v);
      break;
  }
  return out;
}

}  // namespace ddprun::store
