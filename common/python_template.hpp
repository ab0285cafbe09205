#pragma once
// Python's string.Template.safe_substitute, which torchrun applies to each worker's command line
// (its local rank) and to its log line prefix template (TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE):
// ddprun substitutes exactly what torchrun would, and leaves alone what torchrun leaves alone.

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace ddprun {

// A placeholder's value, or nullopt for a name the template leaves as written.
using TemplateLookup = std::function<std::optional<std::string>(std::string_view name)>;
// Literal text as the result needs it written (escaped for another template syntax, say).
using TemplateLiteral = std::function<std::string(std::string_view text)>;

// `text` with "$name" and "${name}" replaced by lookup(name) where it has a value, and "$$" by
// "$". A name is ASCII [_a-zA-Z][_a-zA-Z0-9]*, the longest such run after "$" ("$local_rankX"
// names local_rankX), looked up as written (case-sensitive). Everything else stays as written:
// a name without a value, and a "$" that starts none of these ("$1", "${", "${a b}", "$" at the
// end), after which the scan goes on. With `literal`, every piece of the result that is not a
// looked-up value (the text around placeholders, the "$" of "$$", what stays as written) is
// passed through it.
std::string template_substitute(std::string_view text, const TemplateLookup& lookup,
                                const TemplateLiteral& literal = {});

}  // namespace ddprun
