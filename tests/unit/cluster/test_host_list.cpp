// Host lists on their own: --hosts, hostfile text and reading a hostfile; the accepted forms and
// each error's whole message.

#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "cluster/host_list.hpp"
#include "common/error.hpp"

using namespace ddprun;
using Catch::Message;

namespace {

using Hosts = std::vector<HostSpec>;

HostSpec host(std::string name, std::optional<int> slots = std::nullopt) {
  return HostSpec{std::move(name), slots};
}

// A file in a fresh directory of its own, removed with it.
class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    static int counter = 0;
    dir_ = std::filesystem::temp_directory_path() /
           ("ddprun_host_list_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(dir_);
    std::ofstream(path(), std::ios::binary) << text;
  }
  ~TempFile() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  std::string path() const { return (dir_ / "hosts.txt").string(); }
  std::string dir() const { return dir_.string(); }

 private:
  std::filesystem::path dir_;
};

}  // namespace

TEST_CASE("host list: names, addresses and slots", "[cluster][hosts]") {
  CHECK(parse_hosts("gpu01", "--hosts") == Hosts{host("gpu01")});
  CHECK(parse_hosts("10.0.0.1:2,10.0.0.2,[::1]:4", "--hosts") ==
        Hosts{host("10.0.0.1", 2), host("10.0.0.2"), host("::1", 4)});
  CHECK(parse_hosts(" a , b:3 ,c ", "--hosts") == Hosts{host("a"), host("b", 3), host("c")});
  CHECK(parse_hosts("[fe80::1%eth0],[2001:db8::7]:1", "--hosts") ==
        Hosts{host("fe80::1%eth0"), host("2001:db8::7", 1)});
  CHECK(parse_hosts("node_7.cluster.example.org:08", "--hosts") ==
        Hosts{host("node_7.cluster.example.org", 8)});
  CHECK(parse_hosts("a:1000000", "--hosts") == Hosts{host("a", 1'000'000)});
}

TEST_CASE("host list: the order is kept, which is the node ranks' order", "[cluster][hosts]") {
  CHECK(parse_hosts("c,a,b", "--hosts") == Hosts{host("c"), host("a"), host("b")});
}

TEST_CASE("host list: empty entries", "[cluster][hosts]") {
  CHECK_THROWS_MATCHES(parse_hosts("a,,b", "--hosts"), ConfigError,
                       Message("--hosts=a,,b: empty host entry (item 2)"));
  CHECK_THROWS_MATCHES(parse_hosts("a,b,", "--hosts"), ConfigError,
                       Message("--hosts=a,b,: empty host entry (item 3)"));
  CHECK_THROWS_MATCHES(parse_hosts(",a", "--hosts"), ConfigError,
                       Message("--hosts=,a: empty host entry (item 1)"));
  CHECK_THROWS_MATCHES(parse_hosts("a, ,b", "--hosts"), ConfigError,
                       Message("--hosts=a, ,b: empty host entry (item 2)"));
  CHECK_THROWS_MATCHES(parse_hosts("", "--hosts"), ConfigError, Message("--hosts=: no host given"));
  CHECK_THROWS_MATCHES(parse_hosts("  ", "--hosts"), ConfigError,
                       Message("--hosts=  : no host given"));
}

TEST_CASE("host list: slot counts", "[cluster][hosts]") {
  CHECK_THROWS_MATCHES(parse_hosts("a:0", "--hosts"), ConfigError,
                       Message("--hosts=a:0: slots must be an integer >= 1 (item 1: a:0)"));
  CHECK_THROWS_MATCHES(parse_hosts("a,b:", "--hosts"), ConfigError,
                       Message("--hosts=a,b:: slots must be an integer >= 1 (item 2: b:)"));
  CHECK_THROWS_MATCHES(parse_hosts("a:-1", "--hosts"), ConfigError,
                       Message("--hosts=a:-1: slots must be an integer >= 1 (item 1: a:-1)"));
  CHECK_THROWS_MATCHES(parse_hosts("a:+2", "--hosts"), ConfigError,
                       Message("--hosts=a:+2: slots must be an integer >= 1 (item 1: a:+2)"));
  CHECK_THROWS_MATCHES(parse_hosts("a:two", "--hosts"), ConfigError,
                       Message("--hosts=a:two: slots must be an integer >= 1 (item 1: a:two)"));
  CHECK_THROWS_MATCHES(parse_hosts("a:1.5", "--hosts"), ConfigError,
                       Message("--hosts=a:1.5: slots must be an integer >= 1 (item 1: a:1.5)"));
  CHECK_THROWS_MATCHES(
      parse_hosts("a:1000001", "--hosts"), ConfigError,
      Message("--hosts=a:1000001: slots must be at most 1000000 (item 1: a:1000001)"));
  CHECK_THROWS_MATCHES(parse_hosts("a:99999999999999999999", "--hosts"), ConfigError,
                       Message("--hosts=a:99999999999999999999: slots must be at most 1000000 "
                               "(item 1: a:99999999999999999999)"));
  CHECK_THROWS_MATCHES(parse_hosts("[::1]:0", "--hosts"), ConfigError,
                       Message("--hosts=[::1]:0: slots must be an integer >= 1 (item 1: [::1]:0)"));
}

TEST_CASE("host list: bad host names", "[cluster][hosts]") {
  CHECK_THROWS_MATCHES(parse_hosts(":2", "--hosts"), ConfigError,
                       Message("--hosts=:2: empty host name (item 1: :2)"));
  CHECK_THROWS_MATCHES(parse_hosts("a,-oProxyCommand=x", "--hosts"), ConfigError,
                       Message("--hosts=a,-oProxyCommand=x: a host name must not start with '-' "
                               "(item 2: -oProxyCommand=x)"));
  CHECK_THROWS_MATCHES(
      parse_hosts("gpu 01", "--hosts"), ConfigError,
      Message("--hosts=gpu 01: a host name must not contain whitespace (item 1: gpu 01)"));
  CHECK_THROWS_MATCHES(parse_hosts("a;reboot", "--hosts"), ConfigError,
                       Message("--hosts=a;reboot: a host name must not contain ';' (letters, "
                               "digits, '.', '-' and '_' only) (item 1: a;reboot)"));
  CHECK_THROWS_MATCHES(parse_hosts("user@gpu01", "--hosts"), ConfigError,
                       Message("--hosts=user@gpu01: a host name must not contain '@' (letters, "
                               "digits, '.', '-' and '_' only) (item 1: user@gpu01)"));
  // Control bytes are escaped, so the message stays on one line.
  CHECK_THROWS_MATCHES(parse_hosts("a\x01,b", "--hosts"), ConfigError,
                       Message("--hosts=a\\x01,b: a host name must not contain byte 0x01 "
                               "(letters, digits, '.', '-' and '_' only) (item 1: a\\x01)"));
  CHECK_THROWS_MATCHES(
      parse_hosts("a,b\nc", "--hosts"), ConfigError,
      Message("--hosts=a,b\\x0ac: a host name must not contain whitespace (item 2: b\\x0ac)"));
  CHECK_THROWS_MATCHES(
      parse_hosts("10.0.0.300", "--hosts"), ConfigError,
      Message("--hosts=10.0.0.300: '10.0.0.300' is not a valid IPv4 address (item 1: 10.0.0.300)"));
  CHECK_THROWS_MATCHES(
      parse_hosts("10.0.1:2", "--hosts"), ConfigError,
      Message("--hosts=10.0.1:2: '10.0.1' is not a valid IPv4 address (item 1: 10.0.1:2)"));
}

TEST_CASE("host list: IPv6 addresses need brackets", "[cluster][hosts]") {
  const std::string brackets =
      "more than one ':'; write an IPv6 address in brackets, as in [::1] or [::1]:2";
  CHECK_THROWS_MATCHES(parse_hosts("::1", "--hosts"), ConfigError,
                       Message("--hosts=::1: " + brackets + " (item 1: ::1)"));
  CHECK_THROWS_MATCHES(parse_hosts("a,fe80::1:2", "--hosts"), ConfigError,
                       Message("--hosts=a,fe80::1:2: " + brackets + " (item 2: fe80::1:2)"));
  CHECK_THROWS_MATCHES(parse_hosts("a:2:3", "--hosts"), ConfigError,
                       Message("--hosts=a:2:3: " + brackets + " (item 1: a:2:3)"));
  CHECK_THROWS_MATCHES(parse_hosts("[::1", "--hosts"), ConfigError,
                       Message("--hosts=[::1: missing ']' after the IPv6 address (item 1: [::1)"));
  CHECK_THROWS_MATCHES(parse_hosts("[]:2", "--hosts"), ConfigError,
                       Message("--hosts=[]:2: empty IPv6 address in brackets (item 1: []:2)"));
  CHECK_THROWS_MATCHES(
      parse_hosts("[gpu01]:2", "--hosts"), ConfigError,
      Message("--hosts=[gpu01]:2: 'gpu01' is not an IPv6 address (item 1: [gpu01]:2)"));
  CHECK_THROWS_MATCHES(parse_hosts("[::1]2", "--hosts"), ConfigError,
                       Message("--hosts=[::1]2: unexpected text after ']' (expected ':N' or "
                               "nothing) (item 1: [::1]2)"));
  CHECK_THROWS_MATCHES(parse_hosts("[fe80::1%]", "--hosts"), ConfigError,
                       Message("--hosts=[fe80::1%]: 'fe80::1%' is not an IPv6 address "
                               "(item 1: [fe80::1%])"));
}

TEST_CASE("host list: a host listed twice", "[cluster][hosts]") {
  CHECK_THROWS_MATCHES(parse_hosts("a,a", "--hosts"), ConfigError,
                       Message("--hosts=a,a: host a is listed twice (items 1 and 2)"));
  CHECK_THROWS_MATCHES(parse_hosts("a:2,b,a:4", "--hosts"), ConfigError,
                       Message("--hosts=a:2,b,a:4: host a is listed twice (items 1 and 3)"));
  CHECK_THROWS_MATCHES(
      parse_hosts("gpu01,GPU01", "--hosts"), ConfigError,
      Message("--hosts=gpu01,GPU01: host GPU01 is listed twice (items 1 and 2, as gpu01)"));
  CHECK_THROWS_MATCHES(
      parse_hosts("[::1],[0:0::1]:2", "--hosts"), ConfigError,
      Message("--hosts=[::1],[0:0::1]:2: host 0:0::1 is listed twice (items 1 and 2, as ::1)"));
  // Another label (an environment variable) appears as given.
  CHECK_THROWS_MATCHES(parse_hosts("a,a", "DDPRUN_HOSTS"), ConfigError,
                       Message("DDPRUN_HOSTS=a,a: host a is listed twice (items 1 and 2)"));
}

TEST_CASE("hostfile: every accepted line form", "[cluster][hostfile]") {
  const char* text =
      "# the job's hosts\n"
      "gpu01\n"
      "gpu02 slots=4\n"
      "gpu03:2\n"
      "\n"
      "   \t \n"
      "  gpu04\tslots=8   # rack 2\n"
      "10.0.0.5 # an address\n"
      "10.0.0.6:3\n"
      "[::1]\n"
      "[2001:db8::1]:2\n"
      "[2001:db8::2] slots=6\n"
      "# the end";
  CHECK(parse_hostfile(text, "hosts.txt") ==
        Hosts{host("gpu01"), host("gpu02", 4), host("gpu03", 2), host("gpu04", 8), host("10.0.0.5"),
              host("10.0.0.6", 3), host("::1"), host("2001:db8::1", 2), host("2001:db8::2", 6)});
}

TEST_CASE("hostfile: CRLF line endings, a byte order mark, no final newline",
          "[cluster][hostfile]") {
  CHECK(parse_hostfile("a slots=2\r\n# note\r\n\r\nb:3\r\nc\r\n", "hosts.txt") ==
        Hosts{host("a", 2), host("b", 3), host("c")});
  CHECK(parse_hostfile("\xEF\xBB\xBFgpu01\ngpu02", "hosts.txt") ==
        Hosts{host("gpu01"), host("gpu02")});
  // The line numbers of a CRLF file are the ones an editor shows.
  CHECK_THROWS_MATCHES(parse_hostfile("a\r\n\r\nb slot=2\r\n", "hosts.txt"), ConfigError,
                       Message("hosts.txt:3: unknown field 'slot=2' (expected 'host', "
                               "'host slots=N' or 'host:N')"));
}

TEST_CASE("hostfile: unknown and repeated fields", "[cluster][hostfile]") {
  const std::string expected = "(expected 'host', 'host slots=N' or 'host:N')";
  CHECK_THROWS_MATCHES(parse_hostfile("a\nb\nc slot=2\n", "hosts.txt"), ConfigError,
                       Message("hosts.txt:3: unknown field 'slot=2' " + expected));
  CHECK_THROWS_MATCHES(parse_hostfile("a slots=2 max_slots=4\n", "hosts.txt"), ConfigError,
                       Message("hosts.txt:1: unknown field 'max_slots=4' " + expected));
  CHECK_THROWS_MATCHES(parse_hostfile("a slots = 2\n", "hosts.txt"), ConfigError,
                       Message("hosts.txt:1: unknown field 'slots' " + expected));
  CHECK_THROWS_MATCHES(parse_hostfile("a b\n", "hosts.txt"), ConfigError,
                       Message("hosts.txt:1: unknown field 'b' " + expected));
  CHECK_THROWS_MATCHES(parse_hostfile("a slots=2 slots=2\n", "hosts.txt"), ConfigError,
                       Message("hosts.txt:1: 'slots=' is given twice"));
  CHECK_THROWS_MATCHES(parse_hostfile("x\ngpu01:2 slots=4\n", "hosts.txt"), ConfigError,
                       Message("hosts.txt:2: slots given twice, as 'gpu01:2' and 'slots=4'"));
}

TEST_CASE("hostfile: bad slot counts", "[cluster][hostfile]") {
  CHECK_THROWS_MATCHES(parse_hostfile("a slots=0\n", "hosts.txt"), ConfigError,
                       Message("hosts.txt:1: slots must be an integer >= 1 (slots=0)"));
  CHECK_THROWS_MATCHES(parse_hostfile("a slots=\n", "hosts.txt"), ConfigError,
                       Message("hosts.txt:1: slots must be an integer >= 1 (slots=)"));
  CHECK_THROWS_MATCHES(parse_hostfile("a slots=four\n", "hosts.txt"), ConfigError,
                       Message("hosts.txt:1: slots must be an integer >= 1 (slots=four)"));
  CHECK_THROWS_MATCHES(parse_hostfile("a\n\nb:0\n", "hosts.txt"), ConfigError,
                       Message("hosts.txt:3: slots must be an integer >= 1 (b:0)"));
  CHECK_THROWS_MATCHES(parse_hostfile("a slots=-2\n", "hosts.txt"), ConfigError,
                       Message("hosts.txt:1: slots must be an integer >= 1 (slots=-2)"));
  CHECK_THROWS_MATCHES(parse_hostfile("a slots=2000000\n", "hosts.txt"), ConfigError,
                       Message("hosts.txt:1: slots must be at most 1000000 (slots=2000000)"));
  CHECK_THROWS_MATCHES(parse_hostfile("host:2000000\n", "hosts.txt"), ConfigError,
                       Message("hosts.txt:1: slots must be at most 1000000 (host:2000000)"));
  CHECK_THROWS_MATCHES(parse_hostfile("[::1]:x\n", "hosts.txt"), ConfigError,
                       Message("hosts.txt:1: slots must be an integer >= 1 ([::1]:x)"));
}

TEST_CASE("hostfile: ':N' is a slot count, not a port", "[cluster][hostfile]") {
  // A port parser would refuse 70000 (above 65535) and accept 0; slots are the other way round.
  CHECK(parse_hostfile("host:70000\n", "hosts.txt") == Hosts{host("host", 70000)});
  CHECK_THROWS_MATCHES(parse_hostfile("host:0\n", "hosts.txt"), ConfigError,
                       Message("hosts.txt:1: slots must be an integer >= 1 (host:0)"));
}

TEST_CASE("hostfile: bad hosts", "[cluster][hostfile]") {
  CHECK_THROWS_MATCHES(parse_hostfile("a\n:4\n", "hosts.txt"), ConfigError,
                       Message("hosts.txt:2: empty host name (:4)"));
  CHECK_THROWS_MATCHES(parse_hostfile("-F/tmp/x slots=1\n", "hosts.txt"), ConfigError,
                       Message("hosts.txt:1: a host name must not start with '-' (-F/tmp/x)"));
  CHECK_THROWS_MATCHES(
      parse_hostfile("slots=2\n", "hosts.txt"), ConfigError,
      Message("hosts.txt:1: a host name must not contain '=' (letters, digits, '.', '-' and "
              "'_' only) (slots=2)"));
  CHECK_THROWS_MATCHES(
      parse_hostfile("fe80::1 slots=2\n", "hosts.txt"), ConfigError,
      Message("hosts.txt:1: more than one ':'; write an IPv6 address in brackets, as in [::1] "
              "or [::1]:2 (fe80::1)"));
  CHECK_THROWS_MATCHES(parse_hostfile("[::1 slots=2\n", "hosts.txt"), ConfigError,
                       Message("hosts.txt:1: missing ']' after the IPv6 address ([::1)"));
  CHECK_THROWS_MATCHES(parse_hostfile("[::zz]\n", "hosts.txt"), ConfigError,
                       Message("hosts.txt:1: '::zz' is not an IPv6 address ([::zz])"));
  CHECK_THROWS_MATCHES(parse_hostfile("256.1.1.1\n", "hosts.txt"), ConfigError,
                       Message("hosts.txt:1: '256.1.1.1' is not a valid IPv4 address (256.1.1.1)"));
  // A name that runs into a NUL byte is not cut there, and the message shows it escaped (a raw
  // NUL would end the message).
  CHECK_THROWS_MATCHES(parse_hostfile(std::string("gpu\0"
                                                  "01\n",
                                                  7),
                                      "hosts.txt"),
                       ConfigError,
                       Message("hosts.txt:1: a host name must not contain byte 0x00 (letters, "
                               "digits, '.', '-' and '_' only) (gpu\\x0001)"));
}

TEST_CASE("hostfile: a host listed twice", "[cluster][hostfile]") {
  CHECK_THROWS_MATCHES(parse_hostfile("# rack 1\ngpu01 slots=2\ngpu02\n\ngpu01:4\n", "hosts.txt"),
                       ConfigError,
                       Message("hosts.txt:5: host gpu01 is listed twice (first on line 2)"));
  CHECK_THROWS_MATCHES(parse_hostfile("Gpu01\ngpu01\n", "hosts.txt"), ConfigError,
                       Message("hosts.txt:2: host gpu01 is listed twice (first on line 1, as "
                               "Gpu01)"));
  CHECK_THROWS_MATCHES(
      parse_hostfile("[2001:db8::1]\n[2001:DB8:0::1]:2\n", "hosts.txt"), ConfigError,
      Message("hosts.txt:2: host 2001:DB8:0::1 is listed twice (first on line 1, as "
              "2001:db8::1)"));
  // Different zones are different hosts.
  CHECK(parse_hostfile("[fe80::1%eth0]\n[fe80::1%eth1]\n", "hosts.txt") ==
        Hosts{host("fe80::1%eth0"), host("fe80::1%eth1")});
}

TEST_CASE("hostfile: a file without any host", "[cluster][hostfile]") {
  CHECK_THROWS_MATCHES(parse_hostfile("", "hosts.txt"), ConfigError,
                       Message("hosts.txt: no host in the file"));
  CHECK_THROWS_MATCHES(parse_hostfile("\n  \n# gpu01\n\r\n", "/etc/ddprun/hosts"), ConfigError,
                       Message("/etc/ddprun/hosts: no host in the file"));
}

TEST_CASE("read_hostfile reads and parses a file", "[cluster][hostfile]") {
  TempFile file("gpu01 slots=2\r\n[::1]:4\r\n");
  CHECK(read_hostfile(file.path()) == Hosts{host("gpu01", 2), host("::1", 4)});

  TempFile dup("a\na\n");
  CHECK_THROWS_MATCHES(read_hostfile(dup.path()), ConfigError,
                       Message(dup.path() + ":2: host a is listed twice (first on line 1)"));
  TempFile empty("");
  CHECK_THROWS_MATCHES(read_hostfile(empty.path()), ConfigError,
                       Message(empty.path() + ": no host in the file"));
}

TEST_CASE("read_hostfile: a file that cannot be read", "[cluster][hostfile]") {
  TempFile file("a\n");
  std::string missing = file.dir() + "/no-such-hosts.txt";
  CHECK_THROWS_MATCHES(
      read_hostfile(missing), ConfigError,
      Message("cannot read the hostfile " + missing + ": No such file or directory (errno 2)"));
  CHECK_THROWS_MATCHES(
      read_hostfile(file.dir()), ConfigError,
      Message("cannot read the hostfile " + file.dir() + ": Is a directory (errno 21)"));
}
