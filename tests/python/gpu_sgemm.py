"""The tiled fp32 GEMM through an exported module, on a real GPU:

    kart export --python -o sk.py sgemm
    python3 tests/python/gpu_sgemm.py sk.py

For each problem, `sk.launch("sgemm", a, b, c, M, N, K, problem=...)` picks the tuned
config with `best()` (the embedded kart.tune records) and computes grid and block from
kernel.toml's [launch]; the result is compared with PyTorch's fp32 matmul (TF32 off).
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

    spec = importlib.util.spec_from_file_location("sk", module_path)
    sk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sk)
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    for m, n, k in [(1024, 1024, 1024), (4096, 4096, 4096), (256, 4096, 2048), (333, 129, 257)]:
        a = torch.rand(m, k, device="cuda") * 2 - 1
        b = torch.rand(k, n, device="cuda") * 2 - 1
        c = torch.full((m, n), float("nan"), device="cuda")
        problem = dict(M=m, N=n, K=k)
        t0 = time.perf_counter()
        launcher = sk.best("sgemm", **problem)
        lookup_us = (time.perf_counter() - t0) * 1e6
        launcher.launch(a, b, c, m, n, k, problem=problem)
        torch.cuda.synchronize()
        ref = a.double() @ b.double()
        err = ((c.double() - ref).norm() / ref.norm()).item()
        grid, block, _ = launcher.dims(**problem)
        check(f"M={m} N={n} K={k}: best() {lookup_us:.0f} µs -> {sk._config_text(launcher.config)}, "
              f"grid {grid}, block {block}: rel. error {err:.2e}", not torch.isnan(c).any().item() and err < 1e-5)
        sk.launch("sgemm", a, b, c, m, n, k, problem=problem)  # the one-line form
    print("all sgemm checks passed")


if __name__ == "__main__":
    main(sys.argv[1])
