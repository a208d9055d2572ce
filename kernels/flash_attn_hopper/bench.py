"""The FlashAttention kernels from one exported module, on a GPU machine: the Hopper
kernel (kernels/flash_attn_hopper: wgmma + TMA, sm_90a) and the mma.sync kernel
(kernels/flash_attn) it is a variant of, both called the same way (q, k, v, o, S and
the problem; kart makes the Hopper kernel's tensor maps):

    kart export --python -o fa.py flash_attn --all-configs --target sm_90 --target sm_90a
    python3 kernels/flash_attn_hopper/bench.py check fa.py
    python3 kernels/flash_attn_hopper/bench.py bench fa.py [--runs 30] [--by TREE,CARRY]
    python3 kernels/flash_attn_hopper/bench.py run fa.py --config BLOCK_N=128,CONSUMERS=2,STAGES=3,PIPELINE=1 \
        --problem 32,32,512,128,1 --runs 3    # one Hopper config, for a profiler
    python3 kernels/flash_attn_hopper/bench.py run fa.py --backend CUDNN_ATTENTION --problem 32,32,512,128,1 --runs 3

`check`: every config of both kernels on seq in {1, 17, 128, 500, 512, 2048} (batch x
heads = 3), its head dim and causality, output poisoned with NaN first, against
float64 attention; relative L2 error below 2e-3 (the limit of kernels/flash_attn/program.rs).
`bench`: per row (B x H in {32x32, 8x16, 1x8}, D in {64, 128}, causal or not, S = 512,
and S = 2048 rows) every config of both kernels with that D and causality is timed
(median of --runs) and each kernel's fastest kept, beside `best("flash_attn")`'s pick
from the embedded tuning records (which kernel and config, its time), and PyTorch
SDPA with each backend forced (FLASH, cuDNN, EFFICIENT); with --by, under each row the
Hopper kernel's fastest config for each combination of those parameters' values (to
compare versions of the kernel built side by side); in one process: each run alone
between CUDA events after the L2 is flushed (a 256 MiB buffer zeroed), medians; TFLOP/s
counted as 4*B*H*S^2*D (halved when causal). Prints figures; asserts nothing but
correctness in `check`.
"""
import argparse
import importlib.util
import math
import os
import sys

import torch
import torch.nn.functional as F
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "flash_attn"))
from bench_vs_sdpa import l2_flushed_timer, sdpa_us  # noqa: E402  (kernels/flash_attn's SDPA timer)
from torch.nn.attention import SDPBackend, sdpa_kernel


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reference(q, k, v, causal):
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = q.shape[-2]
        mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


KERNELS = ("flash_attn_hopper", "flash_attn")


def configs(mod, kernel, d, causal):
    return [c for c in mod.kernels().get(kernel, []) if c["HEAD_DIM"] == d and c["CAUSAL"] == causal]


def label(config):
    return ",".join(f"{k}={v}" for k, v in config.items() if k not in ("HEAD_DIM", "CAUSAL"))


def launch(launcher, q, k, v, o, causal):
    b, h, s, d = q.shape
    launcher.launch(q, k, v, o, s, problem=dict(B=b, H=h, S=s, D=d, causal=causal))


def check(mod):
    print(f"{torch.cuda.get_device_name()}: every config against float64, batch x heads = 3, "
          "relative L2 error limit 2e-3")
    failed = total = 0
    for kernel in KERNELS:
        for config in sorted(mod.kernels().get(kernel, []), key=lambda c: sorted(c.items())):
            launcher = mod.load(kernel, **config)
            d, causal, worst, why = config["HEAD_DIM"], config["CAUSAL"], 0.0, None
            total += 1
            for s in (1, 17, 128, 500, 512, 2048):
                q, k, v = (torch.randn(1, 3, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
                o = torch.full_like(q, float("nan"))
                launch(launcher, q, k, v, o, causal)
                torch.cuda.synchronize()
                ref = reference(q, k, v, causal)
                if not torch.isfinite(o).all():
                    why = f"S={s}: {int((~torch.isfinite(o)).sum())} elements never written or NaN"
                    break
                rel = float((o.double() - ref).norm() / ref.norm())
                worst = max(worst, rel)
                if rel >= 2e-3:
                    why = f"S={s}: relative error {rel:.2e}"
                    break
            if why:
                failed += 1
                print(f"  FAIL  {kernel} D={d} causal={causal} {label(config)}: {why}")
            else:
                print(f"  ok    {kernel} D={d} causal={causal} {label(config)}  worst {worst:.2e}")
    print(f"{total - failed} configs correct, {failed} failed")
    return failed == 0


def bench(mod, runs, by=()):
    timed = l2_flushed_timer(runs, warmup=3)

    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; TFLOP/s, median of {runs} runs, L2 flushed")
    print(f"{'B':>3} {'H':>3} {'S':>5} {'D':>4} {'causal':>6}  {'hopper config':40} {'hopper':>7} {'mma':>7}"
          f" {'best()':>7} {'FLASH':>7} {'cuDNN':>7} {'EFF':>7}  {'h/FLASH':>7} {'h/cuDNN':>7}  {'rel err':>8}"
          "  best() picks")
    rows = [(b, h, 512, d, c) for b, h in ((32, 32), (8, 16), (1, 8)) for d in (64, 128) for c in (0, 1)]
    rows += [(b, h, 2048, d, c) for b, h in ((8, 16), (1, 8)) for d in (64, 128) for c in (0, 1)]
    for b, h, s, d, causal in rows:
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
        o = torch.full_like(q, float("nan"))
        flops = 4 * b * h * s * s * d / (2 if causal else 1)
        problem = dict(B=b, H=h, S=s, D=d, causal=causal)
        # Each kernel's fastest config of this row, each config timed in full (a median
        # of a few runs picked configs whose full median was up to 5x slower: some
        # configs' runs vary that much from one to the next).
        fastest, all_trials = {}, {}
        for kernel in KERNELS:
            trials = []
            for config in configs(mod, kernel, d, causal):
                launcher = mod.load(kernel, **config)
                run = lambda launcher=launcher: launch(launcher, q, k, v, o, causal)  # noqa: E731
                run()
                trials.append((timed(run), config, run))
            fastest[kernel] = min(trials, key=lambda t: t[0])
            all_trials[kernel] = trials
        hopper_us, config, run = fastest["flash_attn_hopper"]
        run()
        torch.cuda.synchronize()
        with sdpa_kernel(SDPBackend.MATH):
            ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=bool(causal))
        rel = float((o.float() - ref).norm() / ref.norm())
        picked = mod.best("flash_attn", **problem)
        results = {"hopper": hopper_us, "mma": fastest["flash_attn"][0],
                   "best": timed(lambda: launch(picked, q, k, v, o, causal))}
        results.update(sdpa_us(q, k, v, causal, timed))
        tf = {n: flops / (us * 1e-6) / 1e12 for n, us in results.items()}
        print(f"{b:>3} {h:>3} {s:>5} {d:>4} {causal:>6}  {label(config):40} {tf['hopper']:7.1f} {tf['mma']:7.1f}"
              f" {tf['best']:7.1f} {tf['FLASH']:7.1f} {tf['cuDNN']:7.1f} {tf['EFF']:7.1f}"
              f"  {tf['hopper'] / tf['FLASH']:7.2f} {tf['hopper'] / tf['cuDNN']:7.2f}  {rel:8.1e}"
              f"  {picked.kernel}[{label(picked.config)}]", flush=True)
        if by:
            print_fastest_by(by, all_trials["flash_attn_hopper"], flops)


def print_fastest_by(by, trials, flops):
    """Under a row: the fastest of `trials` for each combination of the `by` params' values."""
    fastest = {}
    for trial in trials:
        key = tuple(trial[1][p] for p in by)
        if key not in fastest or trial[0] < fastest[key][0]:
            fastest[key] = trial
    for key, (us, config, _) in sorted(fastest.items()):
        values = ",".join(f"{p}={v}" for p, v in zip(by, key))
        print(f"{'':>24}{values:30} {flops / (us * 1e-6) / 1e12:7.1f}  {label(config)}", flush=True)


def run(mod, config, problem, times, backend=None):
    """One config on one problem `times` times (for a profiler to pick a launch); with
    `backend`, PyTorch's SDPA with that backend forced instead."""
    b, h, s, d, causal = problem
    if backend:
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
        with sdpa_kernel(getattr(SDPBackend, backend)):
            for _ in range(times):
                F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
        torch.cuda.synchronize()
        return
    config = {**{k: int(v) for k, v in (kv.split("=") for kv in config.split(","))}, "HEAD_DIM": d, "CAUSAL": causal}
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
    o = torch.empty_like(q)
    launcher = mod.load("flash_attn_hopper", **config)
    for _ in range(times):
        launch(launcher, q, k, v, o, causal)
    torch.cuda.synchronize()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["check", "bench", "run"])
    ap.add_argument("module")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--config", help="run: BLOCK_N=128,CONSUMERS=2,STAGES=3,PIPELINE=1")
    ap.add_argument("--problem", help="run: B,H,S,D,causal")
    ap.add_argument("--backend", choices=["FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION"],
                    help="run: PyTorch's SDPA with this backend instead of a Hopper config")
    ap.add_argument("--by", default="", help="bench: the Hopper kernel's fastest per value of these params: TREE,CARRY")
    args = ap.parse_args()
    mod = load(args.module, "fa")
    if args.what == "check":
        raise SystemExit(0 if check(mod) else 1)
    if args.what == "run":
        run(mod, args.config, tuple(int(x) for x in args.problem.split(",")), args.runs, args.backend)
        return
    bench(mod, args.runs, tuple(p for p in args.by.split(",") if p))


if __name__ == "__main__":
    main()
