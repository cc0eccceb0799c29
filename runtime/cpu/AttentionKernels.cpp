//===- AttentionKernels.cpp - Fused causal attention on the CPU -----------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// Forward: for each query tile, the key tiles up to its last row; the
// running maximum and sum of every row are updated per tile and the output
// rows rescaled, so each score tile is used once and dropped. Tiles wholly
// above the diagonal are never computed.
//
// Backward: D_i = dO_i . O_i per row first; then for each key tile (outer),
// the query tiles at or below it: P is recomputed from the scores and the
// saved log-sum-exp, and dV_j += P^T dO_i, dP = dO_i V_j^T, dS = P (dP -
// D_i) scale, dQ_i += dS K_j, dK_j += dS^T Q_i. The query heads of one kv
// head are processed by one task, so dK and dV are written by one writer.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/AttentionKernels.h"
#include "runtime/cpu/Element.h"
#include "runtime/cpu/FastMath.h"
#include "runtime/kernels/AttentionMath.h"

#include <oneapi/dnnl/dnnl.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <vector>

namespace strata::rt::cpu {

namespace {

namespace km = strata::kernels;

/// C[m, n] = alpha * op(A) op(B) + beta * C, row-major with explicit
/// leading dimensions (tiles are views into whole tensors).
void gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
          float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
          float beta, float *c, int64_t ldc) {
  dnnl_status_t status = dnnl_sgemm(transA ? 'T' : 'N', transB ? 'T' : 'N', m,
                                    n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (status != dnnl_success) {
    std::fprintf(stderr,
                 "strata: oneDNN sgemm failed in attention (status "
                 "%d)\n",
                 int(status));
    std::exit(70);
  }
}

const auto kExp = [](float x) { return expApprox(x); };
const auto kLog = [](float x) { return std::log(x); };

/// Views of one (batch, query head) pair and its kv head.
struct HeadView {
  int64_t qOffset, kvOffset, rowOffset;
};

HeadView headView(const AttentionShape &s, int64_t b, int64_t h) {
  int64_t group = s.heads / s.kvHeads;
  int64_t sd = s.seq * s.headDim;
  return {(b * s.heads + h) * sd, (b * s.kvHeads + h / group) * sd,
          (b * s.heads + h) * s.seq};
}

/// One row of a score tile through the online softmax: scales the raw
/// scores, masks keys after the row, exponentiates against the new
/// maximum; returns the factor the row's old sum and output are rescaled
/// by.
float onlineSoftmaxRow(float *row, int64_t valid, int64_t cols, float scale,
                       float &runningMax, float &runningSum) {
  // scale > 0 (the op's verifier), so the scaled maximum is scale * max.
  float tileMax = scale * rowMax(row, valid);
  float newMax = std::max(runningMax, tileMax);
  float acc[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= valid; c += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      float e = expApprox(scale * row[c + l] - newMax);
      row[c + l] = e;
      acc[l] += e;
    }
  for (; c < valid; ++c) {
    float e = expApprox(scale * row[c] - newMax);
    row[c] = e;
    acc[0] += e;
  }
  for (c = valid; c < cols; ++c)
    row[c] = 0.0f;
  float rescale = km::onlineRescale(runningMax, newMax, kExp);
  runningSum = runningSum * rescale + sumLanes(acc);
  runningMax = newMax;
  return rescale;
}

void forwardHead(const float *q, const float *k, const float *v, float *out,
                 float *lse, const AttentionShape &s, float scale,
                 std::vector<float> &tile) {
  const int64_t S = s.seq, D = s.headDim;
  float runningMax[kRowTile], runningSum[kRowTile];
  for (int64_t i0 = 0; i0 < S; i0 += kRowTile) {
    int64_t rows = std::min(kRowTile, S - i0);
    for (int64_t r = 0; r < rows; ++r) {
      runningMax[r] = -std::numeric_limits<float>::infinity();
      runningSum[r] = 0.0f;
    }
    float *o = out + i0 * D;
    std::fill(o, o + rows * D, 0.0f);
    // Key tiles up to the tile's last row; the first tile has a key for
    // every row, so no row's maximum stays -inf.
    for (int64_t j0 = 0; j0 < i0 + rows; j0 += kKeyTile) {
      int64_t cols = std::min(kKeyTile, i0 + rows - j0);
      gemm(false, true, rows, cols, D, 1.0f, q + i0 * D, D, k + j0 * D, D, 0.0f,
           tile.data(), cols);
      for (int64_t r = 0; r < rows; ++r) {
        int64_t valid = km::causalValidKeys(i0 + r, j0, cols);
        float rescale = onlineSoftmaxRow(tile.data() + r * cols, valid, cols,
                                         scale, runningMax[r], runningSum[r]);
        // On the first tile the output rows are still zero.
        if (j0 > 0 && rescale != 1.0f) {
          float *orow = o + r * D;
          STRATA_ELEMENTWISE
          for (int64_t d = 0; d < D; ++d)
            orow[d] *= rescale;
        }
      }
      gemm(false, false, rows, D, cols, 1.0f, tile.data(), cols, v + j0 * D, D,
           1.0f, o, D);
    }
    for (int64_t r = 0; r < rows; ++r) {
      float inv = 1.0f / runningSum[r];
      float *orow = o + r * D;
      STRATA_ELEMENTWISE
      for (int64_t d = 0; d < D; ++d)
        orow[d] *= inv;
      lse[i0 + r] = km::logSumExp(runningMax[r], runningSum[r], kLog);
    }
  }
}

/// dq for one query head and its share of dk, dv (accumulated into).
void backwardHead(const float *dout, const float *q, const float *k,
                  const float *v, const float *out, const float *lse, float *dq,
                  float *dk, float *dv, const AttentionShape &s, float scale,
                  std::vector<float> &probs, std::vector<float> &dscores,
                  std::vector<float> &rowDot) {
  const int64_t S = s.seq, D = s.headDim;
  for (int64_t i = 0; i < S; ++i) {
    const float *g = dout + i * D, *o = out + i * D;
    float acc = 0.0f;
    for (int64_t d = 0; d < D; ++d)
      acc += g[d] * o[d];
    rowDot[i] = acc;
  }
  std::fill(dq, dq + S * D, 0.0f);
  for (int64_t j0 = 0; j0 < S; j0 += kKeyTile) {
    int64_t cols = std::min(kKeyTile, S - j0);
    // Query tiles holding a row >= j0.
    for (int64_t i0 = (j0 / kRowTile) * kRowTile; i0 < S; i0 += kRowTile) {
      int64_t rows = std::min(kRowTile, S - i0);
      float *p = probs.data(), *ds = dscores.data();
      gemm(false, true, rows, cols, D, 1.0f, q + i0 * D, D, k + j0 * D, D, 0.0f,
           p, cols);
      for (int64_t r = 0; r < rows; ++r) {
        float *pr = p + r * cols;
        int64_t valid = km::causalValidKeys(i0 + r, j0, cols);
        float rowLse = lse[i0 + r];
        for (int64_t c = 0; c < valid; ++c)
          pr[c] = km::recomputedProbability(pr[c], scale, rowLse, kExp);
        for (int64_t c = valid; c < cols; ++c)
          pr[c] = 0.0f;
      }
      // dV_j += P^T dO_i.
      gemm(true, false, cols, D, rows, 1.0f, p, cols, dout + i0 * D, D, 1.0f,
           dv + j0 * D, D);
      // dP = dO_i V_j^T, then dS in place.
      gemm(false, true, rows, cols, D, 1.0f, dout + i0 * D, D, v + j0 * D, D,
           0.0f, ds, cols);
      for (int64_t r = 0; r < rows; ++r) {
        float *dsr = ds + r * cols;
        const float *pr = p + r * cols;
        float dot = rowDot[i0 + r];
        STRATA_ELEMENTWISE
        for (int64_t c = 0; c < cols; ++c)
          dsr[c] = km::rawScoreGradient(pr[c], dsr[c], dot, scale);
      }
      // dQ_i += dS K_j; dK_j += dS^T Q_i.
      gemm(false, false, rows, D, cols, 1.0f, ds, cols, k + j0 * D, D, 1.0f,
           dq + i0 * D, D);
      gemm(true, false, cols, D, rows, 1.0f, ds, cols, q + i0 * D, D, 1.0f,
           dk + j0 * D, D);
    }
  }
}

} // namespace

void causalAttentionFwd(const float *q, const float *k, const float *v,
                        float *out, float *lse, const AttentionShape &s,
                        float scale) {
  static thread_local std::vector<float> tile;
  tile.resize(kRowTile * kKeyTile);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h) {
      HeadView view = headView(s, b, h);
      forwardHead(q + view.qOffset, k + view.kvOffset, v + view.kvOffset,
                  out + view.qOffset, lse + view.rowOffset, s, scale, tile);
    }
}

void causalAttentionBwd(const float *dout, const float *q, const float *k,
                        const float *v, const float *out, const float *lse,
                        float *dq, float *dk, float *dv,
                        const AttentionShape &s, float scale) {
  static thread_local std::vector<float> probs, dscores, rowDot;
  probs.resize(kRowTile * kKeyTile);
  dscores.resize(kRowTile * kKeyTile);
  rowDot.resize(s.seq);
  int64_t kvElements = s.batch * s.kvHeads * s.seq * s.headDim;
  std::fill(dk, dk + kvElements, 0.0f);
  std::fill(dv, dv + kvElements, 0.0f);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h) {
      HeadView view = headView(s, b, h);
      backwardHead(dout + view.qOffset, q + view.qOffset, k + view.kvOffset,
                   v + view.kvOffset, out + view.qOffset, lse + view.rowOffset,
                   dq + view.qOffset, dk + view.kvOffset, dv + view.kvOffset, s,
                   scale, probs, dscores, rowDot);
    }
}

namespace {

/// Float32 rows of one head of a bf16 tensor (grow-only, per thread).
struct WideHead {
  std::vector<float> rows;
  float *widen(const bf16_t *src, int64_t n) {
    rows.resize(size_t(n));
    STRATA_ELEMENTWISE
    for (int64_t i = 0; i < n; ++i)
      rows[size_t(i)] = load(src[i]);
    return rows.data();
  }
  float *zeroed(int64_t n) {
    rows.assign(size_t(n), 0.0f);
    return rows.data();
  }
};

void narrow(const float *src, bf16_t *dst, int64_t n) {
  STRATA_ELEMENTWISE
  for (int64_t i = 0; i < n; ++i)
    dst[i] = store<bf16_t>(src[i]);
}

} // namespace

void causalAttentionFwd(const uint16_t *q, const uint16_t *k, const uint16_t *v,
                        uint16_t *out, float *lse, const AttentionShape &s,
                        float scale) {
  static thread_local std::vector<float> tile;
  static thread_local WideHead qh, kh, vh, oh;
  tile.resize(kRowTile * kKeyTile);
  const int64_t sd = s.seq * s.headDim, group = s.heads / s.kvHeads;
  float *o = oh.zeroed(sd), *kw = nullptr, *vw = nullptr;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h) {
      HeadView view = headView(s, b, h);
      if (h % group == 0) {
        kw = kh.widen(k + view.kvOffset, sd);
        vw = vh.widen(v + view.kvOffset, sd);
      }
      forwardHead(qh.widen(q + view.qOffset, sd), kw, vw, o,
                  lse + view.rowOffset, s, scale, tile);
      narrow(o, out + view.qOffset, sd);
    }
}

void causalAttentionBwd(const uint16_t *dout, const uint16_t *q,
                        const uint16_t *k, const uint16_t *v,
                        const uint16_t *out, const float *lse, uint16_t *dq,
                        uint16_t *dk, uint16_t *dv, const AttentionShape &s,
                        float scale) {
  static thread_local std::vector<float> probs, dscores, rowDot;
  static thread_local WideHead gh, qh, kh, vh, oh, dqh, dkh, dvh;
  probs.resize(kRowTile * kKeyTile);
  dscores.resize(kRowTile * kKeyTile);
  rowDot.resize(s.seq);
  const int64_t sd = s.seq * s.headDim, group = s.heads / s.kvHeads;
  float *dqw = dqh.zeroed(sd), *kw = nullptr, *vw = nullptr, *dkw = nullptr,
        *dvw = nullptr;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h) {
      HeadView view = headView(s, b, h);
      if (h % group == 0) { // the first query head of a kv head
        kw = kh.widen(k + view.kvOffset, sd);
        vw = vh.widen(v + view.kvOffset, sd);
        dkw = dkh.zeroed(sd);
        dvw = dvh.zeroed(sd);
      }
      backwardHead(gh.widen(dout + view.qOffset, sd),
                   qh.widen(q + view.qOffset, sd), kw, vw,
                   oh.widen(out + view.qOffset, sd), lse + view.rowOffset, dqw,
                   dkw, dvw, s, scale, probs, dscores, rowDot);
      narrow(dqw, dq + view.qOffset, sd);
      if (h % group == group - 1) { // its last: dk, dv are complete
        narrow(dkw, dk + view.kvOffset, sd);
        narrow(dvw, dv + view.kvOffset, sd);
      }
    }
}

} // namespace strata::rt::cpu
