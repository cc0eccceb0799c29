//===- fuzz_checkpoint.cpp - libFuzzer harness for checkpoint directories -===//
//
// An input is a checkpoint directory in one blob: byte 0 picks the layout
// (even: per-rank pieces with index.json; odd: whole tensors with
// trainer.json), then the state JSON up to the first NUL byte, then one
// safetensors file (rank0.safetensors, or model.safetensors and
// optimizer.safetensors). Everything CheckpointReader offers is exercised;
// rejections must be RuntimeErrors.
//
//===----------------------------------------------------------------------===//

#include "FuzzFiles.h"

#include "runtime/io/CheckpointReader.h"
#include "runtime/support/Error.h"

#include <algorithm>
#include <cstring>

using namespace strata;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  bool perRank = data[0] % 2 == 0;
  const uint8_t *rest = data + 1;
  size_t restSize = size - 1;
  const uint8_t *nul =
      static_cast<const uint8_t *>(std::memchr(rest, 0, restSize));
  size_t stateSize = nul ? size_t(nul - rest) : restSize;
  const uint8_t *tensors = nul ? nul + 1 : rest + restSize;
  size_t tensorsSize = restSize - stateSize - (nul ? 1 : 0);

  for (const char *name : {"index.json", "trainer.json", "rank0.safetensors",
                           "model.safetensors", "optimizer.safetensors"})
    fuzz::removeFile(name);
  fuzz::writeFile(perRank ? "index.json" : "trainer.json", rest, stateSize);
  if (perRank) {
    fuzz::writeFile("rank0.safetensors", tensors, tensorsSize);
  } else {
    fuzz::writeFile("model.safetensors", tensors, tensorsSize);
    fuzz::writeFile("optimizer.safetensors", tensors, tensorsSize);
  }
  try {
    rt::CheckpointReader reader =
        rt::CheckpointReader::open(fuzz::scratchDir());
    (void)reader.configJson();
    for (const std::string &name : reader.tensorNames()) {
      try {
        std::vector<int64_t> shape = reader.checkpointShape(name);
        (void)reader.readTensor(name);
        for (const char *suffix : {".exp_avg", ".exp_avg_sq", ".momentum"})
          if (reader.hasState(name, suffix))
            (void)reader.readState(name, suffix);
      } catch (const rt::RuntimeError &) {
      }
    }
  } catch (const rt::RuntimeError &) {
  }
  return 0;
}
