//===- StepLog.h - The --log file of the training binary ------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Header-only so that the launcher and its unit tests share it without a
// library of their own.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_LAUNCHER_STEPLOG_H
#define STRATA_RUNTIME_LAUNCHER_STEPLOG_H

#include "runtime/core/Trainer.h"
#include "runtime/support/Error.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace strata::rt {

/// The directory a new file at `path` goes into: "." for a bare name.
inline std::string directoryOf(const std::string &path) {
  std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

/// Checks a --log path at start-up, so a run whose log could not be put in
/// place fails before it trains rather than after.
inline void checkLogPath(const std::string &path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode))
      fail("--log ", path, ": is a directory; expected a file path");
    if (!S_ISREG(st.st_mode))
      fail("--log ", path,
           ": exists and is not a regular file; expected a file path");
  }
  std::string dir = directoryOf(path);
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    fail("--log ", path, ": directory '", dir,
         "' does not exist; create it or choose another path");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    fail("--log ", path, ": cannot create a file in directory '", dir,
         "': ", std::strerror(errno));
}

/// One JSON object per step ("step": 1 for the first step, like the
/// progress lines and the checkpoint's step count), written to a temporary sibling and renamed
/// into place when the run ends, so a failed run leaves an old log intact.
class StepLog {
public:
  StepLog(const StepLog &) = delete;
  StepLog &operator=(const StepLog &) = delete;
  explicit StepLog(const std::string &path) : path_(path) {
    if (path.empty())
      return;
    tmp_ = path + ".tmp-" + std::to_string(::getpid());
    file_ = std::fopen(tmp_.c_str(), "w");
    if (!file_)
      fail("--log ", path, ": cannot create a file in directory '",
           directoryOf(path), "': ", std::strerror(errno));
  }
  /// Reached without finish() only when the run failed: an existing log is
  /// kept, and the partial one stays beside it; with no log there, the
  /// partial one takes its place.
  ~StepLog() {
    if (!file_)
      return;
    std::fclose(file_);
    file_ = nullptr;
    if (std::filesystem::exists(path_)) {
      std::fprintf(stderr,
                   "strata: --log %s kept; this run's partial log is %s\n",
                   path_.c_str(), tmp_.c_str());
      return;
    }
    if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
      std::fprintf(stderr,
                   "strata: --log %s: cannot keep this run's partial log: "
                   "%s\n",
                   path_.c_str(), std::strerror(errno));
      std::remove(tmp_.c_str());
    }
  }
  void write(const StepStats &s, int64_t globalBatch) {
    if (!file_)
      return;
    std::fprintf(file_,
                 "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.9g, "
                 "\"grad_norm\": ",
                 (long long)s.step + 1, s.loss, s.lr);
    if (s.gradNorm)
      std::fprintf(file_, "%.9g", *s.gradNorm);
    else
      std::fprintf(file_, "null");
    std::fprintf(file_,
                 ", \"step_time_s\": %.6f, \"tokens_per_s\": %.1f, "
                 "\"tokens\": %lld, \"samples_seen\": %lld}\n",
                 s.seconds, s.seconds > 0 ? s.tokens / s.seconds : 0.0,
                 (long long)s.tokens, (long long)((s.step + 1) * globalBatch));
    std::fflush(file_);
  }
  /// Puts the log in place. Throws (after removing the temporary) when it
  /// cannot: the path was checked at start-up, so it changed under the run.
  void finish() {
    if (!file_)
      return;
    errno = 0;
    bool written = !std::ferror(file_);
    written = std::fclose(file_) == 0 && written;
    file_ = nullptr;
    int err = written ? 0 : (errno ? errno : EIO);
    if (written && std::rename(tmp_.c_str(), path_.c_str()) != 0)
      err = errno;
    if (err == 0)
      return;
    std::remove(tmp_.c_str());
    struct stat st;
    if (::stat(path_.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
      fail("--log ", path_,
           ": is a directory now; expected a file path (the log is lost)");
    fail("--log ", path_, ": cannot write the log: ", std::strerror(err),
         " (the log is lost)");
  }

private:
  std::string path_, tmp_;
  FILE *file_ = nullptr;
};

} // namespace strata::rt

#endif // STRATA_RUNTIME_LAUNCHER_STEPLOG_H
