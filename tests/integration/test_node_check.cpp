// --node-check with real agents: nodes on loopback, one of them in a mount namespace of its
// own whose /dev/shm is a 16 MiB tmpfs (a container's small default), or whose program
// directory is a read-only mount, or a FUSE mount that never answers, while the other node's
// is not.

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "agent/node_check.hpp"
#include "common/exit_codes.hpp"
#include "testing/ddprun_process.hpp"
#include "testing/elastic_cluster.hpp"
#include "testing/test_util.hpp"

using namespace ddprun::test;
using namespace std::chrono_literals;

namespace {

std::string port_arg(std::uint16_t port) { return "--master-port=" + std::to_string(port); }

std::vector<std::string> fake(std::vector<std::string> flags) {
  flags.push_back("--no-python");
  flags.push_back(FAKE_WORKER_BINARY);
  return flags;
}

// Whether `setup` (the mounts a test makes) can run in a mount namespace here.
bool can_mount(const std::string& setup) {
  const std::string command =
      "unshare --mount --propagation private sh -c '" + setup + "' >/dev/null 2>&1";
  return std::system(command.c_str()) == 0;
}

// ddprun in a mount namespace of its own where `setup` (shell, run as root there) ran first.
std::vector<std::string> in_mount_namespace(const std::string& setup) {
  return {"unshare", "--mount", "--propagation", "private", "sh", "-c",
          setup + " && exec \"$0\" \"$@\""};
}

std::string host_name() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

// Why this machine itself would be named by the check, or "" when it would not: its
// /dev/shm, the fake worker's directory (the program's), its limits.
std::string machine_finding() {
  const std::string dir = std::filesystem::path(FAKE_WORKER_BINARY).parent_path().string();
  struct statvfs s {};
  if (::statvfs("/dev/shm", &s) == 0 &&
      static_cast<std::uint64_t>(s.f_bavail) * s.f_frsize < ddprun::kMinShmFreeBytes) {
    return "/dev/shm here has less than 256 MiB free";
  }
  if (::statvfs(dir.c_str(), &s) == 0 &&
      static_cast<std::uint64_t>(s.f_bavail) * s.f_frsize < ddprun::kMinFreeBytes) {
    return dir + " has less than 1 GiB free";
  }
  for (int resource : {RLIMIT_NOFILE, RLIMIT_NPROC}) {
    rlimit r{};
    if (::getrlimit(resource, &r) == 0 && r.rlim_cur != RLIM_INFINITY && r.rlim_cur < 1024) {
      return "a soft ulimit here (-n or -u) is under 1024";
    }
  }
  return "";
}

// A /dev/shm of 16 MiB for a node of its own (a container's small default), in a mount namespace.
const std::string small_shm = "mount -t tmpfs -o size=16m tmpfs /dev/shm";

// Why a test of a node with a small /dev/shm cannot run here, or "" when it can.
std::string why_no_small_shm() {
  if (!can_mount(small_shm)) {
    return "cannot mount a tmpfs in a mount namespace here (unshare --mount)";
  }
  if (const auto why = machine_finding(); !why.empty()) {
    return "this machine itself would be named: " + why;
  }
  return "";
}

// Three nodes of an elastic job (--nnodes=2:3) on loopback with --node-check=exclude; the
// first serves the store, having started before the others. The first round closes when the
// third node joins: the last call is long so that a node slow to start still makes it, and it
// is waited out only by the round of two that follows an exclusion.
struct ElasticJob {
  TempDir dir;
  std::string endpoint = "--rdzv-endpoint=127.0.0.1:" + std::to_string(free_port());
  std::string mode = "exclude";  // --node-check's
  std::string last_call = "10";  // seconds
  std::string worker = "succeed";  // FAKE_MODE

  std::vector<std::string> flags(const std::string& name) const {
    return fake({"--nnodes=2:3", "--rdzv-backend=c10d", endpoint, "--rdzv-id=exclude",
                 "--local-addr=127.0.0.1", "--node-check=" + mode,
                 "--rdzv-conf=last_call_timeout=" + last_call + ",join_timeout=60",
                 "--events-file", dir.file(name + ".jsonl")});
  }
  std::map<std::string, std::string> env() const {
    return {{"FAKE_TOUCH_DIR", dir.path()}, {"FAKE_MODE", worker}};
  }

  // The node_check event `name` wrote.
  nlohmann::json check_event(const std::string& name) const {
    const auto events = ElasticCluster::read_events(dir.file(name + ".jsonl"), "node_check");
    return events.empty() ? nlohmann::json() : events.front();
  }

  // Starts the node that serves the store, and returns once it waits for the others.
  std::unique_ptr<DdprunProcess> start_first(const std::vector<std::string>& wrapper = {}) const {
    auto first = std::make_unique<DdprunProcess>(flags("a"), env(), wrapper);
    const bool waiting = wait_until(
        [&] {
          return !ElasticCluster::read_events(dir.file("a.jsonl"), "rendezvous_started").empty();
        },
        60s);
    INFO(first->output());
    REQUIRE(waiting);
    return first;
  }
};

}  // namespace

TEST_CASE("node check: exclude leaves out the node whose /dev/shm is nearly full, and the other "
          "two run the job", "[launcher][node_check][elastic]") {
  if (const auto why = why_no_small_shm(); !why.empty()) {
    WARN("skipped: " + why);
    return;
  }
  ElasticJob job;
  auto a = job.start_first();
  DdprunProcess b(job.flags("b"), job.env());
  DdprunProcess c(job.flags("c"), job.env(), in_mount_namespace(small_shm));
  const int rc = c.wait(120s);
  INFO(c.output());
  CHECK(rc == ddprun::kExitNodeCheck);
  CHECK(c.output().find("this node left the job (exit code 120): --node-check=exclude: this "
                        "node was left out of the job: /dev/shm has 16 MiB free of 16 MiB") !=
        std::string::npos);
  for (DdprunProcess* node : {a.get(), &b}) {
    const int node_rc = node->wait(120s);
    INFO(node->output());
    CHECK(node_rc == 0);
    CHECK(node->output().find("node check: going on without node ") != std::string::npos);
    CHECK(node->output().find(": 2 of 3 node(s) (--node-check=exclude)") != std::string::npos);
  }
  // Every node's event names the same node, the one whose /dev/shm is small.
  const auto excluded = job.check_event("c").at("figures").at("node");
  for (const char* name : {"a", "b", "c"}) {
    const auto event = job.check_event(name);
    INFO(name << ": " << event.dump());
    CHECK(event.at("excluded") == nlohmann::json::array({excluded}));
  }
  // The job ran with two workers, and no third.
  CHECK(std::filesystem::exists(job.dir.file("started_0_0")));
  CHECK(std::filesystem::exists(job.dir.file("started_1_0")));
  CHECK_FALSE(std::filesystem::exists(job.dir.file("started_2_0")));
}

TEST_CASE("node check: a node whose /dev/shm is nearly full, come after the first round, stays "
          "out, and the running job is not disturbed", "[launcher][node_check][elastic]") {
  if (const auto why = why_no_small_shm(); !why.empty()) {
    WARN("skipped: " + why);
    return;
  }
  ElasticJob job;
  job.mode = "refuse";
  job.last_call = "1";
  job.worker = "after_file:go:0:0";  // runs until the test lets it end
  auto a = job.start_first();
  DdprunProcess b(job.flags("b"), job.env());
  const bool running = wait_until([&] {
    return std::filesystem::exists(job.dir.file("started_0_0")) &&
           std::filesystem::exists(job.dir.file("started_1_0"));
  }, 120s);
  INFO(a->output());
  REQUIRE(running);
  DdprunProcess c(job.flags("c"), job.env(), in_mount_namespace(small_shm));
  const int rc = c.wait(120s);
  INFO(c.output());
  CHECK(rc == ddprun::kExitNodeCheck);
  CHECK(c.output().find("this node left the job (exit code 120): --node-check=refuse: this node "
                        "came after the job's first round and stays out of it: /dev/shm has "
                        "16 MiB free of 16 MiB") != std::string::npos);
  const auto late = job.check_event("c");
  CHECK(late.at("late") == true);
  CHECK(late.at("compared_with") == 2);
  // The job's round was not asked to end: its workers run on, and finish when let.
  std::ofstream(job.dir.file("go")) << "\n";
  for (DdprunProcess* node : {a.get(), &b}) {
    const int node_rc = node->wait(120s);
    INFO(node->output());
    CHECK(node_rc == 0);
    CHECK(node->output().find("re-forming") == std::string::npos);
  }
  CHECK(ElasticCluster::read_events(job.dir.file("a.jsonl"), "rendezvous_completed").size() == 1);
  CHECK_FALSE(std::filesystem::exists(job.dir.file("started_2_0")));
}

TEST_CASE("node check: exclude refuses the job when the node named serves the store",
          "[launcher][node_check][elastic]") {
  if (const auto why = why_no_small_shm(); !why.empty()) {
    WARN("skipped: " + why);
    return;
  }
  ElasticJob job;
  auto a = job.start_first(in_mount_namespace(small_shm));
  DdprunProcess b(job.flags("b"), job.env());
  DdprunProcess c(job.flags("c"), job.env());
  for (DdprunProcess* node : {a.get(), &b, &c}) {
    const int rc = node->wait(120s);
    INFO(node->output());
    CHECK(rc == ddprun::kExitNodeCheck);
    CHECK(node->output().find("serves the rendezvous store, which the job cannot go on without") !=
          std::string::npos);
  }
  for (const char* rank : {"started_0_0", "started_1_0", "started_2_0"}) {
    CHECK_FALSE(std::filesystem::exists(job.dir.file(rank)));
  }
}

TEST_CASE("node check: refuse names the node whose /dev/shm is nearly full on every node, and "
          "no worker starts", "[launcher][node_check]") {
  if (const auto why = why_no_small_shm(); !why.empty()) {
    WARN("skipped: " + why);
    return;
  }
  TempDir dir;
  const auto port = port_arg(free_port());
  const std::map<std::string, std::string> env{{"FAKE_TOUCH_DIR", dir.path()}};
  DdprunProcess node0(fake({"--nnodes=2", "--node-rank=0", port, "--node-check=refuse"}), env);
  DdprunProcess node1(fake({"--nnodes=2", "--node-rank=1", port, "--node-check=refuse"}), env,
                      in_mount_namespace(small_shm));
  const std::string finding =
      "node 1 (" + host_name() + "): /dev/shm has 16 MiB free of 16 MiB (at least 256 MiB needed";
  for (DdprunProcess* node : {&node0, &node1}) {
    const int rc = node->wait(120s);
    INFO(node->output());
    CHECK(rc == ddprun::kExitNodeCheck);
    CHECK(node->output().find(finding) != std::string::npos);
    CHECK(node->output().find("--node-check=refuse: 1 finding(s)") != std::string::npos);
  }
  // Node 0 names no finding of its own: the only one is node 1's.
  CHECK(node0.output().find("node check: node 0 (") == std::string::npos);
  CHECK(std::filesystem::is_empty(dir.path()));  // no worker ran
}

TEST_CASE("node check: warn names a program directory the other nodes can write and this one "
          "cannot, and the job runs", "[launcher][node_check]") {
  TempDir dir, program;
  const std::string read_only = "mount --bind " + program.path() + " " + program.path() +
                                " && mount -o remount,bind,ro " + program.path();
  if (!can_mount(read_only)) {
    WARN("skipped: cannot bind-mount a directory read-only in a mount namespace here");
    return;
  }
  const std::string worker = program.file("worker");
  std::filesystem::copy_file(FAKE_WORKER_BINARY, worker);
  std::filesystem::permissions(worker, std::filesystem::perms::owner_all);
  const auto port = port_arg(free_port());
  const std::map<std::string, std::string> env{{"FAKE_TOUCH_DIR", dir.path()}};
  const std::vector<std::string> flags{"--nnodes=2", port, "--node-check=warn", "--no-python"};
  DdprunProcess node0(flags + std::vector<std::string>{"--node-rank=0", worker}, env);
  // Node 1 sees the program's directory read-only (a bind mount of it, remounted read-only).
  DdprunProcess node1(flags + std::vector<std::string>{"--node-rank=1", worker}, env,
                      in_mount_namespace(read_only));
  for (DdprunProcess* node : {&node0, &node1}) {
    const int rc = node->wait(120s);
    INFO(node->output());
    CHECK(rc == 0);
  }
  const std::string finding = "node 1 (" + host_name() + "): program directory " +
                              program.path() + " is not writable: Read-only file system";
  CHECK(node0.output().find(finding) != std::string::npos);
  CHECK(node1.output().find(finding) != std::string::npos);
  CHECK(node0.output().find("starting anyway (--node-check=warn)") != std::string::npos);
  CHECK(std::filesystem::exists(dir.file("started_0_0")));
  CHECK(std::filesystem::exists(dir.file("started_1_0")));
}

TEST_CASE("node check: a node whose wall clock runs a minute ahead is named against node 0's",
          "[launcher][node_check]") {
  // libfaketime shifts the agent's wall clock alone: its steady clock, which every deadline
  // uses, stays the machine's.
  const std::string faketime = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";
#if defined(__SANITIZE_ADDRESS__)
  // The sanitizer's runtime must come first in a process; a preloaded library ahead of it aborts.
  WARN("skipped: LD_PRELOAD of libfaketime and AddressSanitizer do not mix");
  return;
#endif
  if (!std::filesystem::exists(faketime)) {
    WARN("skipped: libfaketime is not installed (scripts/install-deps.sh --tests installs it)");
    return;
  }
  if (const auto why = machine_finding(); !why.empty()) {
    WARN("skipped: this machine itself would be named: " + why);
    return;
  }
  TempDir dir;
  const auto port = port_arg(free_port());
  const std::map<std::string, std::string> env{{"FAKE_TOUCH_DIR", dir.path()}};
  auto ahead = env;
  ahead.insert({{"LD_PRELOAD", faketime},
                {"FAKETIME", "+60s"},
                {"FAKETIME_DONT_FAKE_MONOTONIC", "1"}});
  DdprunProcess node0(fake({"--nnodes=2", "--node-rank=0", port, "--node-check=refuse",
                            "--local-addr=127.0.0.1"}),
                      env);
  DdprunProcess node1(fake({"--nnodes=2", "--node-rank=1", port, "--node-check=refuse",
                            "--local-addr=127.0.0.1"}),
                      ahead);
  const std::string finding = "node 1 (127.0.0.1): its clock is ";
  for (DdprunProcess* node : {&node0, &node1}) {
    const int rc = node->wait(120s);
    INFO(node->output());
    CHECK(rc == ddprun::kExitNodeCheck);
    const auto at = node->output().find(finding);
    REQUIRE(at != std::string::npos);
    // "60.0 s ahead of node 0's", give or take half a round trip.
    const double seconds = std::stod(node->output().substr(at + finding.size()));
    CHECK(seconds == Approx(60).margin(1));
    CHECK(node->output().find(" s ahead of node 0's", at) != std::string::npos);
  }
  CHECK(std::filesystem::is_empty(dir.path()));  // no worker ran
}

namespace {

// A FUSE mount that never answers (the connection is opened, and nothing reads it): whatever
// touches it waits in the kernel, as under a network mount whose server went away. Ending the
// connection makes those waits fail at once; the mount is then detached.
class HungMount {
 public:
  // In this test process's own mount namespace (the agents it starts share it), so that nothing
  // of it is seen outside, even if the test dies. Empty: why it cannot be made here.
  static std::string private_namespace() {
    if (::unshare(CLONE_NEWNS) != 0) return std::string("unshare: ") + std::strerror(errno);
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      return std::string("mount --make-rprivate /: ") + std::strerror(errno);
    }
    return "";
  }

  explicit HungMount(std::string dir) : dir_(std::move(dir)) {
    fd_ = ::open("/dev/fuse", O_RDWR | O_CLOEXEC);
    if (fd_ < 0) {
      error_ = std::string("/dev/fuse: ") + std::strerror(errno);
      return;
    }
    const auto options = "fd=" + std::to_string(fd_) + ",rootmode=40000,user_id=0,group_id=0";
    if (::mount("hung", dir_.c_str(), "fuse", MS_NOSUID | MS_NODEV, options.c_str()) != 0) {
      error_ = std::string("mount -t fuse: ") + std::strerror(errno);
    }
  }
  ~HungMount() {
    if (fd_ >= 0) ::close(fd_);
    if (error_.empty()) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  HungMount(const HungMount&) = delete;
  HungMount& operator=(const HungMount&) = delete;

  const std::string& error() const { return error_; }

 private:
  std::string dir_;
  int fd_ = -1;
  std::string error_;
};

}  // namespace

TEST_CASE("node check: a program directory on a mount that does not answer is named within the "
          "probe's deadline, and refuse ends the job", "[launcher][node_check]") {
  if (const auto why = HungMount::private_namespace(); !why.empty()) {
    WARN("skipped: no mount namespace of its own here: " + why);
    return;
  }
  TempDir dir, hung, fine;
  // The nodes run one program from two directories: node 0's stops answering once it has
  // started, node 1's stays healthy, so that a writable program directory is expected.
  for (const auto* program : {&hung, &fine}) {
    std::filesystem::copy_file(FAKE_WORKER_BINARY, program->file("worker"));
    std::filesystem::permissions(program->file("worker"), std::filesystem::perms::owner_all);
  }
  const auto port = port_arg(free_port());
  const std::map<std::string, std::string> env{{"FAKE_TOUCH_DIR", dir.path()}};
  const std::vector<std::string> flags{"--nnodes=2", port, "--node-check=refuse", "--no-python"};
  DdprunProcess node0(flags + std::vector<std::string>{"--node-rank=0", hung.file("worker")}, env);
  REQUIRE(wait_until([&] { return node0.output().find("waiting for the others") !=
                                  std::string::npos; }, 60s));
  HungMount mount(hung.path());
  if (!mount.error().empty()) {
    WARN("skipped: cannot mount a FUSE file system here: " + mount.error());
    return;
  }
  DdprunProcess node1(flags + std::vector<std::string>{"--node-rank=1", fine.file("worker")}, env);
  const std::string finding = "node 0 (" + host_name() + "): program directory " + hung.path() +
                              " did not answer within " +
                              std::to_string(ddprun::kDirProbeTimeout.count() / 1000) +
                              "s (a hung network mount?)";
  for (DdprunProcess* node : {&node0, &node1}) {
    const int rc = node->wait(120s);
    INFO(node->output());
    CHECK(rc == ddprun::kExitNodeCheck);
    CHECK(node->output().find(finding) != std::string::npos);
  }
  CHECK(std::filesystem::is_empty(dir.path()));  // no worker ran
}

TEST_CASE("node check: a job of healthy nodes names nothing", "[launcher][node_check]") {
  TempDir dir;
  if (const auto why = machine_finding(); !why.empty()) {
    WARN("skipped: this machine itself would be named: " + why);
    return;
  }
  const auto port = port_arg(free_port());
  const std::map<std::string, std::string> env{{"FAKE_TOUCH_DIR", dir.path()}};
  DdprunProcess node0(fake({"--nnodes=2", "--node-rank=0", port, "--node-check=refuse"}), env);
  DdprunProcess node1(fake({"--nnodes=2", "--node-rank=1", port, "--node-check=refuse"}), env);
  for (DdprunProcess* node : {&node0, &node1}) {
    const int rc = node->wait(120s);
    INFO(node->output());
    CHECK(rc == 0);
    CHECK(node->output().find("node check: 2 node(s), nothing found") != std::string::npos);
  }
  CHECK(std::filesystem::exists(dir.file("started_1_0")));
}
