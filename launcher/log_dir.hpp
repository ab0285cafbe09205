#pragma once

#include <filesystem>
#include <functional>
#include <string>

#include "common/launch_config.hpp"

namespace ddprun {

// The job's log directory: <--log-dir or a new temp dir>/<run id>_<random>, which holds
// attempt_<n>/<local_rank>/ with the workers' error files and, with --redirects or --tee, their
// logs. A temp dir made for a job whose output all goes to the console holds nothing but
// error files, which the agent has read before it reports: it goes with the job (torchrun
// leaves one in /tmp for every run, and a /tmp of tens of thousands makes each new one slow to
// create), and unless TMPDIR says where, it is made in RAM (/dev/shm), so that making and
// removing its directories costs a launch no disk writes. Any other log directory stays, in
// TMPDIR or /tmp.
// Why someone other than this user and root could replace entries of `dir` (a real path) or of
// a directory above it: it, or an ancestor, belongs to another user (not one a user namespace
// leaves unmapped), or is writable by group or others without the sticky bit. Empty when it is
// private in that sense (or does not exist).
std::string why_not_private(const std::filesystem::path& dir);

// Makes `base`/`prefix`<suffix> with a suffix that names nothing yet, drawing suffixes until
// mkdir succeeds (a few tries): an existing name, someone else's directory or link, is never
// reused or followed. Throws ConfigError.
std::filesystem::path make_fresh_dir(const std::filesystem::path& base, const std::string& prefix,
                                     const std::function<std::string()>& random_suffix);

class LogDir {
 public:
  // Makes the directory. Throws ConfigError when --log-dir has no room for a writable one, and
  // Error when no temp directory can be made.
  explicit LogDir(const LaunchConfig& config);
  ~LogDir();
  LogDir(const LogDir&) = delete;
  LogDir& operator=(const LogDir&) = delete;

  const std::string& path() const { return path_; }
  // The scratch directory this run made and removes at its end; empty when it keeps its logs.
  std::string scratch() const { return temp_.string(); }
  // The job failed: a scratch directory that holds ranks' stacks, which its root cause names,
  // is kept.
  void job_failed() { job_failed_ = true; }

 private:
  void remove_temp();

  std::string path_;
  std::filesystem::path temp_;  // ours to remove; empty: the directory stays
  bool job_failed_ = false;
};

}  // namespace ddprun
