// The real TCP store server and client on loopback sockets.

#include <catch2/catch.hpp>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <sstream>
#include <fstream>
#include <future>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "store/prefix_store.hpp"
#include "store/protocol.hpp"
#include "store/store_auth.hpp"
#include "store/store_connection.hpp"
#include "store/tcp_store_client.hpp"
#include "store/tcp_store_server.hpp"
#include "testing/child.hpp"
#include "testing/test_util.hpp"

using namespace ddprun;
using namespace std::chrono_literals;

namespace {

store::StoreServerOptions local(std::string host = "127.0.0.1") {
  store::StoreServerOptions o;
  o.host = std::move(host);
  o.port = 0;
  o.read_timeout = 300ms;
  return o;
}

store::TcpStoreClient connect_to(const store::TcpStoreServer& server, std::string run_id = "test",
                          std::string host = "127.0.0.1") {
  store::StoreClientOptions o;
  o.host = std::move(host);
  o.port = server.port();
  o.run_id = std::move(run_id);
  return store::TcpStoreClient(o, Deadline::after(10s));
}

std::unique_ptr<store::TcpStoreClient> new_client(const store::TcpStoreServer& server) {
  store::StoreClientOptions o;
  o.port = server.port();
  o.run_id = "test";
  return std::make_unique<store::TcpStoreClient>(o, Deadline::after(10s));
}

// A ddprun-store process of its own on a free loopback port (warnings only), for tests that
// kill or stop the server under a client.
// The ddprun-store program with these arguments.
test::SpawnSpec store_program(std::vector<std::string> args) {
  args.insert(args.begin(), DDPRUN_STORE_BINARY);
  return test::SpawnSpec{std::move(args), {}, {}};
}

struct StoreProcess {
  std::uint16_t port = test::free_port();
  test::Child process{store_program(
      {"--host", "127.0.0.1", "--port", std::to_string(port), "--log-level", "warn"})};

  store::TcpStoreClient client() const {
    store::StoreClientOptions o;
    o.port = port;
    return store::TcpStoreClient(o, Deadline::after(10s));
  }
};

std::string hello_frame(std::uint32_t magic = store::kMagic) {
  store::Request hello;
  hello.command = store::Command::kHello;
  hello.magic = magic;
  hello.run_id = "raw";
  return store::encode_request(hello);
}

// After abuse, the server must still serve a well-behaved client.
void require_server_healthy(const store::TcpStoreServer& server) {
  auto client = connect_to(server);
  auto d = Deadline::after(5s);
  client.set("health", "ok", d);
  REQUIRE(client.get("health", d) == "ok");
}

}  // namespace

TEST_CASE("tcp store: every operation over a real socket", "[tcp_store]") {
  store::TcpStoreServer server(local());
  server.start();
  auto c = connect_to(server);
  auto d = Deadline::after(5s);
  c.set("a", "1", d);
  CHECK(c.get("a", d) == "1");
  CHECK(c.try_get("nope", d) == std::nullopt);
  CHECK(c.try_get("a", d) == "1");
  CHECK(c.check({"a"}, d));
  CHECK_FALSE(c.check({"a", "nope"}, d));
  CHECK(c.add("n", 10, d) == 10);
  CHECK(c.add("n", -3, d) == 7);
  CHECK(c.compare_set("cas", "", "v1", d) == "v1");
  CHECK(c.compare_set("cas", "wrong", "v2", d) == "v1");
  CHECK(c.compare_set("cas", "v1", "v2", d) == "v2");
  c.multi_set({"m1", "m2"}, {"x", std::string(100'000, 'y')}, d);
  auto values = c.multi_get({"m2", "m1"}, d);
  REQUIRE(values.size() == 2);
  CHECK(values[0].size() == 100'000);
  CHECK(values[1] == "x");
  CHECK(c.erase("a", d));
  CHECK_FALSE(c.erase("a", d));
  CHECK(c.num_keys(d) == 4);  // n, cas, m1, m2
  c.ping(d);
  CHECK_THROWS_WITH(c.add("m1", 1, d), Catch::Contains("not an integer"));
  // The refusal closed that connection; the next call reconnects.
  CHECK(c.get("n", Deadline::after(5s)) == "7");
}

TEST_CASE("tcp store: arrivals over real sockets: the last releases, each gets what it waits "
          "for, and a timeout comes after the arrival", "[tcp_store]") {
  store::TcpStoreServer server(local());
  server.start();
  constexpr int kNodes = 4;
  // The clients outlive the threads that wait in them (declared first, destroyed last).
  std::vector<std::unique_ptr<store::TcpStoreClient>> clients;
  std::vector<std::future<store::Store::Arrival>> waiting;
  for (int i = 0; i < kNodes - 1; ++i) {
    clients.push_back(new_client(server));
    waiting.push_back(std::async(std::launch::async, [c = clients.back().get()] {
      return c->arrive("settled", kNodes, "all_settled", "root_cause", Deadline::after(30s));
    }));
  }
  auto chooser = connect_to(server);
  auto d = Deadline::after(30s);
  // The chooser's own arrival waits for the release, which the last arrival sets.
  const auto all = chooser.arrive("settled", kNodes, "all_settled", "all_settled", d);
  CHECK(all.value == "1");
  CHECK(chooser.add("settled", 0, d) == kNodes);
  // Nothing released them yet: they wait for the root cause.
  for (auto& w : waiting) CHECK(w.wait_for(0s) == std::future_status::timeout);
  chooser.set("root_cause", "rank 7", d);
  std::set<std::int64_t> counts{all.count};
  for (auto& w : waiting) {
    REQUIRE(w.wait_for(30s) == std::future_status::ready);
    const auto arrival = w.get();
    CHECK(arrival.value == "rank 7");
    counts.insert(arrival.count);
  }
  CHECK(counts == std::set<std::int64_t>{1, 2, 3, 4});  // each arrived once
  // An arrival whose key is there is one request.
  const auto before = server.requests_served();
  CHECK(chooser.arrive("other", 1, "other_all", "root_cause", d).value == "rank 7");
  CHECK(server.requests_served() - before == 1);
  // A timeout names the key waited for; the arrival stands.
  CHECK_THROWS_WITH(chooser.arrive("late", 9, "late_all", "never", Deadline::after(100ms)),
                    Catch::Contains("never") && !Catch::Contains("late_all"));
  CHECK(chooser.add("late", 0, d) == 1);
  require_server_healthy(server);
}

TEST_CASE("tcp store: a get pipelined behind another request is answered to the get that asks "
          "for it, without asking again", "[tcp_store]") {
  store::TcpStoreServer server(local());
  server.start();
  auto writer = server.local_client("test");  // sets keys without TCP requests of its own
  auto c = connect_to(server);
  const auto d = Deadline::after(30s);
  const auto before = server.requests_served();
  const auto served = [&] { return server.requests_served() - before; };

  // An arrival with the next round's watch behind it; that key comes later.
  REQUIRE(c.pipeline_get("next/outcome", d));
  CHECK_FALSE(c.pipeline_get("other", d));  // one at a time
  CHECK(c.arrive("settled", 1, "all_settled", "all_settled", d).value == "1");
  CHECK_FALSE(c.pipeline_get("other", d));  // still unanswered
  writer->set("next/outcome", "failed", d);
  CHECK(c.get("next/outcome", d) == "failed");
  CHECK(served() == 2);

  // A key that is there already: its answer comes with the first, and waits to be read.
  writer->set("ready", "yes", d);
  REQUIRE(c.pipeline_get("ready", d));
  c.set("x", "1", d);
  CHECK(c.get("ready", d) == "yes");
  CHECK(served() == 4);

  // Another call in between: the get's answer would come first, so the connection is closed
  // and the call refused as on a lost connection; the next call connects again, and the key
  // is asked for anew.
  REQUIRE(c.pipeline_get("later", d));
  c.set("y", "2", d);
  CHECK_THROWS_WITH(c.try_get("y", d), Catch::Contains("later") && Catch::Contains("closed"));
  CHECK(c.try_get("y", d) == "2");
  writer->set("later", "z", d);
  CHECK(c.get("later", d) == "z");
  CHECK(served() == 8);

  // The store waits for a get sent ahead until the deadline it went with; the connection
  // serves on after the timeout.
  REQUIRE(c.pipeline_get("never", Deadline::after(200ms)));
  c.set("z", "3", d);
  CHECK_THROWS_WITH(c.get("never", d), Catch::Contains("never") && Catch::Contains("timed out"));
  CHECK(c.get("z", d) == "3");

  // Through a prefix, the key is the prefixed one; an in-process store has no pipelining.
  store::PrefixStore prefixed("job", c);
  REQUIRE(prefixed.pipelining() != nullptr);
  REQUIRE(prefixed.pipelining()->pipeline_get("k", d));
  prefixed.set("a", "1", d);
  writer->set("job/k", "v", d);
  CHECK(prefixed.get("k", d) == "v");
  CHECK(writer->pipelining() == nullptr);
  require_server_healthy(server);
}

TEST_CASE("tcp store: 16 threads x 1000 adds give the exact total", "[tcp_store]") {
  store::TcpStoreServer server(local());
  server.start();
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&] {
      try {
        auto c = connect_to(server);
        for (int i = 0; i < 1000; ++i) c.add("counter", 1, Deadline::after(10s));
      } catch (const std::exception&) {
        ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(failures == 0);
  auto c = connect_to(server);
  CHECK(c.get("counter", Deadline::after(5s)) == "16000");
}

TEST_CASE("tcp store: wait wakes on a set from another client", "[tcp_store]") {
  store::TcpStoreServer server(local());
  server.start();
  auto c = connect_to(server);
  const pid_t waiter = test::this_thread_id();
  std::atomic<Clock::rep> before_last_set{0};
  std::thread writer([&] {
    auto w = connect_to(server);
    // The keys are written while the waiter is blocked in its wait (this thread sees it asleep).
    test::wait_until([&] { return test::thread_sleeping(waiter); }, 20s);
    w.set("k1", "a", Deadline::after(5s));
    before_last_set = Clock::now().time_since_epoch().count();
    w.set("k2", "b", Deadline::after(5s));
  });
  c.wait({"k1", "k2"}, Deadline::after(20s));
  auto returned = Clock::now().time_since_epoch().count();
  writer.join();
  // The wait can only end after the second key was written, however the threads were scheduled.
  CHECK(before_last_set.load() != 0);
  CHECK(returned >= before_last_set.load());
  CHECK(c.multi_get({"k1", "k2"}, Deadline::after(1s)) == std::vector<std::string>{"a", "b"});
}

TEST_CASE("tcp store: get times out with the key and the time in the message", "[tcp_store]") {
  store::TcpStoreServer server(local());
  server.start();
  auto c = connect_to(server);
  auto start = Clock::now();
  try {
    c.get("absent/key", Deadline::after(300ms));
    FAIL("get returned for a key that was never set");
  } catch (const TimeoutError& e) {
    std::string msg = e.what();
    CHECK_THAT(msg, Catch::Contains("absent/key"));
    CHECK_THAT(msg, Catch::Contains("timed out after 0.3"));
    CHECK_THAT(msg, Catch::Contains(server.endpoint()));
  }
  auto waited = Clock::now() - start;
  CHECK(waited >= 300ms);
  CHECK(waited < 5s);
  // The connection survives a server-side timeout.
  c.set("after", "1", Deadline::after(1s));
  CHECK(c.get("after", Deadline::after(1s)) == "1");
}

TEST_CASE("tcp store: run ids never see each other's keys", "[tcp_store]") {
  store::TcpStoreServer server(local());
  server.start();
  auto a = connect_to(server, "job-a");
  auto b = connect_to(server, "job-b");
  auto d = Deadline::after(5s);
  a.set("rank", "a", d);
  CHECK(b.try_get("rank", d) == std::nullopt);
  b.set("rank", "b", d);
  CHECK(a.get("rank", d) == "a");
  CHECK(b.get("rank", d) == "b");
  CHECK(a.num_keys(d) == 1);
}

// The agent that serves the store uses it in-process (TcpStoreServer::local_client): the same
// keys and waiters as its TCP clients, each side woken by the other's writes.
TEST_CASE("tcp store: the server's local client and TCP clients share keys and waiters",
          "[tcp_store]") {
  store::TcpStoreServer server(local());
  server.start();
  auto mine = server.local_client("test");
  CHECK(mine->describe() == server.endpoint());
  auto remote = connect_to(server, "test");
  auto other_job = connect_to(server, "other");
  auto d = Deadline::after(5s);
  mine->set("from-local", "1", d);
  CHECK(remote.get("from-local", d) == "1");
  CHECK(other_job.try_get("from-local", d) == std::nullopt);  // the run id is its namespace
  remote.set("from-tcp", "2", d);
  CHECK(mine->get("from-tcp", d) == "2");
  CHECK(mine->add("n", 5, d) == 5);
  CHECK(remote.add("n", 1, d) == 6);

  // A TCP client blocked in the server is answered by a local write (another thread's).
  const pid_t waiter = test::this_thread_id();
  std::thread local_writer([&] {
    test::wait_until([&] { return test::thread_sleeping(waiter); }, 20s);
    server.local_client("test")->set("late-local", "a", Deadline::after(5s));
  });
  CHECK(remote.get("late-local", Deadline::after(20s)) == "a");
  local_writer.join();

  // A local handle blocked on the condition variable is woken by a TCP client's write.
  std::thread tcp_writer([&] {
    test::wait_until([&] { return test::thread_sleeping(waiter); }, 20s);
    connect_to(server, "test").set("late-tcp", "b", Deadline::after(5s));
  });
  CHECK(mine->multi_get({"late-local", "late-tcp"}, Deadline::after(20s)) ==
        std::vector<std::string>{"a", "b"});
  tcp_writer.join();

  // Timeouts name the key and the store, like a TCP client's.
  try {
    mine->get("absent/key", Deadline::after(200ms));
    FAIL("get returned for a key that was never set");
  } catch (const TimeoutError& e) {
    CHECK_THAT(e.what(), Catch::Contains("absent/key") && Catch::Contains(server.endpoint()));
  }
}

TEST_CASE("tcp store: local and TCP clients adding at once give the exact total", "[tcp_store]") {
  store::TcpStoreServer server(local());
  server.start();
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      try {
        std::unique_ptr<store::Store> c = server.local_client("test");
        if (t % 2 == 0) c = new_client(server);
        for (int i = 0; i < 1000; ++i) c->add("counter", 1, Deadline::after(10s));
      } catch (const std::exception&) {
        ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(failures == 0);
  CHECK(server.local_client("test")->get("counter", Deadline::after(5s)) == "8000");
}

TEST_CASE("tcp store: interrupt() ends a local client's blocked call", "[tcp_store]") {
  store::TcpStoreServer server(local());
  server.start();
  auto c = server.local_client("test");
  auto other = server.local_client("test");
  const pid_t caller = test::this_thread_id();
  std::thread stopper([&] {
    test::wait_until([&] { return test::thread_sleeping(caller); }, 20s);  // blocked in get()
    c->interrupt();
  });
  auto start = Clock::now();
  CHECK_THROWS_AS(c->get("never", Deadline::after(30s)), InterruptedError);
  stopper.join();
  CHECK(Clock::now() - start < 10s);
  CHECK_THROWS_AS(c->ping(Deadline::after(1s)), InterruptedError);
  other->ping(Deadline::after(1s));  // the other handles go on
}

TEST_CASE("tcp store: a client connects to a server that starts later", "[tcp_store]") {
  auto port = test::free_port();
  std::unique_ptr<store::TcpStoreServer> server;
  const pid_t client = test::this_thread_id();
  std::thread starter([&] {
    // The server starts once the client pauses between refused connection attempts.
    test::wait_until([&] { return test::thread_sleeping(client); }, 20s);
    auto o = local();
    o.port = port;
    server = std::make_unique<store::TcpStoreServer>(o);
    server->start();
  });
  store::StoreClientOptions o;
  o.port = port;
  store::TcpStoreClient c(o, Deadline::after(20s));
  starter.join();
  c.set("x", "y", Deadline::after(2s));
  CHECK(c.get("x", Deadline::after(2s)) == "y");
}

TEST_CASE("tcp store: connecting to nothing fails by the deadline, naming host:port",
          "[tcp_store]") {
  auto port = test::free_port();
  store::StoreClientOptions o;
  o.port = port;
  auto start = Clock::now();
  try {
    store::TcpStoreClient c(o, Deadline::after(500ms));
    FAIL("connected to a port nobody listens on");
  } catch (const ConnectionError& e) {
    CHECK_THAT(e.what(), Catch::Contains("127.0.0.1:" + std::to_string(port)));
    CHECK_THAT(e.what(), Catch::Contains("attempts"));
  }
  CHECK(Clock::now() - start < 5s);
}

TEST_CASE("tcp store: interrupt() ends a blocked call from another thread", "[tcp_store]") {
  store::TcpStoreServer server(local());
  server.start();
  auto c = connect_to(server);
  const pid_t caller = test::this_thread_id();
  std::thread stopper([&] {
    test::wait_until([&] { return test::thread_sleeping(caller); }, 20s);  // blocked in get()
    c.interrupt();
  });
  auto start = Clock::now();
  CHECK_THROWS_AS(c.get("never", Deadline::after(30s)), InterruptedError);
  stopper.join();
  CHECK(Clock::now() - start < 10s);
  CHECK_THROWS_AS(c.ping(Deadline::after(1s)), InterruptedError);
}

TEST_CASE("tcp store: IPv6 loopback", "[tcp_store]") {
  std::unique_ptr<store::TcpStoreServer> server;
  try {
    server = std::make_unique<store::TcpStoreServer>(local("::1"));
  } catch (const ConnectionError& e) {
    WARN("IPv6 loopback unavailable here, skipped: " << e.what());
    return;
  }
  server->start();
  CHECK_THAT(server->endpoint(), Catch::StartsWith("[::1]:"));
  auto c = connect_to(*server, "v6", "::1");
  c.set("six", "6", Deadline::after(2s));
  CHECK(c.get("six", Deadline::after(2s)) == "6");
}

TEST_CASE("tcp store: bad input closes only the offending connection", "[tcp_store]") {
  // A read timeout well above the 100 ms during which a stalled half frame must survive, so that
  // a test thread that the machine keeps waiting cannot see the close early.
  auto options = local();
  options.read_timeout = 2s;
  store::TcpStoreServer server(options);
  server.start();
  auto bystander = connect_to(server);
  bystander.set("before", "1", Deadline::after(2s));
  const long rss_before = test::rss_kib();

  SECTION("garbage bytes") {
    test::RawSocket raw("127.0.0.1", server.port());
    raw.send(std::string("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
    CHECK(raw.closed_by_peer_within(5s));
  }
  SECTION("a frame claiming 2^62 bytes") {
    test::RawSocket raw("127.0.0.1", server.port());
    raw.send(hello_frame());
    std::string header(store::kFrameHeaderSize, '\0');
    header[0] = 0x40;
    raw.send(header + "xxxx");
    CHECK(raw.closed_by_peer_within(5s));
  }
  SECTION("a stalled half frame is dropped after the read timeout") {
    test::RawSocket raw("127.0.0.1", server.port());
    auto frame = hello_frame();
    raw.send(frame.substr(0, frame.size() / 2));
    CHECK_FALSE(raw.closed_by_peer_within(100ms));
    CHECK(raw.closed_by_peer_within(5s));
  }
  SECTION("a wrong magic") {
    test::RawSocket raw("127.0.0.1", server.port());
    raw.send(hello_frame(0xdeadbeef));
    CHECK(raw.closed_by_peer_within(5s));
  }
  SECTION("a request before the handshake") {
    test::RawSocket raw("127.0.0.1", server.port());
    store::Request ping;
    ping.command = store::Command::kPing;
    raw.send(store::encode_request(ping));
    CHECK(raw.closed_by_peer_within(5s));
  }

  require_server_healthy(server);
  CHECK(bystander.get("before", Deadline::after(2s)) == "1");
  // Nothing the size of a claimed frame was allocated (a 2^62-byte claim would abort anyway;
  // this bounds smaller leaks too).
  CHECK(test::rss_kib() - rss_before < 16 * 1024);
}

TEST_CASE("tcp store: a client whose server dies mid-request gets an error, not a hang",
          "[tcp_store]") {
  StoreProcess server;
  auto c = server.client();
  c.set("x", "1", Deadline::after(2s));
  const pid_t caller = test::this_thread_id();
  std::thread killer([&] {
    test::wait_until([&] { return test::thread_sleeping(caller); }, 20s);  // blocked in get()
    server.process.signal(SIGKILL);
  });
  auto start = Clock::now();
  CHECK_THROWS_AS(c.get("never", Deadline::after(30s)), ConnectionError);
  killer.join();
  CHECK(Clock::now() - start < 10s);
  CHECK(server.process.wait_for(5s).has_value());
}

TEST_CASE("tcp store: a silent server fails each call by its own deadline, shorter ones too",
          "[tcp_store]") {
  StoreProcess server;
  auto c = server.client();
  // A long deadline first: the socket's receive timeout is set from it.
  c.set("x", "1", Deadline::after(120s));
  // Stopped, the server's kernel still takes the bytes; no reply ever comes. (Every thread:
  // one takes the signal and stops the others, each when it next runs.)
  server.process.signal(SIGSTOP);
  REQUIRE(test::wait_until([&] { return test::process_stopped(server.process.pid()); }, 20s));
  auto start = Clock::now();
  CHECK_THROWS_AS(c.try_get("x", Deadline::after(1500ms)), TimeoutError);
  const auto waited = Clock::now() - start;
  server.process.signal(SIGKILL);
  CHECK(server.process.wait_for(5s).has_value());
  CHECK(waited >= 1500ms);
  CHECK(waited < 30s);  // not the 120 s of the call before
}

TEST_CASE("ddprun-store: listens, refuses a taken port with exit 2, stops on SIGTERM",
          "[tcp_store]") {
  auto port = test::free_port();
  test::Child first(store_program({"--port", std::to_string(port)}));
  store::StoreClientOptions o;
  o.port = port;
  store::TcpStoreClient c(o, Deadline::after(10s));
  c.ping(Deadline::after(2s));
  test::Child second(store_program({"--port", std::to_string(port)}));
  auto status = second.wait_for(10s);
  REQUIRE(status);
  CHECK(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 2);
  first.signal(SIGTERM);
  status = first.wait_for(10s);
  REQUIRE(status);
  CHECK(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 0);
}

TEST_CASE("tcp store: with a secret, only clients that prove it are served", "[tcp_store][auth]") {
  auto options = local();
  options.secret = "the-job-secret-0123456789";
  options.read_timeout = 2s;
  store::TcpStoreServer server(options);
  server.start();
  auto client_with = [&](std::string secret) {
    store::StoreClientOptions o;
    o.port = server.port();
    o.run_id = "job";
    o.secret = std::move(secret);
    return store::TcpStoreClient(o, Deadline::after(10s));
  };
  auto agent = client_with(options.secret);
  agent.set("attempt/0/outcome", "running", Deadline::after(2s));

  SECTION("no secret") {
    CHECK_THROWS_AS(client_with(""), AuthError);
    CHECK_THROWS_WITH(client_with(""), Catch::Contains("requires the job's secret"));
  }
  SECTION("a wrong secret") {
    CHECK_THROWS_AS(client_with("not-the-job-secret-012345"), AuthError);
    CHECK_THROWS_WITH(client_with("not-the-job-secret-012345"), Catch::Contains("authentication failed"));
  }
  store::Request hello;
  hello.command = store::Command::kHello;
  hello.run_id = "job";
  hello.nonce = std::string(store::kNonceSize, 'n');
  SECTION("a request instead of the proof") {
    test::RawSocket raw("127.0.0.1", server.port());
    store::Request forged;
    forged.command = store::Command::kSet;
    forged.keys = {"attempt/0/outcome"};
    forged.values = {"success"};
    raw.send(store::encode_request(hello) + store::encode_request(forged));
    CHECK(raw.closed_by_peer_within(5s));
  }
  SECTION("a hello and then silence: dropped after the read timeout") {
    test::RawSocket raw("127.0.0.1", server.port());
    raw.send(store::encode_request(hello));
    CHECK(raw.closed_by_peer_within(30s));
  }
  // Whatever was tried, the job's keys are as the agent left them.
  CHECK(agent.get("attempt/0/outcome", Deadline::after(2s)) == "running");
  CHECK(client_with(options.secret).get("attempt/0/outcome", Deadline::after(2s)) == "running");
}

TEST_CASE("tcp store: a client with a secret does not trust a store without one",
          "[tcp_store][auth]") {
  store::TcpStoreServer server(local());
  server.start();
  store::StoreClientOptions o;
  o.port = server.port();
  o.secret = "the-job-secret-0123456789";
  CHECK_THROWS_AS(store::TcpStoreClient(o, Deadline::after(10s)), AuthError);
    CHECK_THROWS_WITH(store::TcpStoreClient(o, Deadline::after(10s)), Catch::Contains("has no secret"));
}

TEST_CASE("ddprun-store: --token-file and DDPRUN_TOKEN", "[tcp_store][auth]") {
  test::TempDir dir;
  const std::string secret = "store-secret-from-a-file-42";
  {
    std::ofstream(dir.file("token")) << secret << "\n";
  }
  ::chmod(dir.file("token").c_str(), 0600);
  auto port = test::free_port();
  test::Child store(store_program(
      {"--port", std::to_string(port), "--token-file", dir.file("token"), "--log-level", "warn"}));
  store::StoreClientOptions o;
  o.port = port;
  o.secret = secret;
  store::TcpStoreClient c(o, Deadline::after(10s));
  c.ping(Deadline::after(2s));
  o.secret.clear();
  CHECK_THROWS_AS(store::TcpStoreClient(o, Deadline::after(10s)), AuthError);
  store.signal(SIGTERM);
  CHECK(store.wait_for(10s).has_value());

  // A secret too short to be one: exit 2 before listening.
  std::ofstream(dir.file("short")) << "abc\n";
  test::Child bad(store_program({"--port", "0", "--token-file", dir.file("short")}));
  const auto status = bad.wait_for(10s);
  REQUIRE(status);
  CHECK(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 2);
}

TEST_CASE("tcp store: refusals are logged at a bounded rate", "[tcp_store]") {
  std::ostringstream captured;
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(captured)));
  store::RefusalLog log;
  for (int i = 0; i < 3 * store::RefusalLog::kPerWindow; ++i) log.warn("refused " + std::to_string(i));
  spdlog::set_default_logger(previous);
  const auto text = captured.str();
  CHECK(std::count(text.begin(), text.end(), '\n') == store::RefusalLog::kPerWindow);
  CHECK_THAT(text, Catch::Contains("refused 19"));
  CHECK_THAT(text, !Catch::Contains("refused 20"));
}

TEST_CASE("tcp store: a frame must arrive whole within the read timeout, however it trickles",
          "[tcp_store][limits]") {
  auto options = local();
  options.read_timeout = 1s;
  store::TcpStoreServer server(options);
  server.start();
  test::RawSocket raw("127.0.0.1", server.port());
  const auto frame = hello_frame();
  // One byte every 100 ms: each byte would restart a per-byte timeout. The whole frame needs
  // longer than the read timeout, and the server must drop the connection before it is done.
  REQUIRE(frame.size() > 20);
  bool closed = false;
  for (std::size_t i = 0; i + 1 < frame.size() && !closed; ++i) {
    raw.send(frame.substr(i, 1));
    closed = raw.closed_by_peer_within(100ms);
  }
  if (!closed) closed = raw.closed_by_peer_within(10s);
  CHECK(closed);
  require_server_healthy(server);
}

TEST_CASE("tcp store: at the connection limit, idle connections make room for clients",
          "[tcp_store][limits]") {
  auto options = local();
  options.max_connections = 4;
  options.read_timeout = 60s;  // the idle ones are not dropped by their handshake deadline
  store::TcpStoreServer server(options);
  server.start();
  std::vector<std::unique_ptr<test::RawSocket>> idle;
  for (int i = 0; i < 4; ++i) {
    idle.push_back(std::make_unique<test::RawSocket>("127.0.0.1", server.port()));
  }
  // Four served clients: each takes the place of an idle connection.
  std::vector<std::unique_ptr<store::TcpStoreClient>> clients;
  for (int i = 0; i < 4; ++i) clients.push_back(new_client(server));
  for (auto& raw : idle) CHECK(raw->closed_by_peer_within(10s));
  // A fifth finds only served clients: refused, and its deadline ends its tries.
  store::StoreClientOptions o;
  o.port = server.port();
  CHECK_THROWS_AS(store::TcpStoreClient(o, Deadline::after(1s)), ConnectionError);
  clients.pop_back();  // one leaves: room again
  CHECK_NOTHROW(connect_to(server).ping(Deadline::after(5s)));
}

TEST_CASE("tcp store: unfinished requests are capped over all connections",
          "[tcp_store][limits]") {
  auto options = local();
  options.max_buffered = 1 << 20;
  options.read_timeout = 60s;
  store::TcpStoreServer server(options);
  server.start();
  // A header announcing a 900 KiB body (a Set of one key and a large value), then part of it.
  auto part_of_big_frame = [](std::size_t sent) {
    std::string header(store::kFrameHeaderSize, '\0');
    const std::uint64_t body = 900 * 1024;
    for (std::size_t i = 0; i < store::kFrameHeaderSize; ++i) {
      header[store::kFrameHeaderSize - 1 - i] = static_cast<char>((body >> (8 * i)) & 0xff);
    }
    return hello_frame() + header + std::string(sent, 'x');
  };
  test::RawSocket first("127.0.0.1", server.port());
  first.send(part_of_big_frame(600 * 1024));
  require_server_healthy(server);  // its 600 KiB are held
  test::RawSocket second("127.0.0.1", server.port());
  second.send(part_of_big_frame(600 * 1024));  // 1.2 MiB together: over the cap
  CHECK(second.closed_by_peer_within(10s));
  require_server_healthy(server);
}

TEST_CASE("tcp store: an idle connection costs no read buffer", "[tcp_store][limits]") {
  store::TcpStoreServer server(local());
  server.start();
  require_server_healthy(server);
  const long before = test::rss_kib();
  std::vector<std::unique_ptr<test::RawSocket>> idle;
  for (int i = 0; i < 300; ++i) {
    idle.push_back(std::make_unique<test::RawSocket>("127.0.0.1", server.port()));
    idle.back()->send(hello_frame());
  }
  require_server_healthy(server);  // accepted after all the others
  // Per connection: a socket and a few small objects, no large read buffer.
  CHECK(test::rss_kib() - before < 4 * 1024);
}

TEST_CASE("tcp store: a silent program on the port is named after the handshake timeout",
          "[tcp_store]") {
  // A listener that never accepts: the kernel completes the connection and nobody answers.
  std::uint16_t port = 0;
  const int fd = test::listen_on_loopback(&port);
  store::StoreClientOptions o;
  o.port = port;
  o.handshake_timeout = 300ms;
  const auto start = Clock::now();
  CHECK_THROWS_WITH(store::TcpStoreClient(o, Deadline::after(60s)),
                    Catch::Contains("did not answer the store's handshake within 0.300s"));
  CHECK(Clock::now() - start < 30s);  // not the 60 s deadline
  ::close(fd);
}
