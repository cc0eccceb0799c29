//===- PipelineUnits.h - An explicit graph's pipeline units -----*- C++ -*-===//
//
// What a pipeline stage of an explicit graph takes whole: each maximal run of
// consecutive @forward ops with the same `strata.layer`, and each op with no
// layer on its own. Declarations (params, inputs) and the return belong to
// no unit. The planner costs these units and `strata-assign-pipeline-stages
// {graph-units}` splits them, so both use this one definition.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_PASSES_PARTITION_PIPELINEUNITS_H
#define STRATA_PASSES_PARTITION_PIPELINEUNITS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/SmallVector.h"

namespace strata {

using PipelineUnit = llvm::SmallVector<mlir::Operation *>;

/// The units of `forward`'s body, in order.
llvm::SmallVector<PipelineUnit> pipelineUnits(mlir::func::FuncOp forward);

} // namespace strata

#endif // STRATA_PASSES_PARTITION_PIPELINEUNITS_H
