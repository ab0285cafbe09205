#include <catch2/catch.hpp>

#include <csignal>
#include <cstdlib>

#include "agent/worker_env.hpp"

using ddprun::assign_ranks;
using ddprun::build_worker_env;
using ddprun::EnvMap;
using ddprun::WorkerEnvInput;

namespace {

// The worker on node 1 of the contract's example: two nodes with 2 and 1 workers.
WorkerEnvInput node1_of_two_plus_one() {
  WorkerEnvInput in;
  in.ranks = assign_ranks({2, 1}, 1);
  in.local_rank = 0;
  in.master_addr = "10.0.0.1";
  in.master_port = 29500;
  in.error_file = "/tmp/ddprun/attempt_0/0/error.json";
  return in;
}

}  // namespace

TEST_CASE("worker env matches the contract's 2+1 example for the worker on node 1",
          "[agent][env]") {
  const EnvMap base{{"PATH", "/usr/bin:/bin"}, {"HOME", "/home/me"}};
  const EnvMap env = build_worker_env(base, node1_of_two_plus_one());

  // Everything the worker gets, nothing more: the agent's environment plus torchrun's variables.
  const EnvMap expected{
      {"PATH", "/usr/bin:/bin"},
      {"HOME", "/home/me"},
      // The contract's example values.
      {"GROUP_RANK", "1"},
      {"GROUP_WORLD_SIZE", "2"},
      {"LOCAL_RANK", "0"},
      {"LOCAL_WORLD_SIZE", "1"},
      {"RANK", "2"},
      {"ROLE_NAME", "default"},
      {"ROLE_RANK", "2"},
      {"ROLE_WORLD_SIZE", "3"},
      {"WORLD_SIZE", "3"},
      {"TORCHELASTIC_RESTART_COUNT", "0"},
      {"TORCHELASTIC_MAX_RESTARTS", "0"},
      {"TORCHELASTIC_RUN_ID", "none"},
      // The rest of the contract's list.
      {"MASTER_ADDR", "10.0.0.1"},
      {"MASTER_PORT", "29500"},
      {"TORCHELASTIC_USE_AGENT_STORE", "True"},
      {"TORCHELASTIC_ERROR_FILE", "/tmp/ddprun/attempt_0/0/error.json"},
      {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"},
  };
  CHECK(env == expected);
}

TEST_CASE("workers on node 0 of a 2+1 job get ranks 0 and 1", "[agent][env]") {
  WorkerEnvInput in = node1_of_two_plus_one();
  in.ranks = assign_ranks({2, 1}, 0);
  for (int local = 0; local < 2; ++local) {
    INFO("local rank " << local);
    in.local_rank = local;
    const auto env = build_worker_env({}, in);
    CHECK(env.at("LOCAL_RANK") == std::to_string(local));
    CHECK(env.at("RANK") == std::to_string(local));
    CHECK(env.at("ROLE_RANK") == std::to_string(local));
    CHECK(env.at("GROUP_RANK") == "0");
    CHECK(env.at("LOCAL_WORLD_SIZE") == "2");
    CHECK(env.at("WORLD_SIZE") == "3");
  }
}

TEST_CASE("restart count, max restarts, run id and role reach the worker", "[agent][env]") {
  WorkerEnvInput in = node1_of_two_plus_one();
  in.restart_count = 2;
  in.max_restarts = 3;
  in.run_id = "job-42";
  in.role = "trainer";
  const auto env = build_worker_env({}, in);
  CHECK(env.at("TORCHELASTIC_RESTART_COUNT") == "2");
  CHECK(env.at("TORCHELASTIC_MAX_RESTARTS") == "3");
  CHECK(env.at("TORCHELASTIC_RUN_ID") == "job-42");
  CHECK(env.at("ROLE_NAME") == "trainer");
}

TEST_CASE("TORCH_NCCL_ASYNC_ERROR_HANDLING is inherited when set, else 1", "[agent][env]") {
  const auto in = node1_of_two_plus_one();
  CHECK(build_worker_env({}, in).at("TORCH_NCCL_ASYNC_ERROR_HANDLING") == "1");
  CHECK(build_worker_env({{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"}}, in)
            .at("TORCH_NCCL_ASYNC_ERROR_HANDLING") == "0");
  CHECK(build_worker_env({{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"}}, in)
            .at("TORCH_NCCL_ASYNC_ERROR_HANDLING") == "3");
}

TEST_CASE("TORCHELASTIC_SIGNALS_TO_HANDLE names the handled signals, as torchrun 2.x sets it",
          "[agent][env]") {
  auto in = node1_of_two_plus_one();
  CHECK(build_worker_env({}, in).count("TORCHELASTIC_SIGNALS_TO_HANDLE") == 0);
  in.signals_to_handle = {SIGUSR1, SIGTERM, SIGXCPU};
  // torchrun sets it over whatever its own environment held.
  CHECK(build_worker_env({{"TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGINT"}}, in)
            .at("TORCHELASTIC_SIGNALS_TO_HANDLE") == "SIGUSR1,SIGTERM,SIGXCPU");
}

TEST_CASE("OMP_NUM_THREADS is 1 only when asked for and not already set", "[agent][env]") {
  auto in = node1_of_two_plus_one();

  SECTION("not asked for: left unset") {
    in.set_omp_threads = false;
    CHECK(build_worker_env({}, in).count("OMP_NUM_THREADS") == 0);
  }
  SECTION("not asked for: an inherited value is kept") {
    in.set_omp_threads = false;
    CHECK(build_worker_env({{"OMP_NUM_THREADS", "8"}}, in).at("OMP_NUM_THREADS") == "8");
  }
  SECTION("asked for and unset: 1") {
    in.set_omp_threads = true;
    CHECK(build_worker_env({}, in).at("OMP_NUM_THREADS") == "1");
  }
  SECTION("asked for but the user set it: the user's value wins") {
    in.set_omp_threads = true;
    CHECK(build_worker_env({{"OMP_NUM_THREADS", "4"}}, in).at("OMP_NUM_THREADS") == "4");
  }
}

TEST_CASE("the agent's environment is preserved and stale torchrun variables replaced",
          "[agent][env]") {
  const EnvMap base{{"CUDA_VISIBLE_DEVICES", "0,1"},
                    {"EMPTY", ""},
                    {"WITH_EQUALS", "a=b=c"},
                    {"RANK", "99"},
                    {"WORLD_SIZE", "99"},
                    {"MASTER_PORT", "1"}};
  const auto env = build_worker_env(base, node1_of_two_plus_one());
  CHECK(env.at("CUDA_VISIBLE_DEVICES") == "0,1");
  CHECK(env.at("EMPTY") == "");
  CHECK(env.at("WITH_EQUALS") == "a=b=c");
  CHECK(env.at("RANK") == "2");
  CHECK(env.at("WORLD_SIZE") == "3");
  CHECK(env.at("MASTER_PORT") == "29500");
}

TEST_CASE("to_env_strings gives KEY=VALUE for every entry", "[agent][env]") {
  const EnvMap env{{"A", "1"}, {"B", ""}, {"C", "x=y"}};
  CHECK(ddprun::to_env_strings(env) == std::vector<std::string>{"A=1", "B=", "C=x=y"});
  CHECK(ddprun::to_env_strings({}).empty());
}

TEST_CASE("current_environment reads this process's environment", "[agent][env]") {
  REQUIRE(::setenv("DDPRUN_TEST_ENV_PROBE", "v=1 2", 1) == 0);
  const auto env = ddprun::current_environment();
  ::unsetenv("DDPRUN_TEST_ENV_PROBE");
  REQUIRE(env.count("DDPRUN_TEST_ENV_PROBE") == 1);
  CHECK(env.at("DDPRUN_TEST_ENV_PROBE") == "v=1 2");
}

TEST_CASE("$local_rank and ${local_rank} are replaced in every argument, every occurrence",
          "[agent][env]") {
  using Args = std::vector<std::string>;
  const Args argv{"python3", "train.py", "--local_rank=${local_rank}",
                  "--out=/ckpt/${local_rank}/r$local_rank.pt", "${local_rank}$local_rank",
                  "--epochs", "3"};
  CHECK(ddprun::substitute_local_rank(argv, 1) ==
        Args{"python3", "train.py", "--local_rank=1", "--out=/ckpt/1/r1.pt", "11", "--epochs",
             "3"});
  // A multi-digit rank: the scan continues after the inserted text.
  CHECK(ddprun::substitute_local_rank(argv, 12) ==
        Args{"python3", "train.py", "--local_rank=12", "--out=/ckpt/12/r12.pt", "1212",
             "--epochs", "3"});
}

TEST_CASE("the script's name is substituted, the first argument (torchrun's entrypoint) is not",
          "[agent][env]") {
  using Args = std::vector<std::string>;
  CHECK(ddprun::substitute_local_rank({"python3", "-u", "rank_$local_rank.py"}, 2) ==
        Args{"python3", "-u", "rank_2.py"});
  CHECK(ddprun::substitute_local_rank({"run_$local_rank", "a$$b"}, 2) ==
        Args{"run_$local_rank", "a$b"});
}

TEST_CASE("torchrun's other template text: $$ is a $, the rest stays as written",
          "[agent][env]") {
  using Args = std::vector<std::string>;
  const Args argv{"train.py", "--local_rank", "{local_rank}", "$LOCAL_RANK", "${LOCAL_RANK}",
                  "$local_rankX", "$rank", "${rank}", "$", "$1", "${local_rank", ""};
  CHECK(ddprun::substitute_local_rank(argv, 3) == argv);
  CHECK(ddprun::substitute_local_rank({"x", "a$$b", "$$local_rank", "$local_rank.x"}, 3) ==
        Args{"x", "a$b", "$local_rank", "3.x"});
  CHECK(ddprun::substitute_local_rank({}, 3).empty());
  CHECK(ddprun::substitute_local_rank_arg("ckpt_$local_rank", 4) == "ckpt_4");
  CHECK(ddprun::substitute_local_rank_arg("a$$b.py", 4) == "a$b.py");
}

TEST_CASE("worker env: the FileTimer's FIFO and torch 2.x's Flight Recorder settings",
          "[agent][env]") {
  auto in = node1_of_two_plus_one();
  in.timer_file = "/logs/timer.fifo";
  in.flight_recorder_prefix = "/logs/attempt_0/0/nccl_trace_rank_";
  auto env = build_worker_env({}, in);
  CHECK(env["TORCHELASTIC_TIMER_FILE"] == "/logs/timer.fifo");
  CHECK(env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == in.flight_recorder_prefix);
  CHECK(env["TORCH_FR_DUMP_TEMP_FILE"] == in.flight_recorder_prefix);
  CHECK(env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "2000");
  CHECK(env["TORCH_FR_BUFFER_SIZE"] == "2000");
  CHECK(env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1");

  // The user's own setting of either name of a pair wins, and the pair stays as the user set it.
  env = build_worker_env({{"TORCH_FR_DUMP_TEMP_FILE", "/mine/fr_"},
                          {"TORCH_NCCL_TRACE_BUFFER_SIZE", "0"}},
                         in);
  CHECK(env["TORCH_FR_DUMP_TEMP_FILE"] == "/mine/fr_");
  CHECK(env.count("TORCH_NCCL_DEBUG_INFO_TEMP_FILE") == 0);
  CHECK(env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "0");
  CHECK(env.count("TORCH_FR_BUFFER_SIZE") == 0);

  // Without them, nothing is added.
  env = build_worker_env({}, node1_of_two_plus_one());
  CHECK(env.count("TORCHELASTIC_TIMER_FILE") == 0);
  CHECK(env.count("TORCH_FR_DUMP_TEMP_FILE") == 0);
}

TEST_CASE("worker env with --virtual-local-rank: LOCAL_RANK 0 and one device each, for 4 ranks",
          "[agent][env]") {
  WorkerEnvInput in;
  in.ranks = assign_ranks({4}, 0);
  in.virtual_local_rank = true;
  SECTION("the agent has no CUDA_VISIBLE_DEVICES: the local rank names the device") {
    for (int local = 0; local < 4; ++local) {
      in.local_rank = local;
      const EnvMap env = build_worker_env({}, in);
      CHECK(env.at("LOCAL_RANK") == "0");
      CHECK(env.at("CUDA_VISIBLE_DEVICES") == std::to_string(local));
      CHECK(env.at("RANK") == std::to_string(local));  // the real ranks are unchanged
      CHECK(env.at("LOCAL_WORLD_SIZE") == "4");
    }
  }
  SECTION("the agent's list is mapped: entries pass through as written") {
    const EnvMap base{{"CUDA_VISIBLE_DEVICES", "3, 1,GPU-8f2e9c1a,MIG-0c4d"}};
    const std::vector<std::string> expected{"3", "1", "GPU-8f2e9c1a", "MIG-0c4d"};
    for (int local = 0; local < 4; ++local) {
      in.local_rank = local;
      const EnvMap env = build_worker_env(base, in);
      CHECK(env.at("LOCAL_RANK") == "0");
      CHECK(env.at("CUDA_VISIBLE_DEVICES") == expected[local]);
    }
  }
  SECTION("without the flag both are left as they are") {
    in.virtual_local_rank = false;
    in.local_rank = 2;
    const EnvMap env = build_worker_env({{"CUDA_VISIBLE_DEVICES", "3,1,2,0"}}, in);
    CHECK(env.at("LOCAL_RANK") == "2");
    CHECK(env.at("CUDA_VISIBLE_DEVICES") == "3,1,2,0");
  }
}

TEST_CASE("worker env with --mpi-env: Open MPI's names for the same ranks", "[agent][env]") {
  WorkerEnvInput in = node1_of_two_plus_one();
  in.mpi_env = true;
  const EnvMap env = build_worker_env({}, in);
  CHECK(env.at("OMPI_COMM_WORLD_RANK") == "2");
  CHECK(env.at("OMPI_COMM_WORLD_SIZE") == "3");
  CHECK(env.at("OMPI_COMM_WORLD_LOCAL_RANK") == "0");
  CHECK(env.at("OMPI_COMM_WORLD_LOCAL_SIZE") == "1");
  // Open MPI's node rank is the rank on this node across jobs, not the node's index.
  CHECK(env.at("OMPI_COMM_WORLD_NODE_RANK") == "0");
  in.mpi_env = false;
  CHECK(build_worker_env({}, in).count("OMPI_COMM_WORLD_RANK") == 0);
}
