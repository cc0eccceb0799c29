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

def StrataAssignPipelineStages
    : Pass<"strata-assign-pipeline-stages", "mlir::ModuleOp"> {
  let summary = "Assigns every op of @forward to a pipeline stage";
  let description = [{
    Gives each op of @forward a `strata.stage` attribute: ops of repeated
    layer `l` (`strata.layer`) go to the (virtual) stage whose layer range
    holds `l` (`stage-layers`, one entry per virtual stage, in model order;
    an even split when empty); ops before the first layer (embeddings) go to
    stage 0 and ops that depend on the layers but belong to none (final norm,
    logits, loss) to the last stage. Parameters and inputs used on several
    stages are declared once per stage; such a parameter is marked
    `strata.tied` so its partial gradients are summed across the stages
    holding it (GPT-2's tied embedding). Autodiff copies the stage of each
    forward op to its gradient ops.

    With `graph-units` (explicit graphs), the stages split the graph's
    pipeline units instead (passes/partition/PipelineUnits.h): each maximal
    run of consecutive ops of one `strata.layer`, and each op without a
    layer, is a unit; `stage-layers` then counts units, so a graph with no
    annotations at all is split op by op.
  }];
  let options = [
    Option<"pp", "pp", "int64_t", "1", "Pipeline devices">,
    Option<"vpp", "vpp", "int64_t", "1", "Virtual stages (model chunks) per device">,
    ListOption<"stageLayers", "stage-layers", "int64_t",
               "Layers (units with graph-units) of each virtual stage, in model order">,
    Option<"graphUnits", "graph-units", "bool", "false",
           "Split pipeline units (runs of ops) rather than layers">,
  ];
  let dependentDialects = ["::strata::StrataDialect"];
}

def StrataRecompute : Pass<"strata-recompute", "mlir::ModuleOp"> {
  let summary = "Recomputes layer activations in the backward pass";
  let description = [{
    Activation recomputation (checkpointing) on @train_microbatch: for each
    repeated layer (`strata.layer`), the forward ops are cloned right before
    the layer's first backward op and the backward ops use the clones, so the
    forward activations die after their last forward use and the memory
    planner reuses their bytes. `mode=full` recomputes every op of the layer
    from its input (Megatron's full recomputation: only layer inputs are
    kept); `mode=selective` recomputes only the attention core: the
    sequence-by-sequence scores and their softmax (Korthikanti et al. 2022).
  }];
  let options = [
    Option<"mode", "mode", "std::string", "\"full\"",
           "full | selective">,
  ];
  let dependentDialects = ["::strata::StrataDialect"];
}

def StrataDecodeStep : Pass<"strata-decode-step", "mlir::ModuleOp"> {
  let summary = "Turns @forward into one generation step with a key/value cache";
  let description = [{
    For generation: takes a @forward built for one new position per
    sequence (inputs `[B, 1]`, the frontend's decode mode) and produces
    `func.func @decode_step` returning the next-token logits `[B, 1, V]`
    (the operand of the loss, which is removed with the `targets` input).
    Every causal attention core -- `matmul(q, k, transpose_b)`, causal
    `softmax`, `matmul(probs, v)` -- becomes one `strata.cached_attention`
    of `max-len` positions (default: the model's seq_len), so each new
    token costs one position of every other op; keys and values repeated
    for grouped-query attention (`repeat_interleave` over heads) are cached
    once per kv head. Every `rotary_embedding` becomes
    `rotary_embedding_at_position` (it rotates by the position being fed).
    The rest of the graph is the training forward's, op for op. Any other
    softmax is an error.
  }];
  let options = [
    Option<"maxLen", "max-len", "int64_t", "0",
           "Key/value cache length (0: strata.model's seq_len)">,
  ];
  let dependentDialects = ["::strata::StrataDialect"];
}

//===----------------------------------------------------------------------===//
// Sharding by per-op rules (passes/sharding)
//===----------------------------------------------------------------------===//

def StrataSeedStatedDecisions
    : Pass<"strata-seed-stated-decisions", "mlir::ModuleOp"> {
  let summary = "Turns a model's stated sharding decisions into seeds for a mesh";
  let description = [{
    The presets state Megatron-LM's tensor-parallel decisions where they build
    the graph: on a parameter, `strata.tp_decision` (its split per dimension
    in strata.sharding's notation: "tp", "tp@3x4x4:1", "tp/K" for K
    key/value heads), `strata.tp_decision_view` (the checkpoint view the
    split is stated in) and `strata.tp_decision_padded` (the mesh need not
    divide it: a vocabulary); on the ops whose results are the residual
    stream, `strata.sp_decision` (its split along the sequence). For a mesh
    axis of `mesh-size` members this writes them as `strata.sharding` (and
    `strata.shard_view`) seeds for strata-propagate-sharding, the
    sequence-parallel ones only with `sp`, and removes the statements. "tp/K"
    becomes a plain split when the mesh divides K and stays "tp/K" (the
    weight whole, mesh/K members sharing each head) when K divides the mesh.
    Fails, naming the parameter, where the mesh divides neither or does not
    divide a split dimension that may not be padded.
  }];
  let options = [
    Option<"meshSize", "mesh-size", "int64_t", "2", "Members of the mesh axis">,
    Option<"sp", "sp", "bool", "false",
           "Sequence parallelism: seed the stated sequence splits too">,
  ];
  let dependentDialects = ["::strata::StrataDialect"];
}

def StrataPropagateSharding
    : Pass<"strata-propagate-sharding", "mlir::ModuleOp"> {
  let summary = "Spreads shardings through @forward by each op's sharding rule";
  let description = [{
    Seeds are `strata.sharding` attributes written on some ops of @forward
    (one list per result, one mesh axis name per dimension, "" for whole,
    e.g. `strata.sharding = [["", "tp"]]` on a column-parallel weight).
    Every op's rule (ShardingRuleOpInterface, dialects/strata/
    StrataShardingRules.cpp) maps the shardings it knows onto its factors,
    parameters first, and the factors back onto the dimensions that have no
    sharding yet; forward and backward sweeps repeat until nothing changes.
    A dimension is split only if it divides by `mesh-size`. Inputs stay
    whole. Every op ends with a `strata.sharding`; an op without a rule is
    replicated, with a warning. `annotate-rules` also writes each op's rule
    as `strata.sharding_rule` (Shardy's notation). `split-matmul-weights`
    adds decisions of its own (what `strata compile` uses for explicit
    graphs under tp): the weight parameter of each matmul whose input is
    whole is split by its output features.
  }];
  let options = [
    Option<"meshSize", "mesh-size", "int64_t", "2", "Members of the mesh axis">,
    Option<"annotateRules", "annotate-rules", "bool", "false",
           "Write each op's rule as strata.sharding_rule">,
    Option<"splitMatmulWeights", "split-matmul-weights", "bool", "false",
           "Decide too: split the [K, N] weight of every matmul whose input "
           "is whole by its N output features (the rules then split the "
           "next matmul's weight by rows: Megatron's column -> row)">,
  ];
  let dependentDialects = ["::strata::StrataDialect"];
}

def StrataPartitionSharding
    : Pass<"strata-partition-sharding", "mlir::ModuleOp"> {
  let summary = "Rewrites @forward into one mesh member's part of it";
  let description = [{
    Runs after strata-propagate-sharding. Gives every value this member's
    local type and inserts the collective that reconciles each operand with
    what its op needs: all_reduce (partial sum to whole), reduce_scatter
    (partial sum to split), all_gather (split to whole), replicate + slice
    (whole to split), all_gather + replicate + slice (one split to another:
    all-to-all). A whole operand of an op that splits a factor the operand
    lacks enters through `replicate`, so the gradients autodiff builds later
    are summed over the mesh where they are partial. Split parameters keep
    their checkpoint names and carry `strata.global_shape` (the checkpoint
    shape), `strata.shard_view` (a row-major view of the checkpoint in which
    the shard is one box) and `strata.shard_start` (the box's start in the
    view); the parameter's type is the box's shape. Boxes of a padded
    vocabulary extend past the view.
  }];
  let options = [
    Option<"meshSize", "mesh-size", "int64_t", "2", "Members of the mesh axis">,
    Option<"rank", "rank", "int64_t", "0", "This member's index on the axis">,
    Option<"axisGroup", "group", "std::string", "\"tp\"",
           "The process group of the mesh axis (the axis name in shardings)">,
  ];
  let dependentDialects = ["::strata::StrataDialect"];
}

def StrataMixedPrecision : Pass<"strata-mixed-precision", "mlir::ModuleOp"> {
  let summary = "float32 master parameters with casts to the compute dtype";
  let description = [{
    On @forward of a model imported in bfloat16 (or float16): every such
    `strata.param` becomes float32 (the master weights the optimizer
    updates and checkpoints keep) and each of its uses reads a
    `strata.cast` to the compute dtype; an embedding lookup reads the
    float32 table and casts the gathered rows. Autodiff differentiates the
    casts, so parameter gradients are float32. Float32 models are left
    unchanged. Runs after partitioning and before `strata-autodiff`.
  }];
  let dependentDialects = ["::strata::StrataDialect"];
}

#endif // STRATA_PASSES_TD
