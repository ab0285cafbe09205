#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "process/line_splitter.hpp"

using ddprun::LineSplitter;
using ddprun::SplitLine;
using Lines = std::vector<std::string>;

namespace {

// The pieces' text, each a line (a redraw fails the test: these streams have none).
Lines texts(const std::vector<SplitLine>& pieces) {
  Lines out;
  for (const auto& piece : pieces) {
    CHECK_FALSE(piece.redraw);
    out.push_back(piece.text);
  }
  return out;
}

}  // namespace

TEST_CASE("whole lines in one chunk come out without their newlines", "[agent][lines]") {
  LineSplitter s;
  CHECK(texts(s.feed("alpha\nbeta\n")) == Lines{"alpha", "beta"});
  CHECK(s.finish().empty());
}

TEST_CASE("a line split across chunks is emitted once, whole", "[agent][lines]") {
  LineSplitter s;
  CHECK(s.feed("ab").empty());
  CHECK(texts(s.feed("c\nd")) == Lines{"abc"});
  CHECK(s.feed("e").empty());
  CHECK(texts(s.feed("f\ng\n")) == Lines{"def", "g"});
  CHECK(s.finish().empty());
}

TEST_CASE("byte-at-a-time delivery gives the same lines as one chunk", "[agent][lines]") {
  const std::string text = "first line\n\nthird, after an empty one\nlast\n";
  LineSplitter whole;
  const auto expected = texts(whole.feed(text));
  REQUIRE(expected == Lines{"first line", "", "third, after an empty one", "last"});

  LineSplitter bytewise;
  Lines got;
  for (char c : text) {
    for (auto& line : bytewise.feed(std::string(1, c))) got.push_back(line.text);
  }
  CHECK(got == expected);
  CHECK(bytewise.finish().empty());
}

TEST_CASE("empty lines are kept", "[agent][lines]") {
  LineSplitter s;
  CHECK(texts(s.feed("\n")) == Lines{""});
  CHECK(texts(s.feed("\n\n")) == Lines{"", ""});
  CHECK(texts(s.feed("a\n\nb\n")) == Lines{"a", "", "b"});
  CHECK(s.finish().empty());
}

TEST_CASE("finish() returns the unterminated last line once", "[agent][lines]") {
  LineSplitter s;
  CHECK(texts(s.feed("done\nno newline at e")) == Lines{"done"});
  CHECK(s.feed("nd").empty());
  CHECK(texts(s.finish()) == Lines{"no newline at end"});
  CHECK(s.finish().empty());
  // The splitter is reusable after finish().
  CHECK(texts(s.feed("again\n")) == Lines{"again"});
}

TEST_CASE("finish() on an empty stream or after a newline adds no line", "[agent][lines]") {
  LineSplitter empty;
  CHECK(empty.finish().empty());
  LineSplitter terminated;
  CHECK(texts(terminated.feed("x\n")) == Lines{"x"});
  CHECK(terminated.finish().empty());
}

TEST_CASE("an over-long line without a newline leaves in pieces of the limit",
          "[agent][lines]") {
  LineSplitter s(4);
  CHECK(texts(s.feed("abcdefghij")) == Lines{"abcd", "efgh"});
  CHECK(texts(s.finish()) == Lines{"ij"});
}

TEST_CASE("an over-long line is split the same way whatever the chunking", "[agent][lines]") {
  const std::string text = "abcdefghi\nxy\n";
  const Lines expected{"abcd", "efgh", "i", "xy"};

  LineSplitter whole(4);
  CHECK(texts(whole.feed(text)) == expected);
  CHECK(whole.finish().empty());

  LineSplitter bytewise(4);
  Lines got;
  for (char c : text) {
    for (auto& line : bytewise.feed(std::string(1, c))) got.push_back(line.text);
  }
  CHECK(got == expected);
  CHECK(bytewise.finish().empty());
}

TEST_CASE("a line of exactly the limit is one line, with no empty line after it",
          "[agent][lines]") {
  LineSplitter split_before_newline(4);
  CHECK(split_before_newline.feed("abcd").empty());
  CHECK(texts(split_before_newline.feed("\n")) == Lines{"abcd"});
  CHECK(split_before_newline.finish().empty());

  LineSplitter one_chunk(4);
  CHECK(texts(one_chunk.feed("abcd\nefghefgh\n")) == Lines{"abcd", "efgh", "efgh"});
  CHECK(one_chunk.finish().empty());
}

TEST_CASE("no piece is ever longer than the limit", "[agent][lines]") {
  LineSplitter s(16);
  const std::string big(1000, 'x');
  Lines got = texts(s.feed(big + "\n" + big));
  for (auto& line : s.finish()) got.push_back(line.text);
  std::size_t total = 0;
  for (const auto& line : got) {
    CHECK(line.size() <= 16);
    total += line.size();
  }
  CHECK(total == 2000);
}

TEST_CASE("long lines are never cut inside a UTF-8 character", "[agent][lines]") {
  LineSplitter splitter(8);
  // "ab" then three 3-byte characters: a cut at byte 8 would fall inside the third one.
  std::string text = "ab\xE2\x96\x88\xE2\x96\x88\xE2\x96\x88";
  auto lines = splitter.feed(text + "\n");
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].text == "ab\xE2\x96\x88\xE2\x96\x88");
  CHECK(lines[1].text == "\xE2\x96\x88");
}

TEST_CASE("a lone carriage return ends a redraw, CR LF ends a line", "[agent][lines]") {
  using Pieces = std::vector<SplitLine>;
  LineSplitter s;
  // tqdm's form: every update starts with '\r', so an update ends when the next begins.
  CHECK(s.feed("\r 10%|#").empty());
  CHECK(s.feed("  |\r 20%|## |") == Pieces{{" 10%|#  |", true}});
  CHECK(s.feed("\r100%|###|\n") == Pieces{{" 20%|## |", true}, {"100%|###|", false}});
  // Windows line ends are line ends, also when the pipe splits them.
  CHECK(s.feed("one\r\ntwo\r") == Pieces{{"one", false}});
  CHECK(s.feed("\nthree") == Pieces{{"two", false}});
  // Empty redraws ("\r\r") are nothing to show.
  CHECK(s.feed("\r\r\rfour\n") == Pieces{{"three", true}, {"four", false}});
  // A stream that ends on a '\r' ends with that text as a line.
  CHECK(s.feed("last\r").empty());
  CHECK(s.finish() == Pieces{{"last", false}});
}

TEST_CASE("redraws are the same however the pipe chunks them", "[agent][lines]") {
  const std::string text = "\ra\rbb\r\nccc\rdd\n\r\n";
  LineSplitter whole;
  auto expected = whole.feed(text);
  for (auto& piece : whole.finish()) expected.push_back(piece);
  REQUIRE(expected == std::vector<SplitLine>{{"a", true}, {"bb", false}, {"ccc", true},
                                             {"dd", false}, {"", false}});
  LineSplitter bytewise;
  std::vector<SplitLine> got;
  for (char c : text) {
    for (auto& piece : bytewise.feed(std::string(1, c))) got.push_back(piece);
  }
  for (auto& piece : bytewise.finish()) got.push_back(piece);
  CHECK(got == expected);
}
