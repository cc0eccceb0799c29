//===- ImportModel.cpp - Model spec -> strata IR --------------------------===//
//
// The importer is generic over ops: it creates `strata.<op>` by name, turns
// the spec's attributes into MLIR attributes, and asks the op itself (through
// InferTypeOpInterface) for its result types. Only the two ops whose result
// shape is not a function of operands and attributes — reshape (target shape)
// and split (number of parts) — are typed here.
//
//===----------------------------------------------------------------------===//

#include "frontends/import/ImportModel.h"

#include "dialects/strata/StrataDialect.h"
#include "dialects/strata/StrataOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "llvm/ADT/StringMap.h"

using namespace mlir;
using namespace strata;
using namespace strata::frontend;

void strata::registerImportDialects(DialectRegistry &registry) {
  registry.insert<StrataDialect, func::FuncDialect>();
}

namespace {

class ModelImporter {
public:
  ModelImporter(const ModelSpec &spec, MLIRContext &ctx)
      : spec(spec), ctx(ctx), builder(&ctx) {}

  OwningOpRef<ModuleOp> run();

private:
  Location loc(const SourceLoc &l) {
    if (l.line <= 0)
      return FileLineColLoc::get(&ctx, spec.path, 0, 0);
    return FileLineColLoc::get(&ctx, l.file.empty() ? spec.path : l.file,
                               l.line, l.col);
  }
  Type elementType(DType t) {
    switch (t) {
    case DType::F32:
      return builder.getF32Type();
    case DType::BF16:
      return builder.getBF16Type();
    case DType::F16:
      return builder.getF16Type();
    case DType::I32:
      return builder.getI32Type();
    }
    return builder.getF32Type();
  }
  RankedTensorType tensorType(const GraphTensor &t) {
    return RankedTensorType::get(t.shape, elementType(t.dtype));
  }
  LogicalResult define(const std::string &name, Value v, Location l) {
    if (!values.try_emplace(name, v).second)
      return emitError(l) << "value '" << name << "' is defined twice";
    return success();
  }
  FailureOr<Operation *> importOp(const GraphOp &op);
  FailureOr<SmallVector<Type>>
  explicitResultTypes(const GraphOp &op, ArrayRef<Value> operands, Location l);
  DictionaryAttr modelAttr();
  DictionaryAttr trainingAttr();

  const ModelSpec &spec;
  MLIRContext &ctx;
  OpBuilder builder;
  llvm::StringMap<Value> values;
};

/// Attributes the dialect stores as f64 even when the spec writes an integer.
bool isFloatAttr(StringRef name) {
  return name == "factor" || name == "epsilon" || name == "scale" ||
         name == "theta" || name == "value";
}

/// Spec attributes that shape the op's results rather than being stored.
bool isShapeOnlyAttr(StringRef name) {
  return name == "shape" || name == "num";
}

Attribute toAttr(OpBuilder &b, StringRef name, const AttrValue &v) {
  if (auto *i = std::get_if<int64_t>(&v))
    return isFloatAttr(name) ? Attribute(b.getF64FloatAttr(double(*i)))
                             : Attribute(b.getI64IntegerAttr(*i));
  if (auto *d = std::get_if<double>(&v))
    return b.getF64FloatAttr(*d);
  if (auto *bl = std::get_if<bool>(&v))
    return b.getBoolAttr(*bl);
  if (auto *s = std::get_if<std::string>(&v))
    return b.getStringAttr(*s);
  return b.getDenseI64ArrayAttr(std::get<std::vector<int64_t>>(v));
}

FailureOr<SmallVector<Type>>
ModelImporter::explicitResultTypes(const GraphOp &op, ArrayRef<Value> operands,
                                   Location l) {
  if (op.op == "constant" && operands.empty()) // a float32 scalar
    return SmallVector<Type>{RankedTensorType::get({}, builder.getF32Type())};
  if (operands.size() != 1)
    return emitError(l) << "'strata." << op.op << "' takes one input, got "
                        << operands.size(),
           failure();
  auto in = cast<RankedTensorType>(operands[0].getType());
  if (op.op == "reshape") {
    auto it = op.attrs.find("shape");
    const auto *shape = it == op.attrs.end()
                            ? nullptr
                            : std::get_if<std::vector<int64_t>>(&it->second);
    if (!shape)
      return emitError(l) << "'strata.reshape' needs a 'shape' attribute "
                             "(a list of sizes, one of which may be -1)",
             failure();
    SmallVector<int64_t> dims(shape->begin(), shape->end());
    int64_t known = 1, inferred = -1;
    for (auto [i, d] : llvm::enumerate(dims)) {
      if (d == -1 && inferred < 0)
        inferred = i;
      else if (d <= 0)
        return emitError(l) << "'strata.reshape' shape entries must be "
                               "positive (or a single -1), got "
                            << d,
               failure();
      else
        known *= d;
    }
    if (inferred >= 0) {
      if (known == 0 || in.getNumElements() % known != 0)
        return emitError(l) << "'strata.reshape' cannot infer the -1 "
                               "dimension: "
                            << in.getNumElements()
                            << " elements are not divisible by " << known,
               failure();
      dims[inferred] = in.getNumElements() / known;
    }
    return SmallVector<Type>{RankedTensorType::get(dims, in.getElementType())};
  }
  // split: equal parts along `axis`; the verifier checks divisibility.
  int64_t parts = op.outputs.size();
  auto it = op.attrs.find("axis");
  int64_t axis = 0;
  if (it != op.attrs.end())
    if (const auto *a = std::get_if<int64_t>(&it->second))
      axis = *a;
  if (axis < 0)
    axis += in.getRank();
  if (axis < 0 || axis >= in.getRank())
    return emitError(l) << "'strata.split' axis is out of range for a tensor "
                           "of rank "
                        << in.getRank(),
           failure();
  if (parts == 0 || in.getDimSize(axis) % parts != 0)
    return emitError(l) << "'strata.split' cannot split dimension " << axis
                        << " of size " << in.getDimSize(axis) << " into "
                        << parts << " equal parts",
           failure();
  SmallVector<int64_t> dims(in.getShape());
  dims[axis] /= parts;
  return SmallVector<Type>(parts,
                           RankedTensorType::get(dims, in.getElementType()));
}

FailureOr<Operation *> ModelImporter::importOp(const GraphOp &op) {
  Location l = loc(op.loc);
  std::string name = "strata." + op.op;
  std::optional<RegisteredOperationName> opName =
      RegisteredOperationName::lookup(name, &ctx);
  if (!opName || op.op == "param" || op.op == "input")
    return emitError(l) << "unknown op '" << op.op << "'", failure();

  SmallVector<Value> operands;
  for (const std::string &in : op.inputs) {
    auto it = values.find(in);
    if (it == values.end())
      return emitError(l) << "'" << op.op << "' uses undefined value '" << in
                          << "'",
             failure();
    operands.push_back(it->second);
  }

  OperationState state(l, *opName);
  state.addOperands(operands);
  for (const auto &[key, value] : op.attrs)
    if (!isShapeOnlyAttr(key) || (op.op != "reshape" && op.op != "split"))
      state.addAttribute(key, toAttr(builder, key, value));
  if (op.layer)
    state.addAttribute(kLayerAttrName, builder.getI64IntegerAttr(*op.layer));
  if (!op.spSplit.empty())
    state.addAttribute("strata.sp_decision",
                       builder.getStrArrayAttr(SmallVector<StringRef>(
                           op.spSplit.begin(), op.spSplit.end())));

  bool inferred = opName->hasInterface<InferTypeOpInterface>();
  if (inferred) {
    // Placeholder result types; the op computes the real ones below from its
    // operands and (now property-backed) attributes.
    state.addTypes(SmallVector<Type>(op.outputs.size(), builder.getNoneType()));
  } else {
    FailureOr<SmallVector<Type>> types = explicitResultTypes(op, operands, l);
    if (failed(types))
      return failure();
    state.addTypes(*types);
  }
  Operation *created = builder.create(state);
  if (inferred) {
    SmallVector<Type> types;
    if (failed(cast<InferTypeOpInterface>(created).inferReturnTypes(
            &ctx, l, created->getOperands(), created->getRawDictionaryAttrs(),
            created->getPropertiesStorage(), created->getRegions(), types))) {
      created->erase();
      return failure();
    }
    if (types.size() != created->getNumResults()) {
      created->erase();
      return emitError(l) << "'" << op.op << "' produces " << types.size()
                          << " value(s) but the spec names "
                          << op.outputs.size() << " output(s)",
             failure();
    }
    for (auto [r, t] : llvm::zip(created->getResults(), types))
      r.setType(t);
  }
  for (auto [outName, result] : llvm::zip(op.outputs, created->getResults()))
    if (failed(define(outName, result, l)))
      return failure();
  return created;
}

DictionaryAttr ModelImporter::modelAttr() {
  SmallVector<NamedAttribute> attrs;
  auto add = [&](StringRef k, int64_t v) {
    attrs.push_back(builder.getNamedAttr(k, builder.getI64IntegerAttr(v)));
  };
  attrs.push_back(
      builder.getNamedAttr("family", builder.getStringAttr(spec.family)));
  add("batch", spec.batch);
  if (spec.gpt) {
    const GptConfig &g = *spec.gpt;
    add("vocab", g.vocab), add("seq_len", g.seqLen), add("hidden", g.hidden);
    add("heads", g.heads), add("layers", g.layers),
        add("ffn_hidden", g.ffnHidden);
    attrs.push_back(builder.getNamedAttr(
        "dtype", builder.getStringAttr(dtypeName(g.dtype))));
  } else if (spec.llama) {
    const LlamaConfig &l = *spec.llama;
    add("vocab", l.vocab), add("seq_len", l.seqLen), add("hidden", l.hidden);
    add("heads", l.heads), add("kv_heads", l.kvHeads), add("layers", l.layers),
        add("ffn_hidden", l.ffnHidden);
    attrs.push_back(builder.getNamedAttr("rope_theta",
                                         builder.getF64FloatAttr(l.ropeTheta)));
    attrs.push_back(
        builder.getNamedAttr("norm_eps", builder.getF64FloatAttr(l.normEps)));
    attrs.push_back(builder.getNamedAttr("tie_embeddings",
                                         builder.getBoolAttr(l.tieEmbeddings)));
    attrs.push_back(builder.getNamedAttr(
        "dtype", builder.getStringAttr(dtypeName(l.dtype))));
  } else if (spec.mlp) {
    const MlpConfig &m = *spec.mlp;
    add("vocab", m.vocab), add("seq_len", m.seqLen), add("hidden", m.hidden);
    add("layers", m.layers), add("ffn_hidden", m.ffnHidden);
    attrs.push_back(builder.getNamedAttr("activation",
                                         builder.getStringAttr(m.activation)));
    attrs.push_back(builder.getNamedAttr(
        "dtype", builder.getStringAttr(dtypeName(m.dtype))));
  } else {
    // An explicit graph: the classes of its loss are the token vocabulary
    // the runtime's data contract checks targets against.
    for (const GraphOp &op : spec.graph.ops) {
      if (op.op != "cross_entropy" || op.inputs.empty())
        continue;
      auto it = spec.graph.values.find(op.inputs[0]);
      if (it != spec.graph.values.end() && !it->second.shape.empty()) {
        add("vocab", it->second.shape.back());
        break;
      }
    }
  }
  return builder.getDictionaryAttr(attrs);
}

DictionaryAttr ModelImporter::trainingAttr() {
  const TrainingSpec &t = spec.training;
  auto f = [&](double v) { return builder.getF64FloatAttr(v); };
  auto i = [&](int64_t v) { return builder.getI64IntegerAttr(v); };
  const OptimizerSpec &o = t.optimizer;
  DictionaryAttr opt = builder.getDictionaryAttr({
      builder.getNamedAttr(
          "kind", builder.getStringAttr(
                      o.kind == OptimizerSpec::Kind::SGD ? "sgd" : "adamw")),
      builder.getNamedAttr("lr", f(o.lr)),
      builder.getNamedAttr("momentum", f(o.momentum)),
      builder.getNamedAttr("beta1", f(o.beta1)),
      builder.getNamedAttr("beta2", f(o.beta2)),
      builder.getNamedAttr("eps", f(o.eps)),
      builder.getNamedAttr("weight_decay", f(o.weightDecay)),
  });
  const ScheduleSpec &s = t.schedule;
  const char *kind = s.kind == ScheduleSpec::Kind::Constant ? "constant"
                     : s.kind == ScheduleSpec::Kind::Cosine ? "cosine"
                                                            : "linear";
  DictionaryAttr sched = builder.getDictionaryAttr({
      builder.getNamedAttr("kind", builder.getStringAttr(kind)),
      builder.getNamedAttr("warmup_steps", i(s.warmupSteps)),
      builder.getNamedAttr("min_lr", f(s.minLr)),
      builder.getNamedAttr("total_steps", i(s.totalSteps)),
  });
  SmallVector<NamedAttribute> attrs = {
      builder.getNamedAttr("global_batch", i(t.globalBatch)),
      builder.getNamedAttr("micro_batch",
                           i(t.microBatch.value_or(t.globalBatch))),
      builder.getNamedAttr("optimizer", opt),
      builder.getNamedAttr("schedule", sched),
      builder.getNamedAttr("grad_clip", f(t.gradClip)),
      builder.getNamedAttr("seed", i(static_cast<int64_t>(t.seed))),
  };
  return builder.getDictionaryAttr(attrs);
}

OwningOpRef<ModuleOp> ModelImporter::run() {
  Location topLoc = loc(spec.graph.loc);
  OwningOpRef<ModuleOp> module = ModuleOp::create(topLoc);
  (*module)->setAttr(kModelAttrName, modelAttr());
  (*module)->setAttr(kTrainingAttrName, trainingAttr());
  builder.setInsertionPointToEnd(module->getBody());

  auto func = builder.create<func::FuncOp>(topLoc, "forward",
                                           builder.getFunctionType({}, {}));
  builder.setInsertionPointToStart(func.addEntryBlock());

  for (const GraphTensor &in : spec.graph.inputs) {
    Location l = loc(in.loc);
    auto op = builder.create<InputOp>(l, tensorType(in), in.name);
    if (failed(define(in.name, op, l)))
      return nullptr;
  }
  for (const GraphParam &p : spec.graph.params) {
    Location l = loc(p.loc);
    const char *init = p.init.kind == ParamInit::Kind::Normal  ? "normal"
                       : p.init.kind == ParamInit::Kind::Zeros ? "zeros"
                                                               : "ones";
    auto op = builder.create<ParamOp>(
        l, tensorType(p), builder.getStringAttr(p.name),
        builder.getStringAttr(init), builder.getF64FloatAttr(p.init.std));
    // A preset's stated tensor-parallel decision
    // (passes/sharding/SeedStatedDecisions.cpp).
    if (!p.tpSplit.empty()) {
      op->setAttr("strata.tp_decision",
                  builder.getStrArrayAttr(SmallVector<StringRef>(
                      p.tpSplit.begin(), p.tpSplit.end())));
      if (!p.tpView.empty())
        op->setAttr("strata.tp_decision_view",
                    builder.getDenseI64ArrayAttr(p.tpView));
      if (p.tpPadded)
        op->setAttr("strata.tp_decision_padded", builder.getUnitAttr());
    }
    if (failed(define(p.name, op, l)))
      return nullptr;
  }
  for (const GraphOp &op : spec.graph.ops)
    if (failed(importOp(op)))
      return nullptr;

  SmallVector<Value> results;
  for (const std::string &out : spec.graph.outputs) {
    auto it = values.find(out);
    if (it == values.end()) {
      emitError(topLoc) << "graph output '" << out << "' is not defined";
      return nullptr;
    }
    results.push_back(it->second);
  }
  builder.create<func::ReturnOp>(topLoc, results);
  func.setFunctionType(
      builder.getFunctionType({}, ValueRange(results).getTypes()));

  if (failed(verify(*module)))
    return nullptr;
  return module;
}

} // namespace

OwningOpRef<ModuleOp> strata::importModel(const ModelSpec &spec,
                                          MLIRContext &ctx) {
  ctx.loadDialect<StrataDialect, func::FuncDialect>();
  return ModelImporter(spec, ctx).run();
}
