// The flag value parsers on their own: accepted forms, conversions, and error messages.

#include <catch2/catch.hpp>

#include <csignal>
#include <regex>

#include "agent/gpu_check.hpp"
#include "common/error.hpp"
#include "launcher/gpu_count.hpp"
#include "launcher/value_parsers.hpp"

using namespace ddprun;
using namespace std::chrono_literals;
using Catch::Contains;

TEST_CASE("parse_nnodes", "[launcher][parsers]") {
  CHECK(parse_nnodes("4", "--nnodes") == std::pair{4, 4});
  CHECK(parse_nnodes(" 1:8 ", "--nnodes") == std::pair{1, 8});
  CHECK(parse_nnodes("3:3", "--nnodes") == std::pair{3, 3});
  CHECK_THROWS_MATCHES(parse_nnodes("2:1", "--nnodes"), ConfigError,
                       Catch::Message("--nnodes=2:1: MIN must be <= MAX"));
  CHECK_THROWS_WITH(parse_nnodes("0", "PET_NNODES"), Contains("PET_NNODES=0") && Contains(">= 1"));
  CHECK_THROWS_WITH(parse_nnodes("1:2:3", "--nnodes"), Contains("expected N or MIN:MAX"));
  CHECK_THROWS_WITH(parse_nnodes("a:b", "--nnodes"), Contains("MIN must be an integer"));
  CHECK_THROWS_WITH(parse_nnodes("99999999999", "--nnodes"), Contains("too large"));
}

TEST_CASE("parse_seconds rounds to milliseconds and rejects non-finite values",
          "[launcher][parsers]") {
  CHECK(parse_seconds("30", "--x") == 30s);
  CHECK(parse_seconds("0.0005", "--x") == 1ms);
  CHECK(parse_seconds("1e-1", "--x") == 100ms);
  CHECK(parse_seconds("0", "--x") == 0ms);
  CHECK_THROWS_WITH(parse_seconds("0", "--x", false), Contains("> 0"));
  CHECK_THROWS_WITH(parse_seconds("-0.5", "--x"), Contains("--x=-0.5: must be >= 0"));
  CHECK_THROWS_AS(parse_seconds("inf", "--x"), ConfigError);
  CHECK_THROWS_AS(parse_seconds("1e300", "--x"), ConfigError);
  CHECK_THROWS_AS(parse_seconds("5s", "--x"), ConfigError);
}

TEST_CASE("parse_port and parse_int_at_least", "[launcher][parsers]") {
  CHECK(parse_port("29500", "--p") == 29500);
  CHECK_THROWS_WITH(parse_port("65536", "--p"), Contains("--p=65536") && Contains("0..65535"));
  CHECK(parse_int_at_least("+3", "--n", 0) == 3);
  CHECK_THROWS_WITH(parse_int_at_least("-1", "--n", 0), Contains("must be >= 0"));
  CHECK_THROWS_WITH(parse_int_at_least("1x", "--n", 0), Contains("expected an integer"));
}

TEST_CASE("parse_std_spec: one value or a per-rank map", "[launcher][parsers]") {
  StdSpec all = parse_std_spec("2", "-r");
  CHECK(all.per_rank.empty());
  CHECK(all.for_rank(99) == Std::kErr);

  StdSpec map = parse_std_spec("0:1, 12:3 ,3:0", "-r");
  CHECK(map.per_rank.size() == 3);
  CHECK(map.for_rank(0) == Std::kOut);
  CHECK(map.for_rank(12) == Std::kAll);
  CHECK(map.for_rank(3) == Std::kNone);
  CHECK(map.for_rank(1) == Std::kNone);

  CHECK_THROWS_WITH(parse_std_spec("0:1,0:2", "--redirects"), Contains("local rank 0 is given twice"));
  CHECK_THROWS_WITH(parse_std_spec("0:7", "--tee"), Contains("'7' for local rank 0 is not 0..3"));
  CHECK_THROWS_WITH(parse_std_spec("-1:1", "--tee"), Contains("'-1' is not a local rank"));
  CHECK_THROWS_WITH(parse_std_spec("5", "--tee"), Contains("--tee=5: expected 0..3"));
}

TEST_CASE("parse_rdzv_conf", "[launcher][parsers]") {
  SECTION("empty keeps the defaults") {
    RdzvConf conf = parse_rdzv_conf("", "--rdzv-conf");
    CHECK(conf.join_timeout == 600s);
    CHECK(conf.last_call_timeout == 30s);
    CHECK(conf.close_timeout == 30s);
    CHECK(conf.keep_alive_interval == 5s);
    CHECK(conf.keep_alive_max_attempt == 3);
    CHECK(conf.read_timeout == 60s);
    CHECK_FALSE(conf.is_host.has_value());
  }
  SECTION("every known key, fractional seconds, unknown keys named, trailing comma") {
    std::vector<std::string> unknown;
    RdzvConf conf = parse_rdzv_conf(
        "join_timeout=10,last_call_timeout=0.5,close_timeout=0,keep_alive_interval=2,"
        "keep_alive_max_attempt=7,read_timeout=3.25,is_host=1, store_type = file ,",
        "--rdzv-conf", &unknown);
    CHECK(conf.join_timeout == 10s);
    CHECK(conf.last_call_timeout == 500ms);
    CHECK(conf.close_timeout == 0ms);
    CHECK(conf.keep_alive_interval == 2s);
    CHECK(conf.keep_alive_max_attempt == 7);
    CHECK(conf.read_timeout == 3250ms);
    CHECK(conf.is_host == true);
    CHECK(unknown == std::vector<std::string>{"store_type"});
  }
  SECTION("timeout is an alias of join_timeout, which wins when both are given") {
    CHECK(parse_rdzv_conf("timeout=20", "c").join_timeout == 20s);
    CHECK(parse_rdzv_conf("join_timeout=5,timeout=20", "c").join_timeout == 5s);
    CHECK(parse_rdzv_conf("timeout=20,join_timeout=5", "c").join_timeout == 5s);
  }
  SECTION("errors name the key") {
    CHECK_THROWS_WITH(parse_rdzv_conf("read_timeout=0", "--rdzv-conf"),
                      Contains("--rdzv-conf read_timeout=0: must be > 0"));
    CHECK_THROWS_WITH(parse_rdzv_conf("is_host=2", "--rdzv-conf"), Contains("is_host=2"));
    CHECK_THROWS_WITH(parse_rdzv_conf("a=1,b", "--rdzv-conf"), Contains("'b' is not key=value"));
  }
}

TEST_CASE("parse_signals converts names to numbers", "[launcher][parsers]") {
  CHECK(parse_signals("SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2", "s") ==
        std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2});
  CHECK(parse_signals(" term , SIGTERM,usr2", "s") == std::vector<int>{SIGTERM, SIGUSR2});
  // Any standard signal torchrun's signal module names, such as Slurm's SIGXCPU.
  CHECK(parse_signals("SIGXCPU,SIGALRM,SIGPWR", "s") ==
        std::vector<int>{SIGXCPU, SIGALRM, SIGPWR});
  CHECK(parse_signals("SIGIOT,SIGPOLL,SIGIO", "s") == std::vector<int>{SIGABRT, SIGIO});
  CHECK_THROWS_WITH(parse_signals("SIGCLD", "s"), Contains("SIGCHLD cannot be forwarded"));
  CHECK_THROWS_WITH(parse_signals("SIGPIPE", "s"), Contains("the agent needs it for itself"));
  CHECK_THROWS_WITH(parse_signals("SIGTREM", "--signals-to-handle"),
                    Contains("--signals-to-handle=SIGTREM: unknown signal 'SIGTREM'"));
  CHECK_THROWS_WITH(parse_signals("SIGSTOP", "--signals-to-handle"),
                    Contains("SIGSTOP cannot be forwarded: no process can catch it"));
  CHECK_THROWS_WITH(parse_signals("TERM,chld", "--signals-to-handle"),
                    Contains("SIGCHLD cannot be forwarded: the agent needs it for itself"));
  CHECK_THROWS_WITH(parse_signals("SIGSEGV", "--signals-to-handle"),
                    Contains("it reports a fault of the agent"));
  CHECK_THROWS_WITH(parse_signals("", "--signals-to-handle"), Contains("empty signal name"));
}

TEST_CASE("parse_rank_list sorts and deduplicates", "[launcher][parsers]") {
  CHECK(parse_rank_list("3, 1,3,0", "f") == std::vector<int>{0, 1, 3});
  CHECK_THROWS_WITH(parse_rank_list("1,x", "--local-ranks-filter"), Contains("'x'"));
}

TEST_CASE("parse_filter_list: ,, is a comma, empty items go, spaces stay", "[launcher][parsers]") {
  CHECK(parse_filter_list("apple,orange") == std::vector<std::string>{"apple", "orange"});
  CHECK(parse_filter_list("a,,b,c") == std::vector<std::string>{"a,b", "c"});
  CHECK(parse_filter_list(",x,, ,") == std::vector<std::string>{"x, "});
  CHECK(parse_filter_list(" loss ,") == std::vector<std::string>{" loss "});
  CHECK(parse_filter_list("").empty());
}

TEST_CASE("parse_choice", "[launcher][parsers]") {
  CHECK(parse_choice(" fork ", "--m", {"spawn", "fork"}) == "fork");
  CHECK_THROWS_WITH(parse_choice("x", "--m", {"spawn", "fork"}),
                    Catch::Equals("--m=x: expected one of spawn, fork"));
}

TEST_CASE("log line prefixes", "[launcher][parsers]") {
  CHECK(validate_log_line_prefix("[{role}{local_rank}]:", "p") == "[{role}{local_rank}]:");
  CHECK(validate_log_line_prefix("{time} {host} {node} {rank} {{x}}", "p") ==
        "{time} {host} {node} {rank} {{x}}");
  CHECK_THROWS_WITH(validate_log_line_prefix("{pid}", "p"), Contains("unknown placeholder {pid}"));
  CHECK_THROWS_WITH(validate_log_line_prefix("{rank", "p"), Contains("unmatched '{'"));
  CHECK_THROWS_WITH(validate_log_line_prefix("rank}", "p"), Contains("unmatched '}'"));

  CHECK(convert_log_line_prefix_template("[${role_name}${local_rank}|${rank}]:", "t") ==
        "[{role}{local_rank}|{rank}]:");
  CHECK(convert_log_line_prefix_template("$rank-$$-{x}", "t") == "{rank}-$-{{x}}");
  CHECK(convert_log_line_prefix_template("$local_rank.$role_name", "t") == "{local_rank}.{role}");
}

TEST_CASE("log line prefix templates: what torchrun leaves as written stays text",
          "[launcher][parsers]") {
  // torchrun's safe_substitute keeps unknown names and stray "$" as written; ddprun keeps
  // them as text, braces doubled so that none becomes one of its own placeholders.
  CHECK(convert_log_line_prefix_template("$host|$gpu", "t") == "$host|$gpu");
  CHECK(convert_log_line_prefix_template("${gpu}", "t") == "${{gpu}}");
  CHECK(convert_log_line_prefix_template("${rank", "t") == "${{rank");
  CHECK(convert_log_line_prefix_template("$RANK ${Rank}", "t") == "$RANK ${{Rank}}");
  CHECK(convert_log_line_prefix_template("$rankX $1 $ $", "t") == "$rankX $1 $ $");
  CHECK(convert_log_line_prefix_template("{rank}", "t") == "{{rank}}");
  CHECK(convert_log_line_prefix_template("${ rank}", "t") == "${{ rank}}");
  // "$$" is one "$", and the name after it is text.
  CHECK(convert_log_line_prefix_template("$$rank$$${rank}$$", "t") == "$rank${rank}$");
  CHECK(convert_log_line_prefix_template("", "t").empty());
}

TEST_CASE("random_run_id looks like a UUID4 and differs each time", "[launcher][parsers]") {
  std::string id = random_run_id();
  CHECK(std::regex_match(
      id, std::regex("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")));
  CHECK(random_run_id() != id);
}

TEST_CASE("CUDA_VISIBLE_DEVICES that hides every device", "[launcher][gpu]") {
  CHECK(cuda_devices_hidden(""));
  CHECK(cuda_devices_hidden("  "));
  CHECK(cuda_devices_hidden("-1"));
  CHECK(cuda_devices_hidden("-1,0"));
  CHECK_FALSE(cuda_devices_hidden("0,1"));
  CHECK_FALSE(cuda_devices_hidden("GPU-5e2f"));
  CHECK(visible_cuda_devices() >= 0);
}
