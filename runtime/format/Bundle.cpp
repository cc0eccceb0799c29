//===- Bundle.cpp - Programs appended to the launcher executable ----------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/format/Bundle.h"

#include "runtime/support/Error.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

namespace strata::rt {

namespace {

std::vector<uint8_t> readWholeFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    fail(path, ": cannot open: ", std::strerror(errno));
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
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
  std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  FILE *f = std::fopen(tmp.c_str(), "wb");
  if (!f)
    fail(path, ": cannot create ", tmp, ": ", std::strerror(errno));
  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  ok = (std::fflush(f) == 0) && ok;
  ok = (::fsync(::fileno(f)) == 0) && ok;
  ok = (std::fclose(f) == 0) && ok;
  if (ok && executable)
    ok = ::chmod(tmp.c_str(), 0755) == 0;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    fail(path, ": cannot write: ", std::strerror(err));
  }
}

void writeExecutable(const std::string &launcherPath,
                     const std::vector<uint8_t> &programBytes,
                     const std::string &outPath) {
  std::vector<uint8_t> image = readWholeFile(launcherPath);
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
  std::vector<uint8_t> file = readWholeFile(executablePath);
  std::optional<Trailer> trailer = findTrailer(file, executablePath);
  if (!trailer)
    return std::nullopt;
  return std::vector<uint8_t>(file.begin() + trailer->offset,
                              file.begin() + trailer->offset + trailer->length);
}

} // namespace strata::rt
