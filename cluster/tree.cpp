#include "cluster/tree.hpp"

#include <fmt/format.h>

#include "common/error.hpp"
#include "common/strings.hpp"

namespace ddprun {

std::vector<TreeEntry> plan_tree(std::vector<TreeEntry> hosts, int width) {
  const auto n = hosts.size();
  const auto w = static_cast<std::size_t>(std::max(width, 1));
  if (n <= w || w == 1) return hosts;
  std::vector<TreeEntry> top;
  top.reserve(w);
  std::size_t begin = 0;
  for (std::size_t g = 0; g < w; ++g) {
    const std::size_t size = n / w + (g < n % w ? 1 : 0);
    TreeEntry head = std::move(hosts[begin]);
    std::vector<TreeEntry> rest(std::make_move_iterator(hosts.begin() + begin + 1),
                                std::make_move_iterator(hosts.begin() + begin + size));
    head.subtree = plan_tree(std::move(rest), width);
    top.push_back(std::move(head));
    begin += size;
  }
  return top;
}

void for_each_below(const TreeEntry& entry, const std::function<void(const TreeEntry&)>& fn) {
  for (const auto& child : entry.subtree) {
    fn(child);
    for_each_below(child, fn);
  }
}

std::size_t tree_size(const std::vector<TreeEntry>& entries) {
  std::size_t n = 0;
  for (const auto& e : entries) n += 1 + tree_size(e.subtree);
  return n;
}

nlohmann::json tree_to_json(const std::vector<TreeEntry>& entries) {
  auto out = nlohmann::json::array();
  for (const auto& e : entries) {
    // Bytes, as the hello carries them (session_protocol.hpp).
    auto as_text = [](const std::vector<std::string>& bytes) {
      std::vector<std::string> text;
      for (const auto& b : bytes) text.push_back(bytes_to_utf8(b));
      return text;
    };
    out.push_back({{"node", e.node}, {"host", e.host}, {"argv", as_text(e.argv)},
                   {"args", as_text(e.args)}, {"subtree", tree_to_json(e.subtree)}});
  }
  return out;
}

std::vector<TreeEntry> tree_from_json(const nlohmann::json& json) {
  std::vector<TreeEntry> out;
  try {
    for (const auto& j : json) {
      TreeEntry e;
      e.node = j.at("node").get<int>();
      e.host = j.at("host").get<std::string>();
      for (const auto& arg : j.at("argv").get<std::vector<std::string>>()) {
        e.argv.push_back(bytes_from_utf8(arg));
      }
      for (const auto& arg : j.at("args").get<std::vector<std::string>>()) {
        e.args.push_back(bytes_from_utf8(arg));
      }
      if (e.argv.empty()) throw Error("an empty command line");
      e.subtree = tree_from_json(j.at("subtree"));
      out.push_back(std::move(e));
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("malformed subtree in the session hello: {}", e.what()));
  }
  return out;
}

}  // namespace ddprun
