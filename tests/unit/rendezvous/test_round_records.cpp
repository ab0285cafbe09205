// The elastic round's records: what the encoders write, the decoders read back, and what they
// say about a store value that is not such a record.

#include <catch2/catch.hpp>

#include "common/error.hpp"
#include "rendezvous/job_settings.hpp"
#include "rendezvous/round_records.hpp"

using namespace ddprun;

TEST_CASE("round records: descriptors, assignments and the closed round round-trip", "[rendezvous]") {
  const ElasticNode node{"h:42", "10.0.0.7", 4, 2, 1};
  const auto n = decode_node(encode_node(node));
  CHECK(n.id == "h:42");
  CHECK(n.host == "10.0.0.7");
  CHECK(n.nproc == 4);
  CHECK(n.prev_rank == 2);
  CHECK(n.failures == 1);
  CHECK(n.prev_round == -1);
  CHECK(n.prev_members == 0);
  CHECK(n.prev_ring == -1);
  ElasticNode stayer = node;
  stayer.prev_round = 7;
  stayer.prev_members = 3;
  stayer.prev_ring = 6;
  const auto s = decode_node(encode_node(stayer));
  CHECK(s.prev_round == 7);
  CHECK(s.prev_members == 3);
  CHECK(s.prev_ring == 6);

  const auto a = decode_assignment(encode_assignment({3, 12, "10.0.0.9"}));
  CHECK(a.group_rank == 3);
  CHECK(a.base_rank == 12);
  CHECK(a.successor_host == "10.0.0.9");

  const auto c = decode_closed(encode_closed({5, 20, 2, "10.0.0.1", -1, -1, ""}));
  CHECK(c.members == 5);
  CHECK(c.world_size == 20);
  CHECK(c.failures == 2);
  CHECK(c.master_host == "10.0.0.1");
  CHECK(c.ring_round == -1);
  CHECK(c.ranks_of == -1);
  CHECK(c.closer.empty());
  const auto kept = decode_closed(encode_closed({5, 20, 2, "10.0.0.1", 4, 7, "h:9#2"}));
  CHECK(kept.ring_round == 4);
  CHECK(kept.ranks_of == 7);
  CHECK(kept.closer == "h:9#2");
  // A record without the ring's fields keeps no ring and no ranks.
  const auto bare =
      decode_closed("{\"members\":2,\"world_size\":2,\"failures\":0,\"master_host\":\"h\"}");
  CHECK(bare.ring_round == -1);
  CHECK(bare.ranks_of == -1);
}

TEST_CASE("round records: a value that is not the record is a rendezvous error naming it",
          "[rendezvous]") {
  CHECK_THROWS_AS(decode_node("not json"), RendezvousError);
  CHECK_THROWS_WITH(decode_node("{\"id\":\"x\"}"),
                    Catch::StartsWith("malformed node descriptor '{\"id\":\"x\"}'"));
  CHECK_THROWS_WITH(decode_assignment("[1,2]"), Catch::StartsWith("malformed assignment '[1,2]'"));
  CHECK_THROWS_WITH(decode_closed("{\"members\":\"three\",\"world_size\":1,\"failures\":0,"
                                  "\"master_host\":\"h\"}"),
                    Catch::StartsWith("malformed round record"));
}

TEST_CASE("job settings: the differences are named, both values shown", "[rendezvous]") {
  using ddprun::JobSettings;
  const JobSettings mine{{"--max-restarts", "0"}, {"--hang-timeout", "0s"}, {"the program", "a.py"}};
  const JobSettings theirs{{"--max-restarts", "3"}, {"--hang-timeout", "0s"}, {"the program", "b.py"}};
  CHECK(ddprun::describe_difference(mine, theirs, "node 0 (a)") ==
        "--max-restarts=0 where node 0 (a) has --max-restarts=3; the program a.py where node 0 "
        "(a) has the program b.py");
  CHECK(ddprun::describe_difference(mine, mine, "node 0 (a)").empty());
  CHECK(ddprun::decode_settings(ddprun::encode_settings(mine)) == mine);
  CHECK_THROWS_AS(ddprun::decode_settings("{not json"), ddprun::RendezvousError);
}

TEST_CASE("job settings: a node check names its protocol's version, so that agents of two "
          "ddprun versions are told apart whichever came first", "[rendezvous]") {
  LaunchConfig config;
  config.program = "true";
  const auto setting = [](const JobSettings& settings) {
    for (const auto& [flag, value] : settings) {
      if (flag == "--node-check") return value;
    }
    return std::string("(none)");
  };
  CHECK(setting(agreed_settings(config)) == "off");
  config.node_check = NodeCheck::kWarn;
  const auto mine = agreed_settings(config);
  const auto version = "warn (check version " + std::to_string(kNodeCheckProtocol) + ")";
  CHECK(setting(mine) == version);
  // Against a ddprun that wrote the mode alone, either way round.
  auto older = mine;
  for (auto& [flag, value] : older) {
    if (flag == "--node-check") value = "warn";
  }
  CHECK(describe_difference(mine, older, "node 0 (a)") ==
        "--node-check=" + version + " where node 0 (a) has --node-check=warn");
  CHECK(describe_difference(older, mine, "node 0 (a)") ==
        "--node-check=warn where node 0 (a) has --node-check=" + version);
}

TEST_CASE("job settings: a setting only the other node has is named too", "[rendezvous]") {
  const JobSettings mine{{"--max-restarts", "3"}};
  const JobSettings theirs{{"--max-restarts", "3"}, {"the program", "a.py"}};
  CHECK(describe_difference(mine, theirs, "node 0 (a)") ==
        "the program (not set) where node 0 (a) has the program a.py");
  CHECK(describe_difference(theirs, mine, "node 0 (a)") ==
        "the program a.py where node 0 (a) has the program (not set)");
}
