#include "store/protocol.hpp"

#include <fmt/format.h>

#include "common/error.hpp"

namespace ddprun::store {
namespace {

// The bytes a list of strings takes on the wire.
std::size_t wire_size(const std::vector<std::string>& strings) {
  std::size_t n = 4;
  for (const auto& s : strings) n += 4 + s.size();
  return n;
}

// Writes one frame into `out`, replacing what it held but keeping its storage. `body` is the
// body's expected size, reserved at once: a frame grown byte by byte would be reallocated about
// log2(size) times, and a value of a kilobyte or more each time costs more than its copy.
class Writer {
 public:
  Writer(std::string& out, const Limits& limits, std::size_t body) : out_(out), limits_(limits) {
    out_.clear();
    out_.reserve(kFrameHeaderSize + body);
    out_.resize(kFrameHeaderSize);
  }

  void u8(std::uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u16(std::uint16_t v) { be(v, 2); }
  void u32(std::uint32_t v) { be(v, 4); }
  void i64(std::int64_t v) { be(static_cast<std::uint64_t>(v), 8); }
  void key(std::string_view k) { str(k, limits_.max_key, "key"); }
  void value(std::string_view v) { str(v, limits_.max_value, "value"); }
  void keys(const std::vector<std::string>& ks) {
    count(ks.size());
    for (const auto& k : ks) key(k);
  }
  void values(const std::vector<std::string>& vs) {
    count(vs.size());
    for (const auto& v : vs) value(v);
  }

  void finish() {
    auto body = out_.size() - kFrameHeaderSize;
    if (body > limits_.max_frame) {
      throw ProtocolError(fmt::format("frame of {} bytes exceeds the limit of {} bytes", body,
                                      limits_.max_frame));
    }
    for (std::size_t i = 0; i < kFrameHeaderSize; ++i) {
      out_[i] = static_cast<char>((body >> (8 * (kFrameHeaderSize - 1 - i))) & 0xff);
    }
  }

 private:
  void be(std::uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; --i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void count(std::size_t n) {
    if (n > limits_.max_keys) {
      throw ProtocolError(fmt::format("{} keys exceed the limit of {}", n, limits_.max_keys));
    }
    u32(static_cast<std::uint32_t>(n));
  }
  void str(std::string_view s, std::size_t limit, const char* what) {
    if (s.size() > limit) {
      throw ProtocolError(
          fmt::format("{} of {} bytes exceeds the limit of {} bytes", what, s.size(), limit));
    }
    u32(static_cast<std::uint32_t>(s.size()));
    out_.append(s);
  }

  std::string& out_;
  const Limits& limits_;
};

class Reader {
 public:
  Reader(std::string_view in, const Limits& limits) : in_(in), limits_(limits) {}

  std::uint8_t u8() { return static_cast<std::uint8_t>(be(1, "u8")); }
  std::uint16_t u16() { return static_cast<std::uint16_t>(be(2, "u16")); }
  std::uint32_t u32() { return static_cast<std::uint32_t>(be(4, "u32")); }
  std::int64_t i64() { return static_cast<std::int64_t>(be(8, "i64")); }
  std::string key() { return str(limits_.max_key, "key"); }
  std::string value() { return str(limits_.max_value, "value"); }
  std::vector<std::string> keys() {
    auto n = count();
    std::vector<std::string> out;
    out.reserve(n);
    for (std::size_t i = 0; i < n; ++i) out.push_back(key());
    return out;
  }
  std::vector<std::string> values() {
    auto n = count();
    std::vector<std::string> out;
    out.reserve(n);
    for (std::size_t i = 0; i < n; ++i) out.push_back(value());
    return out;
  }
  void finish() const {
    if (pos_ != in_.size()) {
      throw ProtocolError(fmt::format("{} unexpected trailing bytes", in_.size() - pos_));
    }
  }

 private:
  std::uint64_t be(std::size_t bytes, const char* what) {
    need(bytes, what);
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < bytes; ++i) v = (v << 8) | static_cast<std::uint8_t>(in_[pos_ + i]);
    pos_ += bytes;
    return v;
  }
  void need(std::size_t bytes, const char* what) const {
    if (in_.size() - pos_ < bytes) {
      throw ProtocolError(fmt::format("truncated {}: need {} bytes at offset {}, have {}", what,
                                      bytes, pos_, in_.size() - pos_));
    }
  }
  std::size_t count() {
    auto n = u32();
    // Each entry takes at least 4 bytes, so a count larger than what is left is a lie; checking
    // it here keeps `reserve` from allocating on a forged count.
    if (n > limits_.max_keys || n > (in_.size() - pos_) / 4) {
      throw ProtocolError(fmt::format("list of {} entries exceeds the limit of {} or the frame",
                                      n, limits_.max_keys));
    }
    return n;
  }
  std::string str(std::size_t limit, const char* what) {
    auto n = u32();
    if (n > limit) {
      throw ProtocolError(
          fmt::format("{} of {} bytes exceeds the limit of {} bytes", what, n, limit));
    }
    need(n, what);
    std::string out(in_.substr(pos_, n));
    pos_ += n;
    return out;
  }

  std::string_view in_;
  const Limits& limits_;
  std::size_t pos_ = 0;
};

Command to_command(std::uint8_t byte) {
  auto command = static_cast<Command>(byte);
  switch (command) {
    case Command::kHello:
    case Command::kSet:
    case Command::kGet:
    case Command::kTryGet:
    case Command::kCheck:
    case Command::kAdd:
    case Command::kCompareSet:
    case Command::kErase:
    case Command::kMultiGet:
    case Command::kMultiSet:
    case Command::kWait:
    case Command::kNumKeys:
    case Command::kPing:
    case Command::kAuth:
    case Command::kArrive:
      return command;
  }
  throw ProtocolError(fmt::format("unknown command byte {}", byte));
}

Status to_status(std::uint8_t byte) {
  auto status = static_cast<Status>(byte);
  switch (status) {
    case Status::kOk:
    case Status::kMissing:
    case Status::kTimeout:
    case Status::kError:
      return status;
  }
  throw ProtocolError(fmt::format("unknown status byte {}", byte));
}

void require_count(const Request& r, std::size_t keys, std::size_t values) {
  if (r.keys.size() != keys || r.values.size() != values) {
    throw ProtocolError(fmt::format("{} needs {} key(s) and {} value(s), got {} and {}",
                                    command_name(r.command), keys, values, r.keys.size(),
                                    r.values.size()));
  }
}

}  // namespace

const char* command_name(Command command) {
  switch (command) {
    case Command::kHello: return "hello";
    case Command::kSet: return "set";
    case Command::kGet: return "get";
    case Command::kTryGet: return "try_get";
    case Command::kCheck: return "check";
    case Command::kAdd: return "add";
    case Command::kCompareSet: return "compare_set";
    case Command::kErase: return "erase";
    case Command::kMultiGet: return "multi_get";
    case Command::kMultiSet: return "multi_set";
    case Command::kWait: return "wait";
    case Command::kNumKeys: return "num_keys";
    case Command::kPing: return "ping";
    case Command::kAuth: return "auth";
    case Command::kArrive: return "arrive";
  }
  return "unknown";
}

std::string encode_request(const Request& r, const Limits& limits) {
  std::string frame;
  Writer w(frame, limits,
           32 + wire_size(r.keys) + wire_size(r.values) + r.run_id.size() + r.nonce.size());
  w.u8(static_cast<std::uint8_t>(r.command));
  switch (r.command) {
    case Command::kHello:
      w.u32(r.magic);
      w.u16(r.version);
      w.key(r.run_id);
      if (r.version >= 2) w.key(r.nonce);  // version 1 had none (decoded as such)
      break;
    case Command::kAuth:
      require_count(r, 0, 1);
      w.key(r.values[0]);
      break;
    case Command::kSet:
      require_count(r, 1, 1);
      w.key(r.keys[0]);
      w.value(r.values[0]);
      break;
    case Command::kGet:
      require_count(r, 1, 0);
      w.key(r.keys[0]);
      w.u32(r.timeout_ms);
      break;
    case Command::kTryGet:
    case Command::kErase:
      require_count(r, 1, 0);
      w.key(r.keys[0]);
      break;
    case Command::kCheck:
      w.keys(r.keys);
      break;
    case Command::kAdd:
      require_count(r, 1, 0);
      w.key(r.keys[0]);
      w.i64(r.number);
      break;
    case Command::kCompareSet:
      require_count(r, 1, 2);
      w.key(r.keys[0]);
      w.value(r.values[0]);
      w.value(r.values[1]);
      break;
    case Command::kMultiGet:
    case Command::kWait:
      w.keys(r.keys);
      w.u32(r.timeout_ms);
      break;
    case Command::kMultiSet:
      require_count(r, r.keys.size(), r.keys.size());
      w.keys(r.keys);
      w.values(r.values);
      break;
    case Command::kArrive:
      require_count(r, 3, 0);
      w.key(r.keys[0]);
      w.i64(r.number);
      w.key(r.keys[1]);
      w.key(r.keys[2]);
      w.u32(r.timeout_ms);
      break;
    case Command::kNumKeys:
    case Command::kPing:
      break;
  }
  w.finish();
  return frame;
}

Request decode_request(std::string_view body, const Limits& limits) {
  Reader rd(body, limits);
  Request r;
  r.command = to_command(rd.u8());
  switch (r.command) {
    case Command::kHello:
      r.magic = rd.u32();
      r.version = rd.u16();
      // A version-1 client sends no nonce: decode what it sent, so the server can say that
      // the version is the problem.
      r.run_id = rd.key();
      if (r.version >= 2) r.nonce = rd.key();
      break;
    case Command::kAuth:
      r.values.push_back(rd.key());
      break;
    case Command::kSet:
      r.keys.push_back(rd.key());
      r.values.push_back(rd.value());
      break;
    case Command::kGet:
      r.keys.push_back(rd.key());
      r.timeout_ms = rd.u32();
      break;
    case Command::kTryGet:
    case Command::kErase:
      r.keys.push_back(rd.key());
      break;
    case Command::kCheck:
      r.keys = rd.keys();
      break;
    case Command::kAdd:
      r.keys.push_back(rd.key());
      r.number = rd.i64();
      break;
    case Command::kCompareSet:
      r.keys.push_back(rd.key());
      r.values.push_back(rd.value());
      r.values.push_back(rd.value());
      break;
    case Command::kMultiGet:
    case Command::kWait:
      r.keys = rd.keys();
      r.timeout_ms = rd.u32();
      break;
    case Command::kMultiSet:
      r.keys = rd.keys();
      r.values = rd.values();
      if (r.keys.size() != r.values.size()) {
        throw ProtocolError(fmt::format("multi_set with {} keys but {} values", r.keys.size(),
                                        r.values.size()));
      }
      break;
    case Command::kArrive:
      r.keys.push_back(rd.key());
      r.number = rd.i64();
      r.keys.push_back(rd.key());
      r.keys.push_back(rd.key());
      r.timeout_ms = rd.u32();
      break;
    case Command::kNumKeys:
    case Command::kPing:
      break;
  }
  rd.finish();
  return r;
}

std::string encode_response(Command command, const Response& response, const Limits& limits) {
  std::string frame;
  encode_response(frame, command, response, limits);
  return frame;
}

void encode_response(std::string& frame, Command command, const Response& resp,
                     const Limits& limits) {
  Writer w(frame, limits, 32 + wire_size(resp.values) + resp.message.size());
  w.u8(static_cast<std::uint8_t>(resp.status));
  switch (resp.status) {
    case Status::kMissing:
    case Status::kTimeout:
      w.finish();
      return;
    case Status::kError:
      w.value(resp.message);
      w.finish();
      return;
    case Status::kOk:
      break;
  }
  switch (command) {
    case Command::kGet:
    case Command::kTryGet:
    case Command::kCompareSet:
      if (resp.values.size() != 1) throw ProtocolError("response needs exactly one value");
      w.value(resp.values[0]);
      break;
    case Command::kMultiGet:
      w.values(resp.values);
      break;
    case Command::kAdd:
    case Command::kNumKeys:
      w.i64(resp.number);
      break;
    case Command::kArrive:
      if (resp.values.size() != 1) throw ProtocolError("response needs exactly one value");
      w.i64(resp.number);
      w.value(resp.values[0]);
      break;
    case Command::kCheck:
    case Command::kErase:
      w.u8(resp.number != 0 ? 1 : 0);
      break;
    case Command::kHello:
      if (resp.values.size() != 2) {
        throw ProtocolError("hello reply needs the server's nonce and whom it serves");
      }
      w.u8(resp.number != 0 ? 1 : 0);
      w.key(resp.values[0]);
      w.key(resp.values[1]);
      break;
    case Command::kAuth:
      if (resp.values.size() != 1) throw ProtocolError("auth reply needs the server's proof");
      w.key(resp.values[0]);
      break;
    case Command::kSet:
    case Command::kMultiSet:
    case Command::kWait:
    case Command::kPing:
      break;
  }
  w.finish();
}

Response decode_response(Command command, std::string_view body, const Limits& limits) {
  Reader rd(body, limits);
  Response resp;
  resp.status = to_status(rd.u8());
  switch (resp.status) {
    case Status::kMissing:
    case Status::kTimeout:
      rd.finish();
      return resp;
    case Status::kError:
      resp.message = rd.value();
      rd.finish();
      return resp;
    case Status::kOk:
      break;
  }
  switch (command) {
    case Command::kGet:
    case Command::kTryGet:
    case Command::kCompareSet:
      resp.values.push_back(rd.value());
      break;
    case Command::kMultiGet:
      resp.values = rd.values();
      break;
    case Command::kAdd:
    case Command::kNumKeys:
      resp.number = rd.i64();
      break;
    case Command::kArrive:
      resp.number = rd.i64();
      resp.values.push_back(rd.value());
      break;
    case Command::kCheck:
    case Command::kErase:
      resp.number = rd.u8();
      break;
    case Command::kHello:
      resp.number = rd.u8();
      resp.values.push_back(rd.key());
      resp.values.push_back(rd.key());
      break;
    case Command::kAuth:
      resp.values.push_back(rd.key());
      break;
    case Command::kSet:
    case Command::kMultiSet:
    case Command::kWait:
    case Command::kPing:
      break;
  }
  rd.finish();
  return resp;
}

std::optional<std::size_t> complete_frame_size(std::string_view buffer, const Limits& limits) {
  if (buffer.size() < kFrameHeaderSize) return std::nullopt;
  std::uint64_t body = 0;
  for (std::size_t i = 0; i < kFrameHeaderSize; ++i) {
    body = (body << 8) | static_cast<std::uint8_t>(buffer[i]);
  }
  if (body > limits.max_frame) {
    throw ProtocolError(fmt::format("frame header announces {} bytes, over the limit of {} bytes",
                                    body, limits.max_frame));
  }
  if (body == 0) throw ProtocolError("empty frame");
  if (buffer.size() - kFrameHeaderSize < body) return std::nullopt;
  return kFrameHeaderSize + body;
}

}  // namespace ddprun::store
