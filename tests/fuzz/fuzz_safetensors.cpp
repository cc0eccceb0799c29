//===- fuzz_safetensors.cpp - libFuzzer harness for the safetensors reader ===//
//
// Opening validates the header; every tensor it accepts must then read
// without touching bytes outside the file. Rejections are RuntimeErrors.
//
//===----------------------------------------------------------------------===//

#include "FuzzFiles.h"

#include "runtime/io/SafeTensors.h"
#include "runtime/support/Error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string path = strata::fuzz::writeFile("fuzz.safetensors", data, size);
  try {
    auto file = strata::rt::SafeTensorsFile::open(path);
    for (const strata::rt::SafeTensorInfo &t : file.tensors()) {
      if (t.numElements() > (int64_t(1) << 22))
        continue; // a valid but large tensor: reading it proves nothing
      if (t.dtype == "I32")
        (void)file.readI32(t);
      else
        (void)file.readF32(t);
    }
  } catch (const strata::rt::RuntimeError &) {
  }
  return 0;
}
