#pragma once
// A store request as the tests build them, for the codec's and the store state's tests and the
// fuzzers' seeds.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "store/protocol.hpp"

namespace ddprun::test {

inline store::Request make_request(store::Command command, std::vector<std::string> keys = {},
                                   std::vector<std::string> values = {},
                                   std::uint32_t timeout_ms = 0) {
  store::Request r;
  r.command = command;
  r.keys = std::move(keys);
  r.values = std::move(values);
  r.timeout_ms = timeout_ms;
  return r;
}

}  // namespace ddprun::test
