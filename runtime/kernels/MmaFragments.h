//===- MmaFragments.h - Where tensor-core fragments live, per lane --------===//
//
// Part of the Strata project.
//
//===----------------------------------------------------------------------===//
//
// The register layouts of the warp-wide bf16 matrix instruction
// mma.sync.m16n8k16 (PTX ISA, "Matrix fragments for mma.m16n8k16") and of
// ldmatrix.m8n8.x4, written once as index functions. The CUDA FlashAttention
// kernels (runtime/cuda/CudaFlashAttention.cu) compute their shared-memory
// addresses and causal masks with them; the host test
// (tests/unit/runtime/MmaFragmentTest.cpp) emulates the two instructions
// from the PTX definitions and runs the kernels' tile algorithm through the
// same functions against the CPU attention kernel.
//
// Lane l of a warp has group g = l / 4 and thread-in-group t = l % 4.
//   A (16 x 16, row major), four 32-bit registers of two bf16 each:
//     a0 (g, 2t..2t+1)  a1 (g+8, 2t..)  a2 (g, 2t+8..)  a3 (g+8, 2t+8..)
//   B (16 x 8, k x n, "col": k contiguous), two registers:
//     b0 (k 2t..2t+1, n g)  b1 (k 2t+8.., n g)
//   C, D (16 x 8 float32), four registers:
//     c0 (g, 2t)  c1 (g, 2t+1)  c2 (g+8, 2t)  c3 (g+8, 2t+1)
// ldmatrix.x4 loads four 8 x 8 bf16 matrices; lanes 8i .. 8i+7 give the row
// addresses of matrix i, and register i of lane l receives matrix i's
// elements (l / 4, 2 (l % 4) .. +1), or with .trans (2 (l % 4) .. +1, l / 4).
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_KERNELS_MMAFRAGMENTS_H
#define STRATA_RUNTIME_KERNELS_MMAFRAGMENTS_H

#include "runtime/kernels/HostDevice.h"

namespace strata::kernels::mma {

/// Row (within the 16-row tile) of accumulator register `reg` (0..3).
STRATA_HOST_DEVICE inline int accRow(int lane, int reg) {
  return lane / 4 + (reg >= 2 ? 8 : 0);
}
/// Column (within the 8-column tile) of accumulator register `reg`.
STRATA_HOST_DEVICE inline int accCol(int lane, int reg) {
  return 2 * (lane % 4) + (reg & 1);
}

/// ldmatrix.x4 of a 16 x 16 A operand stored row-major (rows = M, 16
/// contiguous k): the row and first column lane `lane` addresses, so that
/// registers 0..3 are a0..a3.
STRATA_HOST_DEVICE inline int aLoadRow(int lane) { return lane % 16; }
STRATA_HOST_DEVICE inline int aLoadCol(int lane) { return (lane / 16) * 8; }

/// ldmatrix.x4 (no .trans) of two B operands (n-blocks of 8) from a matrix
/// stored with n as rows and k contiguous ([n][k], e.g. K for Q K^T):
/// registers 0, 1 are b0, b1 of n-block 0 and registers 2, 3 of n-block 1.
STRATA_HOST_DEVICE inline int bLoadRow(int lane) {
  return lane % 8 + (lane / 16) * 8;
}
STRATA_HOST_DEVICE inline int bLoadCol(int lane) { return ((lane / 8) % 2) * 8; }

/// ldmatrix.x4.trans of two B operands from a matrix stored with k as rows
/// and n contiguous ([k][n], e.g. V for P V): registers 0, 1 are b0, b1 of
/// n-block 0 and registers 2, 3 of n-block 1.
STRATA_HOST_DEVICE inline int bTransLoadRow(int lane) {
  return lane % 8 + ((lane / 8) % 2) * 8;
}
STRATA_HOST_DEVICE inline int bTransLoadCol(int lane) {
  return (lane / 16) * 8;
}

/// The A operand (16 x 16) that accumulators of two adjacent n-blocks form
/// when fed back as the left operand (P of P V): register `reg` of A packs
/// (block, c-register pair) = (reg / 2 (0: first block), reg % 2 (0: c0 c1,
/// 1: c2 c3)).
STRATA_HOST_DEVICE inline int accToABlock(int reg) { return reg / 2; }
STRATA_HOST_DEVICE inline int accToAPair(int reg) { return reg % 2; }

} // namespace strata::kernels::mma

#endif // STRATA_RUNTIME_KERNELS_MMAFRAGMENTS_H
