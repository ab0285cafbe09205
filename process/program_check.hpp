#pragma once
// Can this program be executed, and if not, why, in the user's words: the shell's conventions
// (127: not found, 126: found but not executable) and a message naming the path, the PATH that
// was searched for a bare name, and the reason.

#include <string>

namespace ddprun {

struct ProgramCheck {
  std::string path;     // the file that would be executed (empty when not found)
  int exit_code = 0;    // 0: executable; 127: not found; 126: not executable
  std::string message;  // when exit_code != 0: one line saying what, where and why
};

// `program` as given (a bare name is looked up on `path_env`, the PATH the worker gets).
ProgramCheck check_program(const std::string& program, const std::string& path_env);

}  // namespace ddprun
