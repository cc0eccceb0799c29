//===- RulePartitionComparisonTest.cpp - Preset rank programs unchanged ---===//
//
// The presets compiled their tensor parallelism through a Megatron block
// matcher (strata-shard-tensor-parallel, retired). They now state
// Megatron-LM's decisions where they are built (frontends/yaml/Presets.cpp)
// and compile through strata-propagate-sharding + strata-partition-sharding
// (seedStatedDecisions, as CompileCommand seeds them). For every preset
// shape the matcher handled (gpt fused and unfused, gpt with a padded
// vocabulary, mlp with a padded vocabulary and a head bias, llama with one
// kv head, kv heads fewer than and as many as the ranks, tied, unfused),
// float32 and bfloat16, tp 2 and 4, with and without sequence parallelism
// (64 combinations, 192 rank programs), this test compiles each rank
// through the passes CompileCommand runs before emission (partitioning,
// strata-mixed-precision, strata-autodiff, strata-build-optimizer) and
// compares the SHA-256 of the printed module with
// golden/preset-rank-programs.sha256, which holds the hashes of the
// matcher's programs (printed the same way, generated with
// strata-shard-tensor-parallel before it was deleted; the two paths were
// identical for all 192). strata.sharding annotations (propagation's
// record, ignored downstream) are dropped before hashing.
//
// STRATA_WRITE_RANK_PROGRAMS=dir writes each program to dir, to read a
// difference; regenerate the golden file only for a deliberate change of
// the programs, and say so in the commit.
//
//===----------------------------------------------------------------------===//

#include "dialects/strata/StrataOps.h"
#include "frontends/import/ImportModel.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "passes/Passes.h"
#include "passes/sharding/SeedStatedDecisions.h"
#include "passes/sharding/Sharding.h"
#include "llvm/Support/SHA256.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <map>
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

std::string sha256(const std::string &text) {
  std::array<uint8_t, 32> hash = llvm::SHA256::hash(ArrayRef<uint8_t>(
      reinterpret_cast<const uint8_t *>(text.data()), text.size()));
  static const char *hex = "0123456789abcdef";
  std::string out;
  for (uint8_t b : hash)
    out += {hex[b >> 4], hex[b & 15]};
  return out;
}

/// The golden hashes, by "config rankN".
std::map<std::string, std::string> goldenHashes() {
  std::map<std::string, std::string> golden;
  std::ifstream in(STRATA_GOLDEN_DIR "/preset-rank-programs.sha256");
  std::string line;
  while (std::getline(in, line))
    if (line.size() > 66)
      golden[line.substr(66)] = line.substr(0, 64);
  return golden;
}

TEST_F(RulePartitionComparisonTest, PresetRankProgramsMatchTheMatcher) {
  std::map<std::string, std::string> golden = goldenHashes();
  ASSERT_EQ(golden.size(), 192u) << "golden/preset-rank-programs.sha256";
  const char *dump = getenv("STRATA_WRITE_RANK_PROGRAMS");
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
          for (int64_t rank = 0; rank < tp; ++rank) {
            std::string key = config + " rank" + std::to_string(rank);
            std::string rulesPass =
                "strata-propagate-sharding{mesh-size=" + std::to_string(tp) +
                "},strata-partition-sharding{mesh-size=" + std::to_string(tp) +
                " rank=" + std::to_string(rank) + "}";
            // The presets' stated decisions as seeds, as CompileCommand
            // gives them.
            OwningOpRef<ModuleOp> ruled =
                compile(*forward, rulesPass, [&](ModuleOp m) {
                  ASSERT_TRUE(succeeded(seedStatedDecisions(m, tp, sp)))
                      << config;
                });
            if (!ruled) {
              same = false;
              why += " rank " + std::to_string(rank) + ": the passes fail;";
              continue;
            }
            std::string text = print(*ruled);
            if (dump)
              std::ofstream(std::string(dump) + "/" + key + ".mlir") << text;
            if (sha256(text) != golden[key]) {
              same = false;
              why += " rank " + std::to_string(rank) + ": program differs;";
            }
          }
          ++combinations;
          if (same)
            identical.insert(config);
          EXPECT_TRUE(same) << config << ":" << why;
          std::cout << config << ": " << (same ? "identical" : "differs:" + why)
                    << "\n";
        }
    }
  EXPECT_EQ(combinations, 64);
  // Every combination: the presets' rank programs are the matcher's.
  EXPECT_EQ(int(identical.size()), combinations);
}

} // namespace
