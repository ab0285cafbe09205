#pragma once
// Process resource limits.

namespace ddprun {

// Raises the soft limit on open files to the hard limit. Every agent holds a few store
// connections, so a store serving thousands of nodes needs more than the usual 1024.
// Returns the new soft limit (or the old one if it could not be raised).
long raise_open_files_limit();

}  // namespace ddprun
