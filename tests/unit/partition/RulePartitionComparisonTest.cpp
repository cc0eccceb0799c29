//===- RulePartitionComparisonTest.cpp - Rules vs Megatron matcher --------===//
//
// The presets compile their tensor parallelism through the Megatron block
// matcher (strata-shard-tensor-parallel). Before `strata compile` can hand
// them to the per-op sharding rules instead (strata-propagate-sharding +
// strata-partition-sharding), both must give every rank the same program.
// For every preset shape the matcher handles (gpt fused and unfused, gpt
// with a padded vocabulary, mlp with a padded vocabulary and a head bias,
// llama with one kv head, kv heads fewer than and as many as the ranks,
// tied, unfused), float32 and bfloat16, tp 2 and 4, with and without
// sequence parallelism (64 combinations), this test
// compiles each rank both ways through the passes CompileCommand runs
// before emission (partitioning, strata-mixed-precision, strata-autodiff,
// strata-build-optimizer), and compares the printed modules; emission reads
// nothing the two could differ in (strata.sharding is read by the sharding
// passes only). The rules get the matcher's decisions as seeds
// (seedMegatronDecisions, as CompileCommand gives them): the parameters it
// splits, by their own dimensions, a view of them (strata.shard_view, or
// "tp@3x4x4:1" for GPT-2's fused QKV by heads), padded where tp does not
// divide the vocabulary, or over a major part of the axis ("tp/2") where it
// cuts a group's kv heads out of a whole weight; under sp the embeddings'
// outputs split along the sequence.
//
// Every combination must be identical; the first differing line of any
// that is not is printed. strata.sharding annotations (propagation's record,
// ignored downstream) are dropped before comparing.
//
//===----------------------------------------------------------------------===//

#include "dialects/strata/StrataOps.h"
#include "frontends/import/ImportModel.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "passes/Passes.h"
#include "passes/sharding/MegatronSeeds.h"
#include "passes/sharding/Sharding.h"

#include <gtest/gtest.h>

#include <iostream>
#include <set>
#include <sstream>

using namespace mlir;
using namespace strata;

namespace {

struct Preset {
  const char *name;
  const char *yaml;
};

/// Small presets, one per shape of the matcher's cases.
const Preset kPresets[] = {
    {"gpt", R"(model:
  family: gpt
  vocab: 64
  seq_len: 8
  hidden: 16
  heads: 4
  layers: 2
  ffn_hidden: 24
)"},
    {"gpt vocab=50", R"(model:
  family: gpt
  vocab: 50
  seq_len: 8
  hidden: 16
  heads: 4
  layers: 1
  ffn_hidden: 24
)"},
    {"llama kv_heads=1", R"(model:
  family: llama
  vocab: 64
  seq_len: 8
  hidden: 16
  heads: 4
  kv_heads: 1
  layers: 2
  ffn_hidden: 24
)"},
    {"llama kv_heads=4", R"(model:
  family: llama
  vocab: 64
  seq_len: 8
  hidden: 16
  heads: 4
  kv_heads: 4
  layers: 2
  ffn_hidden: 24
)"},
    {"mlp vocab=37", R"(model:
  family: mlp
  vocab: 37
  seq_len: 4
  hidden: 8
  layers: 2
  ffn_hidden: 12
  activation: relu
)"},
    {"gpt unfused", R"(model:
  family: gpt
  vocab: 64
  seq_len: 8
  hidden: 16
  heads: 4
  layers: 2
  ffn_hidden: 24
  attention: unfused
)"},
    {"llama kv_heads=2 unfused", R"(model:
  family: llama
  vocab: 64
  seq_len: 8
  hidden: 16
  heads: 4
  kv_heads: 2
  layers: 2
  ffn_hidden: 24
  attention: unfused
)"},
    {"llama kv_heads=2 tied", R"(model:
  family: llama
  vocab: 64
  seq_len: 8
  hidden: 16
  heads: 4
  kv_heads: 2
  layers: 2
  ffn_hidden: 24
  tie_embeddings: true
)"},
};

class RulePartitionComparisonTest : public ::testing::Test {
protected:
  RulePartitionComparisonTest() {
    registerStrataPasses();
    DialectRegistry registry;
    registerImportDialects(registry);
    context.appendDialectRegistry(registry);
    context.loadAllAvailableDialects();
  }

  OwningOpRef<ModuleOp> import(std::string yaml, bool bf16) {
    if (bf16)
      yaml.insert(yaml.find("  layers:"), "  dtype: bfloat16\n");
    yaml += "training:\n  global_batch: 2\n";
    std::vector<frontend::Diagnostic> diags;
    std::optional<frontend::ModelSpec> spec =
        frontend::loadModelSpec("inline.yaml", diags, &yaml);
    if (!spec)
      return nullptr;
    return importModel(*spec, context);
  }

  /// Runs `partition` (a pass pipeline) and the training-step passes on a
  /// clone; null when a pass fails.
  OwningOpRef<ModuleOp> compile(ModuleOp module, const std::string &partition,
                                const std::function<void(ModuleOp)> &seed) {
    OwningOpRef<ModuleOp> clone = module.clone();
    if (seed)
      seed(*clone);
    PassManager pm(&context, ModuleOp::getOperationName());
    std::string pipeline =
        partition + ",strata-mixed-precision,strata-autodiff{loss-scale=1},"
                    "strata-build-optimizer";
    if (failed(parsePassPipeline(pipeline, pm, llvm::errs())))
      return nullptr;
    ScopedDiagnosticHandler quiet(&context,
                                  [](Diagnostic &) { return success(); });
    if (failed(pm.run(*clone)))
      return nullptr;
    return clone;
  }

  MLIRContext context;
};

std::string print(ModuleOp module) {
  module.walk([](Operation *op) {
    op->removeAttr(kShardingAttr);
    op->removeAttr("strata.sharding_rule");
  });
  std::string text;
  llvm::raw_string_ostream os(text);
  module.print(os);
  return text;
}

/// The first line where `a` and `b` differ, both sides.
std::string firstDifference(const std::string &a, const std::string &b) {
  std::istringstream sa(a), sb(b);
  std::string la, lb;
  for (int line = 1;; ++line) {
    bool ea = !std::getline(sa, la), eb = !std::getline(sb, lb);
    if (ea && eb)
      return "";
    if (ea || eb || la != lb)
      return "line " + std::to_string(line) + "\n  matcher: " + la +
             "\n  rules:   " + lb;
  }
}

TEST_F(RulePartitionComparisonTest, PresetRankProgramsMatchTheMatcher) {
  std::set<std::string> identical;
  int combinations = 0;
  for (const Preset &preset : kPresets)
    for (bool bf16 : {false, true}) {
      OwningOpRef<ModuleOp> forward = import(preset.yaml, bf16);
      ASSERT_TRUE(forward) << preset.name;
      for (int64_t tp : {2, 4})
        for (bool sp : {false, true}) {
          std::string config = std::string(preset.name) +
                               (bf16 ? " bf16" : " f32") +
                               " tp=" + std::to_string(tp) + (sp ? " sp" : "");
          bool same = true;
          std::string why;
          for (int64_t rank = 0; rank < tp && same; ++rank) {
            std::string matcherPass =
                "strata-shard-tensor-parallel{tp=" + std::to_string(tp) +
                " tp-rank=" + std::to_string(rank) +
                " sp=" + (sp ? "true" : "false") + "}";
            OwningOpRef<ModuleOp> matched =
                compile(*forward, matcherPass, nullptr);
            ASSERT_TRUE(matched) << config << ": the matcher fails";
            std::string rulesPass =
                "strata-propagate-sharding{mesh-size=" + std::to_string(tp) +
                "},strata-partition-sharding{mesh-size=" + std::to_string(tp) +
                " rank=" + std::to_string(rank) + "}";
            // The matcher's decisions as seeds, as CompileCommand gives them.
            OwningOpRef<ModuleOp> ruled =
                compile(*forward, rulesPass, [&](ModuleOp m) {
                  ASSERT_TRUE(succeeded(seedMegatronDecisions(m, tp, rank, sp)))
                      << config;
                });
            if (!ruled) {
              same = false;
              why = "the rules' passes fail";
            } else {
              std::string a = print(*matched), b = print(*ruled);
              if (a != b) {
                same = false;
                why = firstDifference(a, b);
              }
            }
          }
          ++combinations;
          if (same)
            identical.insert(config);
          EXPECT_TRUE(same) << config << ": rank program " << why;
          std::cout << config << ": "
                    << (same ? "identical" : "differs, rank program " + why)
                    << "\n";
        }
    }
  EXPECT_EQ(combinations, 64);
  // Every combination: the presets' rank programs are the same both ways.
  EXPECT_EQ(int(identical.size()), combinations);
}

} // namespace
