//===- StrataDialect.td - The strata dialect ----------------*- tablegen -*-===//
//
// The `strata` dialect describes training graphs: declarations of named
// parameters and inputs, and the tensor ops that MLPs and GPT-2-style
// transformers are made of.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_DIALECT_TD
#define STRATA_DIALECT_TD

include "mlir/IR/OpBase.td"

def Strata_Dialect : Dialect {
  let name = "strata";
  let cppNamespace = "::strata";
  let summary = "Training graphs for auto-parallel hybrid training";
  let description = [{
    The `strata` dialect holds the forward graph of a model (imported from a
    YAML spec) and, after autodiff, the training step. Values are ranked
    tensors with static shapes. Parameters and inputs are ops that carry the
    names checkpoints and data use, so names survive every transformation.

    Per-op knowledge lives with the op: shapes and dtypes are checked by each
    op's verifier and inferred through `InferTypeOpInterface`; gradient rules
    live behind `StrataDifferentiableOpInterface`.
  }];
}

class Strata_Op<string mnemonic, list<Trait> traits = []>
    : Op<Strata_Dialect, mnemonic, traits>;

#endif // STRATA_DIALECT_TD
