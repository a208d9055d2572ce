"""The floor of a launch through ctypes: the parts of an exported launcher's call timed
apart on a GPU machine (CPU µs per call, median of 5 rounds of 20,000):

    kart export --python -o bk.py smoke
    python3 bench/python_launch_floor.py bk.py

Rows: the launcher's whole call; cuLaunchKernel alone through ctypes (with the argtypes
the loader declares); cuLaunchKernel with pre-converted arguments and no argtypes (the
least ctypes can do); and the other steps of a launch (context query, PyTorch's raw
stream, argument checks, packing). If cuLaunchKernel alone costs what CuPy's whole
launch does, no ctypes launcher can be faster than CuPy.
"""
import ctypes
import importlib.util
import struct
import sys

import torch
from python_launch import per_call_us  # this folder's launch benchmark


def main(module_path):
    spec = importlib.util.spec_from_file_location("bk", module_path)
    bk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bk)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    n = 4096
    x = torch.rand(n, device="cuda")
    y = torch.empty_like(x)
    axpb = bk.load("smoke")
    axpb(16, 256, x, y, 2.0, 1.0, n)
    torch.cuda.synchronize()
    lib = bk._driver
    bound = next(iter(axpb._bound.values()))
    stream = torch.cuda.current_stream().cuda_stream
    function, params = bound.function, axpb._params
    raw = ctypes.CDLL("libcuda.so.1").cuLaunchKernel
    raw.restype = ctypes.c_int
    converted = (ctypes.c_void_p(function), ctypes.c_uint(16), ctypes.c_uint(1), ctypes.c_uint(1),
                 ctypes.c_uint(256), ctypes.c_uint(1), ctypes.c_uint(1), ctypes.c_uint(0),
                 ctypes.c_void_p(stream), params, None)
    ctx = ctypes.c_void_p()
    values = axpb._values((x, y, 2.0, 1.0, n), bound)
    rows = [
        ("the launcher's whole call", lambda: axpb(16, 256, x, y, 2.0, 1.0, n)),
        ("cuLaunchKernel alone, with argtypes",
         lambda: lib.cuLaunchKernel(function, 16, 1, 1, 256, 1, 1, 0, stream, params, None)),
        ("cuLaunchKernel alone, pre-converted, no argtypes", lambda: raw(*converted)),
        ("cuCtxGetCurrent", lambda: lib.cuCtxGetCurrent(ctypes.byref(ctx))),
        ("torch._C._cuda_getCurrentRawStream", lambda: torch._C._cuda_getCurrentRawStream(0)),
        ("argument checks (_values)", lambda: axpb._values((x, y, 2.0, 1.0, n), bound)),
        ("struct.pack_into", lambda: struct.pack_into(axpb._format, axpb._slots, 0, *values)),
        ("an empty lambda", lambda: None),
    ]
    for what, fn in rows:
        print(f"  {per_call_us(fn, 20000):6.2f} µs  {what}")


if __name__ == "__main__":
    main(sys.argv[1])
