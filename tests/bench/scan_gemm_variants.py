#!/usr/bin/env python3
"""Two ways to speed up the tuner scan's float32 products that do not pay (docs/cache-configs.md), timed on one
thread against LibTorch's own product (MKL's sgemm), with the results compared bit for bit:

- the weights packed once for MKL (`cblas_sgemm_pack`, then `cblas_sgemm_compute` for each product), at each of a
  layer's shapes and the output matrix's tiles;
- one product for a layer's query, key and value matrices together (and for gate and up), instead of one each.

    ~/.cache/kvscope/venv/bin/python tests/bench/scan_gemm_variants.py

Prints, per shape, whether the results are equal and the time ratio (above 1: the variant is faster).
"""
import ctypes, time, torch
torch.set_num_threads(1)
lib = ctypes.CDLL(torch.__file__.replace("__init__.py", "lib/libtorch_cpu.so"))
lib.cblas_sgemm_pack_get_size.restype = ctypes.c_size_t
lib.cblas_sgemm_pack_get_size.argtypes = [ctypes.c_int] * 4
lib.cblas_sgemm_pack.argtypes = [ctypes.c_int] * 6 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
lib.cblas_sgemm_compute.argtypes = [ctypes.c_int] * 6 + [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                                                          ctypes.c_float, ctypes.c_void_p, ctypes.c_int]
ROW_MAJOR, B_MATRIX, NO_TRANS, TRANS, PACKED = 101, 162, 111, 112, 151


def best(f, reps):
    f()
    t = 1e9
    for _ in range(5):
        s = time.perf_counter()
        for _ in range(reps):
            f()
        t = min(t, (time.perf_counter() - s) / reps)
    return t


print("weights packed once (rows x cols by weight rows):")
for M, K, N in [(256, 576, 576), (256, 576, 192), (256, 576, 1536), (256, 1536, 576), (1024, 576, 1536),
                (1024, 1536, 576), (256, 576, 3640)]:
    W, x, out = torch.randn(N, K), torch.randn(M, K), torch.empty(M, N)
    buf = torch.empty(lib.cblas_sgemm_pack_get_size(B_MATRIX, M, N, K) // 4 + 16)
    lib.cblas_sgemm_pack(ROW_MAJOR, B_MATRIX, TRANS, M, N, K, 1.0, W.data_ptr(), K, buf.data_ptr())
    packed = lambda: lib.cblas_sgemm_compute(ROW_MAJOR, NO_TRANS, PACKED, M, N, K, x.data_ptr(), K, buf.data_ptr(), 0,
                                             0.0, out.data_ptr(), N)
    packed()
    equal = torch.equal(torch.mm(x, W.t()), out)
    reps = max(20, int(2e9 / (2 * M * N * K)))
    print(f"  {M}x{K} by {N}: equal {equal}, {best(lambda: torch.mm(x, W.t()), reps) / best(packed, reps):.3f}")

print("one product for several matrices (rows: fused / separate):")
for M in (256, 1024):
    x = torch.randn(M, 576)
    for name, ws in [("q,k,v", [torch.randn(576, 576), torch.randn(192, 576), torch.randn(192, 576)]),
                     ("gate,up", [torch.randn(1536, 576), torch.randn(1536, 576)])]:
        cat = torch.cat(ws)
        separate = lambda: [torch.mm(x, w.t()) for w in ws]
        fused = lambda: torch.mm(x, cat.t())
        equal = torch.equal(torch.cat(separate(), 1), fused())
        reps = max(10, int(2e9 / (2 * M * cat.shape[0] * 576)))
        print(f"  {name}, {M} rows: equal {equal}, {best(separate, reps) / best(fused, reps):.3f}")
