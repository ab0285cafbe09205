// Writes the fuzzers' seed corpora into a directory: one valid frame per command (fuzz_protocol),
// or with --sequences a few client conversations in fuzz_server's input format.

#include <fstream>
#include <iostream>
#include <utility>
#include <vector>

#include "store/protocol.hpp"

int main(int argc, char** argv) {
  using namespace ddprun::store;
  if (argc < 2 || argc > 3 || (argc == 3 && std::string(argv[2]) != "--sequences")) {
    std::cerr << "usage: make_seeds DIR [--sequences]\n";
    return 2;
  }
  std::string dir = argv[1];
  int n = 0;
  if (argc == 3) {
    Request hello;
    hello.command = Command::kHello;
    hello.run_id = "job";
    hello.nonce = std::string(32, 'n');
    Request set;
    set.command = Command::kSet;
    set.keys = {"k"};
    set.values = {"v"};
    Request get;
    get.command = Command::kGet;
    get.keys = {"k"};
    get.timeout_ms = 10;
    Request wait = get;
    wait.command = Command::kWait;
    wait.keys = {"a", "k"};
    Request auth;
    auth.command = Command::kAuth;
    auth.values = {std::string(32, 'p')};
    using Step = std::pair<char, Request>;
    auto sequence = [&](char flags, const std::vector<Step>& steps) {
      std::string bytes(1, flags);
      for (const auto& [client, request] : steps) bytes += client + encode_request(request);
      std::ofstream(dir + "/seq_" + std::to_string(n++), std::ios::binary) << bytes;
    };
    sequence(0, {{0, hello}, {1, hello}, {1, wait}, {0, set}, {1, get}, {0, get}});
    sequence(0, {{0, set}, {1, hello}, {1, hello}});
    sequence(1, {{0, hello}, {0, auth}, {0, set}, {1, hello}, {1, get}});
    std::cout << "wrote " << n << " sequence seeds to " << dir << "\n";
    return 0;
  }
  auto write = [&](const Request& r) {
    std::ofstream(dir + "/seed_" + std::to_string(n++), std::ios::binary) << encode_request(r);
  };
  for (int c = 1; c <= static_cast<int>(Command::kArrive); ++c) {
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
      case Command::kArrive: r.keys = {"n", "all", "k"}; r.number = 2; r.timeout_ms = 10; break;
      case Command::kNumKeys:
      case Command::kPing: break;
    }
    write(r);
  }
  std::cout << "wrote " << n << " seeds to " << dir << "\n";
  return 0;
}
