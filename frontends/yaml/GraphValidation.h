//===- GraphValidation.h - Names, order and shapes of a graph ---*- C++ -*-===//

#ifndef STRATA_FRONTENDS_YAML_GRAPHVALIDATION_H
#define STRATA_FRONTENDS_YAML_GRAPHVALIDATION_H

#include "frontends/yaml/ModelSpec.h"

#include <vector>

namespace strata::frontend {

/// Checks an explicit (or expanded preset) graph: unique value names, every
/// use after its definition (ops are listed in dependency order; a use of a
/// later value is reported as use-before-definition, or as a cycle when the
/// later producer depends on the user), known ops with the right number of
/// inputs, outputs and attributes (defaults are filled in), and the shape
/// and dtype rules of GraphShapes.h. Fills graph.values and every
/// op.outputTypes. Returns false after appending located diagnostics.
bool validateGraph(Graph &graph, const std::string &path,
                   std::vector<Diagnostic> &diags);

} // namespace strata::frontend

#endif // STRATA_FRONTENDS_YAML_GRAPHVALIDATION_H
