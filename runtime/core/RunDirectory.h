//===- RunDirectory.h - --save DIR: step-numbered checkpoints -------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// `--save DIR` makes DIR a run directory: every save is a complete
// checkpoint DIR/step-NNNNNNNN (written and published by
// Trainer::saveCheckpoint), then DIR/latest, a relative symbolic link, is
// pointed at it by an atomic rename, and checkpoints beyond --keep-last are
// removed, oldest first. `--save-best` keeps DIR/best, the checkpoint with
// the lowest evaluation loss so far. --resume and --init accept DIR (they
// follow `latest`) or any checkpoint directory.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CORE_RUNDIRECTORY_H
#define STRATA_RUNTIME_CORE_RUNDIRECTORY_H

#include <cstdint>
#include <string>
#include <vector>

namespace strata::rt {

/// "step-00000100": the checkpoint saved after step 100.
std::string stepCheckpointName(int64_t step);

/// Checks `--save dir` before training: it may not exist yet (its parent
/// must), or be empty, or be a run directory. Throws RuntimeError.
void checkRunDirectory(const std::string &dir);

/// The run directory's lock: DIR/.lock, held (flock) by the process that
/// publishes checkpoints for the whole run, so that a second job saving to
/// the same directory fails at start-up instead of clobbering it.
class RunDirectoryLock {
public:
  RunDirectoryLock() = default;
  RunDirectoryLock(RunDirectoryLock &&other) noexcept
      : fd_(other.fd_), dir_(std::move(other.dir_)), created_(other.created_) {
    other.fd_ = -1;
  }
  RunDirectoryLock &operator=(RunDirectoryLock &&other) noexcept;
  RunDirectoryLock(const RunDirectoryLock &) = delete;
  RunDirectoryLock &operator=(const RunDirectoryLock &) = delete;
  /// Removes DIR/.lock and releases it; a directory that acquire created
  /// and that is still empty (the run failed before saving) is removed,
  /// so a failed start leaves the disk as it was.
  ~RunDirectoryLock();

  /// Creates `dir` when missing, takes DIR/.lock and writes the holder
  /// into it (which proves the directory writable before any step runs),
  /// then removes stale temporaries that killed saves left behind (they
  /// are only ever written under the lock). Throws RuntimeError naming
  /// --save.
  static RunDirectoryLock acquire(const std::string &dir);

private:
  void release();

  int fd_ = -1;
  std::string dir_;
  bool created_ = false;
};

/// Points dir/latest at dir/<name> (atomically: a new link renamed over the
/// old one).
void pointLatestAt(const std::string &dir, const std::string &name);

/// Removes the oldest step checkpoints of `dir` so that at most `keepLast`
/// remain (0 keeps all); never the one `latest` names. Returns what it
/// removed.
std::vector<std::string> pruneCheckpoints(const std::string &dir,
                                          int64_t keepLast);

} // namespace strata::rt

#endif // STRATA_RUNTIME_CORE_RUNDIRECTORY_H
