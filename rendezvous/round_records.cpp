#include "rendezvous/round_records.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.hpp"

namespace ddprun {

using nlohmann::json;

namespace {

// Parses `text` and hands the object to `read`; a parse error or a missing or mistyped field
// becomes a RendezvousError naming `what`.
template <typename T, typename Read>
T decode(const std::string& text, const char* what, Read read) {
  try {
    return read(json::parse(text));
  } catch (const json::exception& e) {
    throw RendezvousError(fmt::format("malformed {} '{}': {}", what, text, e.what()));
  }
}

}  // namespace

std::string encode_node(const ElasticNode& n) {
  return json{{"id", n.id},
              {"host", n.host},
              {"nproc", n.nproc},
              {"prev_rank", n.prev_rank},
              {"failures", n.failures},
              {"prev_round", n.prev_round},
              {"prev_members", n.prev_members},
              {"prev_ring", n.prev_ring}}
      .dump();
}

ElasticNode decode_node(const std::string& text) {
  return decode<ElasticNode>(text, "node descriptor", [](const json& j) {
    return ElasticNode{j.at("id"),
                       j.at("host"),
                       j.at("nproc"),
                       j.at("prev_rank"),
                       j.at("failures"),
                       j.value("prev_round", -1),
                       j.value("prev_members", 0),
                       j.value("prev_ring", -1)};
  });
}

std::string encode_assignment(const RoundAssignment& a) {
  return json{{"group_rank", a.group_rank}, {"base_rank", a.base_rank},
              {"successor_host", a.successor_host}}.dump();
}

RoundAssignment decode_assignment(const std::string& text) {
  return decode<RoundAssignment>(text, "assignment", [](const json& j) {
    return RoundAssignment{j.at("group_rank"), j.at("base_rank"), j.at("successor_host")};
  });
}

namespace {

json closed_json(const ClosedRound& c) {
  auto j = json{{"members", c.members},       {"world_size", c.world_size},
                {"failures", c.failures},     {"master_host", c.master_host},
                {"ring_round", c.ring_round}, {"ranks_of", c.ranks_of}};
  if (!c.closer.empty()) j["closer"] = c.closer;
  return j;
}

ClosedRound closed_from(const json& j) {
  return ClosedRound{j.at("members"),
                     j.at("world_size"),
                     j.at("failures"),
                     j.at("master_host"),
                     j.value("ring_round", -1),
                     j.value("ranks_of", -1),
                     j.value("closer", std::string())};
}

}  // namespace

std::string encode_closed(const ClosedRound& c) { return closed_json(c).dump(); }

ClosedRound decode_closed(const std::string& text) {
  return decode<ClosedRound>(text, "round record", closed_from);
}

std::string encode_settled(const SettledRound& s) {
  auto j = closed_json(s.closed);
  j["round"] = s.round;
  return j.dump();
}

SettledRound decode_settled(const std::string& text) {
  return decode<SettledRound>(text, "settled round record", [](const json& j) {
    return SettledRound{j.at("round"), closed_from(j)};
  });
}

}  // namespace ddprun
