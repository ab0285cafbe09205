// The session between the command and its remote agents: every message survives its encoding,
// a report needs the job's token, and only the right environment travels.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>

#include "cluster/session_protocol.hpp"
#include "cluster/staging.hpp"
#include "common/error.hpp"
#include "common/strings.hpp"

using namespace ddprun;

TEST_CASE("session: a hello survives its encoding as one line", "[cluster][session]") {
  SessionHello hello;
  hello.version = "0.1.0";
  hello.token = random_token();
  hello.host = "gpu01";
  hello.cwd = "/home/me/run dir";
  hello.env = {{"PATH", "/usr/bin"}, {"MULTI", "line one\nline two"}, {"QUOTE", "it's \"x\""}};
  hello.hangup_timeout = std::chrono::milliseconds(2500);
  hello.fold_at_head = true;
  const auto line = encode_hello(hello);
  CHECK(line.find('\n') == std::string::npos);
  auto back = decode_hello(line);
  CHECK(back.version == hello.version);
  CHECK(back.token == hello.token);
  CHECK(back.host == hello.host);
  CHECK(back.cwd == hello.cwd);
  CHECK(back.env == hello.env);
  CHECK(back.hangup_timeout == hello.hangup_timeout);
  CHECK(back.fold_at_head);
  hello.fold_at_head = false;
  CHECK_FALSE(decode_hello(encode_hello(hello)).fold_at_head);
  CHECK_THROWS_AS(decode_hello("not json"), Error);
  CHECK_THROWS_WITH(decode_hello(R"({"protocol":99})"), Catch::Contains("session protocol 99"));
}

TEST_CASE("session: bytes that are not UTF-8, control characters and a 1 MiB value travel exactly",
          "[cluster][session]") {
  SessionHello hello;
  hello.version = "0.1.0";
  hello.token = random_token();
  hello.host = "gpu01";
  hello.cwd = "/data/r\xe9sum\xe9/\xff\xfe";  // Latin-1 bytes, invalid as UTF-8
  std::string control;
  for (int c = 1; c < 32; ++c) control += static_cast<char>(c);  // NUL-free control characters
  hello.env = {{"LATIN1", "caf\xe9"}, {"CONTROL", control}, {"BIG", std::string(1 << 20, 'v')},
               {"UTF8", "\xe2\x9c\x93 ok"}};
  hello.args = {"--tee=3", "--", "train.py", "--name=\x80\x81", std::string(200 << 10, 'a')};
  const auto line = encode_hello(hello);
  CHECK(line.find('\n') == std::string::npos);
  const auto back = decode_hello(line);
  CHECK(back.cwd == hello.cwd);
  CHECK(back.env == hello.env);
  CHECK(back.args == hello.args);
  // The text form is an exact inverse, and refuses what it cannot have written.
  for (const auto& bytes : {std::string("\x00\x7f\x80\xff", 4), hello.cwd, control}) {
    CHECK(bytes_from_utf8(bytes_to_utf8(bytes)) == bytes);
  }
  CHECK_THROWS_AS(bytes_from_utf8("\xe2\x9c\x93"), Error);
  CHECK_THROWS_AS(bytes_from_utf8("\xc3"), Error);
}

TEST_CASE("session: control lines", "[cluster][session]") {
  for (Control c : {Control{Control::Kind::kGo, 0}, Control{Control::Kind::kPing, 0},
                    Control{Control::Kind::kSignal, 15}}) {
    auto back = decode_control(encode_control(c));
    REQUIRE(back);
    CHECK(back->kind == c.kind);
    CHECK(back->signal == c.signal);
  }
  CHECK_FALSE(decode_control("signal 0"));
  CHECK_FALSE(decode_control("signal x"));
  CHECK_FALSE(decode_control("go!"));
}

TEST_CASE("session: a report counts only with the job's token", "[cluster][session]") {
  const auto token = random_token();
  CHECK(token.size() == 32);
  CHECK(random_token() != token);
  Report ready{Report::Kind::kReady, {{"nproc_per_node", 4}}};
  auto line = encode_report(token, ready);
  auto back = decode_report(token, line);
  REQUIRE(back);
  CHECK(back->kind == Report::Kind::kReady);
  CHECK(back->body["nproc_per_node"] == 4);
  // A worker that prints something report-like without the token is just output.
  CHECK_FALSE(decode_report(random_token(), line));
  CHECK_FALSE(decode_report(token, "ready {}"));
  CHECK_FALSE(decode_report(token, line.substr(0, line.size() - 1)));  // broken JSON
  CHECK_FALSE(decode_report("", line));
  // A kind this version does not know is not a report either.
  CHECK_FALSE(decode_report(token, line.replace(line.find(" ready "), 7, " later ")));
  // Every kind comes back as itself: the node check's table too, lines and all.
  for (auto kind : {Report::Kind::kReady, Report::Kind::kRefused, Report::Kind::kResult,
                    Report::Kind::kEnded, Report::Kind::kNodeCheck, Report::Kind::kAlive}) {
    INFO(to_string(kind));
    const Report report{kind, {{"node", 2}, {"table", "Node check: 3 nodes\n  0  a\n"}}};
    const auto encoded = encode_report(token, report);
    CHECK(encoded.find('\n') == std::string::npos);
    const auto decoded = decode_report(token, encoded);
    REQUIRE(decoded);
    CHECK(decoded->kind == kind);
    CHECK(decoded->body == report.body);
  }
}

TEST_CASE("session: the environment forwarded by default, and -x", "[cluster][session]") {
  std::map<std::string, std::string> env{
      {"PATH", "/bin"},          {"LD_LIBRARY_PATH", "/lib"}, {"NCCL_DEBUG", "INFO"},
      {"OMP_NUM_THREADS", "4"},  {"PET_MAX_RESTARTS", "3"},   {"PET_HOSTS", "a,b"},
      {"PET_NODE_RANK", "1"},    {"HOME", "/root"},           {"SSH_AUTH_SOCK", "/tmp/x"},
      {"MY_VAR", "mine"}};
  auto out = forwarded_environment(env, {"MY_VAR", "SET_HERE=1", "UNSET_HERE"});
  CHECK(out == std::map<std::string, std::string>{{"PATH", "/bin"},
                                                  {"LD_LIBRARY_PATH", "/lib"},
                                                  {"NCCL_DEBUG", "INFO"},
                                                  {"OMP_NUM_THREADS", "4"},
                                                  {"PET_MAX_RESTARTS", "3"},
                                                  {"MY_VAR", "mine"},
                                                  {"SET_HERE", "1"}});
  CHECK_THROWS_AS(forwarded_environment(env, {"BAD-NAME"}), ConfigError);
  CHECK_THROWS_AS(forwarded_environment(env, {"=x"}), ConfigError);
}

TEST_CASE("session: the remote command survives the remote shell", "[cluster][session]") {
  const std::vector<std::string> args{"--flag=it's", "two words", "$HOME", "`id`", "a\"b", "\\",
                                      ""};
  // `sh -c` with the command, as ssh hands it to the remote user's shell; printf shows what
  // the program would receive.
  auto command = remote_command("printf", std::vector<std::string>{"[%s]"});
  for (const auto& a : args) command += " " + shell_quote(a);
  std::string got;
  FILE* sh = popen(("sh -c " + shell_quote(command)).c_str(), "r");
  REQUIRE(sh != nullptr);
  char buf[256];
  for (std::size_t n; (n = fread(buf, 1, sizeof(buf), sh)) > 0;) got.append(buf, n);
  CHECK(pclose(sh) == 0);
  CHECK(got == "[--flag=it's][two words][$HOME][`id`][a\"b][\\][]");
}

TEST_CASE("the staging command is one line that any login shell passes to sh whole",
          "[session]") {
  StagedBinary binary;
  binary.version = "1.2.3-gabc";
  binary.sha256 = std::string(64, 'f');
  binary.bytes = std::make_shared<const std::string>("x");
  const auto command = staging_command("/opt/dd prun/ddprun", binary);
  // csh cannot take a newline inside quotes; the script's own text has no single quote, so the
  // quoting is the plain '...' every shell reads alike.
  CHECK(command.find('\n') == std::string::npos);
  CHECK(command.rfind("exec sh -c '", 0) == 0);
  CHECK_THAT(command, Catch::EndsWith("' ddprun-stage '/opt/dd prun/ddprun' 1.2.3-gabc " +
                                      binary.sha256));
  CHECK(std::count(command.begin(), command.end(), '\'') == 4);
  CHECK(binary.header() == "1 " + binary.sha256 + "\n");
}
