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

def StrataAutodiff : Pass<"strata-autodiff", "mlir::ModuleOp"> {
  let summary = "Builds forward + backward of one micro-batch from @forward";
  let description = [{
    Replaces `func.func @forward` (whose first result is the scalar loss) by
    `func.func @train_microbatch`: the forward ops, then the reverse-mode
    gradient of `loss_scale * loss` built from each op's gradient rule
    (`DifferentiableOpInterface`), then one `strata.accumulate_grad` per
    parameter. The loss scale defaults to micro_batch / global_batch from
    the module's `strata.training`, so that summing micro-batch gradients
    gives the gradient of the mean loss over the global batch.
  }];
  let options = [
    Option<"lossScale", "loss-scale", "double", "0.0",
           "Gradient seed (0: micro_batch / global_batch from strata.training)">,
  ];
  let dependentDialects = ["::strata::StrataDialect"];
}

def StrataBuildOptimizer : Pass<"strata-build-optimizer", "mlir::ModuleOp"> {
  let summary = "Builds @optimizer_step from the module's training settings";
  let description = [{
    Adds `func.func @optimizer_step`: global-norm gradient clipping when
    `grad_clip > 0`, then one `strata.sgd_update` or `strata.adamw_update`
    per parameter. Weight decay applies to parameters of rank >= 2 only
    (matmul weights and embeddings), never to biases or norm parameters.
  }];
  let dependentDialects = ["::strata::StrataDialect"];
}

def StrataInsertGradientReduction
    : Pass<"strata-insert-gradient-reduction", "mlir::ModuleOp"> {
  let summary = "Buckets parameter gradients for data-parallel reduction";
  let description = [{
    Groups the parameters of @train_microbatch into buckets of about
    `bucket-bytes` of gradients, in the order their gradients become final
    (reverse layer order), and inserts a `strata.gradient_bucket` right after
    the last `strata.accumulate_grad` of each bucket: an all-reduce over the
    data-parallel group for ZeRO stage 0, a reduce-scatter for stages 1-3
    (the optimizer then updates only this replica's shard). Placing the
    reduction there lets it run while the rest of the backward pass
    computes. Parameters marked `strata.grad_group` (already reduced over
    another group) are bucketed the same way.
  }];
  let options = [
    Option<"group", "group", "std::string", "\"dp\"",
           "Process-group axis the gradients are reduced over">,
    Option<"zero", "zero", "int", "0", "ZeRO stage (0-3)">,
    Option<"bucketBytes", "bucket-bytes", "int64_t", "25 << 20",
           "Target gradient bytes per bucket">,
  ];
  let dependentDialects = ["::strata::StrataDialect"];
}

#endif // STRATA_PASSES_TD
