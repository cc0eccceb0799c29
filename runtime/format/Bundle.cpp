//===- Bundle.cpp - Programs appended to the launcher executable ----------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/format/Bundle.h"

#include "runtime/support/FileIO.h"

#include "runtime/support/Error.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <sys/stat.h>
#include <unistd.h>

namespace strata::rt {

namespace {

/// The directory a new file at `path` goes into, for messages: "." for a
/// bare file name.
std::string parentDirectory(const std::string &path) {
  std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

struct Trailer {
  uint64_t offset, length;
};

std::optional<Trailer> findTrailer(const std::vector<uint8_t> &file,
                                   const std::string &path) {
  if (file.size() < kBundleTrailerBytes)
    return std::nullopt;
  const uint8_t *t = file.data() + file.size() - kBundleTrailerBytes;
  if (std::memcmp(t + 16, kBundleMagic, 8) != 0)
    return std::nullopt;
  Trailer trailer;
  std::memcpy(&trailer.offset, t, 8);
  std::memcpy(&trailer.length, t + 8, 8);
  uint64_t limit = file.size() - kBundleTrailerBytes;
  if (trailer.offset > limit || trailer.length != limit - trailer.offset)
    fail(path, ": the embedded program trailer is inconsistent (offset ",
         trailer.offset, ", length ", trailer.length,
         "); the executable is damaged, recompile it");
  return trailer;
}

} // namespace

void writeFileAtomically(const std::string &path,
                         const std::vector<uint8_t> &bytes, bool executable) {
  // Check the target and its directory first: the temporary's name means
  // nothing to the user, and renaming over a directory or a device node
  // must never be tried.
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode))
      fail(path, ": is a directory; expected a file path");
    if (!S_ISREG(st.st_mode))
      fail(path, ": exists and is not a regular file; choose another path");
  }
  std::string dir = parentDirectory(path);
  if (::stat(dir.c_str(), &st) != 0) {
    int err = errno;
    if (err == ENOENT)
      fail(path, ": directory '", dir, "' does not exist (", std::strerror(err),
           "); create it or choose another path");
    fail(path, ": cannot use directory '", dir, "': ", std::strerror(err),
         "; choose another path");
  }
  if (!S_ISDIR(st.st_mode))
    fail(path, ": '", dir, "' is not a directory; choose another path");

  std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  FILE *f = std::fopen(tmp.c_str(), "wb");
  if (!f)
    fail(path, ": cannot create a file in directory '", dir,
         "': ", std::strerror(errno));
  int err = 0;
  auto check = [&](bool ok) {
    if (!ok && err == 0)
      err = errno ? errno : EIO;
  };
  errno = 0;
  check(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
  check(std::fflush(f) == 0);
  check(::fsync(::fileno(f)) == 0);
  check(std::fclose(f) == 0);
  if (err == 0 && executable)
    check(::chmod(tmp.c_str(), 0755) == 0);
  if (err != 0) {
    std::remove(tmp.c_str());
    fail(path, ": cannot write: ", std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    std::remove(tmp.c_str());
    fail(path, ": cannot replace: ", std::strerror(err));
  }
}

std::string launcherMarker() {
  return std::string("strata-launcher") + ":program-bundle-v1";
}

bool isStrataLauncher(const std::string &path) {
  std::vector<uint8_t> image = readRegularFile(path, "an executable file");
  std::string marker = launcherMarker();
  return std::search(image.begin(), image.end(), marker.begin(),
                     marker.end()) != image.end();
}

void writeExecutable(const std::string &launcherPath,
                     const std::vector<uint8_t> &programBytes,
                     const std::string &outPath) {
  std::vector<uint8_t> image =
      readRegularFile(launcherPath, "an executable file");
  if (findTrailer(image, launcherPath))
    fail(launcherPath, ": already carries a program; pass the plain "
                       "strata-launcher");
  uint64_t offset = image.size();
  uint64_t length = programBytes.size();
  image.insert(image.end(), programBytes.begin(), programBytes.end());
  uint8_t trailer[kBundleTrailerBytes];
  std::memcpy(trailer, &offset, 8);
  std::memcpy(trailer + 8, &length, 8);
  std::memcpy(trailer + 16, kBundleMagic, 8);
  image.insert(image.end(), trailer, trailer + kBundleTrailerBytes);
  writeFileAtomically(outPath, image, /*executable=*/true);
}

std::optional<std::vector<uint8_t>>
readEmbeddedProgram(const std::string &executablePath) {
  std::vector<uint8_t> file =
      readRegularFile(executablePath, "an executable file");
  std::optional<Trailer> trailer = findTrailer(file, executablePath);
  if (!trailer)
    return std::nullopt;
  return std::vector<uint8_t>(file.begin() + trailer->offset,
                              file.begin() + trailer->offset + trailer->length);
}

} // namespace strata::rt
