#include "cluster/staging.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>

#include "cluster/session_protocol.hpp"
#include "common/error.hpp"
#include "common/strings.hpp"
#include "common/version.hpp"
#include "common/libcrypto.hpp"

namespace ddprun {
namespace {

// One line, as a login shell of any kind (csh's too) takes a quoted argument: no newline, no
// single quote. $1: --remote-ddprun, $2: the version, $3: the binary's SHA-256.
//
// A cache directory is used only when no other user can change anything on the way to the
// copy: the check of a copy and its start are two steps, and whoever can rename a directory
// above it (or re-point a link) could swap the file between them, or have a root job write
// through a link of theirs. So the path is resolved once (cd -P) and used resolved, and every
// directory from / down to it must be this user's or root's, and writable by no one else
// unless sticky (as /tmp): the rule --log-dir follows. The copy must be this user's (or
// root's) regular file, writable by no one else. A cache that fails the rule is skipped for
// /tmp/ddprun-<uid>, which is made 0700 and must not be a link.
constexpr std::string_view kScript[] = {
    "p=$1 v=$2 s=$3;",
    "if command -v \"$p\" >/dev/null 2>&1 && [ \"$(\"$p\" --version </dev/null 2>/dev/null)\" = \"ddprun $v\" ];",
    "then exec \"$p\" --ddprun-session; fi;",
    // Directories and copies this script makes are the user's alone, whatever umask the
    // login gives (002 with user private groups would make them fail the rule).
    "umask 077; u=$(id -u); t=/tmp/ddprun-$u; o=;",
    // In a user namespace, files of users it does not map (the host's root among them) show as
    // the overflow uid, which is no user of the namespace.
    "{ read -r x y z </proc/self/uid_map; [ \"$x $y $z\" = \"0 0 4294967295\" ] ||",
    "  o=$(cat /proc/sys/kernel/overflowuid); } 2>/dev/null;",
    "ours() { [ \"$1\" = \"$u\" ] || [ \"$1\" = 0 ] || [ \"$1\" = \"$o\" ]; };",
    // safe DIR: r is DIR resolved, when the rule above holds for it; else why says what fails.
    "safe() { r=$(CDPATH= cd -P -- \"$1\" 2>/dev/null && pwd -P) || { why=\"cannot enter $1\"; return 1; };",
    "  q=$r; while :; do",
    "    m=$(stat -c \"%u %a\" -- \"$q\" 2>/dev/null) || { why=\"cannot stat $q\"; return 1; }; set -- $m;",
    "    ours \"$1\" || { why=\"$q belongs to user $1\"; return 1; };",
    "    [ $((0$2 & 022)) = 0 ] || [ $((0$2 & 01000)) != 0 ] ||",
    "      { why=\"$q can be written by others and is not sticky (mode $2)\"; return 1; };",
    "    [ \"$q\" = / ] && return 0; q=${q%/*}; q=${q:-/};",
    "  done; };",
    // good FILE: this user's regular file, no one else may write it, and it is the binary.
    "good() { g=$1; m=$(stat -c \"%u %a %F\" -- \"$g\" 2>/dev/null) && set -- $m && ours \"$1\" &&",
    "  [ \"$3 $4\" = \"regular file\" ] && [ $((0$2 & 022)) = 0 ] &&",
    "  [ \"$(sha256sum <\"$g\" 2>/dev/null)\" = \"$h  -\" ]; };",
    "c=${XDG_CACHE_HOME:-${HOME:+$HOME/.cache}}; set -- ${c:+\"$c/ddprun\"} \"$t/cache\";",
    "h=$s; for b do",
    "  if safe \"$b/$v-$s\" && f=$r/ddprun && good \"$f\";",
    "  then echo \"ddprun-stage: cached\"; exec \"$f\" --ddprun-session; fi;",
    "done;",
    "fail() { echo \"ddprun: cannot stage ddprun $v on $(hostname): $1\" >&2;",
    "  [ -z \"$src\" ] || rm -f \"$src\"; exit 125; }; src=;",
    "for c in head cat sha256sum ln mv stat; do command -v $c >/dev/null || fail \"no $c on PATH\"; done;",
    // The hello the command sent first: it sends it again once the copy is in place.
    "IFS= read -r _ || fail \"the input ended\";",
    "why=\"no cache directory\"; w=;",
    "trap \"rm -f \\\"\\$w\\\"; exit 143\" HUP INT TERM;",
    "mkdir -m 700 \"$t\" 2>/dev/null;",
    "for b do",
    "  if [ \"$b\" = \"$t/cache\" ] && [ -L \"$t\" ]; then why=\"$t is a link\"; continue; fi;",
    "  mkdir -p \"$b\" 2>/dev/null; safe \"$b\" || continue;",
    "  echo \"ddprun-stage: send\";",
    "  IFS=\" \" read -r n h src || fail \"the input ended\";",
    "  case $n in *[!0-9]*|\"\") fail \"not a size: $n\";; esac;",
    "  case $h in *[!0-9a-f]*|\"\") fail \"not a SHA-256: $h\";; esac;",
    // The bytes come on stdin, or are in a file sbcast wrote (checked like any copy).
    "  case $src in \"\"|/tmp/ddprun-bcast-*) ;; *) fail \"not a file to take it from: $src\";; esac;",
    "  if [ -n \"$src\" ] && [ ! -r \"$src\" ]; then echo \"ddprun-stage: send bytes\";",
    "    IFS=\" \" read -r n h src || fail \"the input ended\"; src=; fi;",
    "  if [ -n \"$src\" ]; then get() { cat \"$src\"; }; else get() { head -c \"$n\"; }; fi;",
    "  d=$r/$v-$h;",
    "  if ! mkdir -p \"$d\" 2>/dev/null || ! chmod 700 \"$d\" 2>/dev/null || ! safe \"$d\";",
    "  then get >/dev/null; why=\"cannot create $d\"; continue; fi;",
    // Named after the host too: a home shared by many hosts (NFS) sees the same pid on several.
    "  w=$r/.ddprun.$(hostname).$$; f=$r/ddprun;",
    // A failed write (full, read-only) still reads every byte: the stream stays in step.
    "  if ! get | { cat >\"$w\" 2>/dev/null || { cat >/dev/null; false; }; };",
    "  then rm -f \"$w\"; why=\"cannot write $w (full or read-only)\"; continue; fi;",
    "  if [ \"$(sha256sum <\"$w\")\" != \"$h  -\" ];",
    "  then rm -f \"$w\"; why=\"the copy written to $w is not what was sent\"; continue; fi;",
    "  chmod 700 \"$w\";",
    // Linked, never renamed over a good copy another job put there at the same time; a copy
    // that fails its check is replaced.
    "  if ln \"$w\" \"$f\" 2>/dev/null || good \"$f\" || mv -f \"$w\" \"$f\";",
    "  then rm -f \"$w\" ${src:+\"$src\"}; echo \"ddprun-stage: hello\"; exec \"$f\" --ddprun-session; fi;",
    "  rm -f \"$w\"; why=\"cannot put the copy at $f\";",
    "done;",
    "fail \"$why\"",
};

}  // namespace

std::string StagedBinary::header() const {
  if (!file_on_hosts.empty()) return fmt::format("{} {} {}\n", bytes->size(), sha256, file_on_hosts);
  return fmt::format("{} {}\n", bytes->size(), sha256);
}

std::shared_ptr<const StagedBinary> read_own_binary() {
  constexpr const char* kSelf = "/proc/self/exe";
  const int fd = ::open(kSelf, O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    throw Error(fmt::format("cannot read this ddprun ({}) to send it: {}", kSelf,
                            errno_message(err)));
  }
  auto bytes = std::make_shared<std::string>(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t done = 0;
  while (done < bytes->size()) {
    const auto n = ::read(fd, bytes->data() + done, bytes->size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : 0;
      ::close(fd);
      throw Error(fmt::format("cannot read this ddprun ({}) to send it: {}", kSelf,
                              err != 0 ? errno_message(err) : std::string("it ended early")));
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  const auto& crypto = libcrypto();
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (crypto.evp_digest(bytes->data(), bytes->size(), digest, &size, crypto.evp_sha256(),
                        nullptr) != 1) {
    throw Error("cannot compute the SHA-256 of this ddprun (libcrypto's EVP_Digest failed)");
  }
  auto binary = std::make_shared<StagedBinary>();
  binary->version = ddprun_version();
  for (unsigned int i = 0; i < size; ++i) binary->sha256 += fmt::format("{:02x}", digest[i]);
  binary->bytes = std::move(bytes);
  return binary;
}

std::string staging_command(std::string_view remote_ddprun, const StagedBinary& binary) {
  std::string script;
  for (auto line : kScript) {
    if (!script.empty()) script += ' ';
    // Leading spaces only make the source readable.
    script += line.substr(line.find_first_not_of(' '));
  }
  return fmt::format("exec sh -c {} ddprun-stage {} {} {}", shell_quote(script),
                     shell_quote(remote_ddprun), shell_quote(binary.version),
                     shell_quote(binary.sha256));
}

}  // namespace ddprun
