"""Per-block timelines of the experimental kernel (TIMES = 1: globaltimer stamps of
consumer 0 written after O) on a few rows, against its TIMES = 0 twin and cuDNN:

    python3 times.py fa.py [--launches 5]

Per launch: each block's start (from the first block's), and per work item the wait
for Q, the item's math and O store; then per pass of the grid the spread of items'
durations, the blocks' ends, and the slowest blocks with their SM. Prints figures.
"""
import argparse
import importlib.util
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# kernels/flash_attn's L2-flushed timing, found from this file's copy in a kernel folder
# (kernels/flash_attn_hopper3/) or from experiments/ itself.
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(_here, "..", "flash_attn"), os.path.join(_here, "..", "..", "flash_attn")]
from bench_vs_sdpa import l2_flushed_runs  # noqa: E402

ROWS = [(8, 16, 512, 128, 0), (32, 32, 512, 128, 1), (32, 32, 512, 128, 0), (8, 16, 2048, 128, 0)]
WORDS = 64


def load(path):
    spec = importlib.util.spec_from_file_location("fa", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def q(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("module")
    ap.add_argument("--launches", type=int, default=5)
    args = ap.parse_args()
    mod = load(args.module)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(torch.cuda.get_device_name(), flush=True)
    for b, h, s, d, causal in ROWS:
        n = b * h * s * d
        qq, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
        big = torch.zeros(n + sms * WORDS * 4, device="cuda", dtype=torch.float16)
        o = big[:n].view(b, h, s, d)
        problem = dict(B=b, H=h, S=s, D=d, causal=causal)
        base = dict(HEAD_DIM=d, CAUSAL=causal, BLOCK_N=128, CONSUMERS=2, STAGES=3, PIPELINE=1, PINGPONG=1,
                    WIDE=1, TREE=causal, LAZY=2, SCHED=0)
        timed = mod.load("flash_attn_hopper3", **base, TIMES=1)
        plain = mod.load("flash_attn_hopper3", **base, TIMES=0)
        with sdpa_kernel(SDPBackend.MATH):
            ref = F.scaled_dot_product_attention(qq.float(), k.float(), v.float(), is_causal=bool(causal))

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                F.scaled_dot_product_attention(qq, k, v, is_causal=bool(causal))
        runs = {"TIMES=0": lambda: plain.launch(qq, k, v, o, s, problem=problem),
                "TIMES=1": lambda: timed.launch(qq, k, v, o, s, problem=problem), "cuDNN": cudnn}
        us = {name: [] for name in runs}
        for _ in range(8):
            for name, fn in runs.items():
                us[name].extend(l2_flushed_runs(fn, 1, flush))
        err = float((o.float() - ref).norm() / ref.norm())
        print(f"== {b}x{h}x{s}x{d} causal {causal}: rel err {err:.1e}; median us "
              + ", ".join(f"{name} {statistics.median(t):.1f}" for name, t in us.items()), flush=True)
        blocks = min(sms, (s // 128) * b * h)
        slow_sms = {}
        for launch in range(args.launches):
            big[n:].zero_()
            flush.zero_()
            torch.cuda.synchronize()
            runs["TIMES=1"]()
            torch.cuda.synchronize()
            st = big[n:].view(torch.int64).view(sms, WORDS)[:blocks].cpu().tolist()
            t0 = min(r[1] for r in st)
            starts = [(r[1] - t0) / 1e3 for r in st]
            items = []  # (pass, block, q wait, math, store, end)
            ends = []
            for blk, r in enumerate(st):
                last = 0
                for i in range(20):
                    a, qr, e = r[3 + 3 * i], r[4 + 3 * i], r[5 + 3 * i]
                    if a == 0:
                        break
                    items.append((i, blk, (qr - a) / 1e3, (e - qr) / 1e3, (e - t0) / 1e3))
                    last = (e - t0) / 1e3
                ends.append((last, blk, r[0], sum(1 for it in items if it[1] == blk)))
            ends.sort(reverse=True)
            print(f"  launch {launch}: block starts +{q(starts, 0):.2f}..{q(starts, 0.5):.2f}..{max(starts):.2f} us; "
                  f"ends {ends[-1][0]:.2f}..{q([e[0] for e in ends], 0.5):.2f}..{ends[0][0]:.2f} us")
            for p in range(max(it[0] for it in items) + 1):
                of = [it for it in items if it[0] == p]
                math = [it[3] for it in of]
                wait = [it[2] for it in of]
                print(f"    pass {p}: {len(of)} items; Q wait {q(wait, 0):.2f}/{q(wait, 0.5):.2f}/{max(wait):.2f}"
                      f" us; item {q(math, 0):.2f}/{q(math, 0.5):.2f}/{max(math):.2f} us (min/median/max)")
            full = [e for e in ends if e[3] == max(x[3] for x in ends)]
            print("    slowest blocks (end us, block, SM, per-item us): " + "; ".join(
                f"{e[0]:.2f} b{e[1]} sm{e[2]} [" + " ".join(f"{it[3]:.2f}" for it in items if it[1] == e[1]) + "]"
                for e in full[:6]))
            print("    fastest full blocks: " + "; ".join(
                f"{e[0]:.2f} b{e[1]} sm{e[2]} [" + " ".join(f"{it[3]:.2f}" for it in items if it[1] == e[1]) + "]"
                for e in full[-3:]))
            for e in full[:10]:
                slow_sms[e[2]] = slow_sms.get(e[2], 0) + 1
        print("  SMs among the 10 slowest full blocks, over launches: "
              + ", ".join(f"sm{k}x{v}" for k, v in sorted(slow_sms.items(), key=lambda kv: -kv[1])[:12]), flush=True)


if __name__ == "__main__":
    main()
