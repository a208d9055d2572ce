"""Runs a module written by `kart export --python` on a real GPU, with PyTorch and CuPy
(run by the GPU test `python_export_launches_with_torch_and_cupy`):

    python3 tests/python/gpu_export.py fixture_kernels.py

The module holds the GPU fixture's `scale` (FACTOR=2, OFFSET=1; no signature: kinds
inferred from the cubin's parameter sizes), `smem` (64 KiB of dynamic shared memory;
signature ptr, ptr, i32), `old` (sm_80 only) and `affine` (UNROLL=2: a template entry
taking a struct by value, signature ptr, ptr, struct:12:4). Prints one line per check and the
times of import and first load; exits 1 on the first failure.
"""
import importlib.util
import sys
import time


def main(module_path):
    def check(what, ok, detail=""):
        print(("ok   " if ok else "FAIL ") + what + (f": {detail}" if detail and not ok else ""))
        if not ok:
            sys.exit(1)

    t0 = time.perf_counter()
    spec = importlib.util.spec_from_file_location("fixture_kernels", module_path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    import_ms = (time.perf_counter() - t0) * 1e3
    check(f"import in {import_ms:.1f} ms, no GPU touched", mod._driver is None)

    import torch

    n = 1_000_003
    x = torch.empty(n, device="cuda").uniform_(-4, 4)
    y = torch.full((n,), float("nan"), device="cuda")
    scale = mod.load("scale", FACTOR=2, OFFSET=1)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        t0 = time.perf_counter()
        scale((n + 255) // 256, 256, x, y, n)  # on torch's current stream: `stream`
        first_ms = (time.perf_counter() - t0) * 1e3
    stream.synchronize()
    check(f"torch tensors on torch's current stream (first call {first_ms:.2f} ms incl. load)",
          torch.equal(y, x * 2 + 1))
    t0 = time.perf_counter()
    for _ in range(100):
        scale((n + 255) // 256, 256, x, y, n)
    torch.cuda.synchronize()
    print(f"     100 further launches: {(time.perf_counter() - t0) * 1e4:.1f} µs each incl. sync")

    import struct

    affine = mod.load("affine", UNROLL=2)  # a template entry, by its name
    y.fill_(float("nan"))
    affine((n + 255) // 256, 128, x, y, struct.pack("<ffi", 3.0, 0.5, n))
    torch.cuda.synchronize()
    # The kernel may fuse the multiply-add (one rounding): compare to within an ulp.
    check("a template entry with a struct by value (struct:12:4)",
          torch.allclose(y, x * 3 + 0.5, rtol=1e-6, atol=1e-6))
    try:
        affine(1, 128, x, y, struct.pack("<ff", 3.0, 0.5))
        check("a struct of the wrong size is refused", False)
    except TypeError as e:
        check(f"a struct of the wrong size is refused ({e})", "12 bytes" in str(e))

    try:
        import cupy as cp
    except ImportError:
        cp = None
    # The test that runs this promises CuPy: its absence is a failure, not a pass.
    check("CuPy is installed", cp is not None, "import cupy failed")
    xc = cp.random.uniform(-4, 4, n, dtype=cp.float32)
    yc = cp.full(n, cp.nan, dtype=cp.float32)
    cstream = cp.cuda.Stream(non_blocking=True)
    scale((n + 255) // 256, (256,), xc, yc, n, stream=cstream)
    cstream.synchronize()
    check("CuPy arrays (__cuda_array_interface__) on a CuPy stream",
          bool(cp.all(yc == xc * 2 + 1)))

    smem = mod.load("smem")
    per_block, blocks = 16 * 1024, 8
    xs = torch.arange(per_block * blocks, device="cuda", dtype=torch.float32)
    ys = torch.full_like(xs, float("nan"))
    try:
        smem(blocks, 256, xs, ys, 1.5, shared_mem=per_block * 4)
        check("a float for the declared i32 is refused", False)
    except TypeError as e:
        check(f"a float for the declared i32 is refused ({e})", True)
    smem(blocks, 256, xs, ys, per_block * blocks, shared_mem=per_block * 4)
    torch.cuda.synchronize()
    want = xs.view(blocks, per_block).flip(1).reshape(-1)
    check("64 KiB of dynamic shared memory (limit raised by the loader)", torch.equal(ys, want))

    try:
        mod.load("old")(1, 1, y)
        check("an sm_80-only kernel on this GPU is refused", False)
    except mod.NoCubinForThisGPU as e:
        check(f"an sm_80-only kernel on this GPU is refused: {e}", "sm_80" in str(e))

    loaded = mod.preload()
    check(f"preload loads every entry that fits this GPU ({loaded}: scale, fill, big_smem, affine)", loaded == 4)
    print("all GPU checks passed")


if __name__ == "__main__":
    main(sys.argv[1])
