//===- Passes.td - Strata passes ----------------------------*- tablegen -*-===//

#ifndef STRATA_PASSES_TD
#define STRATA_PASSES_TD

include "mlir/Pass/PassBase.td"

def StrataSummarizeModel : Pass<"strata-summarize-model", "mlir::ModuleOp"> {
  let summary = "Reports parameter counts, op counts and forward FLOPs";
  let description = [{
    Emits a remark on the module with the number of parameters (and their
    bytes), the number of ops of each kind, and the forward-pass FLOPs as
    counted by each op's cost rule. Leaves the IR unchanged.
  }];
}

#endif // STRATA_PASSES_TD
