"""The CuTe Hopper GEMM through an exported module, on an H100/H200:

    kart export --python -o cg.py cute_gemm
    python3 tests/python/gpu_cute_gemm.py cg.py

A template entry found by its name, two TMA descriptors made by the module's
`tensor_map()` (no C++ host code), `best()` picking the tuned config, grid, block and
shared memory from kernel.toml's [launch]; results compared with a float64 matmul of
the same fp16 inputs. Then the cluster check launched in clusters of 2 and 4
(`cluster=`, through cuLaunchKernelEx), and the refusals: a pointer where a tensor map
belongs, a grid that is not whole clusters. Exits 1 on the first failure.
"""
import importlib.util
import sys
import time


def main(module_path):
    def check(what, ok, detail=""):
        print(("ok   " if ok else "FAIL ") + what + (f": {detail}" if detail and not ok else ""))
        if not ok:
            sys.exit(1)

    spec = importlib.util.spec_from_file_location("cg", module_path)
    cg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cg)
    import torch

    torch.manual_seed(0)
    for m, n, k in [(1024, 1024, 1024), (4096, 4096, 4096), (256, 4096, 2048), (333, 129, 264)]:
        a = (torch.rand(m, k, device="cuda") * 2 - 1).half()
        b = (torch.rand(n, k, device="cuda") * 2 - 1).half()
        c = torch.full((m, n), float("nan"), device="cuda")
        problem = dict(M=m, N=n, K=k)
        t0 = time.perf_counter()
        launcher = cg.best("cute_gemm", **problem)
        lookup_us = (time.perf_counter() - t0) * 1e6
        bm, bn, bk = (launcher.config[p] for p in ("BM", "BN", "BK"))
        ta = cg.tensor_map(a, tile=(bm, bk), swizzle=128)
        tb = cg.tensor_map(b, tile=(bn, bk), swizzle=128)
        launcher.launch(ta, tb, c, m, n, k, problem=problem)
        torch.cuda.synchronize()
        ref = a.double() @ b.double().T
        err = ((c.double() - ref).norm() / ref.norm()).item()
        grid, block, shared = launcher.dims(**problem)
        check(f"M={m} N={n} K={k}: best() {lookup_us:.0f} µs -> {cg._config_text(launcher.config)}, "
              f"grid {grid}, block {block}, shared {shared}: rel. error {err:.2e}",
              not torch.isnan(c).any().item() and err < 1e-5)

    launcher = cg.load("cute_gemm", entry="cluster_ranks", BM=64, BN=64, BK=64, STAGES=3)
    for cluster in (2, 4):
        out = torch.full((8,), -1, dtype=torch.int32, device="cuda")
        launcher((8, 1, 1), 32, out, cluster=(cluster, 1, 1))
        torch.cuda.synchronize()
        want = [i % cluster + 256 * cluster for i in range(8)]
        check(f"cluster_ranks in clusters of {cluster}: {out.tolist()}", out.tolist() == want, f"want {want}")

    gemm = cg.load("cute_gemm", BM=64, BN=64, BK=64, STAGES=3)
    a = torch.zeros(64, 64, device="cuda", dtype=torch.half)
    c = torch.zeros(64, 64, device="cuda")
    try:
        gemm(1, 128, a, a, c, 64, 64, 64, shared_mem=50176)
        check("a tensor where a tensor map belongs is refused", False)
    except TypeError as e:
        check(f"a tensor where a tensor map belongs is refused ({e})", "TensorMap" in str(e))
    try:
        launcher(3, 32, c, cluster=(2, 1, 1))
        check("a grid of 3 blocks in clusters of 2 is refused", False)
    except ValueError as e:
        check(f"a grid of 3 blocks in clusters of 2 is refused ({e})", "cluster" in str(e))
    print("all cute_gemm checks passed")


if __name__ == "__main__":
    main(sys.argv[1])
