#include "process/line_splitter.hpp"

namespace ddprun {

void LineSplitter::end_piece(std::vector<SplitLine>& out, bool redraw) {
  if (!(redraw && pending_.empty())) out.push_back(SplitLine{std::move(pending_), redraw});
  pending_.clear();
}

std::vector<SplitLine> LineSplitter::feed(std::string_view bytes) {
  std::vector<SplitLine> lines;
  // Pieces leave only while more than max_line_ bytes are pending: a piece of exactly
  // max_line_ waits, since the next byte may end the line (no spurious empty line), and the
  // pieces are the same however the pipe chunked the stream.
  auto emit_long_pieces = [&] {
    while (pending_.size() > max_line_) {
      // Cut before a UTF-8 continuation byte rather than inside a character (at most 3 back).
      std::size_t cut = max_line_;
      for (int back = 0; back < 3 && cut > 1 &&
                         (static_cast<unsigned char>(pending_[cut]) & 0xC0) == 0x80;
           ++back) {
        --cut;
      }
      lines.push_back(SplitLine{pending_.substr(0, cut), false});
      pending_.erase(0, cut);
    }
  };
  while (!bytes.empty()) {
    if (after_cr_) {
      after_cr_ = false;
      if (bytes.front() == '\n') {  // "\r\n": one line end
        end_piece(lines, false);
        bytes.remove_prefix(1);
        continue;
      }
      end_piece(lines, true);
    }
    const auto end = bytes.find_first_of("\r\n");
    if (end == std::string_view::npos) {
      pending_.append(bytes);
      break;
    }
    pending_.append(bytes.substr(0, end));
    emit_long_pieces();
    if (bytes[end] == '\r') {
      after_cr_ = true;
    } else {
      end_piece(lines, false);
    }
    bytes.remove_prefix(end + 1);
  }
  emit_long_pieces();
  return lines;
}

std::vector<SplitLine> LineSplitter::finish() {
  std::vector<SplitLine> lines;
  after_cr_ = false;
  if (!pending_.empty()) lines.push_back(SplitLine{std::move(pending_), false});
  pending_.clear();
  return lines;
}

}  // namespace ddprun
