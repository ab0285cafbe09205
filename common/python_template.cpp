#include "common/python_template.hpp"

namespace ddprun {

namespace {

// Python's identifier pattern for templates is ASCII only ("(?a:...)"): bytes of a UTF-8
// character never belong to a name.
bool is_name_start(char c) {
  return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }

// The length of the name `text` starts with; 0 when it starts with none.
std::size_t name_length(std::string_view text) {
  if (text.empty() || !is_name_start(text.front())) return 0;
  std::size_t n = 1;
  while (n < text.size() && is_name_char(text[n])) ++n;
  return n;
}

}  // namespace

std::string template_substitute(std::string_view text, const TemplateLookup& lookup,
                                const TemplateLiteral& literal) {
  std::string out;
  // Literal text not yet passed through `literal`: one call for each run between two values.
  std::string pending;
  auto flush = [&] {
    if (pending.empty()) return;
    out += literal ? literal(pending) : pending;
    pending.clear();
  };
  std::size_t i = 0;
  while (i < text.size()) {
    const auto dollar = text.find('$', i);
    if (dollar == std::string_view::npos) {
      pending.append(text.substr(i));
      break;
    }
    pending.append(text.substr(i, dollar - i));
    const auto rest = text.substr(dollar + 1);
    // Python's alternatives, in its order: "$$", "$name", "${name}", else an invalid "$".
    if (!rest.empty() && rest.front() == '$') {
      pending += '$';
      i = dollar + 2;
      continue;
    }
    std::string_view name;
    std::size_t length = 0;  // the whole placeholder's, "$" and braces included
    if (const auto n = name_length(rest); n > 0) {
      name = rest.substr(0, n);
      length = 1 + n;
    } else if (!rest.empty() && rest.front() == '{') {
      const auto braced = name_length(rest.substr(1));
      if (braced > 0 && braced + 1 < rest.size() && rest[braced + 1] == '}') {
        name = rest.substr(1, braced);
        length = braced + 3;
      }
    }
    if (length == 0) {
      // Invalid: the "$" stays, and what follows it is scanned as any other text.
      pending += '$';
      i = dollar + 1;
      continue;
    }
    if (auto value = lookup(name)) {
      flush();
      out += *value;
    } else {
      pending.append(text.substr(dollar, length));
    }
    i = dollar + length;
  }
  flush();
  return out;
}

}  // namespace ddprun
