//===- RunDirectory.cpp - --save DIR: step-numbered checkpoints -----------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/RunDirectory.h"

#include "runtime/io/CheckpointReader.h"
#include "runtime/support/Error.h"

#include "runtime/io/CheckpointFiles.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <sys/file.h>
#include <unistd.h>

namespace strata::rt {

namespace fs = std::filesystem;

std::string stepCheckpointName(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", (long long)step);
  return name;
}

void checkRunDirectory(const std::string &dir) {
  std::error_code ec;
  fs::path root(dir);
  if (!fs::exists(root, ec)) {
    fs::path parent = fs::absolute(root, ec).parent_path();
    if (!fs::is_directory(parent, ec))
      fail("--save ", dir, ": the parent directory ", parent.string(),
           " does not exist");
    return;
  }
  if (!fs::is_directory(root, ec))
    fail("--save ", dir,
         ": exists and is not a directory; --save names a directory of "
         "checkpoints");
  if (hasCheckpointState(dir))
    fail("--save ", dir,
         ": holds a single checkpoint (the layout before step-numbered "
         "checkpoints); resume from it with --resume ",
         dir, " and --save to another directory");
  for (const fs::directory_entry &e : fs::directory_iterator(root, ec)) {
    std::string name = e.path().filename().string();
    bool ours = name == "latest" || name == "best" || name == ".lock" ||
                name == "best.json" || name.rfind("step-", 0) == 0 ||
                name.rfind(".latest-", 0) == 0 ||
                name.find(".tmp-") != std::string::npos ||
                name.find(".old-") != std::string::npos;
    if (!ours)
      fail("--save ", dir, ": exists and is not a Strata run directory ('",
           name, "' is not a checkpoint); choose another directory");
  }
}

namespace {

/// What a killed save can leave in a run directory: temporary checkpoint
/// directories and files, moved-aside old checkpoints, link temporaries.
bool isStaleTemporary(const std::string &name) {
  return name.find(".tmp-") != std::string::npos ||
         name.find(".old-") != std::string::npos ||
         name.rfind(".latest-", 0) == 0;
}

} // namespace

RunDirectoryLock &
RunDirectoryLock::operator=(RunDirectoryLock &&other) noexcept {
  if (this != &other) {
    release();
    fd_ = other.fd_;
    dir_ = std::move(other.dir_);
    created_ = other.created_;
    other.fd_ = -1;
  }
  return *this;
}

RunDirectoryLock::~RunDirectoryLock() { release(); }

void RunDirectoryLock::release() {
  if (fd_ < 0)
    return;
  std::error_code ec;
  fs::remove(fs::path(dir_) / ".lock", ec);
  ::close(fd_);
  fd_ = -1;
  if (created_ && fs::is_empty(dir_, ec))
    fs::remove(dir_, ec);
}

RunDirectoryLock RunDirectoryLock::acquire(const std::string &dir) {
  fs::path root(dir);
  std::error_code ec;
  bool created = false;
  if (!fs::exists(root, ec)) {
    created = fs::create_directory(root, ec);
    if (!created && !fs::is_directory(root, ec))
      fail("--save ", dir, ": cannot create the directory: ", ec.message(),
           "; choose a writable place for checkpoints");
  }
  std::string lockPath = (root / ".lock").string();
  RunDirectoryLock lock;
  lock.fd_ = ::open(lockPath.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock.fd_ < 0) {
    int err = errno;
    if (created)
      fs::remove(root, ec);
    errno = err;
    fail("--save ", dir, ": cannot write in the directory (", lockPath, ": ",
         std::strerror(errno), "); choose a writable place for checkpoints");
  }
  if (::flock(lock.fd_, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    std::string holder;
    std::vector<char> buf(64, 0);
    ssize_t n = ::pread(lock.fd_, buf.data(), buf.size() - 1, 0);
    if (n > 0)
      holder = std::string(buf.data(), size_t(n));
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' '))
      holder.pop_back();
    ::close(lock.fd_);
    lock.fd_ = -1;
    if (err == EWOULDBLOCK)
      fail("--save ", dir, ": another run",
           holder.empty() ? "" : " (" + holder + ")",
           " is saving checkpoints here (", lockPath,
           " is locked); wait for it to end or choose another directory");
    fail("--save ", dir, ": cannot lock ", lockPath, ": ", std::strerror(err));
  }
  lock.dir_ = dir;
  lock.created_ = created;
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  std::string who = "pid " + std::to_string(::getpid()) + " on " + host + "\n";
  if (::ftruncate(lock.fd_, 0) != 0 ||
      ::pwrite(lock.fd_, who.data(), who.size(), 0) != ssize_t(who.size()))
    fail("--save ", dir, ": cannot write ", lockPath, ": ",
         std::strerror(errno), "; choose a writable place for checkpoints");
  // Only runs holding the lock write here, so whatever temporaries exist
  // were left by a killed save.
  for (const fs::directory_entry &e : fs::directory_iterator(root, ec))
    if (isStaleTemporary(e.path().filename().string())) {
      std::error_code ignore;
      fs::remove_all(e.path(), ignore);
    }
  syncDirectory(root.string());
  return lock;
}

void pointLatestAt(const std::string &dir, const std::string &name) {
  fs::path root(dir);
  fs::path tmp = root / (".latest-" + std::to_string(::getpid()));
  std::error_code ec;
  fs::remove(tmp, ec);
  saveCrashPoint();
  fs::create_directory_symlink(name, tmp, ec);
  if (ec)
    fail("--save ", dir, ": cannot create the 'latest' link: ", ec.message());
  saveCrashPoint();
  fs::rename(tmp, root / "latest", ec);
  if (ec) {
    std::error_code ignore;
    fs::remove(tmp, ignore);
    fail("--save ", dir, ": cannot point 'latest' at ", name, ": ",
         ec.message());
  }
  syncDirectory(dir);
}

std::vector<std::string> pruneCheckpoints(const std::string &dir,
                                          int64_t keepLast) {
  std::vector<std::string> removed;
  if (keepLast <= 0)
    return removed;
  fs::path root(dir);
  std::error_code ec;
  std::string latest = fs::read_symlink(root / "latest", ec).string();
  std::vector<std::string> steps;
  for (const fs::directory_entry &e : fs::directory_iterator(root, ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) == 0 && name.find('.') == std::string::npos &&
        e.is_directory(ec))
      steps.push_back(name);
  }
  std::sort(steps.begin(), steps.end());
  int64_t excess = int64_t(steps.size()) - keepLast;
  for (int64_t i = 0; i < int64_t(steps.size()) && excess > 0; ++i) {
    if (steps[i] == latest)
      continue;
    // Renamed first, so that a kill mid-removal leaves a stale temporary
    // (removed at the next start), never a half-deleted checkpoint.
    fs::path doomed = root / (steps[i] + ".old-" + std::to_string(::getpid()));
    saveCrashPoint();
    fs::rename(root / steps[i], doomed, ec);
    if (!ec)
      fs::remove_all(doomed, ec);
    if (!ec) {
      removed.push_back(steps[i]);
      --excess;
    }
  }
  return removed;
}

} // namespace strata::rt
