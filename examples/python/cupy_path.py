"""Load a kart artifact from Python with CuPy: `kart path` writes the verified cubin
and prints its path; CuPy loads it with no compiler involved.

    python3 examples/python/cupy_path.py "$(kart path smoke)"
"""
import sys

import cupy as cp


def main(path: str) -> None:
    module = cp.RawModule(path=path)
    axpb = module.get_function("kart_smoke_axpb")
    n = 1_000_003
    x = cp.random.uniform(-4, 4, n, dtype=cp.float32)
    y = cp.full(n, cp.nan, dtype=cp.float32)
    a, b = cp.float32(1.5), cp.float32(-0.25)
    axpb(((n + 255) // 256,), (256,), (x, y, a, b, cp.int32(n)))
    err = float(cp.max(cp.abs(y - (a * x + b))))
    print(f"cupy RawModule(path=...): {n} elements, max abs error {err:.2e}")
    if not err < 1e-5:
        sys.exit("wrong result")


if __name__ == "__main__":
    main(sys.argv[1])
