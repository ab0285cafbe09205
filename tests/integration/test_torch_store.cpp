// The workers' store (store/torch_store_server.hpp) with torch's own clients: Debian's torch
// 1.13 from Python (its TCPStore, and init_process_group over env:// as torchrun's workers do
// it), and torch 2.x's queries byte for byte as its client writes them (no torch 2.x here).

#include <catch2/catch.hpp>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "common/error.hpp"
#include "store/torch_protocol.hpp"
#include "store/torch_store_server.hpp"
#include "testing/child.hpp"
#include "testing/ddprun_process.hpp"
#include "testing/test_util.hpp"

using namespace ddprun;
using namespace ddprun::store;
using namespace std::chrono_literals;

namespace {

using C = TorchCommand;

// A client speaking torch 2.2's numbering over a plain socket, reading answers exactly.
class RawClient {
 public:
  explicit RawClient(std::uint16_t port) : fd_(test::connect_loopback(port, 10s)) {
    REQUIRE(fd_ >= 0);
  }
  ~RawClient() { ::close(fd_); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  void send(const std::string& bytes) {
    REQUIRE(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(bytes.size()));
  }
  void query(TorchCommand command, std::vector<std::string> keys = {},
             std::vector<std::string> values = {}, std::int64_t delta = 0,
             std::uint32_t number = 0) {
    TorchQuery q;
    q.command = command;
    q.keys = std::move(keys);
    q.values = std::move(values);
    q.delta = delta;
    q.number = number;
    send(encode_torch_query(q, TorchDialect::kValidated));
  }
  // Exactly n bytes; fails the test on a close or after the socket's 10 s receive timeout.
  std::string read(std::size_t n) {
    std::string out(n, '\0');
    std::size_t got = 0;
    while (got < n) {
      const auto r = ::recv(fd_, out.data() + got, n - got, 0);
      REQUIRE(r > 0);
      got += static_cast<std::size_t>(r);
    }
    return out;
  }
  std::uint8_t byte() { return static_cast<std::uint8_t>(read(1)[0]); }
  std::int64_t i64() {
    auto b = read(8);
    std::uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(b[i]);
    return static_cast<std::int64_t>(v);
  }
  std::string value() { return read(static_cast<std::size_t>(i64())); }
  // Nothing has arrived (and the connection is open).
  bool quiet() {
    char c = 0;
    return ::recv(fd_, &c, 1, MSG_DONTWAIT) < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
  // The server closed the connection (a read sees its end within the receive timeout).
  bool closed() {
    char c = 0;
    return ::recv(fd_, &c, 1, 0) == 0;
  }

 private:
  int fd_;
};

RawClient& validated(RawClient& c) {
  c.query(C::kValidate, {}, {}, 0, kTorchValidationMagic);
  return c;
}

}  // namespace

TEST_CASE("workers' store: torch 2.x's queries byte for byte, each answered as torch's server does",
          "[torch-store]") {
  TorchStoreServer server;
  RawClient c(server.port());
  validated(c);
  c.query(C::kPing, {}, {}, 0, 0xA1B2C3D4);
  CHECK(c.read(4) == std::string("\xD4\xC3\xB2\xA1", 4));
  c.query(C::kAdd, {"init/"}, {}, 1);
  CHECK(c.i64() == 1);
  c.query(C::kSet, {"/a"}, {"1"});
  c.query(C::kGet, {"/a"});
  CHECK(c.value() == "1");
  c.query(C::kCompareSet, {"/c"}, {"", "x"});
  CHECK(c.value() == "x");
  c.query(C::kCompareSet, {"/d"}, {"y", "z"});  // missing, expected not empty: nothing stored
  CHECK(c.value() == "y");
  c.query(C::kCompareSet, {"/c"}, {"nope", "v"});
  CHECK(c.value() == "x");
  c.query(C::kCheck, {"/a", "/c"});
  CHECK(c.byte() == kTorchReady);
  c.query(C::kCheck, {"/a", "/d"});
  CHECK(c.byte() == kTorchNotReady);
  c.query(C::kMultiSet, {"/m1", "/m2"}, {"p", "q"});
  c.query(C::kMultiGet, {"/m2", "/m1"});
  CHECK(c.value() == "q");
  CHECK(c.value() == "p");
  c.query(C::kAppend, {"/log"}, {"ab"});
  c.query(C::kAppend, {"/log"}, {"cd"});
  c.query(C::kGet, {"/log"});
  CHECK(c.value() == "abcd");
  c.query(C::kDeleteKey, {"/m1"});
  CHECK(c.i64() == 1);
  c.query(C::kDeleteKey, {"/m1"});
  CHECK(c.i64() == 0);
  c.query(C::kNumKeys);
  CHECK(c.i64() == 5);  // init/, /a, /c, /m2, /log
  c.query(C::kList);
  std::vector<std::string> keys(static_cast<std::size_t>(c.i64()));
  for (auto& k : keys) k = c.value();
  std::sort(keys.begin(), keys.end());
  CHECK(keys == std::vector<std::string>{"/a", "/c", "/log", "/m2", "init/"});
  CHECK(server.requests_served() == 19);
}

TEST_CASE("workers' store: a WAIT is answered when another client writes the key, CANCEL_WAIT "
          "always answers", "[torch-store]") {
  TorchStoreServer server;
  RawClient waiter(server.port());
  RawClient writer(server.port());
  validated(waiter);
  validated(writer);
  waiter.query(C::kWait, {"/k", "/j"});
  writer.query(C::kSet, {"/k"}, {"1"});
  writer.query(C::kCheck, {"/k", "/j"});
  CHECK(writer.byte() == kTorchNotReady);
  CHECK(waiter.quiet());  // one of its two keys exists
  writer.query(C::kSet, {"/j"}, {"2"});
  CHECK(waiter.byte() == kTorchStopWaiting);
  // A WAIT for keys that exist is answered at once.
  waiter.query(C::kWait, {"/k"});
  CHECK(waiter.byte() == kTorchStopWaiting);
  // torch 2.1 and later cancel a wait whose deadline passed, and read WAIT_CANCELED.
  waiter.query(C::kWait, {"/never"});
  waiter.query(C::kCancelWait);
  CHECK(waiter.byte() == kTorchWaitCanceled);
  writer.query(C::kSet, {"/never"}, {"late"});
  writer.query(C::kGet, {"/never"});
  CHECK(writer.value() == "late");
  waiter.query(C::kPing, {}, {}, 0, 7);
  CHECK(waiter.read(4) == std::string("\x07\0\0\0", 4));  // and no STOP_WAITING before it
  waiter.query(C::kCancelWait);  // nothing pending: answered all the same
  CHECK(waiter.byte() == kTorchWaitCanceled);
  // torch 1.13 gives up on a wait without a word and waits again: the new wait is the one
  // answered, when its own key comes.
  waiter.query(C::kWait, {"/first"});
  waiter.query(C::kWait, {"/second"});
  waiter.query(C::kPing, {}, {}, 0, 9);  // answered once both waits were read
  CHECK(waiter.read(4) == std::string("\x09\0\0\0", 4));
  writer.query(C::kSet, {"/first"}, {"1"});
  writer.query(C::kGet, {"/first"});
  CHECK(writer.value() == "1");
  waiter.query(C::kPing, {}, {}, 0, 10);
  CHECK(waiter.read(4) == std::string("\x0a\0\0\0", 4));  // no STOP_WAITING for /first
  writer.query(C::kSet, {"/second"}, {"2"});
  CHECK(waiter.byte() == kTorchStopWaiting);
}

TEST_CASE("workers' store: a client that asks without reading is paused, and gets every answer "
          "when it reads", "[torch-store]") {
  TorchStoreServer server;
  RawClient c(server.port());
  validated(c);
  const std::string value(1 << 20, 'v');
  c.query(C::kSet, {"/big"}, {value});
  // 40 MiB of answers asked for at once, more than a client may leave unread.
  for (int i = 0; i < 40; ++i) c.query(C::kGet, {"/big"});
  c.query(C::kPing, {}, {}, 0, 1);
  for (int i = 0; i < 40; ++i) CHECK(c.value() == value);
  CHECK(c.read(4) == std::string("\x01\0\0\0", 4));
}

TEST_CASE("workers' store: a client that breaks the protocol loses its own connection only",
          "[torch-store]") {
  TorchStoreServer server;
  RawClient good(server.port());
  validated(good);
  {
    RawClient bad(server.port());
    validated(bad);
    bad.send(std::string(1, '\x55'));  // no such command
    CHECK(bad.closed());
  }
  {
    RawClient watcher(server.port());  // torch 1.13's WATCH_KEY is not served
    watcher.send(std::string(1, '\x07') + std::string("\x01\0\0\0\0\0\0\0k", 9));
    CHECK(watcher.closed());
  }
  {
    RawClient greedy(server.port());  // a key longer than any torch allows, refused on its length
    validated(greedy);
    greedy.send(std::string(1, '\x01') + std::string("\0\0\0\x01\0\0\0\0", 8));
    CHECK(greedy.closed());
  }
  good.query(C::kAdd, {"/n"}, {}, 2);
  CHECK(good.i64() == 2);
}

TEST_CASE("workers' store: torch 1.13's own TCPStore client, as a worker's env:// makes it",
          "[torch-store][python]") {
  if (!test::torch_available()) {
    WARN("Debian's python3-torch is not installed: skipped");
    return;
  }
  TorchStoreServer server;
  test::TempDir dir;
  test::Child client({{"/usr/bin/python3", TORCH_STORE_CLIENT_SCRIPT, "127.0.0.1",
                       std::to_string(server.port())},
                      {},
                      dir.file("out")});
  const int status = client.wait(120s);
  INFO(test::read_file(dir.file("out")));
  CHECK(status == 0);
  CHECK(test::count_of(test::read_file(dir.file("out")), "all calls answered") == 1);
}

TEST_CASE("workers' store: three torch 1.13 ranks meet in it with init_process_group(env://) "
          "and all_reduce", "[torch-store][python]") {
  if (!test::torch_available()) {
    WARN("Debian's python3-torch is not installed: skipped");
    return;
  }
  TorchStoreServer server;
  test::TempDir dir;
  std::vector<std::unique_ptr<test::Child>> ranks;
  for (int rank = 0; rank < 3; ++rank) {
    ranks.push_back(std::make_unique<test::Child>(test::SpawnSpec{
        {"/usr/bin/python3", TORCH_ALLREDUCE_SCRIPT},
        {{"MASTER_ADDR", "127.0.0.1"},
         {"MASTER_PORT", std::to_string(server.port())},
         {"TORCHELASTIC_USE_AGENT_STORE", "True"},
         {"TORCHELASTIC_RESTART_COUNT", "0"},
         {"RANK", std::to_string(rank)},
         {"LOCAL_RANK", std::to_string(rank)},
         {"GROUP_RANK", "0"},
         {"WORLD_SIZE", "3"},
         {"OMP_NUM_THREADS", "1"}},
        dir.file("rank" + std::to_string(rank))}));
  }
  for (int rank = 0; rank < 3; ++rank) {
    const auto out = dir.file("rank" + std::to_string(rank));
    const int status = ranks[rank]->wait(180s);
    INFO(test::read_file(out));
    CHECK(status == 0);
    CHECK(test::count_of(test::read_file(out), "sum 6 expected 6") == 1);
  }
  // The ranks joined through the store (init/ and their prefixed keys), not one of their own.
  CHECK(server.requests_served() >= 3);
}
