//===- fuzz_model_spec.cpp - libFuzzer harness for the model-spec loader --===//
//
// Any input must end in a spec or in located diagnostics: no crash, no
// sanitizer report, no exception escaping loadModelSpec.
//
//===----------------------------------------------------------------------===//

#include "frontends/yaml/ModelSpec.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  std::vector<strata::frontend::Diagnostic> diags;
  auto spec = strata::frontend::loadModelSpec("fuzz.yaml", diags, &text);
  if (!spec && diags.empty())
    __builtin_trap(); // a rejection must say why
  return 0;
}
