#include "common/remove_tree.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace ddprun {

bool remove_tree(int parent, const char* name, int depth) {
  for (int pass = 0; pass < 4; ++pass) {
    if (syscall(SYS_unlinkat, parent, name, AT_REMOVEDIR) == 0 || errno == ENOENT) return true;
    if (errno != ENOTEMPTY || depth == 0) return false;
    const int dir = static_cast<int>(syscall(SYS_openat, parent, name,
                                             O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (dir < 0) return false;
    alignas(dirent64) char entries[4096];
    for (long n; (n = syscall(SYS_getdents64, dir, entries, sizeof(entries))) > 0;) {
      for (long off = 0; off < n;) {
        const auto* entry = reinterpret_cast<const dirent64*>(entries + off);
        off += entry->d_reclen;
        const char* e = entry->d_name;
        if (e[0] == '.' && (e[1] == '\0' || (e[1] == '.' && e[2] == '\0'))) continue;
        if (entry->d_type == DT_DIR ||
            (syscall(SYS_unlinkat, dir, e, 0) != 0 && errno == EISDIR)) {
          remove_tree(dir, e, depth - 1);
        }
      }
    }
    syscall(SYS_close, dir);
  }
  return false;
}

}  // namespace ddprun
