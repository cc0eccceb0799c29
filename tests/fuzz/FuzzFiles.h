//===- FuzzFiles.h - Fuzz inputs as files for path-based readers -*- C++
//-*-===//
//
// The runtime readers take paths; the harnesses write each input into a
// private temporary directory (one per process, reused).
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_TESTS_FUZZ_FUZZFILES_H
#define STRATA_TESTS_FUZZ_FUZZFILES_H

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

namespace strata::fuzz {

inline const std::string &scratchDir() {
  static const std::string dir = [] {
    const char *tmp = std::getenv("TMPDIR");
    std::string t =
        std::string(tmp && *tmp ? tmp : "/tmp") + "/strata-fuzz-XXXXXX";
    if (!mkdtemp(t.data()))
      std::abort();
    return t;
  }();
  return dir;
}

inline std::string writeFile(const std::string &name, const uint8_t *data,
                             size_t size) {
  std::string path = scratchDir() + "/" + name;
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f)
    std::abort();
  if (size && std::fwrite(data, 1, size, f) != size)
    std::abort();
  std::fclose(f);
  return path;
}

inline void removeFile(const std::string &name) {
  ::unlink((scratchDir() + "/" + name).c_str());
}

} // namespace strata::fuzz

#endif // STRATA_TESTS_FUZZ_FUZZFILES_H
