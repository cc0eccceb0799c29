//===- GraphShapes.h - Per-op arity, attributes and shape rules -*- C++ -*-===//
//
// The one table that says, for every op of the explicit graph form, what it
// takes, what attributes it has (with defaults) and how its output types
// follow from its inputs. Explicit graphs and expanded presets are both
// checked against it. The strata dialect's verifiers check the same rules on
// the IR; keeping the frontend's copy in this one place lets a spec error
// point at the YAML line instead of at generated IR.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_FRONTENDS_YAML_GRAPHSHAPES_H
#define STRATA_FRONTENDS_YAML_GRAPHSHAPES_H

#include "frontends/yaml/ModelSpec.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace strata::frontend {

enum class AttrKind {
  Bool,
  Int,
  Float,
  IntList,
  /// A list of dims where the string `batch` stands for ModelSpec::batch and
  /// one entry may be -1 (reshape's `shape`).
  Shape,
  /// A name (strata.unary's `kind`).
  String,
};

struct AttrSpec {
  std::string name;
  AttrKind kind;
  std::optional<AttrValue> defaultValue; // nullopt: the attribute is required
};

using OpAttrs = std::map<std::string, AttrValue>;

/// Computes output types from input types; returns an error message (without
/// the "op 'name': " prefix) on a mismatch. Inputs are already checked for
/// count; attributes are present and of the right kind.
using ShapeInferFn = std::optional<std::string> (*)(
    const std::vector<TensorType> &in, const OpAttrs &attrs,
    std::vector<TensorType> &out);

struct OpRule {
  std::string name;
  /// Operand names as used in messages ("a", "b"); a variadic op has one
  /// entry naming each of its operands.
  std::vector<std::string> operands;
  bool variadic = false; // one or more inputs (concat)
  int numOutputs = 1;    // -1: given by the integer attribute `num`
  std::vector<AttrSpec> attrs;
  ShapeInferFn infer = nullptr;
  std::string summary; // one line for docs and "expected" hints
};

/// All ops, in documentation order.
const std::vector<OpRule> &opRules();
/// The rule for `name`, or null.
const OpRule *findOpRule(const std::string &name);
std::vector<std::string> opNames();

/// "matmul(a, b)": the signature used in arity messages.
std::string opSignature(const OpRule &rule);
/// The number of outputs `rule` produces with these attributes.
int expectedOutputs(const OpRule &rule, const OpAttrs &attrs);

/// Fills defaults into `attrs` and checks that every attribute is known,
/// present and of its kind. Returns an error message on failure.
std::optional<std::string> completeOpAttrs(const OpRule &rule, OpAttrs &attrs);

/// "[8,64]".
std::string formatShape(const std::vector<int64_t> &shape);
/// "float32[8,64]".
std::string formatType(const TensorType &t);

} // namespace strata::frontend

#endif // STRATA_FRONTENDS_YAML_GRAPHSHAPES_H
