//===- DecodeTest.cpp - Generation's logits are the training forward's ----===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Compiles a small GPT twice from one spec, as `strata compile` does: the
// training program (whose forward-only eval sequence leaves the logits of
// every position in a buffer) and the inference program (one position per
// run, key/value caches). Fed a sequence token by token, the inference
// program's logits must equal the training forward's at every position.
//
//===----------------------------------------------------------------------===//

#include "compiler/emit/EmitProgram.h"
#include "frontends/import/ImportModel.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "passes/Passes.h"
#include "runtime/core/Generator.h"
#include "runtime/core/Trainer.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace strata;
using namespace strata::rt;

namespace {

const char *const kGpt = R"(
model:
  family: gpt
  vocab: 97
  seq_len: 12
  hidden: 32
  heads: 4
  layers: 2
training:
  global_batch: 2
  seed: 5
)";

const char *const kLlama = R"(
model:
  family: llama
  vocab: 61
  seq_len: 10
  hidden: 32
  heads: 4
  kv_heads: 2
  layers: 2
  ffn_hidden: 48
training:
  global_batch: 2
  seed: 5
)";

const char *const kMlp = R"(
model:
  family: mlp
  vocab: 50
  seq_len: 8
  hidden: 16
  layers: 2
training:
  global_batch: 2
  seed: 5
)";

class DecodeTest : public ::testing::Test {
protected:
  DecodeTest() {
    mlir::DialectRegistry registry;
    registerImportDialects(registry);
    context.appendDialectRegistry(registry);
    context.loadAllAvailableDialects();
    registerStrataPasses();
  }

  mlir::OwningOpRef<mlir::ModuleOp> import(const std::string &yaml,
                                           bool decode) {
    std::vector<frontend::Diagnostic> diags;
    frontend::LoadOptions options;
    if (decode) {
      options.batch = 1;
      options.decode = true;
    }
    std::optional<frontend::ModelSpec> spec =
        frontend::loadModelSpec("inline.yaml", diags, &yaml, options);
    EXPECT_TRUE(spec.has_value());
    return spec ? importModel(*spec, context) : nullptr;
  }

  bool run(mlir::ModuleOp module, const std::string &pipeline) {
    mlir::PassManager pm(&context, mlir::ModuleOp::getOperationName());
    return succeeded(mlir::parsePassPipeline(pipeline, pm, llvm::errs())) &&
           succeeded(pm.run(module));
  }

  /// Training program (one rank) with the inference program attached.
  Program compile(const std::string &yaml) {
    auto train = import(yaml, false);
    EXPECT_TRUE(run(*train, "strata-autodiff,strata-build-optimizer"));
    mlir::FailureOr<Program> program = emitProgram(*train, "test");
    EXPECT_TRUE(succeeded(program));
    auto decode = import(yaml, true);
    EXPECT_TRUE(run(*decode, "strata-decode-step"));
    mlir::FailureOr<RankProgram> rank =
        emitDecodeProgram(*decode, program->meta);
    EXPECT_TRUE(succeeded(rank));
    program->decode = *rank;
    verifyProgram(*program, "test");
    return *program;
  }

  /// The logits of every position of `rows` from the training program's
  /// eval sequence: the operand the loss instruction reads.
  std::vector<float> trainingLogits(const Program &program,
                                    const std::vector<int32_t> &rows) {
    Trainer trainer(program, 0, createCpuDevice(), program.meta.seed);
    trainer.initParameters();
    const RankProgram &rp = trainer.rankProgram();
    std::vector<int32_t> positions(rows.size());
    for (size_t i = 0; i < rows.size(); ++i)
      positions[i] = int32_t(i % program.meta.seqLen);
    // The eval sequence on a device of its own, with the trainer's
    // initial parameters.
    std::unique_ptr<Device> device = createCpuDevice();
    device->prepare(rp);
    for (const ParamDesc &p : rp.params) {
      std::vector<float> v = trainer.readF32(p.value);
      device->upload(rp.buffers[p.value].offset, v.data(), v.size() * 4);
    }
    device->upload(rp.buffers[rp.tokens].offset, rows.data(), rows.size() * 4);
    device->upload(rp.buffers[rp.targets].offset, rows.data(), rows.size() * 4);
    if (rp.positions != kNoBuffer)
      device->upload(rp.buffers[rp.positions].offset, positions.data(),
                     positions.size() * 4);
    device->run(SequenceKind::Eval, {});
    uint32_t logits = kNoBuffer;
    for (const Instruction &inst : rp.sequence(SequenceKind::Eval))
      if (inst.opcode == Opcode::CrossEntropyFwd)
        logits = inst.operands[0];
    EXPECT_NE(logits, kNoBuffer);
    std::vector<float> out(rp.buffers[logits].numElements());
    device->download(rp.buffers[logits].offset, out.data(), out.size() * 4);
    return out;
  }

  void expectSameLogits(const std::string &yaml) {
    Program program = compile(yaml);
    const int64_t S = program.meta.seqLen, V = program.meta.vocab,
                  rows = program.meta.microBatch;
    std::vector<int32_t> tokens(rows * S);
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = int32_t((i * 37 + 11) % V);
    std::vector<float> want = trainingLogits(program, tokens);
    ASSERT_EQ(int64_t(want.size()), rows * S * V);

    Generator generator(program, createCpuDevice());
    generator.initWeights(program.meta.seed);
    // Row 1 too: the cache is reset between sequences.
    for (int64_t row = 0; row < rows; ++row) {
      generator.reset();
      double worst = 0;
      for (int64_t s = 0; s < S; ++s) {
        std::vector<float> got = generator.feed(tokens[row * S + s]);
        for (int64_t v = 0; v < V; ++v) {
          float w = want[(row * S + s) * V + v];
          worst = std::max(worst, double(std::abs(got[v] - w)) /
                                      (1e-3 + std::abs(double(w))));
        }
      }
      EXPECT_LT(worst, 1e-4) << "row " << row;
    }
  }

  mlir::MLIRContext context;
};

TEST_F(DecodeTest, GptLogitsEqualTheTrainingForwardAtEveryPosition) {
  expectSameLogits(kGpt);
}

TEST_F(DecodeTest, LlamaLogitsEqualTheTrainingForwardAtEveryPosition) {
  // Rotary embeddings at the fed position; grouped-query kv heads cached
  // once.
  expectSameLogits(kLlama);
}

TEST_F(DecodeTest, LlamaCachesEachKvHeadOnce) {
  Program program = compile(kLlama);
  ASSERT_TRUE(program.decode.has_value());
  int attentions = 0;
  for (const Instruction &inst :
       program.decode->sequence(SequenceKind::Microbatch))
    if (inst.opcode == Opcode::KvAttention) {
      ++attentions;
      EXPECT_EQ(inst.ints[1], 4); // query heads
      EXPECT_EQ(inst.ints[2], 2); // kv heads
    }
  EXPECT_EQ(attentions, 2);
}

TEST_F(DecodeTest, MlpLogitsEqualTheTrainingForwardAtEveryPosition) {
  expectSameLogits(kMlp);
}

TEST_F(DecodeTest, AttentionBecomesOneCachedAttentionPerLayer) {
  auto decode = import(kGpt, true);
  ASSERT_TRUE(run(*decode, "strata-decode-step"));
  int cached = 0, softmaxes = 0;
  decode->walk([&](mlir::Operation *op) {
    cached += op->getName().getStringRef() == "strata.cached_attention";
    softmaxes += op->getName().getStringRef() == "strata.softmax";
  });
  EXPECT_EQ(cached, 2);
  EXPECT_EQ(softmaxes, 0);
  Program program = compile(kGpt);
  ASSERT_TRUE(program.decode.has_value());
  // Every op but attention sees one position: no buffer is seq_len long
  // except the caches and the position table.
  for (const BufferDesc &b : program.decode->buffers) {
    bool cache = b.name.find("_cache") != std::string::npos;
    if (!cache && b.name != "wpe.weight")
      for (int64_t d : b.shape)
        EXPECT_NE(d, program.meta.seqLen) << b.name;
  }
}

TEST_F(DecodeTest, GreedySamplingFollowsTheLogits) {
  std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.9f};
  SamplingOptions greedy;
  greedy.temperature = 0;
  EXPECT_EQ(Generator::sample(logits, greedy, 0.99), 1);
  SamplingOptions top2;
  top2.topK = 2;
  // Only ids 1 and 3 can be drawn, in proportion exp(2.0) : exp(1.9).
  double p1 = std::exp(2.0) / (std::exp(2.0) + std::exp(1.9));
  EXPECT_EQ(Generator::sample(logits, top2, p1 - 1e-6), 1);
  EXPECT_EQ(Generator::sample(logits, top2, p1 + 1e-6), 3);
  EXPECT_EQ(Generator::sample(logits, top2, 0.999999), 3);
}

} // namespace
