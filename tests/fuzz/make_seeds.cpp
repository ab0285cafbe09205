// Writes one valid frame per command into a directory: the fuzzer's seed corpus.

#include <fstream>
#include <iostream>

#include "rendezvous/protocol.hpp"

int main(int argc, char** argv) {
  using namespace ddprun::store;
  if (argc != 2) {
    std::cerr << "usage: make_seeds DIR\n";
    return 2;
  }
  std::string dir = argv[1];
  int n = 0;
  auto write = [&](const Request& r) {
    std::ofstream(dir + "/seed_" + std::to_string(n++), std::ios::binary) << encode_request(r);
  };
  for (int c = 1; c <= static_cast<int>(Command::kAuth); ++c) {
    Request r;
    r.command = static_cast<Command>(c);
    r.run_id = "seed";
    switch (r.command) {
      case Command::kSet: r.keys = {"k"}; r.values = {"v"}; break;
      case Command::kCompareSet: r.keys = {"k"}; r.values = {"", "v"}; break;
      case Command::kMultiSet: r.keys = {"a", "b"}; r.values = {"1", "2"}; break;
      case Command::kGet:
      case Command::kTryGet:
      case Command::kErase:
      case Command::kAdd: r.keys = {"k"}; r.number = 1; r.timeout_ms = 10; break;
      case Command::kCheck:
      case Command::kMultiGet:
      case Command::kWait: r.keys = {"a", "b"}; r.timeout_ms = 10; break;
      case Command::kHello: r.nonce = std::string(32, 'n'); break;
      case Command::kAuth: r.values = {std::string(32, 'p')}; break;
      case Command::kNumKeys:
      case Command::kPing: break;
    }
    write(r);
  }
  std::cout << "wrote " << n << " seeds to " << dir << "\n";
  return 0;
}
