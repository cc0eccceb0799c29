//===- ImportModel.h - Model spec -> strata IR ------------------*- C++ -*-===//
//
// Builds the forward graph of a parsed model spec as a `func.func @forward`
// of strata ops. Every op carries the spec's file:line:col as its location,
// so verifier errors point into the YAML file.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_FRONTENDS_IMPORT_IMPORTMODEL_H
#define STRATA_FRONTENDS_IMPORT_IMPORTMODEL_H

#include "frontends/yaml/ModelSpec.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

namespace mlir {
class DialectRegistry;
class MLIRContext;
} // namespace mlir

namespace strata {

/// Registers the dialects imported IR uses (strata, func).
void registerImportDialects(mlir::DialectRegistry &registry);

/// Builds and verifies the module; on failure, diagnostics have been emitted
/// through the context and the result is null.
mlir::OwningOpRef<mlir::ModuleOp> importModel(const frontend::ModelSpec &spec,
                                              mlir::MLIRContext &ctx);

/// Module attribute names.
constexpr const char *kModelAttrName = "strata.model";
constexpr const char *kTrainingAttrName = "strata.training";
/// Discardable op attribute: index of the repeated block an op belongs to.
constexpr const char *kLayerAttrName = "strata.layer";

} // namespace strata

#endif // STRATA_FRONTENDS_IMPORT_IMPORTMODEL_H
