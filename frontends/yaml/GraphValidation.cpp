//===- GraphValidation.cpp - Names, order and shapes of a graph -----------===//
//
// One forward pass over the ops in their listed order. A value whose
// producer failed to check is marked unknown, and ops that use it are
// skipped silently, so one mistake yields one diagnostic, not a cascade.
//
//===----------------------------------------------------------------------===//

#include "frontends/yaml/GraphValidation.h"

#include "frontends/yaml/GraphShapes.h"
#include "frontends/yaml/YamlFields.h"

#include <set>

namespace strata::frontend {

namespace {

/// After this many, further graph errors are most likely consequences.
constexpr int kMaxGraphErrors = 20;

std::string at(const SourceLoc &loc) {
  return std::to_string(loc.line) + ":" + std::to_string(loc.col);
}

class GraphValidator {
public:
  GraphValidator(Graph &g, const std::string &path,
                 std::vector<Diagnostic> &diags)
      : g(g), path(path), diags(diags) {}

  bool run() {
    declareAll();
    for (size_t i = 0; i < g.ops.size() && !tooManyErrors(); ++i)
      checkOp((int)i);
    if (tooManyErrors())
      return false;
    checkOutputs();
    return errors == 0;
  }

private:
  /// Where a value is defined: an input, a param, or output of op `op`.
  struct Definition {
    SourceLoc loc;
    std::string what;
    int op = -1;
  };

  void error(SourceLoc loc, std::string message) {
    if (loc.file.empty())
      loc.file = path;
    if (errors < kMaxGraphErrors)
      diags.push_back(Diagnostic{std::move(loc), std::move(message)});
    else if (errors == kMaxGraphErrors)
      diags.push_back(Diagnostic{
          SourceLoc{path, 0, 0},
          "too many errors in the graph; stopping after " +
              std::to_string(kMaxGraphErrors) + " (fix the ones above first)"});
    ++errors;
  }

  bool tooManyErrors() const { return errors > kMaxGraphErrors; }

  std::string opLabel(const GraphOp &op) const {
    return op.outputs.empty() ? op.op : op.op + " '" + op.outputs[0] + "'";
  }

  SourceLoc inputLoc(const GraphOp &op, size_t j) const {
    return j < op.inputLocs.size() ? op.inputLocs[j] : op.loc;
  }
  SourceLoc outputLoc(const GraphOp &op, size_t j) const {
    return j < op.outputLocs.size() ? op.outputLocs[j] : op.loc;
  }

  void declare(const std::string &name, const SourceLoc &loc,
               const std::string &what, int op) {
    if (name.empty()) {
      error(loc, "an empty value name; expected a name for each " + what);
      return;
    }
    auto [it, inserted] = defs.emplace(name, Definition{loc, what, op});
    if (!inserted) {
      error(loc, "duplicate value name '" + name + "': already defined as " +
                     it->second.what + " at " + at(it->second.loc) +
                     "; expected every input, param and op output to have "
                     "its own name");
      if (op >= 0)
        unknown.insert(name);
    }
  }

  bool checkDeclaredShape(const GraphTensor &t, const char *what) {
    int64_t count = 1;
    for (int64_t d : t.shape) {
      if (d < 1) {
        error(t.loc, std::string(what) + " '" + t.name + "' has shape " +
                         formatShape(t.shape) + "; expected positive dims");
        return false;
      }
      std::optional<int64_t> p = checkedMul(count, d);
      if (!p) {
        error(t.loc, std::string(what) + " '" + t.name + "' has shape " +
                         formatShape(t.shape) +
                         ", more than 2^62 elements; expected a smaller "
                         "tensor");
        return false;
      }
      count = *p;
    }
    return true;
  }

  void declareAll() {
    for (const GraphTensor &in : g.inputs) {
      declare(in.name, in.loc, "an input", -1);
      if (checkDeclaredShape(in, "input"))
        g.values[in.name] = TensorType{in.shape, in.dtype};
      else
        unknown.insert(in.name);
    }
    int64_t paramTotal = 0;
    for (const GraphParam &p : g.params) {
      declare(p.name, p.loc, "a param", -1);
      bool ok = checkDeclaredShape(p, "param");
      if (ok && !isFloatDType(p.dtype)) {
        error(p.loc, "param '" + p.name + "' is " + dtypeName(p.dtype) +
                         "; expected a floating-point dtype (float32, "
                         "bfloat16 or float16)");
        ok = false;
      }
      if (ok) {
        std::optional<int64_t> sum =
            checkedAdd(paramTotal, numElements(p.shape));
        if (!sum) {
          error(p.loc, "the params up to '" + p.name +
                           "' hold more than 2^62 elements in total; "
                           "expected a smaller model");
          ok = false;
        } else {
          paramTotal = *sum;
        }
      }
      if (ok)
        g.values[p.name] = TensorType{p.shape, p.dtype};
      else
        unknown.insert(p.name);
    }
    for (size_t i = 0; i < g.ops.size(); ++i) {
      const GraphOp &op = g.ops[i];
      for (size_t j = 0; j < op.outputs.size(); ++j)
        declare(op.outputs[j], outputLoc(op, j), "an output of " + op.op,
                (int)i);
    }
  }

  /// The data-flow path from an output of op `user` to `value`, if `value`
  /// depends on op `user` (then using it in `user` closes a cycle).
  std::vector<std::string> findCycle(int user, const std::string &value) {
    std::map<std::string, std::string> usedBy; // value -> value it feeds
    std::vector<std::string> stack{value};
    usedBy[value] = "";
    while (!stack.empty()) {
      std::string v = stack.back();
      stack.pop_back();
      auto d = defs.find(v);
      if (d == defs.end() || d->second.op < 0)
        continue;
      if (d->second.op == user) {
        std::vector<std::string> path{v};
        for (std::string w = usedBy[v]; !w.empty(); w = usedBy[w])
          path.push_back(w);
        path.push_back(v);
        return path;
      }
      for (const std::string &in : g.ops[d->second.op].inputs)
        if (usedBy.emplace(in, v).second)
          stack.push_back(in);
    }
    return {};
  }

  std::vector<std::string> definedNames() const {
    std::vector<std::string> names;
    for (const auto &[name, def] : defs)
      names.push_back(name);
    return names;
  }

  void markOutputsUnknown(const GraphOp &op) {
    for (const std::string &out : op.outputs)
      unknown.insert(out);
  }

  void checkOp(int i) {
    GraphOp &op = g.ops[i];
    const OpRule *rule = findOpRule(op.op);
    if (!rule) {
      std::string hint = didYouMean(op.op, opNames());
      error(op.loc, "unknown op '" + op.op + "'" + (hint.empty() ? ";" : hint) +
                        " expected one of: " + joinChoices(opNames()));
      markOutputsUnknown(op);
      return;
    }
    std::string label = opLabel(op);
    bool ok = true;
    if (rule->variadic ? op.inputs.empty()
                       : op.inputs.size() != rule->operands.size()) {
      error(op.loc,
            label + ": " + rule->name + " takes " +
                (rule->variadic
                     ? std::string("one or more inputs")
                     : std::to_string(rule->operands.size()) + " input" +
                           (rule->operands.size() == 1 ? "" : "s")) +
                ", " + opSignature(*rule) + "; got " +
                std::to_string(op.inputs.size()));
      ok = false;
    }
    if (std::optional<std::string> e = completeOpAttrs(*rule, op.attrs)) {
      error(op.loc, label + ": " + *e);
      markOutputsUnknown(op);
      return;
    }
    int outs = expectedOutputs(*rule, op.attrs);
    if (outs < 1) {
      error(op.loc, label + ": num is " +
                        std::to_string(std::get<int64_t>(op.attrs["num"])) +
                        "; expected a positive number of parts");
      ok = false;
    } else if ((int)op.outputs.size() != outs) {
      error(op.loc,
            label + ": " + rule->name + " produces " + std::to_string(outs) +
                " output" + (outs == 1 ? "" : "s") +
                (rule->numOutputs < 0 ? " (num = " + std::to_string(outs) + ")"
                                      : "") +
                "; got " + std::to_string(op.outputs.size()) + " output name" +
                (op.outputs.size() == 1 ? "" : "s"));
      ok = false;
    }
    std::vector<TensorType> inTypes;
    for (size_t j = 0; j < op.inputs.size(); ++j) {
      const std::string &name = op.inputs[j];
      auto d = defs.find(name);
      if (d == defs.end()) {
        std::string hint = errors < 5 ? didYouMean(name, definedNames()) : "";
        error(inputLoc(op, j), label + ": undefined value '" + name + "'" +
                                   (hint.empty() ? ";" : hint) +
                                   " expected an input, a param or an "
                                   "earlier op's output");
        ok = false;
        continue;
      }
      if (d->second.op >= i) {
        std::vector<std::string> cycle = findCycle(i, name);
        if (!cycle.empty()) {
          // Long cycles show their ends; the middle says how much is elided.
          std::string text;
          for (size_t k = 0; k < cycle.size(); ++k) {
            if (cycle.size() > 9 && k == 4) {
              text += " -> ... (" + std::to_string(cycle.size() - 8) + " more)";
              k = cycle.size() - 5;
              continue;
            }
            text += (k ? " -> " : "") + cycle[k];
          }
          error(inputLoc(op, j), label + ": input '" + name +
                                     "' depends on this op's own "
                                     "output, a cycle: " +
                                     text + "; expected an acyclic graph");
        } else {
          error(inputLoc(op, j),
                label + ": input '" + name +
                    "' is used before it is "
                    "defined (by " +
                    g.ops[d->second.op].op + " at " + at(d->second.loc) +
                    "); expected ops listed so "
                    "that each value is defined before it is used");
        }
        ok = false;
        continue;
      }
      if (unknown.count(name)) {
        ok = false; // already reported where it was defined
        continue;
      }
      inTypes.push_back(g.values.at(name));
    }
    if (!ok) {
      markOutputsUnknown(op);
      return;
    }
    std::vector<TensorType> outTypes;
    if (std::optional<std::string> e =
            rule->infer(inTypes, op.attrs, outTypes)) {
      error(op.loc, label + ": " + *e);
      markOutputsUnknown(op);
      return;
    }
    for (size_t k = 0; k < outTypes.size(); ++k) {
      int64_t count = 1;
      for (int64_t d : outTypes[k].shape) {
        std::optional<int64_t> p = checkedMul(count, d);
        if (!p) {
          error(op.loc, label + ": output '" + op.outputs[k] + "' would be " +
                            formatShape(outTypes[k].shape) +
                            ", more than 2^62 elements; expected smaller "
                            "dimensions");
          markOutputsUnknown(op);
          return;
        }
        count = *p;
      }
    }
    op.outputTypes = outTypes;
    for (size_t k = 0; k < outTypes.size(); ++k)
      if (!unknown.count(op.outputs[k]))
        g.values[op.outputs[k]] = outTypes[k];
  }

  void checkOutputs() {
    if (g.outputs.empty()) {
      error(g.loc, "the graph has no outputs; expected 'outputs: [loss, "
                   "...]' naming the scalar loss first");
      return;
    }
    std::set<std::string> seen;
    for (size_t k = 0; k < g.outputs.size(); ++k) {
      const std::string &name = g.outputs[k];
      SourceLoc loc = k < g.outputLocs.size() ? g.outputLocs[k] : g.loc;
      if (!defs.count(name)) {
        std::string hint = didYouMean(name, definedNames());
        error(loc, "graph output '" + name + "' is not defined" +
                       (hint.empty() ? ";" : hint) +
                       " expected the name of an input, param or op "
                       "output");
        continue;
      }
      if (!seen.insert(name).second)
        error(loc, "graph output '" + name +
                       "' is listed twice; expected each output once");
    }
    auto first = g.values.find(g.outputs[0]);
    if (first != g.values.end() &&
        (!first->second.shape.empty() || !isFloatDType(first->second.dtype)))
      error(g.outputLocs.empty() ? g.loc : g.outputLocs[0],
            "the first graph output '" + g.outputs[0] + "' is " +
                formatType(first->second) +
                "; expected the scalar float loss (e.g. the output "
                "of cross_entropy)");
  }

  Graph &g;
  const std::string &path;
  std::vector<Diagnostic> &diags;
  int errors = 0;
  std::map<std::string, Definition> defs;
  std::set<std::string> unknown;
};

} // namespace

bool validateGraph(Graph &graph, const std::string &path,
                   std::vector<Diagnostic> &diags) {
  return GraphValidator(graph, path, diags).run();
}

} // namespace strata::frontend
