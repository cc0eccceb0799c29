//===- CheckpointFiles.h - Checksums and durable writes of checkpoints ----===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// A checkpoint's state file (trainer.json, or index.json for per-rank
// checkpoints) lists every other file of the checkpoint with its size and
// CRC-32 (zlib's, as Python's zlib.crc32) under "files", and carries its
// own CRC-32 in "checksum": "crc32:XXXXXXXX", computed over the file's bytes
// with those eight hex digits written as zeros. Loading verifies all of them
// before any tensor is read, so a flipped bit or a truncated file fails with
// an error naming the file instead of resuming silently (docs/runtime.md).
//
// Publishing is durable and atomic: files are fsynced, the temporary
// directory is fsynced, then renamed into place (an existing checkpoint of
// the same name is swapped out in one renameat2(RENAME_EXCHANGE)), and the
// parent directory is fsynced.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_IO_CHECKPOINTFILES_H
#define STRATA_RUNTIME_IO_CHECKPOINTFILES_H

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace strata::rt {

/// zlib's CRC-32 of `size` bytes (Python: zlib.crc32).
uint32_t crc32Of(const void *data, size_t size);

/// {"bytes": N, "crc32": "xxxxxxxx"} for a file's contents.
nlohmann::json fileRecord(const void *data, size_t size);

/// The bytes of a checkpoint state file for `state` (which must not hold
/// "checksum"): `state` with "checksum" added, its CRC-32 filled in.
std::string encodeCheckpointState(nlohmann::json state, int indent);

/// Parses a state file's bytes read from `path`, verifying its own
/// checksum when it has one (checkpoints written before checksums have
/// none). Throws RuntimeError naming `path`.
nlohmann::json decodeCheckpointState(const std::vector<uint8_t> &bytes,
                                     const std::string &path);

/// Checks every file `state["files"]` lists in `dir` (or only `only`
/// when given): present, a regular file, its size and CRC-32 as recorded.
/// Throws RuntimeError naming the file and saying the checkpoint is
/// damaged. A state without "files" (written before checksums) passes.
void verifyCheckpointFiles(const std::string &dir, const nlohmann::json &state,
                           const std::string &statePath,
                           const std::string &only = "");

/// fsync of a directory (after creating or renaming entries in it).
void syncDirectory(const std::string &dir);

/// Moves the complete directory `tmp` to `target` atomically: a plain
/// rename when `target` does not exist, else an exchange of the two (then
/// the old checkpoint, now at `tmp`, is removed). Syncs `tmp` before and
/// the parent after. Throws RuntimeError naming `flag` and `target`.
void publishDirectory(const std::string &tmp, const std::string &target,
                      const std::string &flag);

/// Tests of interrupted saves: with STRATA_TEST_SAVE_CRASH=K in the
/// environment, the K-th call (counted over the process, from 1) ends the
/// process at once with status 9, as a SIGKILL would. Saving calls it
/// between every two file-system steps.
void saveCrashPoint();

} // namespace strata::rt

#endif // STRATA_RUNTIME_IO_CHECKPOINTFILES_H
