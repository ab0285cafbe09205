// The status server on a real Unix socket and a real TCP port (the subject is a server), and the
// control directory's rules.

#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "common/error.hpp"
#include "monitor/status_client.hpp"
#include "monitor/status_server.hpp"
#include "testing/test_util.hpp"

using namespace ddprun;
using namespace ddprun::test;
using namespace std::chrono_literals;

namespace {

// A connection the test needs: made, or the test fails here.
int connect_tcp(int port) {
  const int fd = connect_loopback(static_cast<std::uint16_t>(port));
  REQUIRE(fd >= 0);
  return fd;
}

struct Served {
  TempDir dir;
  std::atomic<int> status_calls{0};
  std::unique_ptr<StatusServer> server;
  explicit Served(std::size_t max_connections = 32, std::chrono::milliseconds timeout = 5s) {
    StatusServerOptions o;
    o.control_path = dir.file("c.sock");
    o.metrics_addr = "127.0.0.1";
    o.metrics_port = 0;
    o.max_connections = max_connections;
    o.request_timeout = timeout;
    StatusHandlers h;
    h.status = [this] {
      ++status_calls;
      return std::string("{\"nodes\": []}\n");
    };
    h.metrics = [] { return std::string("# HELP x y\n# TYPE x gauge\nx 1\n"); };
    server = std::make_unique<StatusServer>(o, h);
  }
};

}  // namespace

TEST_CASE("the control socket answers /status, the metrics port /metrics and nothing else",
          "[monitor]") {
  Served s;
  CHECK(control_get(s.dir.file("c.sock"), "/status", Deadline::after(30s)) == "{\"nodes\": []}\n");
  CHECK(s.status_calls == 1);
  CHECK_THROWS_WITH(control_get(s.dir.file("c.sock"), "/stacks", Deadline::after(30s)),
                    Catch::Contains("answered 404"));
  struct stat st {};
  REQUIRE(::stat(s.dir.file("c.sock").c_str(), &st) == 0);
  CHECK((st.st_mode & 077) == 0);

  const int port = s.server->metrics_port();
  REQUIRE(port > 0);
  auto page = exchange(connect_tcp(port), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK_THAT(page, Catch::StartsWith("HTTP/1.1 200"));
  CHECK_THAT(page, Catch::Contains("Content-Type: text/plain; version=0.0.4"));
  CHECK_THAT(page, Catch::EndsWith("x 1\n"));
  CHECK_THAT(exchange(connect_tcp(port), "GET /status HTTP/1.1\r\nHost: x\r\n\r\n"),
             Catch::StartsWith("HTTP/1.1 404"));
  CHECK_THAT(exchange(connect_tcp(port), "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"),
             Catch::StartsWith("HTTP/1.1 405"));
  CHECK(exchange(connect_tcp(port), "this is not HTTP\r\n\r\n").empty());  // closed, unanswered
  CHECK(s.status_calls == 1);

  const auto path = s.dir.file("c.sock");
  s.server.reset();
  CHECK_FALSE(file_exists(path));
}

TEST_CASE("beyond the limit a newcomer is turned away at once, on that listener only",
          "[monitor]") {
  Served s(2, 60s);
  const int port = s.server->metrics_port();
  const int a = connect_tcp(port);
  const int b = connect_tcp(port);
  ::send(a, "GET /metr", 9, MSG_NOSIGNAL);
  ::send(b, "GET /metr", 9, MSG_NOSIGNAL);
  // Both held (for a minute): a third connection is accepted and closed without an answer.
  REQUIRE(wait_until([&] {
    return exchange(connect_tcp(port), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").empty();
  }, 30s));
  // The control socket has a limit of its own: the user's `ddprun status` still gets through.
  CHECK(control_get(s.dir.file("c.sock"), "/status", Deadline::after(30s)) == "{\"nodes\": []}\n");
  ::close(a);
  ::close(b);
  // Once they are gone, the port answers again.
  REQUIRE(wait_until([&] {
    return exchange(connect_tcp(port), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").find("x 1") !=
           std::string::npos;
  }, 30s));
}

TEST_CASE("a client that sends half a request is closed at the timeout", "[monitor]") {
  Served s(32, 300ms);
  const int a = connect_tcp(s.server->metrics_port());  // a receive timeout of 30 s
  ::send(a, "GET /metr", 9, MSG_NOSIGNAL);
  char c;
  const auto start = Clock::now();
  CHECK(::recv(a, &c, 1, 0) == 0);  // end of file, not the receive timeout (-1)
  CHECK(Clock::now() - start < 20s);
  ::close(a);
}

TEST_CASE("the control directory must be this user's alone, a dead agent's socket is removed",
          "[monitor]") {
  TempDir dir;
  const auto runtime = dir.file("rt");
  std::filesystem::create_directory(runtime);
  ::chmod(runtime.c_str(), 0700);
  struct Env {
    std::optional<std::string> old;
    explicit Env(const std::string& value) {
      if (const char* v = std::getenv("XDG_RUNTIME_DIR")) old = v;
      ::setenv("XDG_RUNTIME_DIR", value.c_str(), 1);
    }
    ~Env() { old ? ::setenv("XDG_RUNTIME_DIR", old->c_str(), 1) : ::unsetenv("XDG_RUNTIME_DIR"); }
  } env(runtime);
  CHECK(control_dir() == runtime + "/ddprun");
  // A login session's directory is scanned as well, only while it is private.
  const auto run_user = dir.file("run-user");
  const auto session = run_user + "/" + std::to_string(::geteuid()) + "/ddprun";
  std::filesystem::create_directories(session);
  ::chmod(session.c_str(), 0700);
  auto dirs = control_dirs_to_scan(run_user);
  CHECK(std::count(dirs.begin(), dirs.end(), runtime + "/ddprun") == 1);
  CHECK(std::count(dirs.begin(), dirs.end(), session) == 1);
  // The same directory under another name (a link, a trailing slash) is asked once.
  const auto linked = dir.file("linked");
  std::filesystem::create_directories(linked);
  std::filesystem::create_directory_symlink(runtime, linked + "/" + std::to_string(::geteuid()));
  dirs = control_dirs_to_scan(linked);
  CHECK(std::count(dirs.begin(), dirs.end(), runtime + "/ddprun") == 1);
  CHECK(std::count(dirs.begin(), dirs.end(),
                   linked + "/" + std::to_string(::geteuid()) + "/ddprun") == 0);
  ::chmod(session.c_str(), 0750);
  dirs = control_dirs_to_scan(run_user);
  CHECK(std::count(dirs.begin(), dirs.end(), session) == 0);
  ::chmod((runtime + "/ddprun").c_str(), 0770);
  CHECK_THROWS_WITH(control_dir(), Catch::Contains("only user"));
  ::chmod((runtime + "/ddprun").c_str(), 0700);

  // Sockets bound and closed without unlink: nobody listens, as after a SIGKILL. An agent's
  // socket takes its "<pid>.sock" name only once it listens, so one that refuses is removed
  // even when its pid is a live process's (pids are reused); one still under its binding name
  // (an agent between its bind and its listen) is not scanned, and stays.
  const auto bound_and_closed = [](const std::string& path) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    ::close(fd);
  };
  const pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  REQUIRE(gone > 0);
  REQUIRE(::waitpid(gone, nullptr, 0) == gone);
  const auto stale = runtime + "/ddprun/" + std::to_string(gone) + ".sock";
  const auto reused = runtime + "/ddprun/" + std::to_string(::getpid()) + ".sock";
  const auto binding = runtime + "/ddprun/" + std::to_string(::getpid() + 1) + ".sock.binding";
  bound_and_closed(stale);
  bound_and_closed(reused);
  bound_and_closed(binding);
  // The scan also reads /tmp/ddprun-<uid>, where the agents of other tests running now may
  // listen: only what is in this test's directory is its business.
  const auto scan = scan_local(Deadline::after(30s));
  for (const auto& process : scan.processes) CHECK_FALSE(process.socket.starts_with(runtime));
  for (const auto& line : scan.unanswered) CHECK_FALSE(line.starts_with(runtime));
  CHECK_FALSE(file_exists(stale));
  CHECK_FALSE(file_exists(reused));
  CHECK(file_exists(binding));
}
