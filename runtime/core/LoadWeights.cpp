//===- LoadWeights.cpp - Weights and checkpoints from other layouts -------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Where the files do not match this program one to one: --init from a
// safetensors file in Hugging Face's spellings or from a checkpoint
// directory of any plan, and --resume from a checkpoint of another plan or
// rank count (resharding). Whole tensors are read (CheckpointReader
// reassembles them from per-rank pieces) and every rank copies out its box
// or flat range, exactly as initialisation does, so the result does not
// depend on how either plan split the tensors.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/ParamLayout.h"
#include "runtime/core/Trainer.h"

#include "runtime/io/CheckpointReader.h"
#include "runtime/io/WeightsSource.h"
#include "runtime/support/Error.h"

#include <set>

namespace strata::rt {

namespace {

/// Every parameter name of the model, over all ranks (a pipeline stage
/// holds only some).
std::set<std::string> modelParameters(const Program &program) {
  std::set<std::string> names;
  for (const RankProgram &rp : program.ranks)
    for (const ParamDesc &p : rp.params)
      names.insert(p.name);
  return names;
}

} // namespace

void Trainer::loadInitialWeights(const std::string &path) {
  initParameters(); // Zero grads and optimizer state.
  WeightsSource weights = WeightsSource::open(path, modelParameters(program_));
  for (const ParamDesc &p : rankProgram().params)
    loadParamValue(p, weights.read(p.name), weights.shape(p.name),
                   weights.source());
}

void Trainer::loadResharded(const CheckpointReader &checkpoint) {
  const std::string &dir = checkpoint.directory();
  WeightsSource weights = WeightsSource::open(dir, modelParameters(program_));
  for (const ParamDesc &p : rankProgram().params)
    loadParamValue(p, weights.read(p.name), weights.shape(p.name), dir);
  const RankProgram &rp = rankProgram();
  std::vector<std::string> suffixes = stateSuffixes(program_.train.optimizer);
  for (const ParamDesc &p : rp.params) {
    ParamLayout layout = layoutOf(rp, p);
    int64_t whole = shapeElements(layout.view);
    for (size_t s = 0; s < p.state.size(); ++s) {
      if (!checkpoint.hasState(p.name, suffixes[s]))
        fail(dir, ": has no optimizer state '", p.name, suffixes[s],
             "'; the checkpoint is incomplete");
      std::vector<float> state = checkpoint.readState(p.name, suffixes[s]);
      if (int64_t(state.size()) != whole)
        fail(dir, ": optimizer state '", p.name, suffixes[s], "' has ",
             state.size(), " elements, the parameter ", whole);
      // This rank's state covers a flat range of its box; padding is zero.
      std::vector<float> local(layout.stateCount, 0.0f);
      forEachInFlatRange(layout, layout.stateOffset,
                         layout.stateOffset + layout.stateCount,
                         [&](int64_t i, int64_t g) {
                           local[i - layout.stateOffset] = state[g];
                         });
      writeF32(p.state[s], local);
    }
    writeF32(p.grad, std::vector<float>(rp.buffers[p.grad].numElements()));
  }
}

} // namespace strata::rt
