#include <catch2/catch.hpp>

#include <regex>

#include "common/random.hpp"

using namespace ddprun;

TEST_CASE("random_hex gives the asked number of random bytes as hex", "[common]") {
  const auto a = random_hex(12);
  CHECK(std::regex_match(a, std::regex("[0-9a-f]{24}")));
  CHECK(random_hex(12) != a);
  CHECK(random_hex(0).empty());
}

TEST_CASE("random_bytes gives the asked number of bytes, different each time", "[common]") {
  const auto a = random_bytes(32);
  CHECK(a.size() == 32);
  CHECK(random_bytes(32) != a);
  CHECK(random_bytes(0).empty());
}
