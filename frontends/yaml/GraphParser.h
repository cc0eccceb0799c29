//===- GraphParser.h - The explicit `graph:` section ------------*- C++ -*-===//

#ifndef STRATA_FRONTENDS_YAML_GRAPHPARSER_H
#define STRATA_FRONTENDS_YAML_GRAPHPARSER_H

#include "frontends/yaml/ModelSpec.h"
#include "frontends/yaml/YamlFields.h"

namespace strata::frontend {

/// Reads a `graph:` mapping (inputs, params, ops, outputs) into `graph`,
/// resolving the symbolic `batch` dimension to `batch` and defaulting
/// dtypes to `defaultDType`. Checks the YAML structure, op names and
/// attribute types; names, order and shapes are left to validateGraph.
/// Returns false after reporting errors through `r`.
bool readExplicitGraph(SpecReader &r, const YamlNode *node, DType defaultDType,
                       int64_t batch, Graph &graph);

} // namespace strata::frontend

#endif // STRATA_FRONTENDS_YAML_GRAPHPARSER_H
