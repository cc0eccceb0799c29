//===- StrataOps.h - strata dialect operations ------------------*- C++ -*-===//

#ifndef STRATA_DIALECTS_STRATA_STRATAOPS_H
#define STRATA_DIALECTS_STRATA_STRATAOPS_H

#include "dialects/strata/StrataDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include <array>

#include "dialects/strata/StrataInterfaces.h.inc"

#define GET_OP_CLASSES
#include "dialects/strata/StrataOps.h.inc"

#endif // STRATA_DIALECTS_STRATA_STRATAOPS_H
