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
