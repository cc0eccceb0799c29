//===- AttentionMemoryTest.cpp - No score matrix in the fused arena -------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Compiles a GPT with 1024-token sequences through the real pipeline
// (import, autodiff, optimizer, emission) with `attention: fused` and with
// `attention: unfused`, and inspects every buffer of the memory plan: the
// unfused program holds [batch, heads, seq, seq] score and probability
// buffers, the fused one no buffer of even seq x seq elements. The arena
// sizes are printed.
//
//===----------------------------------------------------------------------===//

#include "compiler/emit/EmitProgram.h"
#include "frontends/import/ImportModel.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "passes/Passes.h"

#include <gtest/gtest.h>

#include <cstdio>

using namespace strata;

namespace {

constexpr int64_t kSeq = 1024, kHeads = 4;

std::string gptSpec(const char *attention) {
  return std::string(R"(
model:
  family: gpt
  vocab: 128
  seq_len: 1024
  hidden: 64
  heads: 4
  layers: 2
  ffn_hidden: 256
  attention: )") +
         attention +
         R"(
training:
  global_batch: 1
)";
}

class AttentionMemoryTest : public ::testing::Test {
protected:
  AttentionMemoryTest() {
    mlir::DialectRegistry registry;
    registerImportDialects(registry);
    context.appendDialectRegistry(registry);
    context.loadAllAvailableDialects();
    registerStrataPasses();
  }

  /// The one-rank training program of `yaml` and its emission statistics.
  rt::Program compile(const std::string &yaml, EmitStats &stats) {
    std::vector<frontend::Diagnostic> diags;
    std::optional<frontend::ModelSpec> spec =
        frontend::loadModelSpec("inline.yaml", diags, &yaml);
    EXPECT_TRUE(spec.has_value());
    if (!spec)
      return {};
    mlir::OwningOpRef<mlir::ModuleOp> module = importModel(*spec, context);
    mlir::PassManager pm(&context, mlir::ModuleOp::getOperationName());
    EXPECT_TRUE(succeeded(mlir::parsePassPipeline(
        "strata-autodiff,strata-build-optimizer", pm, llvm::errs())));
    EXPECT_TRUE(succeeded(pm.run(*module)));
    mlir::FailureOr<rt::Program> program = emitProgram(*module, "test", &stats);
    EXPECT_TRUE(succeeded(program));
    return succeeded(program) ? *program : rt::Program{};
  }

  mlir::MLIRContext context;
};

TEST_F(AttentionMemoryTest, FusedArenaHoldsNoScoreMatrix) {
  EmitStats fusedStats, unfusedStats;
  rt::Program fused = compile(gptSpec("fused"), fusedStats);
  rt::Program unfused = compile(gptSpec("unfused"), unfusedStats);
  ASSERT_EQ(fused.ranks.size(), 1u);
  ASSERT_EQ(unfused.ranks.size(), 1u);

  const int64_t scores = kHeads * kSeq * kSeq; // one micro-batch of 1
  int64_t unfusedScoreBuffers = 0, fusedLargest = 0;
  std::string fusedLargestName;
  for (const rt::BufferDesc &b : unfused.ranks[0].buffers)
    unfusedScoreBuffers += b.numElements() == scores;
  for (const rt::BufferDesc &b : fused.ranks[0].buffers)
    if (b.numElements() > fusedLargest) {
      fusedLargest = b.numElements();
      fusedLargestName = b.name;
    }
  // Control: the unfused plan really has [1, heads, seq, seq] buffers
  // (scores and probabilities of both layers, and their gradients).
  EXPECT_GE(unfusedScoreBuffers, 4);
  // Fused: not even one head's seq x seq.
  EXPECT_LT(fusedLargest, kSeq * kSeq)
      << "largest buffer " << fusedLargestName << " has " << fusedLargest
      << " elements";
  EXPECT_LT(fusedStats.arenaBytes, unfusedStats.arenaBytes);

  std::printf("seq %lld, %lld heads, 2 layers: fused arena %.2f MiB (largest "
              "buffer %s, %lld elements), unfused arena %.2f MiB (%lld "
              "buffers of [1, %lld, %lld, %lld])\n",
              (long long)kSeq, (long long)kHeads,
              fusedStats.arenaBytes / 1048576.0, fusedLargestName.c_str(),
              (long long)fusedLargest, unfusedStats.arenaBytes / 1048576.0,
              (long long)unfusedScoreBuffers, (long long)kHeads,
              (long long)kSeq, (long long)kSeq);
}

} // namespace
