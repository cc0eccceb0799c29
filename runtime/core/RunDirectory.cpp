//===- RunDirectory.cpp - --save DIR: step-numbered checkpoints -----------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/RunDirectory.h"

#include "runtime/io/CheckpointReader.h"
#include "runtime/support/Error.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
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
    bool ours = name == "latest" || name == "best" ||
                name.rfind("step-", 0) == 0 || name.rfind(".latest-", 0) == 0 ||
                name.find(".tmp-") != std::string::npos ||
                name.find(".old-") != std::string::npos;
    if (!ours)
      fail("--save ", dir, ": exists and is not a Strata run directory ('",
           name, "' is not a checkpoint); choose another directory");
  }
}

void pointLatestAt(const std::string &dir, const std::string &name) {
  fs::path root(dir);
  fs::path tmp = root / (".latest-" + std::to_string(::getpid()));
  std::error_code ec;
  fs::remove(tmp, ec);
  fs::create_directory_symlink(name, tmp, ec);
  if (ec)
    fail("--save ", dir, ": cannot create the 'latest' link: ", ec.message());
  fs::rename(tmp, root / "latest", ec);
  if (ec) {
    std::error_code ignore;
    fs::remove(tmp, ignore);
    fail("--save ", dir, ": cannot point 'latest' at ", name, ": ",
         ec.message());
  }
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
    fs::remove_all(root / steps[i], ec);
    if (!ec) {
      removed.push_back(steps[i]);
      --excess;
    }
  }
  return removed;
}

} // namespace strata::rt
