//===- StrataDialect.h - The strata dialect ---------------------*- C++ -*-===//

#ifndef STRATA_DIALECTS_STRATA_STRATADIALECT_H
#define STRATA_DIALECTS_STRATA_STRATADIALECT_H

#include "mlir/IR/Dialect.h"

#include "dialects/strata/StrataDialect.h.inc"

#endif // STRATA_DIALECTS_STRATA_STRATADIALECT_H
