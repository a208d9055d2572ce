"""Which kernels PyTorch's SDPA backends launch for a problem, and their launch shapes:

    python3 kernels/flash_attn_hopper2/sdpa_kernels.py B H S D CAUSAL [B H S D CAUSAL ...]

For each problem (fp16 [B, H, S, D]), cuDNN's and FLASH's forward run under the
profiler after a warm-up, and every GPU kernel of one call is printed with its grid,
block, registers per thread, shared memory and time, as the profiler's trace reports
them. What the vendor's kernel does per block (rows of Q per block, blocks per SM) is
what to compare a tile shape with.
"""
import json
import os
import sys
import tempfile

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa
from torch.profiler import ProfilerActivity, profile


def kernels_of(fn):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    return [e for e in events if e.get("cat") == "kernel"]


def main(argv):
    if not argv or len(argv) % 5:
        sys.exit(__doc__)
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    for i in range(0, len(argv), 5):
        b, h, s, d, causal = (int(x) for x in argv[i : i + 5])
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
        print(f"\n{b}x{h}x{s}x{d} causal={causal}")
        for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
            def call():
                with sdpa_kernel(backend):
                    sdpa(q, k, v, is_causal=bool(causal))
            try:
                found = kernels_of(call)
            except RuntimeError as e:
                print(f"  {backend.name}: {e}")
                continue
            for e in found:
                a = e.get("args", {})
                print(
                    f"  {backend.name:16s} {e['dur']:8.1f} us grid {a.get('grid')} block {a.get('block')}"
                    f" regs {a.get('registers per thread')} smem {a.get('shared memory')}"
                    f" blocks/SM {a.get('blocks per SM')} {e['name'][:150]}"
                )


if __name__ == "__main__":
    main(sys.argv[1:])
