"""The floor of a launch from Python: the parts of an exported launcher's call timed
apart, and the ways a launch can reach the driver, on a GPU machine (CPU µs per call,
median of 7 interleaved rounds of 20,000 calls, the GPU kept busy asynchronously):

    kart export --python -o bk.py smoke
    python3 bench/python_launch_floor.py bk.py

Rows: the launcher's whole call; CuPy's RawModule launch of the same cubin (the bar);
cuLaunchKernel through ctypes with the argtypes the loader declares, and with arguments
converted beforehand (the least an 11-argument ctypes call can do); cuLaunchKernelEx
through ctypes with a launch configuration built beforehand (4 arguments); the driver's
Cython bindings (cuda.bindings, where installed) with handles built beforehand; and the
other steps of a launch (context query, PyTorch's device and raw stream, argument
checks and packing). Rounds interleave the rows, so drift of the machine hits all alike.
"""
import ctypes
import importlib.util
import os
import statistics
import struct
import sys
import tempfile
import time

import torch


def timed_rounds(rows, n, rounds=7):
    samples = {what: [] for what, _ in rows}
    for _ in range(rounds):
        for what, fn in rows:
            torch.cuda.synchronize()
            t0 = time.process_time()
            for _ in range(n):
                fn()
            samples[what].append((time.process_time() - t0) / n * 1e6)
            torch.cuda.synchronize()
    return {what: statistics.median(s) for what, s in samples.items()}


def main(module_path, n=20000):
    n = int(n)
    spec = importlib.util.spec_from_file_location("bk", module_path)
    bk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bk)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {n} calls x 7 interleaved rounds")
    size = 4096
    x = torch.rand(size, device="cuda")
    y = torch.empty_like(x)
    axpb = bk.load("smoke")
    grid, block = (size + 255) // 256, 256
    axpb(grid, block, x, y, 2.0, 1.0, size)
    torch.cuda.synchronize()
    lib = bk._driver
    bound = next(iter(axpb._bound.values()))
    stream = torch.cuda.current_stream().cuda_stream
    function, params = bound.function, axpb._params
    raw = ctypes.CDLL("libcuda.so.1").cuLaunchKernel
    raw.restype = ctypes.c_int
    u = ctypes.c_uint
    converted = (ctypes.c_void_p(function), u(grid), u(1), u(1), u(block), u(1), u(1), u(0),
                 ctypes.c_void_p(stream or None), params, None)
    raw_ex = ctypes.CDLL("libcuda.so.1").cuLaunchKernelEx
    raw_ex.restype = ctypes.c_int
    config = bk._LaunchConfig((u * 3)(grid, 1, 1), (u * 3)(block, 1, 1), 0, stream or None, None, 0)
    config_ref, function_ref = ctypes.byref(config), ctypes.c_void_p(function)
    held = ctypes.PyDLL("libcuda.so.1").cuLaunchKernelEx  # calls that keep the GIL
    held.restype = ctypes.c_int
    ctx = ctypes.c_void_p()
    ctx_ref = ctypes.byref(ctx)
    get_current = ctypes.CDLL("libcuda.so.1").cuCtxGetCurrent
    get_current.restype = ctypes.c_int
    args = (x, y, 2.0, 1.0, size)
    xp, yp = x.data_ptr(), y.data_ptr()  # the rows that pack write real pointers: later rows launch them
    artifact = bound.artifact
    rows = [
        ("the launcher's whole call", lambda: axpb(grid, block, x, y, 2.0, 1.0, size)),
        ("cuLaunchKernel alone, with argtypes",
         lambda: lib.cuLaunchKernel(function, grid, 1, 1, block, 1, 1, 0, stream, params, None)),
        ("cuLaunchKernel alone, pre-converted, no argtypes", lambda: raw(*converted)),
        ("cuLaunchKernelEx alone, pre-built config, no argtypes",
         lambda: raw_ex(config_ref, function_ref, params, None)),
        ("cuLaunchKernelEx alone, pre-built config, through PyDLL (the GIL kept)",
         lambda: held(config_ref, function_ref, params, None)),
        ("cuCtxGetCurrent (argtypes, byref per call)", lambda: lib.cuCtxGetCurrent(ctypes.byref(ctx))),
        ("cuCtxGetCurrent (no argtypes, pointer built once)", lambda: get_current(ctx_ref)),
        ("torch._C._cuda_getDevice", lambda: torch._C._cuda_getDevice()),
        ("torch._C._cuda_getCurrentRawStream", lambda: torch._C._cuda_getCurrentRawStream(0)),
        ("argument checks and packing (the written-out packer)", lambda: axpb._pack_slots(args, 0)),
        ("struct.pack_into alone", lambda: struct.pack_into(axpb._format, axpb._slots, 0, xp, yp, 2.0, 1.0, size)),
        ("a lock taken and released", lambda: (axpb._mutex.acquire(), axpb._mutex.release())),
        ("an empty lambda", lambda: None),
    ]
    try:
        from cuda.bindings import driver

        cu_function = driver.CUfunction(function)
        cu_stream = driver.CUstream(stream)
        address = ctypes.addressof(params)
        rows.append(("cuda.bindings cuLaunchKernel, handles built once",
                     lambda: driver.cuLaunchKernel(cu_function, grid, 1, 1, block, 1, 1, 0, cu_stream, address, 0)))
    except ImportError as e:
        print(f"(no cuda.bindings: {e})")
    try:
        import cupy as cp

        with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
            f.write(bk._cubin(artifact))
        entry = artifact["entries"][0]
        symbol = entry.get("symbol", entry["name"])
        kernel = cp.RawModule(path=f.name).get_function(symbol)
        os.unlink(f.name)
        cx, cy = cp.asarray(x), cp.asarray(y)
        alpha, beta, count = cp.float32(2.0), cp.float32(1.0), cp.int32(size)
        kernel((grid,), (block,), (cx, cy, alpha, beta, count))
        rows.append(("CuPy RawModule launch, same cubin",
                     lambda: kernel((grid,), (block,), (cx, cy, alpha, beta, count))))
    except ImportError as e:
        print(f"(no CuPy: {e})")
    for what, us in timed_rounds(rows, n).items():
        print(f"  {us:6.2f} µs  {what}")


if __name__ == "__main__":
    main(*sys.argv[1:])
