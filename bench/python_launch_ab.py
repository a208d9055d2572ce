"""Two exported modules' launchers of the smoke kernel timed in one process, rounds
interleaved (CPU µs per call, 20,000 calls a round, 7 rounds each): an A/B of two loader
versions that machine-to-machine and process-to-process noise cannot blur.

    python3 bench/python_launch_ab.py A.py B.py
"""
import importlib.util
import statistics
import sys
import time

import torch


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(*paths):
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    n = 4096
    x = torch.rand(n, device="cuda")
    y = torch.empty_like(x)
    launchers = {path: load(path, f"m{i}").load("smoke") for i, path in enumerate(paths)}
    for launcher in launchers.values():
        launcher(16, 256, x, y, 2.0, 1.0, n)
    torch.cuda.synchronize()
    samples = {path: [] for path in paths}
    for _ in range(7):
        for path, launcher in launchers.items():
            torch.cuda.synchronize()
            t0 = time.process_time()
            for _ in range(20000):
                launcher(16, 256, x, y, 2.0, 1.0, n)
            samples[path].append((time.process_time() - t0) / 20000 * 1e6)
            torch.cuda.synchronize()
    for path, values in samples.items():
        print(f"  {statistics.median(values):6.2f} µs median  {path}  rounds: "
              + " ".join(f"{v:.2f}" for v in values))


if __name__ == "__main__":
    main(*sys.argv[1:])
