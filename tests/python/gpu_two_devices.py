"""An exported launcher on a machine with two GPUs:

    kart export --python -o bk.py smoke
    python3 tests/python/gpu_two_devices.py bk.py

Tensors (and CuPy arrays) on cuda:1 launched while cuda:0 is current are refused with
WrongDevice before anything reaches the driver (launching them would run the kernel on
GPU 0 with GPU 1's pointers: an illegal memory access that poisons the context); launches
on each device, with its own tensors current, work in one process. Exits 1 on the first
failure; prints a skip line with fewer than two GPUs.
"""
import importlib.util
import sys


def main(module_path):
    def check(what, ok, detail=""):
        print(("ok   " if ok else "FAIL ") + what + (f": {detail}" if detail and not ok else ""))
        if not ok:
            sys.exit(1)

    import torch

    if torch.cuda.device_count() < 2:
        print("skipped: fewer than two GPUs")
        return
    spec = importlib.util.spec_from_file_location("bk", module_path)
    bk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bk)
    axpb = bk.load("smoke")
    n = 1 << 16
    grid = (n + 255) // 256
    x1 = torch.rand(n, device="cuda:1")
    y1 = torch.full_like(x1, float("nan"))
    torch.cuda.set_device(0)
    for round in ("first call", "after a launch on cuda:0"):
        try:
            axpb(grid, 256, x1, y1, 2.0, 1.0, n)
            torch.cuda.synchronize(1)
            check(f"{round}: tensors on cuda:1 with cuda:0 current are refused", False)
        except bk.WrongDevice as e:
            check(f"{round}: tensors on cuda:1 with cuda:0 current are refused: {e}", "cuda:1" in str(e))
        x0 = torch.rand(n, device="cuda:0")
        y0 = torch.empty_like(x0)
        axpb(grid, 256, x0, y0, 2.0, 1.0, n)
        torch.cuda.synchronize(0)
        check(f"{round}: a launch on cuda:0 with its own tensors", torch.allclose(y0, 2 * x0 + 1, atol=1e-6))
    try:
        import cupy as cp

        with cp.cuda.Device(1):
            xc = cp.random.rand(n, dtype=cp.float32)
            yc = cp.empty_like(xc)
        try:
            axpb(grid, 256, xc, yc, 2.0, 1.0, n)
            check("a CuPy array on cuda:1 with cuda:0 current is refused", False)
        except bk.WrongDevice as e:
            check(f"a CuPy array on cuda:1 with cuda:0 current is refused: {e}", True)
    except ImportError:
        print("skip CuPy: not installed")
    with torch.cuda.device(1):
        axpb(grid, 256, x1, y1, 2.0, 1.0, n)
        torch.cuda.synchronize(1)
    check("a launch on cuda:1 with cuda:1 current, in the same process", torch.allclose(y1, 2 * x1 + 1, atol=1e-6))
    axpb(grid, 256, x0, y0, -1.0, 0.5, n)
    torch.cuda.synchronize(0)
    check("and cuda:0 again afterwards", torch.allclose(y0, -x0 + 0.5, atol=1e-6))
    print("all two-device checks passed")


if __name__ == "__main__":
    main(sys.argv[1])
