//===- StepLog.h - The --log file of the training binary ------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// One JSON object per line, appended and flushed as it happens, so the log
// can be followed live (`tail -f`) and is kept whatever ends the run:
//   training step  {"step": k, "loss": ..., "time": "...Z", "mfu": ..., ...}
//   evaluation     {"step": k, "eval_loss": ..., ...}
//   end of a run   {"summary": {...}}
// A run resumed from step k with the same log keeps the records of steps
// 1..k and drops later ones (they are about to be redone), so the log holds
// each step once. Header-only so that the launcher and its tests share it.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_LAUNCHER_STEPLOG_H
#define STRATA_RUNTIME_LAUNCHER_STEPLOG_H

#include "runtime/core/Trainer.h"
#include "runtime/support/Error.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace strata::rt {

/// The directory a new file at `path` goes into: "." for a bare name.
inline std::string directoryOf(const std::string &path) {
  std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

/// Checks a --log path at start-up, so a run whose log could not be written
/// fails before it trains rather than after.
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

/// Now as ISO 8601 UTC with milliseconds: "2025-01-31T12:00:00.123Z".
inline std::string utcTimestamp() {
  auto now = std::chrono::system_clock::now();
  std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  int ms = int(std::chrono::duration_cast<std::chrono::milliseconds>(
                   now.time_since_epoch())
                   .count() %
               1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
                tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                tm.tm_min, tm.tm_sec, ms);
  return buf;
}

class StepLog {
public:
  StepLog(const StepLog &) = delete;
  StepLog &operator=(const StepLog &) = delete;
  StepLog() = default;
  /// Opens `path` (nothing when empty). `resumedStep` > 0: the run
  /// continues a checkpoint of that step, and records of later steps are
  /// dropped; 0: a new run, and the file starts empty.
  void open(const std::string &path, int64_t resumedStep) {
    if (path.empty())
      return;
    path_ = path;
    if (resumedStep > 0)
      keepUpTo(resumedStep);
    file_ = std::fopen(path.c_str(), resumedStep > 0 ? "a" : "w");
    if (!file_)
      fail("--log ", path, ": cannot open for writing: ", std::strerror(errno));
  }
  ~StepLog() {
    if (file_)
      std::fclose(file_);
  }
  bool enabled() const { return file_ != nullptr; }

  /// Writes one record and flushes it; a write error is reported once on
  /// stderr and the run goes on (the log is not worth the training).
  void write(const nlohmann::ordered_json &record) {
    if (!file_)
      return;
    std::string line = record.dump() + "\n";
    if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() ||
        std::fflush(file_) != 0) {
      if (!failed_)
        std::fprintf(stderr, "strata: --log %s: cannot write: %s\n",
                     path_.c_str(), std::strerror(errno));
      failed_ = true;
    }
  }

private:
  /// Rewrites the log without records of steps after `step` (and without a
  /// torn last line), via a temporary sibling renamed over it.
  void keepUpTo(int64_t step) {
    std::ifstream in(path_);
    if (!in)
      return;
    std::string kept, line;
    while (std::getline(in, line)) {
      nlohmann::json rec = nlohmann::json::parse(line, nullptr, false);
      if (rec.is_discarded() || !rec.is_object())
        continue;
      int64_t at = rec.contains("step") && rec["step"].is_number_integer()
                       ? rec["step"].get<int64_t>()
                   : rec.contains("summary") && rec["summary"].is_object()
                       ? rec["summary"].value("last_step", int64_t(0))
                       : 0;
      if (at <= step)
        kept += line + "\n";
    }
    std::string tmp = path_ + ".tmp-" + std::to_string(::getpid());
    FILE *out = std::fopen(tmp.c_str(), "w");
    bool ok =
        out && std::fwrite(kept.data(), 1, kept.size(), out) == kept.size();
    ok = out && std::fclose(out) == 0 && ok;
    if (!ok || std::rename(tmp.c_str(), path_.c_str()) != 0) {
      std::remove(tmp.c_str());
      fail("--log ", path_,
           ": cannot rewrite it for the resumed run: ", std::strerror(errno));
    }
  }

  std::string path_;
  FILE *file_ = nullptr;
  bool failed_ = false;
};

} // namespace strata::rt

#endif // STRATA_RUNTIME_LAUNCHER_STEPLOG_H
