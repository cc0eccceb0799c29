//===- FileIO.cpp - Reading user-named files safely -----------------------===//

#include "runtime/support/FileIO.h"

#include "runtime/support/Error.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace strata::rt;

// std::ifstream would open a directory and then throw from its buffer with a
// message naming neither the file nor the problem; O_NONBLOCK keeps a FIFO
// from blocking the open.
std::vector<uint8_t> strata::rt::readRegularFile(const std::string &path,
                                                 const std::string &expected) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    fail(path, ": cannot open: ", std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    fail(path, ": cannot open: ", std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, ": not a regular file; expected ", expected);
  }
  std::vector<uint8_t> bytes(size_t(st.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      fail(path, ": cannot read: ", std::strerror(err));
    }
    if (n == 0)
      break; // The file shrank while we read it.
    done += size_t(n);
  }
  ::close(fd);
  bytes.resize(done);
  return bytes;
}
