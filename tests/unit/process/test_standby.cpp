// What a warm standby starts with, and which launches it may serve (process/standby.hpp).

#include <catch2/catch.hpp>

#include <fstream>

#include <nlohmann/json.hpp>

#include "process/standby.hpp"
#include "testing/test_util.hpp"

using namespace ddprun;

namespace {

StandbyOptions options() {
  StandbyOptions o;
  o.attempt_variables = {"RANK", "MASTER_PORT"};
  return o;
}

// A script that exists: a standby runs source files only.
const std::string& script() {
  static test::TempDir dir;
  static const std::string path = [] {
    const auto p = dir.file("train.py");
    std::ofstream(p) << "print('training')\n";
    return p;
  }();
  return path;
}

WorkerLaunch python_launch() {
  WorkerLaunch w;
  w.local_rank = 1;
  w.argv = {"python3", "-u", script(), "--lr=0.1"};
  w.env = {"PATH=/usr/bin", "RANK=3", "MASTER_PORT=29500", "OMP_NUM_THREADS=1"};
  return w;
}

}  // namespace

TEST_CASE("a standby starts the interpreter on the bootstrap, without the attempt's variables",
          "[process][standby]") {
  const auto s = standby_launch(python_launch(), options());
  REQUIRE(s.has_value());
  CHECK(s->argv == std::vector<std::string>{"python3", "-u", "-c", standby_bootstrap()});
  CHECK(s->env == std::vector<std::string>{"OMP_NUM_THREADS=1", "PATH=/usr/bin"});
  CHECK(s->local_rank == 1);

  auto native = python_launch();
  native.argv = {"./ddp_resnet", "--epochs=1"};
  CHECK_FALSE(standby_launch(native, options()).has_value());
  // What a cold python runs otherwise: a directory's or a zip archive's __main__.py, a .pyc.
  test::TempDir dir;
  std::ofstream(dir.file("app.pyz")) << "PK\x03\x04";
  std::ofstream(dir.file("zipped.py")) << "PK\x03\x04";
  std::ofstream(dir.file("train.pyc")) << "compiled";
  for (const auto& other : {dir.path(), dir.file("app.pyz"), dir.file("zipped.py"),
                            dir.file("train.pyc"), dir.file("missing.py")}) {
    auto launch = python_launch();
    launch.argv[2] = other;
    CHECK_FALSE(standby_launch(launch, options()).has_value());
  }
  auto module = python_launch();
  module.argv = {"python3", "-u", "-m", "pkg.train"};
  CHECK(standby_launch(module, options()).has_value());

  // A program that speaks the protocol itself starts as it is.
  auto speaks = options();
  speaks.native = true;
  const auto n = standby_launch(native, speaks);
  REQUIRE(n.has_value());
  CHECK(n->argv == native.argv);
  CHECK(n->env == std::vector<std::string>{"OMP_NUM_THREADS=1", "PATH=/usr/bin"});
  CHECK(nlohmann::json::parse(standby_plan_message(native, speaks))["args"] ==
        nlohmann::json({"--epochs=1"}));
}

TEST_CASE("a standby serves a launch that differs from its own in the attempt's variables only",
          "[process][standby]") {
  const auto made_for = python_launch();
  auto next = made_for;
  next.env = {"RANK=5", "OMP_NUM_THREADS=1", "MASTER_PORT=29611", "PATH=/usr/bin"};
  CHECK(standby_serves(made_for, next, options()));
  // The log files move with each attempt; whether there are any is what counts.
  next.output.stdout_file = "/logs/attempt_1/1/stdout.log";
  auto logged = made_for;
  logged.output.stdout_file = "/logs/attempt_0/1/stdout.log";
  CHECK(standby_serves(logged, next, options()));
  CHECK_FALSE(standby_serves(made_for, next, options()));

  auto threads = made_for;
  threads.env = {"PATH=/usr/bin", "RANK=3", "MASTER_PORT=29500", "OMP_NUM_THREADS=4"};
  CHECK_FALSE(standby_serves(made_for, threads, options()));
  auto argv = made_for;
  argv.argv.back() = "--lr=0.2";
  CHECK_FALSE(standby_serves(made_for, argv, options()));
  auto placed = made_for;
  placed.placement.cpus = {0, 1};
  CHECK_FALSE(standby_serves(made_for, placed, options()));
  auto raw = made_for;
  raw.output.raw = true;
  CHECK_FALSE(standby_serves(made_for, raw, options()));
}

TEST_CASE("the standby's messages: its plan, then the handover", "[process][standby]") {
  const auto plan = nlohmann::json::parse(standby_plan_message(python_launch(), options()));
  CHECK(plan["args"] == nlohmann::json({script(), "--lr=0.1"}));
  CHECK(plan["modules"] == nlohmann::json({"torch"}));
  CHECK(plan["optional"] == true);
  auto named = options();
  named.modules = {"numpy", "torch"};
  const auto strict = nlohmann::json::parse(standby_plan_message(python_launch(), named));
  CHECK(strict["modules"] == nlohmann::json({"numpy", "torch"}));
  CHECK(strict["optional"] == false);

  const auto go_text = standby_handover_message({"A=1", "B=x=y", "EMPTY="}, {"/usr/bin/python3"});
  CHECK(go_text.back() == '\n');
  CHECK(std::count(go_text.begin(), go_text.end(), '\n') == 1);
  const auto go = nlohmann::json::parse(go_text);
  CHECK(go["env"] == nlohmann::json({{"A", "1"}, {"B", "x=y"}, {"EMPTY", ""}}));
  CHECK(go["orig_argv"] == nlohmann::json({"/usr/bin/python3"}));
  // Not UTF-8: not something JSON can carry; the caller starts the worker cold.
  CHECK_THROWS(standby_handover_message({"X=\xff"}, {"python3"}));
}
