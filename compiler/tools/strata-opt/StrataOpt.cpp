//===- StrataOpt.cpp - mlir-opt with the strata dialect and passes --------===//
//
// Registers only what Strata IR uses (strata, func) and Strata's passes plus
// the generic cleanups, which keeps this tool quick to build.
//
//===----------------------------------------------------------------------===//

#include "dialects/strata/StrataDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "passes/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<strata::StrataDialect, mlir::func::FuncDialect>();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();
  strata::registerStrataPasses();
  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "Strata optimizer driver (strata dialect + passes)\n",
      registry));
}
