// `--hosts` staging ddprun on hosts that lack it (cluster/staging.hpp), end to end with the real
// binary over testing/local_ssh.sh; each "host" has a HOME of its own (LOCAL_SSH_HOMES),
// so its cache is its own. The same over real OpenSSH: tests/netns/ssh_hosts.sh, check
// "staging".

#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "testing/ddprun_process.hpp"
#include "testing/test_util.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

constexpr auto kHang = 60s;
const std::string kMissing = "--remote-ddprun=/nonexistent/ddprun";

std::string version() {
  DdprunProcess p({"--version"});
  p.wait(kHang);
  auto out = p.output();
  out = out.substr(out.find(' ') + 1);
  return out.substr(0, out.find('\n'));
}

// `ddprun --hosts=HOSTS FLAGS... --no-python true`, each host's HOME under `homes`.
std::vector<std::string> job(const std::string& hosts, std::vector<std::string> flags) {
  std::vector<std::string> args{"--hosts=" + hosts, "--ssh-command=" LOCAL_SSH,
                                "--master-port=" + std::to_string(free_port())};
  args.insert(args.end(), flags.begin(), flags.end());
  args.insert(args.end(), {"--no-python", "true"});
  return args;
}

std::map<std::string, std::string> homes_env(const TempDir& homes) {
  return {{"LOCAL_SSH_HOMES", homes.path()}};
}

// The copies of ddprun in a cache directory: path -> whether it is this ddprun, byte for byte.
std::map<std::string, bool> copies_in(const std::string& cache) {
  static const std::string self = read_file(DDPRUN_BINARY);
  std::map<std::string, bool> out;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(cache, ec)) {
    if (e.is_regular_file()) out[e.path().string()] = read_file(e.path().string()) == self;
  }
  return out;
}

std::string cache_of(const TempDir& homes, const std::string& host) {
  return homes.file(host) + "/.cache/ddprun";
}

// An ssh stand-in that runs each session in a mount namespace of its own with a private
// directory /tmp/ddprun-<uid> of its own, PRIVATE_SIZE large (the machine's is not touched; the
// rest of /tmp, where the build may be, stays visible), with SMALL_HOME set a 1 MiB home, and
// with LOGIN_UMASK set that umask, as a login may give.
// Empty when mount namespaces cannot be made here.
std::string private_tmp_ssh(const TempDir& dir) {
  {
    Child probe(SpawnSpec{{"unshare", "-m", "true"}, {}, {}});
    if (exit_code(probe.wait(kHang)) != 0) return {};
  }
  const auto ssh = dir.file("private_tmp_ssh");
  {
    std::ofstream f(ssh);
    f << "#!/bin/sh\n"
         "[ -z \"$LOGIN_UMASK\" ] || umask \"$LOGIN_UMASK\"\n"
         "exec unshare -m sh -c 'private=/tmp/ddprun-$(id -u); mkdir -p -m 700 \"$private\" &&"
         " mount -t tmpfs -o size=\"$PRIVATE_SIZE\",mode=700 tmpfs \"$private\" &&"
         " { [ -z \"$SMALL_HOME\" ] || mount -t tmpfs -o size=1m tmpfs \"$HOME\"; } &&"
         " exec \"$@\"' private-tmp " LOCAL_SSH " \"$@\"\n";
  }
  fs::permissions(ssh, fs::perms::owner_all);
  return ssh;
}

// Room for two copies (the one written and the one run) and the job's own files.
std::string private_room() {
  return std::to_string(2 * fs::file_size(DDPRUN_BINARY) + (16 << 20));
}

// A job on one host whose worker says what its agent runs (the staged copy's path).
std::vector<std::string> job_showing_agent(const std::string& ssh) {
  auto args = job("127.0.0.1", {kMissing, "--ssh-command=" + ssh});
  args.erase(args.end() - 1);
  args.insert(args.end(), {"sh", "-c", "echo \"agent runs $(readlink /proc/$PPID/exe)\""});
  return args;
}

std::string private_cache() {
  return "/tmp/ddprun-" + std::to_string(::getuid()) + "/cache/" + version() + "-";
}

}  // namespace

TEST_CASE("a host without ddprun gets a copy in its cache and the next job runs it from there",
          "[hosts][staging]") {
  TempDir homes;
  const auto v = version();
  {
    DdprunProcess p(job("127.0.0.1,127.0.0.2", {kMissing}), homes_env(homes));
    const int code = p.wait(kHang);
    INFO(p.output());
    REQUIRE(code == 0);
    CHECK_THAT(p.output(), Contains("staged ddprun " + v + " on 2 host(s) that lacked it "
                                    "(2 sent from here, 0 by relays)"));
    CHECK_THAT(p.output(), Contains("every worker succeeded"));
  }
  for (const auto* host : {"127.0.0.1", "127.0.0.2"}) {
    INFO(host);
    const auto copies = copies_in(cache_of(homes, host));
    REQUIRE(copies.size() == 1);  // no temporary file left
    const auto& [path, same] = *copies.begin();
    CHECK(same);
    CHECK(fs::path(path).filename() == "ddprun");
    CHECK(fs::path(path).parent_path().filename().string().rfind(v + "-", 0) == 0);
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0700);
  }

  // The next job: the cached copies run, nothing is sent.
  {
    DdprunProcess p(job("127.0.0.1,127.0.0.2", {kMissing}), homes_env(homes));
    const int code = p.wait(kHang);
    INFO(p.output());
    REQUIRE(code == 0);
    CHECK_THAT(p.output(), Contains("ddprun " + v + " from the cache on 2 host(s): 127.0.0.1, 127.0.0.2"));
    CHECK_THAT(p.output(), !Contains("staged ddprun"));
  }

  // A cached copy damaged: it fails its check, that host gets a new one.
  const auto damaged = copies_in(cache_of(homes, "127.0.0.2")).begin()->first;
  {
    std::fstream f(damaged, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096);
    f.write("\xde\xad\xbe\xef", 4);
  }
  CHECK_FALSE(copies_in(cache_of(homes, "127.0.0.2")).begin()->second);
  {
    DdprunProcess p(job("127.0.0.1,127.0.0.2", {kMissing}), homes_env(homes));
    const int code = p.wait(kHang);
    INFO(p.output());
    REQUIRE(code == 0);
    CHECK_THAT(p.output(), Contains("staged ddprun " + v + " on 1 host(s) that lacked it "
                                    "(1 sent from here, 0 by relays), "));
    CHECK_THAT(p.output(), Contains("from the cache on 1 host(s): 127.0.0.1"));
  }
  CHECK(copies_in(cache_of(homes, "127.0.0.2")) == std::map<std::string, bool>{{damaged, true}});
}

TEST_CASE("a host with another version of ddprun gets this one, --no-stage refuses instead",
          "[hosts][staging]") {
  TempDir homes;
  const auto older = homes.file("older-ddprun");
  {
    std::ofstream f(older);
    f << "#!/bin/sh\necho 'ddprun 0.0.1'\n";
  }
  fs::permissions(older, fs::perms::owner_all);
  {
    DdprunProcess p(job("127.0.0.1", {"--remote-ddprun=" + older}), homes_env(homes));
    const int code = p.wait(kHang);
    INFO(p.output());
    REQUIRE(code == 0);
    CHECK_THAT(p.output(), Contains("on 1 host(s) that lacked it"));
    CHECK(copies_in(cache_of(homes, "127.0.0.1")).size() == 1);
  }
  {
    TempDir empty;
    DdprunProcess p(job("127.0.0.1,127.0.0.2", {kMissing, "--no-stage"}), homes_env(empty));
    const int code = p.wait(kHang);
    INFO(p.output());
    CHECK(code == 123);
    CHECK_THAT(p.output(), Contains("127.0.0.2  node 1: /nonexistent/ddprun not found there"));
    CHECK(copies_in(empty.path()).empty());
  }
}

TEST_CASE("through the tree each relay stages its own subtree from its copy", "[hosts][staging]") {
  TempDir homes;
  std::string hosts;
  for (int i = 1; i <= 6; ++i) hosts += (i > 1 ? "," : "") + ("127.0.0." + std::to_string(i));
  DdprunProcess p(job(hosts, {kMissing, "--tree-threshold=2", "--fanout=2"}), homes_env(homes));
  const int code = p.wait(kHang);
  INFO(p.output());
  REQUIRE(code == 0);
  // The command sends two copies (its fan-out); the two relays send the other four.
  CHECK_THAT(p.output(), Contains("on 6 host(s) that lacked it (2 sent from here, 4 by relays)"));
  for (int i = 1; i <= 6; ++i) {
    const auto copies = copies_in(cache_of(homes, "127.0.0." + std::to_string(i)));
    CHECK(copies.size() == 1);
    CHECK(copies.begin()->second);
  }
}

TEST_CASE("pings the command sends while a host stages do not reach the staging script",
          "[hosts][staging]") {
  // A slow login (2 s, as across an ocean) with pings every half second (--hangup-timeout=2):
  // the command has sent pings before the remote command reads its input.
  TempDir homes;
  const auto ssh = homes.file("slow_ssh");
  {
    std::ofstream f(ssh);
    f << "#!/bin/sh\nsleep 2\nexec " LOCAL_SSH " \"$@\"\n";
  }
  fs::permissions(ssh, fs::perms::owner_all);
  DdprunProcess p(job("127.0.0.1,127.0.0.2", {kMissing, "--ssh-command=" + ssh,
                                              "--hangup-timeout=2"}),
                  homes_env(homes));
  const int code = p.wait(kHang);
  INFO(p.output());
  REQUIRE(code == 0);
  CHECK_THAT(p.output(), Contains("on 2 host(s) that lacked it"));
}

TEST_CASE("two jobs staging to one host at once both run and leave one good copy",
          "[hosts][staging]") {
  TempDir home;  // one HOME for all four sessions of the two jobs: one host, as its cache sees it
  DdprunProcess a(job("127.0.0.1,127.0.0.2", {kMissing}), {{"HOME", home.path()}});
  DdprunProcess b(job("127.0.0.1,127.0.0.2", {kMissing}), {{"HOME", home.path()}});
  CHECK(a.wait(kHang) == 0);
  CHECK(b.wait(kHang) == 0);
  const auto copies = copies_in(home.path() + "/.cache/ddprun");
  INFO(a.output() << b.output());
  REQUIRE(copies.size() == 1);
  CHECK(copies.begin()->second);
}

TEST_CASE("a full home puts the copy in the user's private directory under /tmp, and no room "
          "anywhere is one clear line", "[hosts][staging]") {
  TempDir dir;
  const auto ssh = private_tmp_ssh(dir);
  if (ssh.empty()) {
    WARN("skipped: cannot make a mount namespace here (unshare -m)");
    return;
  }
  const auto home = dir.file("home");
  fs::create_directory(home);
  const auto args = job_showing_agent(ssh);
  {
    DdprunProcess p(args, {{"HOME", home}, {"SMALL_HOME", "1"}, {"PRIVATE_SIZE", private_room()}});
    const int code = p.wait(kHang);
    INFO(p.output());
    REQUIRE(code == 0);
    CHECK_THAT(p.output(), Contains("on 1 host(s) that lacked it"));
    CHECK_THAT(p.output(), Contains("agent runs " + private_cache()));
  }
  {
    DdprunProcess p(args, {{"HOME", home}, {"SMALL_HOME", "1"}, {"PRIVATE_SIZE", "1m"}});
    const int code = p.wait(kHang);
    INFO(p.output());
    CHECK(code == 123);
    CHECK_THAT(p.output(), Contains("127.0.0.1  node 0: not staged: ddprun: cannot stage ddprun " +
                                    version() + " on "));
    CHECK_THAT(p.output(), Contains("(full or read-only)"));
  }
}

TEST_CASE("a cache another user could change is neither run nor written: the copy goes to the "
          "user's private directory", "[hosts][staging]") {
  // A good copy of this ddprun in the cache, on a path another user can change: they could swap
  // it between its check and its start, or have this job write through a link of theirs.
  if (::geteuid() != 0) {
    WARN("skipped: making a directory of another user needs root");
    return;
  }
  TempDir dir;
  const auto ssh = private_tmp_ssh(dir);
  if (ssh.empty()) {
    WARN("skipped: cannot make a mount namespace here (unshare -m)");
    return;
  }
  const auto home = dir.file("home");
  fs::create_directory(home);
  const auto args = job_showing_agent(ssh);
  const std::map<std::string, std::string> env{{"HOME", home}, {"PRIVATE_SIZE", private_room()}};
  {
    DdprunProcess p(args, env);  // a good copy in ~/.cache/ddprun
    INFO(p.output());
    REQUIRE(p.wait(kHang) == 0);
  }
  const auto cache = home + "/.cache";
  std::string where;  // the directory another user can change
  SECTION("~/.cache is a link into another user's directory") {
    where = dir.file("theirs");
    fs::rename(cache, where);
    REQUIRE(::chown(where.c_str(), 65534, 65534) == 0);
    for (const auto& e : fs::recursive_directory_iterator(where)) {
      REQUIRE(::lchown(e.path().c_str(), 65534, 65534) == 0);
    }
    fs::create_directory_symlink(where, cache);
  }
  SECTION("~/.cache may be written by every user and is not sticky") {
    where = cache;
    fs::permissions(where, fs::perms::all);
  }
  const auto before = copies_in(where);
  REQUIRE(before.size() == 1);
  DdprunProcess p(args, env);
  const int code = p.wait(kHang);
  INFO(p.output());
  REQUIRE(code == 0);
  CHECK_THAT(p.output(), Contains("on 1 host(s) that lacked it"));
  CHECK_THAT(p.output(), !Contains("from the cache"));
  CHECK_THAT(p.output(), Contains("agent runs " + private_cache()));
  CHECK(copies_in(where) == before);  // nothing written there
}

TEST_CASE("a login's umask of 002 (user private groups) still stages into the home's cache",
          "[hosts][staging]") {
  TempDir dir;
  const auto ssh = private_tmp_ssh(dir);
  if (ssh.empty()) {
    WARN("skipped: cannot make a mount namespace here (unshare -m)");
    return;
  }
  const auto home = dir.file("home");
  fs::create_directory(home);
  DdprunProcess p(job_showing_agent(ssh),
                  {{"HOME", home}, {"LOGIN_UMASK", "002"}, {"PRIVATE_SIZE", private_room()}});
  const int code = p.wait(kHang);
  INFO(p.output());
  REQUIRE(code == 0);
  CHECK_THAT(p.output(), Contains("agent runs " + home + "/.cache/ddprun/" + version() + "-"));
  struct stat st {};
  REQUIRE(::stat((home + "/.cache/ddprun").c_str(), &st) == 0);
  CHECK((st.st_mode & 077) == 0);
}
