#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "process/console_fold.hpp"

using namespace ddprun;
using namespace std::chrono_literals;

namespace {

// A fold whose window ends only when the test says so (run_for), with what it wrote at a
// window's end kept per fd.
struct Harness {
  explicit Harness(std::chrono::milliseconds window = 1h)
      : fold(io.get_executor(), [this](int fd, std::string_view s) { later.emplace_back(fd, s); },
             window) {}

  // What prints at once for one line.
  std::string add(int rank, std::string_view text, FoldMode mode = FoldMode::kNumbers,
                  int fd = 1, std::string_view host = {}) {
    std::string out;
    fold.add(fd, mode, rank, host, "[" + std::to_string(rank) + "]:", text, out);
    return out;
  }

  boost::asio::io_context io;
  std::vector<std::pair<int, std::string>> later;
  ConsoleFold fold;
};

}  // namespace

TEST_CASE("fold: numbers are found where they are numbers, not parts of names", "[fold]") {
  auto numbers = [](std::string_view text) {
    const auto found = find_numbers(text);
    std::vector<std::string> out;
    for (const auto& span : found.spans) out.emplace_back(text.substr(span.pos, span.size));
    return out;
  };
  CHECK(numbers("step 20 loss 0.7134 lr=1e-4 took 12ms") ==
        std::vector<std::string>{"20", "0.7134", "1e-4", "12"});
  CHECK(numbers("resnet18 on cuda:3 x86_64 v1.2") == std::vector<std::string>{"3"});
  CHECK(numbers("delta -0.5, range 3-4") == std::vector<std::string>{"-0.5", "3", "4"});
  CHECK(numbers("12:30:01") == std::vector<std::string>{"12", "30", "01"});
  // Dotted runs are addresses and versions, not numbers to fold into a range.
  CHECK(numbers("from 10.0.0.1 and 127.0.0.1, torch 2.1.0, -1.2.3 at 0.5.") ==
        std::vector<std::string>{"0.5"});
  // Lines that differ only in their numbers share a key; a different word does not.
  CHECK(find_numbers("epoch 1 loss 0.5").key == find_numbers("epoch 22 loss 0.75").key);
  CHECK(find_numbers("epoch 1 loss 0.5").key != find_numbers("epoch 1 gain 0.5").key);
  // The marker byte in the text itself cannot pass for a number.
  CHECK(find_numbers("a \x01").key != find_numbers("a 1").key);
}

TEST_CASE("fold: rank lists are written as ranges", "[fold]") {
  CHECK(format_rank_ranges({0}) == "0");
  CHECK(format_rank_ranges({1, 2, 3, 5, 7, 8, 9}) == "1-3,5,7-9");
  CHECK(format_rank_ranges({}).empty());
}

TEST_CASE("fold: the first occurrence prints at once, the others in one summary", "[fold]") {
  Harness h(50ms);
  CHECK(h.add(0, "epoch 3 done") == "[0]:epoch 3 done\n");
  for (int rank = 1; rank < 1024; ++rank) CHECK(h.add(rank, "epoch 3 done").empty());
  CHECK(h.later.empty());
  h.io.run_for(2s);  // the window's end (the timer is the only work)
  REQUIRE(h.later.size() == 1);
  CHECK(h.later[0] == std::pair<int, std::string>{1, "[ranks 1-1023] the same: epoch 3 done\n"});
  CHECK(h.fold.pending() == 0);
  CHECK(h.fold.folded_lines() == 1023);
}

TEST_CASE("fold: numbers fold into their ranges unless the mode is exact", "[fold]") {
  Harness h;
  CHECK_FALSE(h.add(0, "step 20 loss 0.72 took 31ms").empty());
  CHECK(h.add(1, "step 20 loss 0.71 took 29ms").empty());
  CHECK(h.add(3, "step 20 loss 0.74 took 30ms").empty());
  CHECK(h.add(2, "step 20 delta -0.5").size() > 0);  // different words: printed
  CHECK(h.add(4, "step 20 delta -0.25").empty());
  h.fold.flush();
  REQUIRE(h.later.size() == 2);
  CHECK(h.later[0].second == "[ranks 1,3] the same: step 20 loss 0.71-0.74 took 29-30ms\n");
  CHECK(h.later[1].second == "[rank 4] the same: step 20 delta -0.25\n");

  Harness exact;
  CHECK_FALSE(exact.add(0, "loss 0.5", FoldMode::kExact).empty());
  CHECK_FALSE(exact.add(1, "loss 0.6", FoldMode::kExact).empty());
  CHECK(exact.add(2, "loss 0.5", FoldMode::kExact).empty());
  exact.fold.flush();
  REQUIRE(exact.later.size() == 1);
  CHECK(exact.later[0].second == "[rank 2] the same: loss 0.5\n");
}

TEST_CASE("fold: negative ranges are written with 'to'", "[fold]") {
  Harness h;
  h.add(0, "delta -3");
  h.add(1, "delta -2");
  h.add(2, "delta 4");
  h.fold.flush();
  REQUIRE(h.later.size() == 1);
  CHECK(h.later[0].second == "[ranks 1-2] the same: delta -2 to 4\n");
}

TEST_CASE("fold: a rank's own lines never fold together, and keep their order", "[fold]") {
  // One rank alone: every line prints, however alike.
  Harness one;
  for (int step = 0; step < 5; ++step) {
    CHECK(one.add(0, "step " + std::to_string(step)) ==
          "[0]:step " + std::to_string(step) + "\n");
  }
  one.fold.flush();
  CHECK(one.later.empty());  // nothing was folded: no summary
}

TEST_CASE("fold: a rank whose line folded waits for its summary, so its order holds", "[fold]") {
  Harness h(50ms);
  CHECK(h.add(0, "loading") == "[0]:loading\n");
  CHECK(h.add(5, "loading").empty());
  // Rank 5's next lines differ, but its folded line is not shown yet: they wait for it.
  CHECK(h.add(5, "rank five saw something").empty());
  CHECK(h.add(5, "and more").empty());
  CHECK(h.add(1, "loading").empty());
  h.io.run_for(2s);
  REQUIRE(h.later.size() == 1);
  CHECK(h.later[0].second ==
        "[ranks 1,5] the same: loading\n[5]:rank five saw something\n[5]:and more\n");
  // Free again: its lines print at once.
  CHECK(h.add(5, "rank five again") == "[5]:rank five again\n");
}

TEST_CASE("fold: the same line again from the rank that printed it ends the group first",
          "[fold]") {
  Harness h;
  h.add(0, "step 1");
  h.add(1, "step 1");
  CHECK(h.add(1, "step 2").empty());  // held: rank 1's step 1 is not summarized yet
  // Rank 0's step 2 ends step 1's group: its summary, rank 1's step 2 (now the first), and
  // rank 0's, which folds into it.
  CHECK(h.add(0, "step 2") == "[rank 1] the same: step 1\n[1]:step 2\n");
  h.fold.flush();
  REQUIRE(h.later.size() == 1);
  CHECK(h.later[0].second == "[rank 0] the same: step 2\n");
}

TEST_CASE("fold: flush shows every held line, even ones that fold again", "[fold]") {
  Harness h;
  h.add(0, "a 1");
  h.add(1, "a 2");     // folds
  h.add(1, "b");       // held
  h.add(2, "a 3");     // folds
  h.add(2, "b");       // held
  h.add(2, "c");       // held
  h.fold.flush();
  std::string all;
  for (const auto& [fd, text] : h.later) all += text;
  CHECK(all == "[ranks 1-2] the same: a 2-3\n[1]:b\n[rank 2] the same: b\n[2]:c\n");
  CHECK(h.fold.pending() == 0);
}

TEST_CASE("fold: streams and hosts", "[fold]") {
  Harness h;
  CHECK_FALSE(h.add(0, "warning: x", FoldMode::kNumbers, 2, "a").empty());
  CHECK_FALSE(h.add(1, "warning: x", FoldMode::kNumbers, 1, "a").empty());  // other stream
  CHECK(h.add(2, "warning: x", FoldMode::kNumbers, 2, "b").empty());
  CHECK(h.add(3, "warning: x", FoldMode::kNumbers, 2, "c").empty());
  CHECK(h.add(4, "warning: x", FoldMode::kNumbers, 1, "b").empty());
  h.fold.flush();
  REQUIRE(h.later.size() == 2);
  CHECK(h.later[0] ==
        std::pair<int, std::string>{2, "[ranks 2-3 on 2 hosts] the same: warning: x\n"});
  CHECK(h.later[1] == std::pair<int, std::string>{1, "[rank 4 on b] the same: warning: x\n"});
}

TEST_CASE("fold: off prints every line", "[fold]") {
  Harness h;
  for (int rank = 0; rank < 3; ++rank) {
    CHECK(h.add(rank, "same", FoldMode::kOff) == "[" + std::to_string(rank) + "]:same\n");
  }
  CHECK(h.fold.pending() == 0);
}

TEST_CASE("fold: tagged lines carry rank, host and prefix to the command, whatever the text",
          "[fold]") {
  const auto line = tag_console_line(17, "node-3", "[node-3:17]: \x1f ", "a \x1e b \x1f c");
  const auto tagged = untag_console_line(line);
  REQUIRE(tagged);
  CHECK(tagged->rank == 17);
  CHECK(tagged->host == "node-3");
  CHECK(tagged->prefix == "[node-3:17]: \x1f ");
  CHECK(tagged->text == "a \x1e b \x1f c");
  CHECK(untag_console_line(tag_console_line(0, "h", "", ""))->text.empty());
  // Lines that are not tagged: a worker's own (even one that looks like a tag further in),
  // an agent's log line, or one cut short.
  for (std::string_view bad :
       {"plain line", " \x1e" "1 h 0\x1f" "text", "\x1e" "1 h\x1f" "text", "\x1ex h 0\x1f" "text",
        "\x1e" "1 h 9\x1f" "short", "\x1e" "1 h 0"}) {
    CHECK_FALSE(untag_console_line(bad));
  }
}
