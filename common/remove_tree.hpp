#pragma once
// Removing a directory tree with raw system calls: no allocation, no lock, no symbolic link
// followed (unlinkat removes a link itself, never what it points to). Safe in the orphan
// guard's guardian, which shares the agent's memory and may call nothing that allocates; and
// cheaper than std::filesystem::remove_all for the small trees the agent makes (a run's
// scratch directory: ~20 system calls against ~60).

namespace ddprun {

// Removes `name` in the directory `parent` (a descriptor, or AT_FDCWD) with everything in it,
// down to `depth` levels below it. Returns true when it is gone (or was never there). An entry
// of a directory being read may be missed while entries are removed, so a directory that is
// not empty at the end is read again, a few times. Sets errno on failure.
bool remove_tree(int parent, const char* name, int depth);

}  // namespace ddprun
