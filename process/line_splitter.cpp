#include "process/line_splitter.hpp"

namespace ddprun {

std::vector<std::string> LineSplitter::feed(std::string_view bytes) {
  std::vector<std::string> lines;
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
      lines.push_back(pending_.substr(0, cut));
      pending_.erase(0, cut);
    }
  };
  while (!bytes.empty()) {
    auto nl = bytes.find('\n');
    if (nl == std::string_view::npos) {
      pending_.append(bytes);
      break;
    }
    pending_.append(bytes.substr(0, nl));
    emit_long_pieces();
    lines.push_back(std::move(pending_));
    pending_.clear();
    bytes.remove_prefix(nl + 1);
  }
  emit_long_pieces();
  return lines;
}

std::vector<std::string> LineSplitter::finish() {
  std::vector<std::string> lines;
  if (!pending_.empty()) lines.push_back(std::move(pending_));
  pending_.clear();
  return lines;
}

}  // namespace ddprun
