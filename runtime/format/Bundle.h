//===- Bundle.h - Programs appended to the launcher executable ------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// A compiled training binary is the prebuilt strata-launcher with the program
// appended, followed by a 24-byte trailer: u64 program offset, u64 program
// length, 8-byte magic "STRATAEX" (little-endian, at the very end of the
// file). The launcher reads its own file (/proc/self/exe) and looks for it.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_FORMAT_BUNDLE_H
#define STRATA_RUNTIME_FORMAT_BUNDLE_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace strata::rt {

constexpr char kBundleMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'E', 'X'};
constexpr size_t kBundleTrailerBytes = 24;

/// Copies the launcher to `outPath`, appends `programBytes` and the trailer
/// and makes it executable. Writes a temporary sibling and renames it into
/// place, so an existing `outPath` survives any failure. A launcher that
/// already carries a program is rejected. Throws RuntimeError.
void writeExecutable(const std::string &launcherPath,
                     const std::vector<uint8_t> &programBytes,
                     const std::string &outPath);

/// The program embedded in `executablePath`, or nullopt when the file has no
/// trailer. Throws RuntimeError when a trailer is present but inconsistent.
std::optional<std::vector<uint8_t>>
readEmbeddedProgram(const std::string &executablePath);

/// The marker string every strata-launcher carries (Main.cpp), so that
/// `strata compile --launcher PATH` can refuse a binary that would run
/// without training anything (e.g. /bin/true). Built at run time here, so
/// that only the launcher holds it as one literal.
std::string launcherMarker();

/// Whether the file at `path` is a strata-launcher (holds the marker).
/// Throws RuntimeError when it cannot be read.
bool isStrataLauncher(const std::string &path);

/// Writes `bytes` to `path` through a temporary sibling and a rename.
void writeFileAtomically(const std::string &path,
                         const std::vector<uint8_t> &bytes, bool executable);

} // namespace strata::rt

#endif // STRATA_RUNTIME_FORMAT_BUNDLE_H
