// The etcd client's pure parts: endpoint lists, base64, prefix ranges.

#include <catch2/catch.hpp>

#include "common/error.hpp"
#include "common/exit_codes.hpp"
#include "etcd/etcd_client.hpp"

using namespace ddprun;

TEST_CASE("etcd client: endpoints, base64 and prefix ends", "[etcd]") {
  auto e = parse_etcd_endpoints("http://10.0.0.5:2379/, 10.0.0.6,[::1]:2380", "--rdzv-endpoint");
  REQUIRE(e.size() == 3);
  CHECK(e[0].text() == "10.0.0.5:2379");
  CHECK(e[1].text() == "10.0.0.6:2379");
  CHECK(e[2].text() == "[::1]:2380");
  CHECK_THROWS_AS(parse_etcd_endpoints("https://x:2379", "f"), ConfigError);
  CHECK_THROWS_AS(parse_etcd_endpoints(",", "f"), ConfigError);
  for (std::string s : {std::string(), std::string("a"), std::string("ab"), std::string("abc"),
                        std::string("\0\xff\x10zz", 5)}) {
    CHECK(base64_decode(base64_encode(s)) == s);
  }
  CHECK(base64_encode("hello") == "aGVsbG8=");
  CHECK_THROWS_AS(base64_decode("abc"), ProtocolError);
  CHECK(prefix_range_end("/ddprun/a/") == "/ddprun/a0");
  CHECK(prefix_range_end(std::string("a\xff", 2)) == "b");
}

TEST_CASE("etcd client: etcd's refusals are rendezvous failures (exit 124)", "[etcd]") {
  CHECK(exit_code_for(classify(EtcdError(14, "etcdserver: no leader"))) == kExitRendezvous);
  CHECK(exit_code_for(classify(EtcdUnavailable("no endpoint answered"))) == kExitRendezvous);
}
