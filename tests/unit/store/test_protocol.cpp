#include <catch2/catch.hpp>

#include "common/error.hpp"
#include "store/protocol.hpp"
#include "testing/store_request.hpp"

using namespace ddprun;
using namespace ddprun::store;

using ddprun::test::make_request;

namespace {

std::string body_of(const std::string& frame) {
  auto size = complete_frame_size(frame, Limits{});
  REQUIRE(size);
  REQUIRE(*size == frame.size());
  return frame.substr(kFrameHeaderSize);
}

Request round_trip(const Request& in) { return decode_request(body_of(encode_request(in))); }

}  // namespace

TEST_CASE("every request round-trips through the codec", "[protocol]") {
  Request hello;
  hello.command = Command::kHello;
  hello.run_id = "job-42";
  auto h = round_trip(hello);
  CHECK(h.command == Command::kHello);
  CHECK(h.magic == kMagic);
  CHECK(h.version == kProtocolVersion);
  CHECK(h.run_id == "job-42");
  hello.nonce = std::string("n\0nce", 5);
  CHECK(round_trip(hello).nonce == hello.nonce);

  auto auth = round_trip(make_request(Command::kAuth, {}, {std::string(32, '\xff')}));
  CHECK(auth.command == Command::kAuth);
  CHECK(auth.values == std::vector<std::string>{std::string(32, '\xff')});

  auto set = round_trip(make_request(Command::kSet, {"k"}, {std::string("v\0x", 3)}));
  CHECK(set.keys == std::vector<std::string>{"k"});
  CHECK(set.values == std::vector<std::string>{std::string("v\0x", 3)});

  auto get = make_request(Command::kGet, {"key"});
  get.timeout_ms = 1234;
  auto g = round_trip(get);
  CHECK(g.keys[0] == "key");
  CHECK(g.timeout_ms == 1234);

  CHECK(round_trip(make_request(Command::kTryGet, {"a"})).keys[0] == "a");
  CHECK(round_trip(make_request(Command::kErase, {"a"})).command == Command::kErase);
  CHECK(round_trip(make_request(Command::kCheck, {"a", "b", "c"})).keys.size() == 3);

  auto add = make_request(Command::kAdd, {"ctr"});
  add.number = -7;
  CHECK(round_trip(add).number == -7);
  add.number = INT64_MIN;
  CHECK(round_trip(add).number == INT64_MIN);

  auto cas = round_trip(make_request(Command::kCompareSet, {"k"}, {"", "new"}));
  CHECK(cas.values == std::vector<std::string>{"", "new"});

  auto mget = make_request(Command::kMultiGet, {"x", "y"});
  mget.timeout_ms = 5;
  auto mg = round_trip(mget);
  CHECK(mg.keys == std::vector<std::string>{"x", "y"});
  CHECK(mg.timeout_ms == 5);

  auto mset = round_trip(make_request(Command::kMultiSet, {"x", "y"}, {"1", "2"}));
  CHECK(mset.values == std::vector<std::string>{"1", "2"});

  auto wait = make_request(Command::kWait, {"w"});
  wait.timeout_ms = 99;
  CHECK(round_trip(wait).timeout_ms == 99);
  CHECK(round_trip(make_request(Command::kNumKeys)).command == Command::kNumKeys);
  CHECK(round_trip(make_request(Command::kPing)).command == Command::kPing);

  auto arrive = make_request(Command::kArrive, {"settled", "all_settled", "news/root_cause"});
  arrive.number = 1024;
  arrive.timeout_ms = 77;
  arrive.arrived = 5;  // the server's own mark: never sent
  auto a = round_trip(arrive);
  CHECK(a.keys == arrive.keys);
  CHECK(a.number == 1024);
  CHECK(a.timeout_ms == 77);
  CHECK_FALSE(a.arrived);
}

TEST_CASE("every response round-trips through the codec", "[protocol]") {
  auto rt = [](Command c, const Response& r) {
    return decode_response(c, body_of(encode_response(c, r)));
  };
  Response value;
  value.values = {"hello"};
  CHECK(rt(Command::kGet, value).values == value.values);
  CHECK(rt(Command::kTryGet, value).values == value.values);
  CHECK(rt(Command::kCompareSet, value).values == value.values);

  Response many;
  many.values = {"a", "", "c"};
  CHECK(rt(Command::kMultiGet, many).values == many.values);

  Response number;
  number.number = 1LL << 40;
  CHECK(rt(Command::kAdd, number).number == (1LL << 40));
  CHECK(rt(Command::kNumKeys, number).number == (1LL << 40));
  number.number = 1;
  CHECK(rt(Command::kCheck, number).number == 1);
  CHECK(rt(Command::kErase, number).number == 1);

  Response missing;
  missing.status = Status::kMissing;
  CHECK(rt(Command::kTryGet, missing).status == Status::kMissing);
  Response timeout;
  timeout.status = Status::kTimeout;
  CHECK(rt(Command::kWait, timeout).status == Status::kTimeout);
  Response error;
  error.status = Status::kError;
  error.message = "nope";
  auto e = rt(Command::kSet, error);
  CHECK(e.status == Status::kError);
  CHECK(e.message == "nope");
  Response challenge;
  challenge.number = 1;
  challenge.values = {std::string(32, 'c'), "job-7"};
  auto greeting = rt(Command::kHello, challenge);
  CHECK(greeting.number == 1);
  CHECK(greeting.values == challenge.values);
  Response proof;
  proof.values = {std::string(32, 'p')};
  CHECK(rt(Command::kAuth, proof).values == proof.values);
  Response arrival;
  arrival.number = 1023;
  arrival.values = {"cause"};
  auto arrived = rt(Command::kArrive, arrival);
  CHECK(arrived.number == 1023);
  CHECK(arrived.values == arrival.values);
  for (auto c : {Command::kSet, Command::kMultiSet, Command::kWait, Command::kPing}) {
    CHECK(rt(c, Response{}).status == Status::kOk);
  }
}

TEST_CASE("frame size is known only once the whole frame arrived", "[protocol]") {
  auto frame = encode_request(make_request(Command::kSet, {"key"}, {"value"}));
  for (std::size_t n = 0; n < frame.size(); ++n) {
    CHECK_FALSE(complete_frame_size(std::string_view(frame).substr(0, n), Limits{}));
  }
  CHECK(complete_frame_size(frame + "trailing", Limits{}) == frame.size());
}

TEST_CASE("the decoder rejects truncated input", "[protocol]") {
  auto body = body_of(encode_request(make_request(Command::kMultiSet, {"a", "b"}, {"1", "2"})));
  for (std::size_t n = 0; n < body.size(); ++n) {
    CHECK_THROWS_AS(decode_request(body.substr(0, n)), ProtocolError);
  }
  CHECK_THROWS_AS(decode_request(body + "x"), ProtocolError);  // trailing bytes
}

TEST_CASE("the decoder rejects unknown commands and statuses", "[protocol]") {
  CHECK_THROWS_WITH(decode_request(std::string(1, '\x00')), Catch::Contains("unknown command"));
  CHECK_THROWS_WITH(decode_request(std::string(1, '\x7f')), Catch::Contains("unknown command"));
  CHECK_THROWS_WITH(decode_response(Command::kPing, std::string(1, '\x09')),
                    Catch::Contains("unknown status"));
}

TEST_CASE("limits are checked before allocating", "[protocol]") {
  Limits small;
  small.max_key = 8;
  small.max_value = 16;
  small.max_keys = 2;
  small.max_frame = 64;

  SECTION("oversized frame header") {
    std::string header(kFrameHeaderSize, '\0');
    header[0] = 0x40;  // 2^62 bytes
    CHECK_THROWS_WITH(complete_frame_size(header, small), Catch::Contains("over the limit"));
  }
  SECTION("oversized key") {
    auto body = body_of(encode_request(make_request(Command::kTryGet, {"0123456789"})));
    CHECK_THROWS_WITH(decode_request(body, small), Catch::Contains("key of 10 bytes"));
  }
  SECTION("oversized value claimed by the length field alone") {
    std::string body = "\x02";                          // set
    body += std::string("\x00\x00\x00\x01k", 5);        // key "k"
    body += std::string("\x7f\xff\xff\xff", 4);         // value claims 2 GiB
    CHECK_THROWS_WITH(decode_request(body, small), Catch::Contains("value of 2147483647 bytes"));
  }
  SECTION("too many keys") {
    auto body = body_of(encode_request(make_request(Command::kCheck, {"a", "b", "c"})));
    CHECK_THROWS_WITH(decode_request(body, small), Catch::Contains("exceeds the limit"));
  }
  SECTION("a forged count larger than the frame") {
    std::string body = "\x05";                          // check
    body += std::string("\x00\x00\xff\xff", 4);         // 65535 keys, no bytes behind them
    CHECK_THROWS_AS(decode_request(body), ProtocolError);
  }
  SECTION("the encoder refuses what the decoder would") {
    CHECK_THROWS_AS(encode_request(make_request(Command::kSet, {"k"}, {std::string(17, 'v')}), small),
                    ProtocolError);
  }
}

TEST_CASE("garbage never crashes the decoder", "[protocol]") {
  std::uint32_t seed = 12345;
  int rejected = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string body;
    auto len = (seed % 40) + 1;
    for (std::uint32_t j = 0; j < len; ++j) {
      seed = seed * 1103515245 + 12345;
      body.push_back(static_cast<char>(seed >> 16));
    }
    try {
      (void)decode_request(body);
    } catch (const ProtocolError&) {
      ++rejected;
    }
  }
  // Random bytes are almost never a valid frame; anything but ProtocolError escapes and fails.
  CHECK(rejected > 1900);
}
