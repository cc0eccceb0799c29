//===- Error.h - Runtime error type ---------------------------------------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Every runtime failure caused by user input (a program, data file, checkpoint
// or flag) is reported with a RuntimeError whose message is meant for people:
// it names the file or flag, says what is wrong, and what would fix it. The
// launcher catches it at the top and exits non-zero; nothing below aborts.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_SUPPORT_ERROR_H
#define STRATA_RUNTIME_SUPPORT_ERROR_H

#include <sstream>
#include <stdexcept>
#include <string>

namespace strata::rt {

class RuntimeError : public std::runtime_error {
public:
  explicit RuntimeError(const std::string &message)
      : std::runtime_error(message) {}
};

/// An error every rank of a job raises together, at the same point, with
/// the same message (e.g. after agreeing that a checkpoint save failed):
/// rank 0 reports it, the other ranks stay quiet.
class CollectiveError : public RuntimeError {
public:
  using RuntimeError::RuntimeError;
};

/// Builds a message from streamable parts: fail("file ", path, ": bad").
template <typename... Parts> [[noreturn]] void fail(const Parts &...parts) {
  std::ostringstream os;
  (os << ... << parts);
  throw RuntimeError(os.str());
}

} // namespace strata::rt

#endif // STRATA_RUNTIME_SUPPORT_ERROR_H
