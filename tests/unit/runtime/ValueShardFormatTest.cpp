//===- ValueShardFormatTest.cpp - ZeRO-3 value shards in the format -------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// ParamDesc::valueSharded and boxShape round-trip (and read as absent from
// programs without them); the verifier holds a value-sharded parameter's
// pieces to covering the tensor (ranges tile their box, boxes tile the
// tensor) and rejects gaps, partial overlaps and mis-sized buffers; flat
// ranges map to the right tensor elements; a one-rank program with a
// value-sharded parameter initialises, saves and loads like an unsharded one.
//
//===----------------------------------------------------------------------===//

#include "TestPrograms.h"

#include "runtime/core/ParamLayout.h"
#include "runtime/core/Trainer.h"
#include "runtime/format/ProgramBuilder.h"
#include "runtime/support/Error.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

using namespace strata::rt;
namespace fs = std::filesystem;

namespace {

std::string verifyError(const Program &p) {
  try {
    std::vector<uint8_t> bytes = serializeProgram(p);
    parseProgram(bytes.data(), bytes.size(), "test");
  } catch (const RuntimeError &e) {
    return e.what();
  }
  return "";
}

void expectRejected(const Program &p, const std::string &needle) {
  std::string error = verifyError(p);
  EXPECT_NE(error.find(needle), std::string::npos) << error;
}

struct Piece {
  std::vector<int64_t> start; ///< Box start; empty: the whole tensor.
  std::vector<int64_t> box;
  int64_t begin, end;
};

/// One rank per piece, each holding one value-sharded parameter "w" of
/// `global` shape. Built without verification so that broken layouts can be
/// handed to the verifier.
Program piecesProgram(const std::vector<int64_t> &global,
                      const std::vector<Piece> &pieces) {
  ModelMeta meta;
  meta.family = "t";
  meta.vocab = 4;
  meta.seqLen = 1;
  meta.microBatch = 1;
  meta.globalBatch = pieces.size();
  meta.worldSize = pieces.size();
  meta.planDescription = "pieces";
  std::vector<RankProgram> ranks;
  for (size_t r = 0; r < pieces.size(); ++r) {
    ProgramBuilder b(meta, TrainConfig{}, uint32_t(r));
    b.setLoss(b.addBuffer("loss", {1}));
    const Piece &piece = pieces[r];
    int64_t ns = piece.end - piece.begin;
    ParamDesc p;
    p.name = "w";
    p.value = b.addBuffer("w", {ns});
    p.grad = b.addBuffer("w.grad", {ns});
    p.state = {b.addBuffer("w.exp_avg", {ns}),
               b.addBuffer("w.exp_avg_sq", {ns})};
    p.stateOffset = piece.begin;
    p.valueSharded = true;
    p.boxShape = piece.box;
    p.globalShape = global;
    p.shardStart = piece.start.empty() ? std::vector<int64_t>(global.size(), 0)
                                       : piece.start;
    b.addParamWithBuffers(p);
    ranks.push_back(b.rankProgram());
  }
  Program program;
  program.meta = meta;
  program.ranks = std::move(ranks);
  return program;
}

TEST(ValueShardFormatTest, FieldsRoundTripAndDefaultToUnsharded) {
  for (uint32_t world : {1u, 2u, 4u}) {
    Program p = testprograms::buildValueShardedProgram(world);
    std::vector<uint8_t> bytes = serializeProgram(p);
    Program q = parseProgram(bytes.data(), bytes.size(), "zero3");
    for (uint32_t r = 0; r < world; ++r)
      for (size_t i = 0; i < p.ranks[r].params.size(); ++i) {
        const ParamDesc &a = p.ranks[r].params[i], &b = q.ranks[r].params[i];
        EXPECT_EQ(a.valueSharded, b.valueSharded) << a.name;
        EXPECT_EQ(a.boxShape, b.boxShape) << a.name;
        EXPECT_EQ(a.stateOffset, b.stateOffset) << a.name;
      }
    EXPECT_EQ(serializeProgram(q), bytes);
  }
  Program p = testprograms::buildValueShardedProgram(2);
  EXPECT_TRUE(p.ranks[1].params[0].valueSharded);
  EXPECT_EQ(p.ranks[1].params[0].stateOffset, 9);
  EXPECT_EQ(paramBoxShape(p.ranks[1], p.ranks[1].params[0]),
            (std::vector<int64_t>{6, 3}));
  // An empty box shape means the whole tensor.
  EXPECT_EQ(paramBoxShape(p.ranks[1], p.ranks[1].params[3]),
            (std::vector<int64_t>{2, 3, 2}));
  EXPECT_FALSE(p.ranks[1].params[4].valueSharded);

  // Programs without value-sharded parameters carry no shard section, so
  // they read the same in runtimes that predate it; they read as unsharded.
  Program plain = testprograms::buildMlpProgram();
  std::vector<uint8_t> before = serializeProgram(plain);
  plain.ranks[0].params[0].valueSharded = true;
  plain.ranks[0].params[0].valueSharded = false;
  EXPECT_EQ(serializeProgram(plain), before);
  Program back = parseProgram(before.data(), before.size(), "mlp");
  for (const ParamDesc &param : back.ranks[0].params) {
    EXPECT_FALSE(param.valueSharded);
    EXPECT_TRUE(param.boxShape.empty());
  }
  // The section adds bytes only when used.
  Program sharded = testprograms::buildValueShardedProgram(1);
  for (ParamDesc &param : sharded.ranks[0].params) {
    param.valueSharded = false;
    param.boxShape.clear();
  }
  std::vector<uint8_t> without = serializeProgram(sharded);
  EXPECT_LT(without.size(),
            serializeProgram(testprograms::buildValueShardedProgram(1)).size());
}

TEST(ValueShardFormatTest, VerifierAcceptsTilingsNestedReplicasAndEmptyRanks) {
  // Two halves; a rank with nothing.
  EXPECT_EQ(verifyError(piecesProgram(
                {2, 3},
                {{{}, {2, 3}, 0, 3}, {{}, {2, 3}, 3, 6}, {{}, {2, 3}, 6, 6}})),
            "");
  // Replicas (hybrid sharding): the same ranges twice, and a whole box with
  // a range inside it.
  EXPECT_EQ(verifyError(piecesProgram({4}, {{{}, {4}, 0, 2},
                                            {{}, {4}, 2, 4},
                                            {{}, {4}, 0, 2},
                                            {{}, {4}, 2, 4}})),
            "");
  EXPECT_EQ(verifyError(piecesProgram({4}, {{{}, {4}, 0, 4}, {{}, {4}, 1, 3}})),
            "");
  // Row boxes with padding past the tensor, each split in two.
  EXPECT_EQ(verifyError(piecesProgram({5, 2}, {{{0, 0}, {3, 2}, 0, 3},
                                               {{0, 0}, {3, 2}, 3, 6},
                                               {{3, 0}, {3, 2}, 0, 3},
                                               {{3, 0}, {3, 2}, 3, 6}})),
            "");
}

TEST(ValueShardFormatTest, VerifierRejectsPiecesThatLoseOrRepeatElements) {
  expectRejected(piecesProgram({6}, {{{}, {6}, 0, 2}, {{}, {6}, 3, 6}}),
                 "no rank holds elements [2, 3) of the box at [0] of shape "
                 "[6]");
  expectRejected(piecesProgram({6}, {{{}, {6}, 0, 2}, {{}, {6}, 2, 5}}),
                 "no rank holds elements [5, 6)");
  expectRejected(piecesProgram({6}, {{{}, {6}, 0, 4}, {{}, {6}, 2, 6}}),
                 "rank 1 holds elements [2, 6) and rank 0 holds [0, 4)");
  expectRejected(piecesProgram({5}, {{{0}, {3}, 0, 3}, {{2}, {3}, 0, 3}}),
                 "overlap but differ");
  expectRejected(piecesProgram({8}, {{{0}, {3}, 0, 3}, {{3}, {3}, 0, 3}}),
                 "the ranks' boxes hold 6 of its 8 elements");
  Program p = piecesProgram({6}, {{{}, {6}, 0, 3}, {{}, {6}, 3, 6}});
  p.ranks[1].params[0].globalShape = {7};
  expectRejected(p, "has global shape [6] on rank 0 but [7] on rank 1");

  // Per rank: the value buffer has the state's size, the range fits the
  // box, box_shape needs value_sharded.
  Program good = testprograms::buildValueShardedProgram(2);
  p = good;
  p.ranks[0].buffers[p.ranks[0].params[0].value].shape = {18};
  expectRejected(p, "parameter 'dense.weight' value (value-sharded: its "
                    "optimizer state's size) buffer must be f32 with 9");
  p = good;
  p.ranks[1].params[0].stateOffset = 10;
  expectRejected(p, "optimizer state range [10, 19) lies outside its local "
                    "box of 18 elements");
  p = good;
  p.ranks[0].params[4].boxShape = {2, 2};
  expectRejected(p, "box_shape is only meaningful with value_sharded");
  p = good;
  p.ranks[0].params[0].boxShape = {6, -3};
  expectRejected(p, "invalid box shape");
  p = good;
  p.ranks[0].params[0].shardStart = {0};
  expectRejected(p, "shard does not fit its global shape");
}

TEST(ValueShardFormatTest, FlatRangesMapToTensorElements) {
  // Box [3, 2] at row 3 of a [5, 2] tensor: box rows 0-1 are tensor rows
  // 3-4, box row 2 is padding. Range [1, 5) = (0,1) (1,0) (1,1) (2,0).
  Program p = piecesProgram({5, 2}, {{{0, 0}, {3, 2}, 0, 6},
                                     {{3, 0}, {3, 2}, 0, 1},
                                     {{3, 0}, {3, 2}, 1, 5},
                                     {{3, 0}, {3, 2}, 5, 6}});
  ASSERT_EQ(verifyError(p), "");
  ParamLayout l = layoutOf(p.ranks[2], p.ranks[2].params[0]);
  EXPECT_EQ(l.local, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(l.valueOffset, 1);
  EXPECT_EQ(l.valueCount, 4);
  std::vector<std::pair<int64_t, int64_t>> seen;
  forEachHeldValue(l, [&](int64_t v, int64_t g) { seen.push_back({v, g}); });
  EXPECT_EQ(seen,
            (std::vector<std::pair<int64_t, int64_t>>{{0, 7}, {1, 8}, {2, 9}}));
  EXPECT_EQ(countInFlatRange(l, 1, 5), 3);
  EXPECT_EQ(countInFlatRange(l, 4, 6), 0);
}

TEST(ValueShardFormatTest, OneRankValueShardedParamsInitSaveAndLoad) {
  Program sharded = testprograms::buildValueShardedProgram(1);
  Program reference = testprograms::buildValueShardedReference(1);
  Trainer a(sharded, 0, createCpuDevice(), 5);
  Trainer b(reference, 0, createCpuDevice(), 5);
  a.initParameters();
  b.initParameters();
  // Padding (dense row 5, rows.weight row 2) is zero and not in the tensor.
  auto whole = [](Trainer &t, size_t param, const std::vector<int64_t> &box,
                  const std::vector<int64_t> &global) {
    std::vector<float> v = t.readF32(t.rankProgram().params[param].value);
    std::vector<float> out;
    for (int64_t i = 0; i < int64_t(v.size()); ++i) {
      int64_t row = i / box[1];
      if (row < global[0])
        out.push_back(v[i]);
      else
        EXPECT_EQ(v[i], 0.0f) << "padding of parameter " << param;
    }
    return out;
  };
  EXPECT_EQ(whole(a, 0, {6, 3}, {5, 3}),
            b.readF32(b.rankProgram().params[0].value));
  EXPECT_EQ(whole(a, 1, {3, 2}, {2, 2}),
            b.readF32(b.rankProgram().params[1].value));
  for (size_t p = 2; p < 5; ++p)
    EXPECT_EQ(a.readF32(a.rankProgram().params[p].value),
              b.readF32(b.rankProgram().params[p].value))
        << p;

  // A one-rank checkpoint is a plain weights file that the unsharded
  // program loads with --init, and the sharded one resumes.
  fs::path dir = fs::temp_directory_path() /
                 ("strata-zero3-one-" + std::to_string(::getpid()));
  a.saveCheckpoint(dir.string());
  Trainer c(reference, 0, createCpuDevice(), 9);
  c.loadInitialWeights((dir / "model.safetensors").string());
  Trainer d(sharded, 0, createCpuDevice(), 9);
  d.loadCheckpoint(dir.string());
  for (size_t p = 0; p < 5; ++p) {
    EXPECT_EQ(c.readF32(c.rankProgram().params[p].value),
              b.readF32(b.rankProgram().params[p].value))
        << p;
    EXPECT_EQ(d.readF32(d.rankProgram().params[p].value),
              a.readF32(a.rankProgram().params[p].value))
        << p;
  }
  fs::remove_all(dir);
}

} // namespace
