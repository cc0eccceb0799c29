//===- SummarizeModel.h - Parameter, op and FLOP summary --------*- C++ -*-===//

#ifndef STRATA_PASSES_ANALYSIS_SUMMARIZEMODEL_H
#define STRATA_PASSES_ANALYSIS_SUMMARIZEMODEL_H

#include "mlir/IR/BuiltinOps.h"
#include <cstdint>
#include <map>
#include <string>

namespace llvm {
class raw_ostream;
}

namespace strata {

struct ModelSummary {
  int64_t numParams = 0, numParamTensors = 0, paramBytes = 0;
  int64_t forwardFlops = 0, forwardBytes = 0;
  std::map<std::string, int64_t> opCounts;
};

ModelSummary summarizeModel(mlir::ModuleOp module);
void printModelSummary(const ModelSummary &summary, llvm::raw_ostream &os);

} // namespace strata

#endif // STRATA_PASSES_ANALYSIS_SUMMARIZEMODEL_H
