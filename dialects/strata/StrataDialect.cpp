//===- StrataDialect.cpp - The strata dialect -----------------------------===//

#include "dialects/strata/StrataDialect.h"
#include "dialects/strata/StrataOps.h"
#include "dialects/strata/StrataSharding.h"

using namespace mlir;
using namespace strata;

#include "dialects/strata/StrataDialect.cpp.inc"

void StrataDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/strata/StrataOps.cpp.inc"
      >();
  attachShardingRules(getContext());
}
