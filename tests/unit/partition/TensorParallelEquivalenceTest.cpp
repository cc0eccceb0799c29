//===- TensorParallelEquivalenceTest.cpp - TP ranks == one device ---------===//
//
// Imports small gpt and mlp presets, converts them to float64, and checks
// that for tp in {2, 4}, with and without sequence parallelism, the tp
// programs (the presets' stated decisions seeded per rank, spread by
// strata-propagate-sharding and materialised by strata-partition-sharding,
// then strata-autodiff, as strata compile builds them),
// run in lockstep on the reference interpreter with each rank's parameter
// shards cut from one set of global weights by the shard attributes, give
// the unsharded loss on every rank and, reassembled from the shards, the
// unsharded gradient of every parameter.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/autodiff/Interpreter.h"

#include "dialects/strata/StrataOps.h"
#include "frontends/import/ImportModel.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "passes/Passes.h"
#include "passes/sharding/SeedStatedDecisions.h"
#include "passes/sharding/Sharding.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <iostream>
#include <map>
#include <random>
#include <sstream>

using namespace mlir;
using namespace strata;
using namespace strata::reference;

namespace {

constexpr double kTolerance = 1e-9;

/// A gpt preset whose vocabulary (50) is not a multiple of 4, so tp = 4
/// pads it to 52.
constexpr const char *kGptSpec = R"(model:
  family: gpt
  vocab: 50
  seq_len: 8
  hidden: 16
  heads: 4
  layers: 2
  ffn_hidden: 24
training:
  global_batch: 2
)";

/// Llama presets with grouped-query attention: one kv head (replicated under
/// tp 2 and 4, an untied lm_head) and two kv heads (split under tp 2,
/// replicated under tp 4, the head tied to the embedding); the vocabulary
/// (50) is padded under tp 4.
constexpr const char *kLlamaOneKvHeadSpec = R"(model:
  family: llama
  vocab: 50
  seq_len: 8
  hidden: 16
  heads: 4
  kv_heads: 1
  layers: 2
  ffn_hidden: 24
  rope_theta: 100.0
training:
  global_batch: 2
)";
constexpr const char *kLlamaTwoKvHeadsTiedSpec = R"(model:
  family: llama
  vocab: 50
  seq_len: 8
  hidden: 16
  heads: 4
  kv_heads: 2
  layers: 2
  ffn_hidden: 24
  tie_embeddings: true
training:
  global_batch: 2
)";

/// An mlp preset whose vocabulary (37) needs padding for tp 2 and 4.
constexpr const char *kMlpSpec = R"(model:
  family: mlp
  vocab: 37
  seq_len: 4
  hidden: 8
  layers: 2
  ffn_hidden: 12
  activation: relu
training:
  global_batch: 3
)";

class TensorParallelTest : public ::testing::Test {
protected:
  TensorParallelTest() {
    DialectRegistry registry;
    registerImportDialects(registry);
    context.appendDialectRegistry(registry);
    context.loadAllAvailableDialects();
  }

  /// The spec's @forward in float64 (the presets only build float32).
  OwningOpRef<ModuleOp> importF64(const std::string &yaml) {
    std::vector<frontend::Diagnostic> diags;
    std::optional<frontend::ModelSpec> spec =
        frontend::loadModelSpec("inline.yaml", diags, &yaml);
    if (!spec) {
      ADD_FAILURE() << "the test's model spec does not load";
      return nullptr;
    }
    OwningOpRef<ModuleOp> module = importModel(*spec, context);
    if (!module)
      return nullptr;
    auto f64 = Float64Type::get(&context);
    auto toF64 = [&](Type t) -> Type {
      auto ranked = dyn_cast<RankedTensorType>(t);
      if (ranked && ranked.getElementType().isF32())
        return RankedTensorType::get(ranked.getShape(), f64);
      return t;
    };
    module->walk([&](Operation *op) {
      for (Value r : op->getResults())
        r.setType(toF64(r.getType()));
    });
    module->walk([&](func::FuncOp f) {
      SmallVector<Type> results;
      for (Type t : f.getFunctionType().getResults())
        results.push_back(toF64(t));
      f.setType(FunctionType::get(&context, {}, results));
    });
    EXPECT_TRUE(succeeded(verify(*module)));
    return module;
  }

  /// Seeds the preset's stated decisions and runs the sharding passes
  /// (unless tp == 0) and autodiff on a clone.
  OwningOpRef<ModuleOp> lower(ModuleOp module, int64_t tp, int64_t rank,
                              bool sp) {
    OwningOpRef<ModuleOp> clone = module.clone();
    PassManager pm(&context);
    if (tp > 0) {
      if (failed(seedStatedDecisions(*clone, tp, sp))) {
        ADD_FAILURE() << "seeding failed for tp=" << tp;
        return nullptr;
      }
      StrataPropagateShardingOptions propagate;
      propagate.meshSize = tp;
      pm.addPass(createStrataPropagateSharding(propagate));
      StrataPartitionShardingOptions partition;
      partition.meshSize = tp;
      partition.rank = rank;
      pm.addPass(createStrataPartitionSharding(partition));
    }
    StrataAutodiffOptions autodiff;
    autodiff.lossScale = 1.0;
    pm.addPass(createStrataAutodiff(autodiff));
    if (failed(pm.run(*clone))) {
      ADD_FAILURE() << "passes failed for tp=" << tp << " rank=" << rank;
      return nullptr;
    }
    return clone;
  }

  /// strata-propagate-sharding from `seeds` (parameter name suffix ->
  /// sharding; "embedding" seeds the embedding's output), then
  /// strata-partition-sharding and autodiff, on a clone (tp == 0:
  /// unsharded).
  OwningOpRef<ModuleOp>
  lowerByRules(ModuleOp module, int64_t tp, int64_t rank,
               const std::map<std::string, Sharding> &seeds) {
    OwningOpRef<ModuleOp> clone = module.clone();
    PassManager pm(&context);
    if (tp > 0) {
      clone->walk([&](Operation *op) {
        for (const auto &[suffix, sharding] : seeds) {
          auto param = dyn_cast<ParamOp>(op);
          if ((param && param.getName().ends_with(suffix)) ||
              (isa<EmbeddingOp>(op) && suffix == "embedding"))
            writeShardings(op, {sharding});
        }
      });
      StrataPropagateShardingOptions propagate;
      propagate.meshSize = tp;
      pm.addPass(createStrataPropagateSharding(propagate));
      StrataPartitionShardingOptions partition;
      partition.meshSize = tp;
      partition.rank = rank;
      pm.addPass(createStrataPartitionSharding(partition));
    }
    StrataAutodiffOptions autodiff;
    autodiff.lossScale = 1.0;
    pm.addPass(createStrataAutodiff(autodiff));
    if (failed(pm.run(*clone))) {
      ADD_FAILURE() << "rule passes failed for tp=" << tp << " rank=" << rank;
      return nullptr;
    }
    return clone;
  }

  MLIRContext context;
};

std::vector<int64_t> typeShape(Value v) {
  auto t = cast<RankedTensorType>(v.getType());
  return std::vector<int64_t>(t.getShape().begin(), t.getShape().end());
}

std::vector<int64_t> arrayAttr(Operation *op, StringRef name) {
  auto attr = op->getAttrOfType<DenseI64ArrayAttr>(name);
  if (!attr)
    return {};
  return std::vector<int64_t>(attr.asArrayRef().begin(),
                              attr.asArrayRef().end());
}

/// A parameter's box: where its local tensor sits in its view of the
/// checkpoint. Unsharded parameters are one box covering everything.
struct Box {
  std::vector<int64_t> view, start, shape;

  static Box of(ParamOp param) {
    Box b;
    b.shape = typeShape(param.getResult());
    b.view = arrayAttr(param, "strata.shard_view");
    b.start = arrayAttr(param, "strata.shard_start");
    if (b.view.empty()) {
      b.view = b.shape;
      b.start.assign(b.shape.size(), 0);
    }
    return b;
  }

  /// Calls fn(local index, view index or -1 for padding) per element.
  template <typename Fn> void forEach(Fn fn) const {
    int64_t rank = shape.size(), count = 1;
    for (int64_t d : shape)
      count *= d;
    std::vector<int64_t> idx(rank, 0);
    for (int64_t i = 0; i < count; ++i) {
      int64_t global = 0;
      bool inside = true;
      for (int64_t d = 0; d < rank; ++d) {
        int64_t g = start[d] + idx[d];
        inside &= g < view[d];
        global = global * view[d] + g;
      }
      fn(i, inside ? global : -1);
      for (int64_t d = rank - 1; d >= 0; --d) {
        if (++idx[d] < shape[d])
          break;
        idx[d] = 0;
      }
    }
  }
};

func::FuncOp trainStep(ModuleOp module) {
  return module.lookupSymbol<func::FuncOp>("train_microbatch");
}

TensorMap randomParams(func::FuncOp step, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(-0.5, 0.5);
  TensorMap params;
  step.walk([&](ParamOp p) {
    Tensor t(typeShape(p.getResult()));
    for (double &x : t.data)
      x = uniform(rng);
    params[p.getName().str()] = std::move(t);
  });
  return params;
}

Tensor randomIds(std::vector<int64_t> shape, int64_t bound,
                 std::mt19937_64 &rng) {
  Tensor t(std::move(shape));
  std::uniform_int_distribution<int64_t> dist(0, bound - 1);
  for (double &x : t.data)
    x = static_cast<double>(dist(rng));
  return t;
}

TensorMap makeInputs(func::FuncOp step, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  TensorMap inputs;
  step.walk([&](InputOp in) {
    std::vector<int64_t> shape = typeShape(in.getResult());
    if (in.getName() == "positions") {
      Tensor t(shape);
      for (int64_t i = 0; i < t.numElements(); ++i)
        t.data[i] = static_cast<double>(i % shape.back());
      inputs["positions"] = t;
    } else {
      inputs[in.getName().str()] = randomIds(shape, vocab, rng);
    }
  });
  return inputs;
}

/// max |a - b| / max |b| over a tensor, or a failure description.
::testing::AssertionResult close(const Tensor &actual, const Tensor &expected,
                                 const std::string &what, double &worstSeen) {
  if (actual.shape != expected.shape)
    return ::testing::AssertionFailure()
           << what << ": shape " << formatShape(actual.shape) << " vs "
           << formatShape(expected.shape);
  double scale = 0.0, worst = 0.0;
  for (double x : expected.data)
    scale = std::max(scale, std::abs(x));
  for (int64_t i = 0; i < expected.numElements(); ++i)
    worst = std::max(worst, std::abs(actual.data[i] - expected.data[i]));
  worstSeen = std::max(worstSeen, worst / std::max(scale, 1e-300));
  if (worst > kTolerance * std::max(scale, 1e-300))
    return ::testing::AssertionFailure() << what << ": max difference " << worst
                                         << " against max magnitude " << scale;
  return ::testing::AssertionSuccess();
}

/// Runs the tp group for one configuration and compares it with `reference`.
void checkGroup(std::vector<OwningOpRef<ModuleOp>> &ranks,
                const TensorMap &globalParams, const TensorMap &inputs,
                const Evaluation &reference, const std::string &config) {
  int64_t tp = ranks.size();
  std::vector<func::FuncOp> funcs;
  std::vector<TensorMap> rankParams(tp), rankInputs(tp, inputs);
  std::vector<std::map<std::string, Box>> boxes(tp);
  for (int64_t r = 0; r < tp; ++r) {
    func::FuncOp step = trainStep(*ranks[r]);
    ASSERT_TRUE(step) << config;
    funcs.push_back(step);
    step.walk([&](ParamOp p) {
      Box box = Box::of(p);
      const Tensor &global = globalParams.at(p.getName().str());
      std::vector<int64_t> checkpoint = arrayAttr(p, "strata.global_shape");
      if (!checkpoint.empty())
        EXPECT_EQ(checkpoint, global.shape)
            << config << " " << p.getName().str();
      Tensor local(box.shape);
      box.forEach([&](int64_t i, int64_t g) {
        local.data[i] = g < 0 ? 0.0 : global.data[g];
      });
      rankParams[r][p.getName().str()] = std::move(local);
      boxes[r][p.getName().str()] = box;
    });
  }
  std::vector<Evaluation> results =
      evaluateGroup(funcs, rankInputs, rankParams);
  double expectedLoss = reference.results[0].data[0];
  double worst = 0.0;
  for (int64_t r = 0; r < tp; ++r) {
    ASSERT_TRUE(results[r].ok()) << config << ": " << results[r].error;
    double loss = results[r].results[0].data[0];
    worst =
        std::max(worst, std::abs(loss - expectedLoss) / std::abs(expectedLoss));
    EXPECT_LE(std::abs(loss - expectedLoss),
              kTolerance * std::abs(expectedLoss))
        << config << " rank " << r << ": loss " << loss << " vs "
        << expectedLoss;
  }

  for (const auto &[name, expected] : reference.grads) {
    Tensor assembled(expected.shape);
    std::vector<int> covered(expected.numElements(), 0);
    for (int64_t r = 0; r < tp; ++r) {
      auto it = results[r].grads.find(name);
      ASSERT_NE(it, results[r].grads.end())
          << config << ": rank " << r << " has no gradient for " << name;
      const Box &box = boxes[r].at(name);
      box.forEach([&](int64_t i, int64_t g) {
        if (g < 0) {
          EXPECT_EQ(it->second.data[i], 0.0)
              << config << ": padding gradient of " << name;
          return;
        }
        // A replicated parameter: every rank's copy must be the whole
        // gradient; a shard: exactly one rank covers each element.
        if (box.view == box.shape) {
          if (r == 0)
            assembled.data[g] = it->second.data[i];
        } else {
          assembled.data[g] += it->second.data[i];
        }
        ++covered[g];
      });
      if (box.view == box.shape)
        EXPECT_TRUE(close(it->second, expected,
                          config + " rank " + std::to_string(r) +
                              " replicated gradient of " + name,
                          worst));
    }
    bool replicated = boxes[0].at(name).view == boxes[0].at(name).shape;
    for (int c : covered)
      ASSERT_EQ(c, replicated ? tp : 1) << config << ": the shards of " << name
                                        << " do not tile the parameter";
    EXPECT_TRUE(
        close(assembled, expected, config + " gradient of " + name, worst));
  }
  // The reassociation error actually seen, for the record.
  std::cout << config << ": loss " << expectedLoss << ", "
            << reference.grads.size()
            << " parameter gradients, max relative difference " << worst
            << "\n";
}

/// `lower(tp, rank, sp)` gives a rank's training step (tp = 0: unsharded).
void runEquivalence(
    const std::string &model,
    const std::function<OwningOpRef<ModuleOp>(int64_t, int64_t, bool)> &lower,
    std::vector<int64_t> tps = {2, 4}, std::vector<bool> sps = {false, true}) {
  OwningOpRef<ModuleOp> single = lower(0, 0, false);
  ASSERT_TRUE(single);
  func::FuncOp step = trainStep(*single);
  int64_t vocab = 0;
  step.walk([&](CrossEntropyOp ce) {
    vocab = cast<RankedTensorType>(ce.getLogits().getType()).getShape().back();
  });
  TensorMap params = randomParams(step, 42);
  TensorMap inputs = makeInputs(step, vocab, 7);
  Evaluation reference = evaluate(step, inputs, params);
  ASSERT_TRUE(reference.ok()) << reference.error;
  ASSERT_FALSE(reference.grads.empty());

  for (int64_t tp : tps)
    for (bool sp : sps) {
      std::string config =
          model + " tp=" + std::to_string(tp) + (sp ? " sp=true" : " sp=false");
      std::vector<OwningOpRef<ModuleOp>> ranks;
      for (int64_t r = 0; r < tp; ++r) {
        ranks.push_back(lower(tp, r, sp));
        ASSERT_TRUE(ranks.back()) << config;
      }
      checkGroup(ranks, params, inputs, reference, config);
    }
}

TEST_F(TensorParallelTest, GptRanksComputeTheUnshardedStep) {
  OwningOpRef<ModuleOp> forward = importF64(kGptSpec);
  ASSERT_TRUE(forward);
  runEquivalence("gpt", [&](int64_t tp, int64_t rank, bool sp) {
    return lower(*forward, tp, rank, sp);
  });
}

TEST_F(TensorParallelTest, MlpRanksComputeTheUnshardedStep) {
  OwningOpRef<ModuleOp> forward = importF64(kMlpSpec);
  ASSERT_TRUE(forward);
  runEquivalence("mlp", [&](int64_t tp, int64_t rank, bool sp) {
    return lower(*forward, tp, rank, sp);
  });
}

TEST_F(TensorParallelTest, LlamaRanksComputeTheUnshardedStep) {
  for (const char *spec : {kLlamaOneKvHeadSpec, kLlamaTwoKvHeadsTiedSpec}) {
    OwningOpRef<ModuleOp> forward = importF64(spec);
    ASSERT_TRUE(forward);
    runEquivalence(spec == kLlamaOneKvHeadSpec ? "llama kv_heads=1"
                                               : "llama kv_heads=2 tied",
                   [&](int64_t tp, int64_t rank, bool sp) {
                     return lower(*forward, tp, rank, sp);
                   });
  }
}

/// Sharding by per-op rules: a few decisions (Megatron's column-parallel
/// weights; with sp also the embedding output split along the sequence)
/// spread by strata-propagate-sharding and materialised by
/// strata-partition-sharding give every rank the unsharded loss and, over
/// the ranks, the unsharded gradients. Nothing in the passes knows these
/// models: the collectives come from the ops' rules.
TEST_F(TensorParallelTest, RuleShardedRanksComputeTheUnshardedStep) {
  struct Case {
    const char *name, *spec;
    std::map<std::string, Sharding> column;
  };
  std::vector<Case> cases = {
      {"mlp by rules", kMlpSpec, {{"fc1.weight", {"", "tp"}}}},
      {"gpt by rules", kGptSpec, {{"mlp.c_fc.weight", {"", "tp"}}}},
      // The fused QKV projection split by heads: its features viewed as
      // [3, heads, head_dim] split along the heads; the tied table by rows
      // (50, padded under tp 4).
      {"gpt heads and vocabulary by rules",
       kGptSpec,
       {{"wte.weight", {"tp", ""}},
        {"attn.c_attn.weight", {"", "tp@3x4x4:1"}},
        {"attn.c_attn.bias", {"tp@3x4x4:1"}},
        {"mlp.c_fc.weight", {"", "tp"}}}},
      {"llama by rules",
       kLlamaTwoKvHeadsTiedSpec,
       {{"mlp.gate_proj.weight", {"tp", ""}},
        {"mlp.up_proj.weight", {"tp", ""}},
        {"self_attn.q_proj.weight", {"tp", ""}}}},
      // Under tp 4, two kv heads: each pair of ranks cuts its kv head out
      // of the whole weights ("tp/2": a major part of the axis).
      {"llama kv heads over part of the axis by rules",
       kLlamaTwoKvHeadsTiedSpec,
       {{"mlp.gate_proj.weight", {"tp", ""}},
        {"mlp.up_proj.weight", {"tp", ""}},
        {"self_attn.q_proj.weight", {"tp", ""}},
        {"self_attn.k_proj.weight", {"tp/2", ""}},
        {"self_attn.v_proj.weight", {"tp/2", ""}}}},
      // One kv head shared by every rank: a one-part split ("tp/1").
      {"llama one kv head by rules",
       kLlamaOneKvHeadSpec,
       {{"mlp.gate_proj.weight", {"tp", ""}},
        {"mlp.up_proj.weight", {"tp", ""}},
        {"self_attn.q_proj.weight", {"tp", ""}},
        {"self_attn.k_proj.weight", {"tp/1", ""}},
        {"self_attn.v_proj.weight", {"tp/1", ""}}}},
  };
  for (const Case &c : cases) {
    OwningOpRef<ModuleOp> forward = importF64(c.spec);
    ASSERT_TRUE(forward);
    runEquivalence(c.name,
                   [&](int64_t tp, int64_t rank, bool sp) {
                     std::map<std::string, Sharding> seeds = c.column;
                     if (sp)
                       seeds["embedding"] = {"", "tp", ""};
                     return lowerByRules(*forward, tp, rank, seeds);
                   },
                   {2, 4});
  }
}

/// Every op of the gpt and llama presets has a rule whose factors tile each
/// dimension it shards.
TEST_F(TensorParallelTest, EveryPresetOpHasAConsistentShardingRule) {
  for (const char *spec : {kGptSpec, kLlamaOneKvHeadSpec, kMlpSpec}) {
    OwningOpRef<ModuleOp> forward = importF64(spec);
    ASSERT_TRUE(forward);
    forward->walk([&](Operation *op) {
      if (isa<ParamOp, InputOp, func::ReturnOp, func::FuncOp, ModuleOp>(op))
        return;
      auto iface = dyn_cast<ShardingRuleOpInterface>(op);
      ASSERT_TRUE(iface) << op->getName().getStringRef().str()
                         << " has no sharding rule";
      ShardingRule rule = iface.getShardingRule();
      auto check = [&](ValueRange values,
                       ArrayRef<ShardingRule::TensorFactors> tensors) {
        ASSERT_EQ(values.size(), tensors.size()) << rule.str();
        for (auto [v, dims] : llvm::zip(values, tensors)) {
          std::vector<int64_t> shape = typeShape(v);
          ASSERT_EQ(shape.size(), dims.size()) << rule.str();
          for (auto [size, factors] : llvm::zip(shape, dims)) {
            if (factors.empty())
              continue;
            int64_t product = 1;
            for (int64_t f : factors)
              product *= rule.factorSizes[f];
            EXPECT_EQ(product, size)
                << op->getName().getStringRef().str() << ": " << rule.str();
          }
        }
      };
      check(op->getOperands(), rule.operands);
      check(op->getResults(), rule.results);
    });
  }
}

/// The presets' previous attention (matmul, causal softmax, matmul, with
/// repeat_interleave for grouped-query) shards as before.
TEST_F(TensorParallelTest, UnfusedAttentionRanksComputeTheUnshardedStep) {
  for (const char *spec : {kGptSpec, kLlamaTwoKvHeadsTiedSpec}) {
    std::string text(spec);
    text.insert(text.find("training:"), "  attention: unfused\n");
    OwningOpRef<ModuleOp> forward = importF64(text.c_str());
    ASSERT_TRUE(forward);
    runEquivalence(spec == kGptSpec ? "gpt unfused" : "llama unfused",
                   [&](int64_t tp, int64_t rank, bool sp) {
                     return lower(*forward, tp, rank, sp);
                   });
  }
}

/// Under tp 4 with 2 kv heads, q is split by heads, k and v are read whole
/// (each rank slices its kv head out of a replicated weight), o by its input
/// features and gate/up/down by ffn features, all in nn.Linear layout.
TEST_F(TensorParallelTest, LlamaShardsAndReplicatedKvHeads) {
  OwningOpRef<ModuleOp> forward = importF64(kLlamaTwoKvHeadsTiedSpec);
  ASSERT_TRUE(forward);
  OwningOpRef<ModuleOp> rank3 = lower(*forward, 4, 3, false);
  ASSERT_TRUE(rank3);
  std::map<std::string, ParamOp> params;
  trainStep(*rank3).walk([&](ParamOp p) { params[p.getName().str()] = p; });
  std::string p = "model.layers.1.";
  ParamOp q = params.at(p + "self_attn.q_proj.weight");
  EXPECT_EQ(arrayAttr(q, "strata.shard_view"),
            (std::vector<int64_t>{4, 4, 16}));
  EXPECT_EQ(arrayAttr(q, "strata.shard_start"),
            (std::vector<int64_t>{3, 0, 0}));
  ParamOp k = params.at(p + "self_attn.k_proj.weight");
  EXPECT_FALSE(k->hasAttr("strata.shard_view"));
  EXPECT_EQ(typeShape(k.getResult()), (std::vector<int64_t>{8, 16}));
  // Rank 3's query head 3 uses kv head 1: rows 4..7 of k_proj.
  auto rep = dyn_cast<ReplicateOp>(*k->getUsers().begin());
  ASSERT_TRUE(rep);
  auto slice = dyn_cast<SliceOp>(*rep->getUsers().begin());
  ASSERT_TRUE(slice);
  EXPECT_EQ(slice.getAxis(), 0);
  EXPECT_EQ(slice.getOffset(), 4);
  EXPECT_EQ(slice.getSize(), 4);
  ParamOp o = params.at(p + "self_attn.o_proj.weight");
  EXPECT_EQ(arrayAttr(o, "strata.shard_start"), (std::vector<int64_t>{0, 12}));
  EXPECT_EQ(typeShape(o.getResult()), (std::vector<int64_t>{16, 4}));
  ParamOp down = params.at(p + "mlp.down_proj.weight");
  EXPECT_EQ(arrayAttr(down, "strata.shard_start"),
            (std::vector<int64_t>{0, 18}));
  ParamOp gate = params.at(p + "mlp.gate_proj.weight");
  EXPECT_EQ(typeShape(gate.getResult()), (std::vector<int64_t>{6, 16}));
  EXPECT_FALSE(
      params.at(p + "input_layernorm.weight")->hasAttr("strata.shard_view"));
}

/// The shards the pass declares are the boxes the checkpoint convention
/// promises: c_attn by heads of q, k and v, vocabulary rows padded.
TEST_F(TensorParallelTest, ShardAttributesDescribeCheckpointBoxes) {
  OwningOpRef<ModuleOp> forward = importF64(kGptSpec);
  ASSERT_TRUE(forward);
  OwningOpRef<ModuleOp> rank3 = lower(*forward, 4, 3, false);
  ASSERT_TRUE(rank3);
  std::map<std::string, ParamOp> params;
  trainStep(*rank3).walk([&](ParamOp p) { params[p.getName().str()] = p; });
  ParamOp qkv = params.at("h.1.attn.c_attn.weight");
  EXPECT_EQ(arrayAttr(qkv, "strata.global_shape"),
            (std::vector<int64_t>{16, 48}));
  EXPECT_EQ(arrayAttr(qkv, "strata.shard_view"),
            (std::vector<int64_t>{16, 3, 4, 4}));
  EXPECT_EQ(arrayAttr(qkv, "strata.shard_start"),
            (std::vector<int64_t>{0, 0, 3, 0}));
  EXPECT_EQ(typeShape(qkv.getResult()), (std::vector<int64_t>{16, 3, 1, 4}));
  ParamOp wte = params.at("wte.weight");
  EXPECT_EQ(arrayAttr(wte, "strata.shard_start"),
            (std::vector<int64_t>{39, 0}));
  EXPECT_EQ(typeShape(wte.getResult()), (std::vector<int64_t>{13, 16}));
  EXPECT_FALSE(params.at("ln_f.weight")->hasAttr("strata.shard_view"));
  EXPECT_FALSE(params.at("h.0.mlp.c_proj.bias")->hasAttr("strata.shard_view"));
}

/// Divisibility errors point into the model spec and name the option.
TEST_F(TensorParallelTest, IndivisibleHeadsAreLocatedErrors) {
  OwningOpRef<ModuleOp> forward = importF64(kGptSpec);
  ASSERT_TRUE(forward);
  std::vector<std::string> errors;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &d) {
    std::string text;
    llvm::raw_string_ostream os(text);
    os << d.getLocation() << ": " << d.str();
    errors.push_back(text);
    return success();
  });
  EXPECT_TRUE(failed(seedStatedDecisions(*forward, 3, false)));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("inline.yaml\":"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("tp=3 does not divide the 4 parts of dimension 1 "
                           "of parameter 'h.0.attn.c_attn.weight'"),
            std::string::npos)
      << errors[0];
}

} // namespace
