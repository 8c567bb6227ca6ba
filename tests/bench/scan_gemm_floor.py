#!/usr/bin/env python3
"""How long the documented tuner scan's weight products alone take on this machine (docs/cache-configs.md).

The scan (SmolLM2-135M, 2 windows of 256 tokens, 120 runs from their layer up) must do these multiply-adds in
float32 to keep its figures exact: this times LibTorch's float32 GEMM (MKL's sgemm) on one thread at the scan's
shapes, batches of ROWS rows (a group's: 8 runs of 32), and sums. Run two at once, one per core, for the two-core
figure:

    PY=~/.cache/kvscope/venv/bin/python; $PY tests/bench/scan_gemm_floor.py & $PY tests/bench/scan_gemm_floor.py; wait
"""
import sys, time, torch
torch.set_num_threads(1)
rows = int(sys.argv[1]) if len(sys.argv) > 1 else 256
H, F, KV, V = 576, 1536, 192, 49152
layer_runs, tokens, scored = 1860, 512, 120 * 2 * 129   # sum over the 120 runs of (30 - layer); 2 windows of 256
shapes = {"q,o": (H, H, 2), "k,v": (H, KV, 2), "gate,up": (H, F, 2), "down": (F, H, 1)}
total = 0.0
for name, (K, N, count) in shapes.items():
    W, x = torch.randn(N, K), torch.randn(rows, K)
    torch.mm(x, W.t()); reps = max(5, int(3e9 / (2 * rows * N * K)))
    t = time.perf_counter()
    for _ in range(reps): torch.mm(x, W.t())
    dt = (time.perf_counter() - t) / reps
    macs = count * K * N * tokens * layer_runs
    total += macs / (rows * K * N) * dt
    print(f"{name}: {2 * rows * K * N / dt / 1e9:.1f} GFLOP/s")
W, x = torch.randn(3640, H), torch.randn(rows, H)   # the output matrix, in the GEMM path's tiles
torch.mm(x, W.t()); reps = 20
t = time.perf_counter()
for _ in range(reps): torch.mm(x, W.t())
dt = (time.perf_counter() - t) / reps
total += scored * H * V / (rows * H * 3640) * dt
print(f"output: {2 * rows * H * 3640 / dt / 1e9:.1f} GFLOP/s")
print(f"GEMM seconds on one thread: {total:.1f}")
