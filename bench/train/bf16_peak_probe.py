#!/usr/bin/python3
"""The bf16 (and fp32) GEMM peak of one core, measured: oneDNN's
gemm_bf16bf16f32 (AVX512-BF16 where the core has it) and sgemm, which are
the kernels Strata's bf16 and fp32 matmuls call, on square shapes, one
thread, best of --reps.

  OMP_NUM_THREADS=1 /usr/bin/python3 bench/train/bf16_peak_probe.py [--sizes 1024,2048]

Prints one JSON object: {"bf16_gflops": best, "f32_gflops": best, "rows": [...]}.
"""

import argparse
import ctypes
import json
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np  # noqa: E402

LIB = ctypes.CDLL("libdnnl.so.2")
dim = ctypes.c_int64
LIB.dnnl_gemm_bf16bf16f32.argtypes = [ctypes.c_char, ctypes.c_char, dim, dim, dim,
                                      ctypes.c_float, ctypes.c_void_p, dim,
                                      ctypes.c_void_p, dim, ctypes.c_float,
                                      ctypes.c_void_p, dim]
LIB.dnnl_sgemm.argtypes = LIB.dnnl_gemm_bf16bf16f32.argtypes


def best_gflops(fn, n, reps):
    fn()  # warm-up (JIT, packing buffers)
    best = 0.0
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = max(best, 2.0 * n ** 3 / (time.perf_counter() - t0) / 1e9)
    return best


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sizes", default="1024,2048")
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        a32 = rng.standard_normal((n, n), dtype=np.float32)
        b32 = rng.standard_normal((n, n), dtype=np.float32)
        a16 = (a32.view(np.uint32) >> 16).astype(np.uint16)
        b16 = (b32.view(np.uint32) >> 16).astype(np.uint16)
        c = np.zeros((n, n), dtype=np.float32)
        bf16 = best_gflops(lambda: LIB.dnnl_gemm_bf16bf16f32(
            b"N", b"N", n, n, n, 1.0, a16.ctypes.data, n, b16.ctypes.data, n, 0.0,
            c.ctypes.data, n), n, args.reps)
        f32 = best_gflops(lambda: LIB.dnnl_sgemm(
            b"N", b"N", n, n, n, 1.0, a32.ctypes.data, n, b32.ctypes.data, n, 0.0,
            c.ctypes.data, n), n, args.reps)
        rows.append({"n": n, "bf16_gflops": bf16, "f32_gflops": f32})
    print(json.dumps({"bf16_gflops": max(r["bf16_gflops"] for r in rows),
                      "f32_gflops": max(r["f32_gflops"] for r in rows), "rows": rows}))


if __name__ == "__main__":
    main()
