// template_substitute against what Python 3.11's string.Template.safe_substitute returns for
// the same text (each expectation is that of Template(text).safe_substitute(local_rank="3")).

#include <catch2/catch.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/python_template.hpp"

using ddprun::template_substitute;

namespace {

// torchrun's mapping for the command line: local_rank alone.
std::string rank3(std::string_view text) {
  return template_substitute(text, [](std::string_view name) -> std::optional<std::string> {
    if (name == "local_rank") return "3";
    return std::nullopt;
  });
}

}  // namespace

TEST_CASE("template: $name and ${name} are substituted", "[common][template]") {
  CHECK(rank3("$local_rank") == "3");
  CHECK(rank3("${local_rank}") == "3");
  CHECK(rank3("--out=ckpt_$local_rank") == "--out=ckpt_3");
  CHECK(rank3("$local_rank.x") == "3.x");
  CHECK(rank3("${local_rank}x") == "3x");
  CHECK(rank3("a$local_rank/b${local_rank}$local_rank") == "a3/b33");
  CHECK(rank3("") == "");
  CHECK(rank3("no placeholder") == "no placeholder");
}

TEST_CASE("template: $$ is one $, and wins over a name after it", "[common][template]") {
  CHECK(rank3("$$") == "$");
  CHECK(rank3("a$$b") == "a$b");
  CHECK(rank3("$$local_rank") == "$local_rank");
  CHECK(rank3("$$${local_rank}") == "$3");
  CHECK(rank3("$$$") == "$$");
  CHECK(rank3("$$$$") == "$$");
}

TEST_CASE("template: names are the longest ASCII run, case-sensitive", "[common][template]") {
  CHECK(rank3("$local_rankX") == "$local_rankX");
  CHECK(rank3("$local_rank_") == "$local_rank_");
  CHECK(rank3("$local_rank0") == "$local_rank0");
  CHECK(rank3("$LOCAL_RANK") == "$LOCAL_RANK");
  CHECK(rank3("${LOCAL_RANK}") == "${LOCAL_RANK}");
  CHECK(rank3("$local_rank-1") == "3-1");
}

TEST_CASE("template: an unknown name stays as written", "[common][template]") {
  CHECK(rank3("$other") == "$other");
  CHECK(rank3("${other}") == "${other}");
  CHECK(rank3("$other$local_rank") == "$other3");
  CHECK(rank3("${other}$$") == "${other}$");
  CHECK(rank3("$_") == "$_");
}

TEST_CASE("template: a $ that starts no placeholder stays, and the scan goes on after it",
          "[common][template]") {
  CHECK(rank3("$") == "$");
  CHECK(rank3("a$") == "a$");
  CHECK(rank3("$1") == "$1");
  CHECK(rank3("$1$local_rank") == "$13");
  CHECK(rank3("${") == "${");
  CHECK(rank3("${x") == "${x");
  CHECK(rank3("${local_rank") == "${local_rank");
  CHECK(rank3("${}") == "${}");
  CHECK(rank3("${1x}") == "${1x}");
  CHECK(rank3("${a b}") == "${a b}");
  CHECK(rank3("${ local_rank}") == "${ local_rank}");
  CHECK(rank3("$-") == "$-");
  CHECK(rank3("$ local_rank") == "$ local_rank");
  CHECK(rank3("${$local_rank}") == "${3}");
}

TEST_CASE("template: bytes that are not ASCII are text, never part of a name",
          "[common][template]") {
  CHECK(rank3("\xc3\xa9$local_rank\xc3\xa9") == "\xc3\xa9" "3\xc3\xa9");
  CHECK(rank3("$\xc3\xa9") == "$\xc3\xa9");
  CHECK(rank3("${local_rank\xc3\xa9}") == "${local_rank\xc3\xa9}");
  CHECK(rank3("$local_rank\xff") == "3\xff");
}

TEST_CASE("template: literal text goes through the literal function, values do not",
          "[common][template]") {
  std::vector<std::string> pieces;
  auto lookup = [](std::string_view name) -> std::optional<std::string> {
    if (name == "v") return "{V}";
    return std::nullopt;
  };
  auto literal = [&pieces](std::string_view text) {
    pieces.emplace_back(text);
    return "<" + std::string(text) + ">";
  };
  CHECK(template_substitute("a$$b${v}$x${y}$1$v", lookup, literal) == "<a$b>{V}<$x${y}$1>{V}");
  CHECK(pieces == std::vector<std::string>{"a$b", "$x${y}$1"});
  pieces.clear();
  CHECK(template_substitute("$v", lookup, literal) == "{V}");
  CHECK(pieces.empty());
  CHECK(template_substitute("", lookup, literal).empty());
}
