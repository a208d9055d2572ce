"""Time to first result from Python, each way of getting a small CUDA kernel running,
each measured in a fresh process with cold caches (run on a GPU machine):

  load_inline  torch.utils.cpp_extension.load_inline (nvcc + host compiler + link at
               import; build folder new and empty)
  triton       a @triton.jit kernel of the same kind, first call (TRITON_CACHE_DIR
               new and empty)
  triton-warm  the same, second process, cache kept (what a warm CI cache buys)
  kart+cupy    `kart path` (verify + write the cubin) then CuPy RawModule(path=...) and
               the first launch: no compiler anywhere
  kart export  a module written by `kart export --python` (made before the runs):
               import it, load and launch on torch tensors: no compiler, no kart

Each child prints seconds for `import` and for `first` (from the start of the build or
load to a synchronized, checked result). Prints figures; asserts nothing.

    python3 bench/python_jit.py --kart target/release/kart [--repeat 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

AXPB_CHECK = """
import torch
n = 1_000_003
x = torch.empty(n, device="cuda").uniform_(-4, 4)
y = torch.full((n,), float("nan"), device="cuda")
"""

LOAD_INLINE = """
import time, json
t0 = time.perf_counter()
import torch
from torch.utils.cpp_extension import load_inline
torch.cuda.init()
t1 = time.perf_counter()
cuda_src = r'''
__global__ void axpb_kernel(const float* x, float* y, float a, float b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + b;
}
void axpb(torch::Tensor x, torch::Tensor y, double a, double b) {
    int n = x.numel();
    axpb_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), a, b, n);
}
'''
cpp_src = "void axpb(torch::Tensor x, torch::Tensor y, double a, double b);"
mod = load_inline("kart_bench_axpb", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["axpb"], build_directory=BUILD_DIR, verbose=False)
""" + AXPB_CHECK + """
mod.axpb(x, y, 1.5, -0.25)
torch.cuda.synchronize()
t2 = time.perf_counter()
err = float((y - (1.5 * x - 0.25)).abs().max())
print(json.dumps({"import": t1 - t0, "first": t2 - t1, "err": err}))
"""

TRITON = """
import time, json
t0 = time.perf_counter()
import torch, triton, triton.language as tl
torch.cuda.init()
t1 = time.perf_counter()

@triton.jit
def axpb_kernel(x_ptr, y_ptr, a, b, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(y_ptr + i, a * tl.load(x_ptr + i, mask=m) + b, mask=m)
""" + AXPB_CHECK + """
axpb_kernel[(triton.cdiv(n, 1024),)](x, y, 1.5, -0.25, n, BLOCK=1024)
torch.cuda.synchronize()
t2 = time.perf_counter()
err = float((y - (1.5 * x - 0.25)).abs().max())
print(json.dumps({"import": t1 - t0, "first": t2 - t1, "err": err}))
"""

KART_CUPY = """
import time, json, subprocess
t0 = time.perf_counter()
import numpy as np
import cupy as cp
cp.cuda.runtime.getDeviceCount(); cp.cuda.Device(0).use()
t1 = time.perf_counter()
path = subprocess.run([KART, "-q", "path", "smoke"], check=True, capture_output=True,
                      text=True).stdout.strip()
axpb = cp.RawModule(path=path).get_function("kart_smoke_axpb")
n = 1_000_003
# Data made on the host and copied: CuPy's own elementwise kernels would be compiled
# with NVRTC on first use, which is not what this row measures.
x_host = np.random.default_rng().uniform(-4, 4, n).astype(np.float32)
x = cp.asarray(x_host)
y = cp.asarray(np.full(n, np.nan, dtype=np.float32))
axpb(((n + 255) // 256,), (256,), (x, y, np.float32(1.5), np.float32(-0.25), np.int32(n)))
y_host = y.get()
t2 = time.perf_counter()
err = float(np.max(np.abs(y_host - (np.float32(1.5) * x_host - np.float32(0.25)))))
print(json.dumps({"import": t1 - t0, "first": t2 - t1, "err": err}))
"""


KART_EXPORT = """
import time, json, importlib.util
t0 = time.perf_counter()
import torch
torch.cuda.init()
t1 = time.perf_counter()
spec = importlib.util.spec_from_file_location("smoke_kernels", MODULE)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
t_import = time.perf_counter() - t1
""" + AXPB_CHECK + """
mod.load("smoke")((n + 255) // 256, 256, x, y, 1.5, -0.25, n)
torch.cuda.synchronize()
t2 = time.perf_counter()
err = float((y - (1.5 * x - 0.25)).abs().max())
print(json.dumps({"import": t1 - t0, "first": t2 - t1, "module_import": t_import, "err": err}))
"""


def child(code: str, env: dict, timeout: float) -> dict:
    # A script file, not `-c`: Triton reads a kernel's source from its file.
    with tempfile.TemporaryDirectory() as scratch:
        script = os.path.join(scratch, "child.py")
        with open(script, "w") as f:
            f.write(code)
        t = time.perf_counter()
        try:
            out = subprocess.run([sys.executable, script], env=env, capture_output=True,
                                 text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout:.0f} s"}
        wall = time.perf_counter() - t
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        tail = (out.stderr or out.stdout).strip().splitlines()[-3:]
        return {"error": f"exit {out.returncode}: " + " | ".join(tail)}
    result = json.loads(lines[-1])
    result["process"] = wall
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kart", required=True, help="the kart binary")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args()
    kart = os.path.abspath(args.kart)
    module_dir = tempfile.mkdtemp()
    module = os.path.join(module_dir, "smoke_kernels.py")
    subprocess.run([kart, "-q", "export", "--python", "-o", module, "smoke"], check=True)
    rows = {}
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as build, tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, TORCH_EXTENSIONS_DIR=build)
            runs = [
                ("load_inline", LOAD_INLINE.replace("BUILD_DIR", repr(build)), env),
                ("triton", TRITON, dict(os.environ, TRITON_CACHE_DIR=cache)),
                ("triton-warm", TRITON, dict(os.environ, TRITON_CACHE_DIR=cache)),
                ("kart+cupy", KART_CUPY.replace("KART", repr(kart)), dict(os.environ)),
                ("kart export", KART_EXPORT.replace("MODULE", repr(module)), dict(os.environ)),
            ]
            for name, code, child_env in runs:
                result = child(code, child_env, args.timeout)
                print(name, json.dumps(result), flush=True)
                rows.setdefault(name, []).append(result)
    print()
    print(f"{'way':12} {'runs':>4} {'import s':>9} {'first result s':>15} {'process s':>10}"
          f" {'max err':>9}  vs kart export")
    base = None
    ok = [r for r in rows.get("kart export", []) if "error" not in r]
    if ok:
        base = statistics.median(r["first"] for r in ok)
    for name, results in rows.items():
        good = [r for r in results if "error" not in r]
        if not good:
            print(f"{name:12} {0:>4}  failed: {results[0]['error']}")
            continue
        first = statistics.median(r["first"] for r in good)
        ratio = f"{first / base:8.0f}x" if base else "n/a"
        print(f"{name:12} {len(good):>4} {statistics.median(r['import'] for r in good):9.3f}"
              f" {first:15.4f} {statistics.median(r['process'] for r in good):10.2f}"
              f" {max(r['err'] for r in good):9.1e}  {ratio}")
    exported = [r for r in rows.get("kart export", []) if "error" not in r]
    if exported:
        ms = statistics.median(r["module_import"] for r in exported) * 1e3
        print(f"\nimporting the exported module itself: {ms:.1f} ms (median)")


if __name__ == "__main__":
    main()
