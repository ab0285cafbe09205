#pragma once
// `--hosts` brings ddprun to hosts that lack it: the remote command is a short POSIX shell
// script that runs ddprun at --remote-ddprun when it is this version, else a copy in the user's
// cache on that host (checked against its SHA-256), else asks for this binary over the same
// session, writes it under a temporary name, checks it, links it into place and runs it.
//
//   script -> sender, on stdout:  "ddprun-stage: cached"  (a checked copy in the cache runs)
//                                 "ddprun-stage: send"    (send the binary: at most once per
//                                                          cache directory tried)
//                                 "ddprun-stage: send bytes" (the file a header named cannot
//                                                          be read: send the bytes instead)
//                                 "ddprun-stage: hello"   (staged: send the hello again)
//   sender -> script, on stdin:   the hello first, as to any agent (a script that stages reads
//                                 it and asks for it again once the copy is in place); for
//                                 each "send", "<size> <sha256>\n" and the bytes, or
//                                 "<size> <sha256> <file>\n" when the bytes are already in
//                                 that file on the host (--hosts=slurm: put there by sbcast).
//
// The cache is ${XDG_CACHE_HOME:-~/.cache}/ddprun/<version>-<sha256>/ddprun, or, when that
// cannot be written (read-only or full home) or another user could change it, /tmp/ddprun-<uid>/
// cache/... in the user's private directory. A file is only ever linked into place (never
// replacing a good one another job wrote), except a copy that fails its check, which is replaced.

#include <memory>
#include <string>
#include <string_view>

namespace ddprun {

inline constexpr std::string_view kStageCached = "ddprun-stage: cached";
inline constexpr std::string_view kStageSend = "ddprun-stage: send";
// The file a header named is not there (another host sharing /tmp took it): the bytes, please.
inline constexpr std::string_view kStageSendBytes = "ddprun-stage: send bytes";
inline constexpr std::string_view kStageHello = "ddprun-stage: hello";
// The script's exit code when no cache directory could take the copy.
inline constexpr int kStageFailedCode = 125;

// A ddprun binary as it is sent: this process's own executable.
struct StagedBinary {
  std::string version;
  std::string sha256;  // lowercase hex
  std::shared_ptr<const std::string> bytes;
  // Not empty: every host has the bytes in this file already (sbcast), and only the header
  // goes on the session.
  std::string file_on_hosts;

  std::string header() const;  // "<size> <sha256>[ <file_on_hosts>]\n"
};

// Where sbcast puts the binary on every node: a name no other user can guess, matched by the
// staging script, which accepts no other.
inline constexpr std::string_view kBroadcastPrefix = "/tmp/ddprun-bcast-";

// Reads /proc/self/exe and its digest (libcrypto). Throws Error saying what failed.
std::shared_ptr<const StagedBinary> read_own_binary();

// The remote command (one shell command line, as ssh takes it) that runs `remote_ddprun
// --ddprun-session` when it is `binary`'s version, and otherwise stages `binary`.
std::string staging_command(std::string_view remote_ddprun, const StagedBinary& binary);

}  // namespace ddprun
