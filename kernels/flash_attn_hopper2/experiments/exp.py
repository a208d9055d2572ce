"""The third Hopper FlashAttention kernel's params against the second kernel's fastest
config and cuDNN, on the head-dim-128 rows where cuDNN was ahead or close:

    kart export --python -o fa.py flash_attn --all-configs --target sm_90 --target sm_90a
    python3 kernels/flash_attn_hopper3/exp.py fa.py [--rounds 5] [--runs 10]

Per row, every config of flash_attn_hopper3 with the row's causality, the second
kernel's config that won the row before (CONSUMERS 2, PINGPONG 1, WIDE 1, LAZY 2, SCHED
0 or 2) and SDPA with cuDNN forced, each timed in `--rounds` interleaved rounds of
`--runs` L2-flushed runs; the median over all runs. Each config's output is checked
against SDPA's math backend first (relative L2 error above 2e-3: WRONG, not timed).
With --ncu ROW, launches that row's cuDNN, hopper2 and best hopper3 config once each
(for ncu) and exits. Prints figures; asserts nothing.
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

ROWS = [(8, 16, 512, 128, 0), (32, 32, 512, 128, 1), (32, 32, 512, 128, 0), (8, 16, 512, 128, 1),
        (8, 16, 2048, 128, 0), (8, 16, 2048, 128, 1), (2, 16, 4096, 128, 1), (1, 8, 2048, 128, 0)]


def load(path):
    spec = importlib.util.spec_from_file_location("fa", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("module")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--ncu", default="", help="B,H,S,D,causal: one launch of each contender, for ncu")
    ap.add_argument("--ncu-config", default="", help="the hopper3 config for --ncu, as named in the output: SCHED=0,STAGES=3,QBUF=1,QREG=1")
    args = ap.parse_args()
    mod = load(args.module)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; TFLOP/s, median of "
          f"{args.rounds} x {args.runs} L2-flushed runs, interleaved", flush=True)
    available = mod.kernels()
    rows = ROWS
    if args.ncu:
        rows = [tuple(int(x) for x in args.ncu.split(","))]
    for b, h, s, d, causal in rows:
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
        o = torch.full_like(q, float("nan"))
        problem = dict(B=b, H=h, S=s, D=d, causal=causal)
        flops = 4 * b * h * s * s * d / (2 if causal else 1)
        with sdpa_kernel(SDPBackend.MATH):
            ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=bool(causal))
        contenders = {}
        for sched in ((0, 2) if causal else (0,)):
            h2 = dict(HEAD_DIM=d, CAUSAL=causal, BLOCK_N=128, CONSUMERS=2, STAGES=3, PIPELINE=1, PINGPONG=1,
                      WIDE=1, TREE=causal, LAZY=2, SCHED=sched, QREG=0)
            contenders[f"hopper2 SCHED={sched}"] = mod.load("flash_attn_hopper2", **h2)
        for config in available.get("flash_attn_hopper3", []):
            if config["HEAD_DIM"] != d or config["CAUSAL"] != causal:
                continue
            # Named by SCHED and the params the second kernel's config does not set or sets
            # otherwise.
            params = ["SCHED"] + [p for p in config if p != "SCHED" and config[p] != h2.get(p)]
            name = "h3 " + ",".join(f"{p}={config[p]}" for p in params)
            contenders[name] = mod.load("flash_attn_hopper3", **config)
        runs = {}
        if args.ncu:
            # The first hopper3 config whose name has every NAME=VALUE of --ncu-config.
            want = set(args.ncu_config.split(","))
            pick = next(n for n in contenders if n.startswith("h3 ") and want <= set(n[3:].split(",")))
            contenders = {n: contenders[n] for n in ("hopper2 SCHED=0", pick)}
        for name, launcher in contenders.items():
            o.fill_(float("nan"))
            launcher.launch(q, k, v, o, s, problem=problem)
            torch.cuda.synchronize()
            err = float((o.float() - ref).norm() / ref.norm())
            if not err < 2e-3:
                print(f"  {name}: WRONG, relative error {err:.2e}", flush=True)
                continue
            runs[name] = lambda launcher=launcher: launcher.launch(q, k, v, o, s, problem=problem)

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
        runs["cuDNN"] = cudnn
        if args.ncu:
            for name in ("cuDNN", "hopper2 SCHED=0", pick):
                for _ in range(3):
                    runs[name]()
                torch.cuda.synchronize()
            return
        times = {name: [] for name in runs}
        for fn in runs.values():
            fn()
        for _ in range(args.rounds):
            for name, fn in runs.items():
                # The first run of each turn untimed: the others' runs came before it.
                times[name].extend(l2_flushed_runs(fn, args.runs + 1, flush)[1:])
        tf = {name: flops / (statistics.median(t) * 1e-6) / 1e12 for name, t in times.items()}
        print(f"{b}x{h}x{s}x{d} causal {causal}: cuDNN {tf['cuDNN']:.1f} TFLOP/s", flush=True)
        for name, value in sorted(tf.items(), key=lambda kv: -kv[1]):
            print(f"  {value:7.1f}  {value / tf['cuDNN']:6.3f}  {name}", flush=True)


if __name__ == "__main__":
    main()
