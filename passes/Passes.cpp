//===- Passes.cpp - Strata pass registration ------------------------------===//

#include "passes/Passes.h"
