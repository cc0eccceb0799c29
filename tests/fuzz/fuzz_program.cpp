//===- fuzz_program.cpp - libFuzzer harness for the program-file parser ---===//
//
// An input is a program payload (the sections after the 32-byte header);
// the harness adds the header with a matching length and checksum so the
// fuzzer reaches the section decoder and the verifier (verifyProgram) instead
// of stopping at the checksum. Rejections must be RuntimeErrors.
//
//===----------------------------------------------------------------------===//

#include "runtime/format/Program.h"
#include "runtime/support/Error.h"

#include <cstring>
#include <vector>

using namespace strata::rt;

static void put64(std::vector<uint8_t> &out, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    out.push_back(uint8_t(v >> (8 * i)));
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::vector<uint8_t> file(kProgramMagic, kProgramMagic + 8);
  uint32_t version = kProgramFormatVersion;
  for (int i = 0; i < 4; ++i)
    file.push_back(uint8_t(version >> (8 * i)));
  for (int i = 0; i < 4; ++i)
    file.push_back(0);
  put64(file, size);
  put64(file, fnv1a64(data, size));
  file.insert(file.end(), data, data + size);
  try {
    Program p = parseProgram(file.data(), file.size(), "fuzz.program");
    // What parses must serialise back to what parses the same way.
    std::vector<uint8_t> again = serializeProgram(p);
    (void)parseProgram(again.data(), again.size(), "fuzz.program(again)");
  } catch (const RuntimeError &) {
  }
  return 0;
}
