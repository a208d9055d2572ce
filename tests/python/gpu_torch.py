"""The exported module as a PyTorch citizen, on a real GPU (run by the GPU test
`python_module_in_cuda_graphs_and_torch_compile`):

    kart export --python -o bk.py smoke flash_attn
    python3 tests/python/gpu_torch.py bk.py

1. CUDA graphs: three captures of the smoke kernel (y = a * x + b) with different
   scalars, replayed and compared, first with the module loading inside the first
   capture, then again after `preload()`.
2. Launch cost, a sanity bound (not a benchmark: bench/python_launch.py measures it).
3. `torch_op`: FlashAttention as `torch.ops.kart.flash_attn`; `torch.compile(fullgraph=True)`
   of a function calling it has no graph break and matches PyTorch's attention, and so
   does the same function compiled with CUDA graphs (mode="reduce-overhead").
Exits 1 on the first failure.
"""
import importlib.util
import sys
import time


def main(module_path):
    def check(what, ok, detail=""):
        print(("ok   " if ok else "FAIL ") + what + (f": {detail}" if detail and not ok else ""))
        if not ok:
            sys.exit(1)

    spec = importlib.util.spec_from_file_location("bk", module_path)
    bk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bk)
    import torch
    import torch.nn.functional as F

    n = 1 << 20
    x = torch.rand(n, device="cuda") * 2 - 1
    axpb = bk.load("smoke")
    for when in ("loading inside the first capture", "after preload()"):
        if when.startswith("after"):
            check(f"preload() loaded {bk.preload()} entries", True)
        graphs, outputs = [], []
        for a, b in ((2.0, 1.0), (-0.5, 3.0), (7.0, -2.0)):
            y = torch.full_like(x, float("nan"))
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                axpb((n + 255) // 256, 256, x, y, a, b, n)
            graphs.append(g)
            outputs.append((y, a, b))
        x.uniform_(-1, 1)  # replays read the current x
        for g in graphs:
            g.replay()
        torch.cuda.synchronize()
        # The kernel rounds a * x + b once (fma), PyTorch twice: equal within an ulp.
        ok = all(torch.allclose(y, a * x + b, rtol=1e-6, atol=1e-5) for y, a, b in outputs)
        check(f"CUDA graphs, {when}: 3 captures with different scalars, replays exact", ok)

    y = torch.empty_like(x)
    axpb((n + 255) // 256, 256, x, y, 2.0, 1.0, n)
    torch.cuda.synchronize()
    t0 = time.process_time()
    for _ in range(2000):
        axpb((n + 255) // 256, 256, x, y, 2.0, 1.0, n)
    per_call = (time.process_time() - t0) / 2000 * 1e6
    torch.cuda.synchronize()
    check(f"launch cost {per_call:.1f} µs of CPU per call (sanity bound 100 µs)", per_call < 100)

    B, H, S, D = 2, 8, 512, 64
    op = bk.torch_op("flash_attn", mutates=[3], problem=("B", "H", "S", "D", "causal"))

    def attention(q, k, v):
        o = torch.empty_like(q)
        op(q, k, v, o, S, B, H, S, D, 0)
        return o

    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.float16) for _ in range(3))
    explained = torch._dynamo.explain(attention)(q, k, v)
    check(f"torch.compile sees {explained.graph_count} graph, {explained.graph_break_count} breaks",
          explained.graph_break_count == 0 and explained.graph_count == 1, explained)
    for mode in ("default", "reduce-overhead"):
        compiled = torch.compile(attention, fullgraph=True, mode=mode)
        worst = 0.0
        for _ in range(3):
            q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.float16) for _ in range(3))
            out = compiled(q, k, v)
            ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float())
            worst = max(worst, ((out.float() - ref).norm() / ref.norm()).item())
        check(f"torch.compile(fullgraph=True, mode={mode!r}) of the op, 3 calls: worst rel. error {worst:.2e}",
              worst < 2e-3)
    print("all torch checks passed")


if __name__ == "__main__":
    main(sys.argv[1])
