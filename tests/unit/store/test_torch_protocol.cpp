// torch's TCPStore queries as its clients write them, read by the workers' store.

#include <catch2/catch.hpp>

#include "common/error.hpp"
#include "store/torch_protocol.hpp"

using namespace ddprun;
using namespace ddprun::store;
using namespace std::string_literals;

namespace {

std::string bytes(std::initializer_list<int> list) {
  std::string s;
  for (int b : list) s.push_back(static_cast<char>(b));
  return s;
}

std::string u64(std::uint64_t v) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return s;
}

TorchQuery query(TorchCommand command, std::vector<std::string> keys = {},
                 std::vector<std::string> values = {}) {
  TorchQuery q;
  q.command = command;
  q.keys = std::move(keys);
  q.values = std::move(values);
  return q;
}

// Parses a whole query, checking that every shorter prefix asks for more bytes.
TorchQuery parse_whole(const std::string& wire, TorchDialect& dialect) {
  for (std::size_t n = 0; n < wire.size(); ++n) {
    auto before = dialect;
    INFO("prefix of " << n << " bytes");
    CHECK_FALSE(parse_torch_query(std::string_view(wire).substr(0, n), before));
    CHECK(before == dialect);
  }
  auto parsed = parse_torch_query(wire, dialect);
  REQUIRE(parsed);
  CHECK(parsed->size == wire.size());
  return parsed->query;
}

}  // namespace

TEST_CASE("torch 2.2's first query, VALIDATE, and its ADD of init/ as torch writes them",
          "[torch-protocol]") {
  TorchDialect dialect = TorchDialect::kUnknown;
  auto validate = parse_whole(bytes({0x00, 0xCE, 0xF7, 0x85, 0x3C}), dialect);
  CHECK(validate.command == TorchCommand::kValidate);
  CHECK(dialect == TorchDialect::kValidated);
  auto add = parse_whole(bytes({0x04}) + u64(5) + "init/" + u64(1), dialect);
  CHECK(add.command == TorchCommand::kAdd);
  CHECK(add.keys == std::vector<std::string>{"init/"});
  CHECK(add.delta == 1);
}

TEST_CASE("a connection that opens with anything but VALIDATE speaks torch 1.13's numbering",
          "[torch-protocol]") {
  TorchDialect dialect = TorchDialect::kUnknown;
  // torch 1.13's ADD of init/: command 3.
  auto add = parse_whole(bytes({0x03}) + u64(5) + "init/" + u64(1), dialect);
  CHECK(add.command == TorchCommand::kAdd);
  CHECK(dialect == TorchDialect::kLegacy);
  // In that numbering 0 is SET, and its key length follows.
  TorchDialect fresh = TorchDialect::kUnknown;
  auto set = parse_whole(bytes({0x00}) + u64(1) + "k" + u64(2) + "v\0"s, fresh);
  CHECK(set.command == TorchCommand::kSet);
  CHECK(set.values == std::vector<std::string>{"v\0"s});
  CHECK(fresh == TorchDialect::kLegacy);
  CHECK(parse_whole(bytes({0x07}) + u64(1) + "k", dialect).command == TorchCommand::kWatchKey);
  CHECK(parse_whole(bytes({0x08}) + u64(1) + "k", dialect).command == TorchCommand::kDeleteKey);
  CHECK(parse_whole(bytes({0x0B}), dialect).command == TorchCommand::kCancelWait);
}

TEST_CASE("every query of each numbering reads back as written", "[torch-protocol]") {
  using C = TorchCommand;
  std::vector<TorchQuery> queries = {
      query(C::kSet, {"/a"}, {"1"}),
      query(C::kCompareSet, {"/a"}, {"", "2"}),
      query(C::kGet, {"/a"}),
      query(C::kCheck, {"/a", "/b"}),
      query(C::kWait, {"/a", "/b", "/c"}),
      query(C::kNumKeys),
      query(C::kDeleteKey, {"/a"}),
      query(C::kMultiGet, {"/a", "/b"}),
      query(C::kMultiSet, {"/a", "/b"}, {"x", "y"}),
      query(C::kCancelWait),
  };
  auto add = query(C::kAdd, {"/n"});
  add.delta = -7;
  queries.push_back(add);
  for (auto dialect : {TorchDialect::kLegacy, TorchDialect::kValidated}) {
    auto all = queries;
    if (dialect == TorchDialect::kValidated) {
      all.push_back(query(C::kAppend, {"/a"}, {"more"}));
      all.push_back(query(C::kList));
      auto ping = query(C::kPing);
      ping.number = 0xDEADBEEF;
      all.push_back(ping);
    }
    for (const auto& q : all) {
      INFO(torch_command_name(q.command));
      auto d = dialect;
      auto back = parse_whole(encode_torch_query(q, dialect), d);
      CHECK(back.command == q.command);
      CHECK(back.keys == q.keys);
      CHECK(back.values == q.values);
      CHECK(back.delta == q.delta);
      CHECK(back.number == q.number);
    }
  }
}

TEST_CASE("queries sent back to back are read one at a time", "[torch-protocol]") {
  TorchDialect dialect = TorchDialect::kValidated;
  auto wire = encode_torch_query(query(TorchCommand::kSet, {"/a"}, {"1"}), dialect) +
              encode_torch_query(query(TorchCommand::kGet, {"/a"}), dialect);
  auto first = parse_torch_query(wire, dialect);
  REQUIRE(first);
  CHECK(first->query.command == TorchCommand::kSet);
  auto second = parse_torch_query(std::string_view(wire).substr(first->size), dialect);
  REQUIRE(second);
  CHECK(second->query.command == TorchCommand::kGet);
  CHECK(first->size + second->size == wire.size());
}

TEST_CASE("bad queries are refused on their first bytes", "[torch-protocol]") {
  TorchLimits limits;
  limits.max_key = 16;
  limits.max_value = 32;
  limits.max_keys = 4;
  auto legacy = TorchDialect::kLegacy;
  auto validated = TorchDialect::kValidated;
  // Unknown command bytes in each numbering.
  CHECK_THROWS_AS(parse_torch_query(bytes({12}), legacy, limits), ProtocolError);
  CHECK_THROWS_AS(parse_torch_query(bytes({18}), validated, limits), ProtocolError);
  // A length over the limits is refused before its bytes arrive.
  CHECK_THROWS_AS(parse_torch_query(bytes({0x01}) + u64(17), validated, limits), ProtocolError);
  CHECK_THROWS_AS(parse_torch_query(bytes({0x01}) + u64(1) + "k" + u64(33), validated, limits),
                  ProtocolError);
  CHECK_THROWS_AS(parse_torch_query(bytes({0x06}) + u64(5), validated, limits), ProtocolError);
  // VALIDATE with another magic number, on a connection that already settled its numbering.
  CHECK_THROWS_AS(parse_torch_query(bytes({0x00, 1, 2, 3, 4}), validated, limits),
                  ProtocolError);
  // An opening 0 without the magic is an older SET whose key length is far over the limit.
  auto unknown = TorchDialect::kUnknown;
  CHECK_THROWS_AS(parse_torch_query(bytes({0x00, 1, 2, 3, 4}) + u64(0), unknown, limits),
                  ProtocolError);
}

TEST_CASE("a query that has not fully arrived says how many bytes it needs, and no more than "
          "it may take", "[torch-protocol]") {
  auto dialect = TorchDialect::kValidated;
  const std::string value(100'000, 'v');
  const auto wire = encode_torch_query(query(TorchCommand::kSet, {"/big"}, {value}), dialect);
  std::size_t needed = 0;
  // Once the value's length has arrived, the whole query's size is known.
  CHECK_FALSE(parse_torch_query(std::string_view(wire).substr(0, 30), dialect, {}, &needed));
  CHECK(needed == wire.size());
  CHECK_FALSE(parse_torch_query(std::string_view(wire).substr(0, 3), dialect, {}, &needed));
  CHECK(needed == 9);  // the key's length first
  auto whole = parse_torch_query(wire, dialect, {}, &needed);
  REQUIRE(whole);
  CHECK(whole->query.values.at(0) == value);
  TorchLimits limits;
  limits.max_query = 1000;
  CHECK_THROWS_AS(parse_torch_query(wire, dialect, limits), ProtocolError);
  // Many keys, each within the limits, together over the query's limit.
  TorchQuery many = query(TorchCommand::kMultiSet);
  for (int i = 0; i < 20; ++i) {
    many.keys.push_back("/k" + std::to_string(i));
    many.values.push_back(std::string(100, 'x'));
  }
  CHECK_THROWS_AS(parse_torch_query(encode_torch_query(many, dialect), dialect, limits),
                  ProtocolError);
}

TEST_CASE("answers are torch's: little-endian integers, values with a u64 length",
          "[torch-protocol]") {
  std::string out;
  put_torch_i64(out, 3);
  put_torch_u32(out, 0x01020304);
  put_torch_value(out, "ab");
  put_torch_byte(out, kTorchWaitCanceled);
  CHECK(out == u64(3) + bytes({4, 3, 2, 1}) + u64(2) + "ab" + bytes({1}));
}
