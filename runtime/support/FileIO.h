//===- FileIO.h - Reading user-named files safely ---------------*- C++ -*-===//
//
// Files the user names (programs, checkpoints, weights) are read through one
// function that refuses what is not a regular file with a message naming the
// path, instead of letting a stream throw a library message later.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_SUPPORT_FILEIO_H
#define STRATA_RUNTIME_SUPPORT_FILEIO_H

#include <cstdint>
#include <string>
#include <vector>

namespace strata::rt {

/// The bytes of the regular file at `path`. Throws RuntimeError naming the
/// path when it cannot be opened or read, or is not a regular file (then
/// saying "expected `expected`", e.g. "a .safetensors file").
std::vector<uint8_t> readRegularFile(const std::string &path,
                                     const std::string &expected);

} // namespace strata::rt

#endif // STRATA_RUNTIME_SUPPORT_FILEIO_H
