//===- CheckpointFiles.cpp - Checksums and durable writes of checkpoints --===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//

#include "runtime/io/CheckpointFiles.h"

#include "runtime/support/Error.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <sys/stat.h>
#include <unistd.h>

namespace strata::rt {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char *kChecksumField = "\"checksum\": \"crc32:";

std::string hex8(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

/// CRC-32 and size of a file, read in chunks (checkpoints can be large).
bool crcOfFile(const std::string &path, uint32_t &crc, uint64_t &size,
               std::string &error) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    error = std::strerror(errno);
    return false;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    error = "not a regular file";
    return false;
  }
  uLong c = ::crc32(0L, Z_NULL, 0);
  std::vector<uint8_t> buf(1 << 20);
  size = 0;
  while (true) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      error = std::strerror(errno);
      ::close(fd);
      return false;
    }
    if (n == 0)
      break;
    c = ::crc32(c, buf.data(), uInt(n));
    size += uint64_t(n);
  }
  ::close(fd);
  crc = uint32_t(c);
  return true;
}

} // namespace

void saveCrashPoint() {
  static const long target = [] {
    const char *env = std::getenv("STRATA_TEST_SAVE_CRASH");
    return env && *env ? std::strtol(env, nullptr, 10) : 0L;
  }();
  static long calls = 0;
  if (target > 0 && ++calls == target) {
    std::fprintf(stderr,
                 "strata: STRATA_TEST_SAVE_CRASH: exiting at save "
                 "point %ld\n",
                 calls);
    std::fflush(stderr);
    ::_exit(9);
  }
}

uint32_t crc32Of(const void *data, size_t size) {
  uLong c = ::crc32(0L, Z_NULL, 0);
  const Bytef *p = static_cast<const Bytef *>(data);
  // zlib takes uInt lengths: feed it in chunks below 4 GiB.
  while (size > 0) {
    uInt n = uInt(std::min<size_t>(size, 1u << 30));
    c = ::crc32(c, p, n);
    p += n;
    size -= n;
  }
  return uint32_t(c);
}

json fileRecord(const void *data, size_t size) {
  return {{"bytes", uint64_t(size)}, {"crc32", hex8(crc32Of(data, size))}};
}

std::string encodeCheckpointState(json state, int indent) {
  state["checksum"] = "crc32:00000000";
  std::string text = state.dump(indent < 0 ? 0 : indent) + "\n";
  size_t at = text.find(kChecksumField);
  if (at == std::string::npos)
    fail("internal error: checkpoint state without its checksum field");
  at += std::strlen(kChecksumField);
  std::string crc = hex8(crc32Of(text.data(), text.size()));
  text.replace(at, 8, crc);
  return text;
}

json decodeCheckpointState(const std::vector<uint8_t> &bytes,
                           const std::string &path) {
  std::string text(bytes.begin(), bytes.end());
  json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object())
    fail(path, ": malformed checkpoint state: not a JSON object; the "
               "checkpoint is damaged (resume from an earlier one)");
  if (!doc.contains("checksum"))
    return doc; // Written before checkpoints carried checksums.
  size_t at = text.find(kChecksumField);
  if (!doc["checksum"].is_string() || at == std::string::npos ||
      text.find(kChecksumField, at + 1) != std::string::npos ||
      at + std::strlen(kChecksumField) + 8 > text.size())
    fail(path, ": malformed checkpoint state: 'checksum' must be "
               "\"crc32:XXXXXXXX\" (once)");
  at += std::strlen(kChecksumField);
  std::string recorded = text.substr(at, 8);
  text.replace(at, 8, "00000000");
  std::string actual = hex8(crc32Of(text.data(), text.size()));
  if (recorded != actual)
    fail(path, ": checksum mismatch (the file's CRC-32 is ", actual,
         ", it records ", recorded,
         "): the checkpoint is damaged; resume from an earlier checkpoint");
  doc.erase("checksum");
  return doc;
}

void verifyCheckpointFiles(const std::string &dir, const json &state,
                           const std::string &statePath,
                           const std::string &only) {
  if (!state.contains("files"))
    return; // Written before checkpoints carried checksums.
  const json &files = state["files"];
  if (!files.is_object())
    fail(statePath, ": malformed checkpoint state: 'files' must be an object "
                    "of {bytes, crc32}");
  for (auto it = files.begin(); it != files.end(); ++it) {
    const std::string &name = it.key();
    const json &rec = it.value();
    if (!only.empty() && name != only)
      continue;
    if (name.empty() || name.find('/') != std::string::npos || name == "." ||
        name == ".." || !rec.is_object() || !rec.contains("bytes") ||
        !rec["bytes"].is_number_unsigned() || !rec.contains("crc32") ||
        !rec["crc32"].is_string() ||
        rec["crc32"].get<std::string>().size() != 8)
      fail(statePath, ": malformed checkpoint state: files entry '", name,
           "' must be a plain file name with {bytes, crc32}");
    std::string path = (fs::path(dir) / name).string();
    uint32_t crc = 0;
    uint64_t size = 0;
    std::string error;
    struct stat st;
    if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
      fail(path, ": not a regular file; expected a ",
           name.size() > 12 &&
                   name.compare(name.size() - 12, 12, ".safetensors") == 0
               ? ".safetensors file"
               : "checkpoint file",
           " (", statePath, " lists it)");
    if (!crcOfFile(path, crc, size, error))
      fail(path, ": cannot read (", error, "); ", statePath,
           " lists it, so the checkpoint is incomplete or damaged; resume "
           "from an earlier checkpoint");
    uint64_t want = rec["bytes"].get<uint64_t>();
    if (size != want)
      fail(path, ": ", size, " bytes, but ", statePath, " records ", want,
           ": the file is truncated or damaged; resume from an earlier "
           "checkpoint");
    if (hex8(crc) != rec["crc32"].get<std::string>())
      fail(path, ": checksum mismatch (CRC-32 ", hex8(crc), ", ", statePath,
           " records ", rec["crc32"].get<std::string>(),
           "): the file is damaged; resume from an earlier checkpoint");
  }
}

void syncDirectory(const std::string &dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    fail(dir, ": cannot open the directory to sync it: ", std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  // Some file systems cannot sync directories; that is not an error here.
  if (rc != 0 && err != EINVAL && err != EROFS)
    fail(dir, ": cannot sync the directory: ", std::strerror(err));
}

void publishDirectory(const std::string &tmp, const std::string &target,
                      const std::string &flag) {
  saveCrashPoint();
  syncDirectory(tmp);
  saveCrashPoint();
  std::string parent = fs::absolute(fs::path(target)).parent_path().string();
  std::error_code ec;
  bool exists = fs::exists(fs::symlink_status(target, ec));
  if (!exists) {
    if (std::rename(tmp.c_str(), target.c_str()) != 0)
      fail(flag, " ", target, ": cannot rename the new checkpoint into place: ",
           std::strerror(errno));
  } else {
    // One atomic step: the new checkpoint takes the name, the old one
    // goes to tmp's name (removed below; a stale temporary if killed).
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(),
                    RENAME_EXCHANGE) != 0) {
      int err = errno;
      if (err != EINVAL && err != ENOSYS)
        fail(flag, " ", target, ": cannot swap the new checkpoint into place: ",
             std::strerror(err));
      // No exchange on this file system: move the old one aside first (a
      // kill between the two renames leaves it at TARGET.old-PID).
      std::string old = target + ".old-" + std::to_string(::getpid());
      if (std::rename(target.c_str(), old.c_str()) != 0)
        fail(flag, " ", target,
             ": cannot move the old checkpoint aside: ", std::strerror(errno));
      if (std::rename(tmp.c_str(), target.c_str()) != 0) {
        err = errno;
        std::rename(old.c_str(), target.c_str());
        fail(flag, " ", target,
             ": cannot rename the new checkpoint into "
             "place: ",
             std::strerror(err));
      }
      fs::remove_all(old, ec);
    }
  }
  saveCrashPoint();
  syncDirectory(parent);
  if (exists)
    fs::remove_all(tmp, ec);
  saveCrashPoint();
}

} // namespace strata::rt
