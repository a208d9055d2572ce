"""The Hopper FlashAttention kernel (kernels/flash_attn_hopper: wgmma + TMA, sm_90a)
from an exported module, on a GPU machine:

    kart export --python -o fa_hopper.py flash_attn_hopper --all-configs
    kart export --python -o fa_kernels.py flash_attn        # the mma.sync kernel, tuned
    python3 bench/flash_attn_hopper.py check fa_hopper.py
    python3 bench/flash_attn_hopper.py bench fa_hopper.py fa_kernels.py [--runs 30]
    python3 bench/flash_attn_hopper.py run fa_hopper.py --config BLOCK_N=128,CONSUMERS=2,STAGES=3,PIPELINE=1 \
        --problem 32,32,512,128,1 --runs 3    # one config, for a profiler

`check`: every config on seq in {1, 17, 128, 500, 512, 2048} (batch x heads = 3), its
head dim and causality, output poisoned with NaN first, against float64 attention;
relative L2 error below 2e-3 (the limit of examples/flash_attn.rs). `bench`: per row
(B x H in {32x32, 8x16, 1x8}, D in {64, 128}, causal or not, S = 512, and S = 2048
rows) every config of that D and causality is timed (median of --runs) and the fastest
kept, beside the mma.sync kernel's tuned config and PyTorch SDPA with each backend
forced (FLASH, cuDNN, EFFICIENT), in one process: each run alone between CUDA events after the L2 is flushed
(a 256 MiB buffer zeroed), medians; TFLOP/s counted as 4*B*H*S^2*D (halved when causal).
Prints figures; asserts nothing but correctness in `check`.
"""
import argparse
import importlib.util
import math

import torch
import torch.nn.functional as F
from flash_attn_vs_sdpa import l2_flushed_timer, sdpa_us  # this folder's SDPA benchmark
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


class Hopper:
    """Launches of one flash_attn_hopper config on one set of tensors: tensor maps made
    once (Q's tile 64 rows, K's and V's BLOCK_N rows, 64 columns, 128-byte swizzle)."""

    def __init__(self, mod, launcher, q, k, v, o, causal):
        b, h, s, d = q.shape
        bn = launcher.config["BLOCK_N"]
        flat = lambda t: t.view(b * h, s, d)  # noqa: E731
        self.args = (mod.tensor_map(flat(q), tile=(1, 64, 64)), mod.tensor_map(flat(k), tile=(1, bn, 64)),
                     mod.tensor_map(flat(v), tile=(1, bn, 64)), o, s, b * h)
        self.problem = dict(B=b, H=h, S=s, D=d, causal=causal)
        self.launcher = launcher

    def __call__(self):
        self.launcher.launch(*self.args, problem=self.problem)


def configs(mod, d, causal):
    return [c for c in mod.kernels()["flash_attn_hopper"] if c["HEAD_DIM"] == d and c["CAUSAL"] == causal]


def label(config):
    return ",".join(f"{k}={v}" for k, v in config.items() if k not in ("HEAD_DIM", "CAUSAL"))


def check(mod):
    print(f"{torch.cuda.get_device_name()}: every config against float64, batch x heads = 3, "
          "relative L2 error limit 2e-3")
    failed = 0
    every = mod.kernels()["flash_attn_hopper"]
    for config in sorted(every, key=lambda c: sorted(c.items())):
        launcher = mod.load("flash_attn_hopper", **config)
        d, causal, worst, why = config["HEAD_DIM"], config["CAUSAL"], 0.0, None
        for s in (1, 17, 128, 500, 512, 2048):
            q, k, v = (torch.randn(1, 3, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
            o = torch.full_like(q, float("nan"))
            Hopper(mod, launcher, q, k, v, o, causal)()
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
            print(f"  FAIL  D={d} causal={causal} {label(config)}: {why}")
        else:
            print(f"  ok    D={d} causal={causal} {label(config)}  worst {worst:.2e}")
    print(f"{len(every) - failed} configs correct, {failed} failed")
    return failed == 0


def bench(mod, fa, runs):
    timed = l2_flushed_timer(runs, warmup=3)

    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; TFLOP/s, median of {runs} runs, L2 flushed")
    print(f"{'B':>3} {'H':>3} {'S':>5} {'D':>4} {'causal':>6}  {'hopper config':40} {'hopper':>7} {'mma':>7}"
          f" {'FLASH':>7} {'cuDNN':>7} {'EFF':>7}  {'h/FLASH':>7} {'h/cuDNN':>7}  {'rel err':>8}")
    rows = [(b, h, 512, d, c) for b, h in ((32, 32), (8, 16), (1, 8)) for d in (64, 128) for c in (0, 1)]
    rows += [(b, h, 2048, d, c) for b, h in ((8, 16), (1, 8)) for d in (64, 128) for c in (0, 1)]
    for b, h, s, d, causal in rows:
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
        o = torch.full_like(q, float("nan"))
        flops = 4 * b * h * s * s * d / (2 if causal else 1)
        # The fastest config of this row, each timed in full (a median of a few runs
        # picked configs whose full median was up to 5x slower: some configs' runs vary
        # that much from one to the next).
        trials = []
        for config in configs(mod, d, causal):
            run = Hopper(mod, mod.load("flash_attn_hopper", **config), q, k, v, o, causal)
            run()
            trials.append((timed(run), config, run))
        hopper_us, config, run = min(trials, key=lambda t: t[0])
        run()
        torch.cuda.synchronize()
        with sdpa_kernel(SDPBackend.MATH):
            ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=bool(causal))
        rel = float((o.float() - ref).norm() / ref.norm())
        results = {"hopper": hopper_us}
        problem = dict(B=b, H=h, S=s, D=d, causal=causal)
        o2 = torch.empty_like(q)
        results["mma"] = timed(lambda: fa.launch("flash_attn", q, k, v, o2, s, problem=problem))
        results.update(sdpa_us(q, k, v, causal, timed))
        tf = {n: flops / (us * 1e-6) / 1e12 for n, us in results.items()}
        print(f"{b:>3} {h:>3} {s:>5} {d:>4} {causal:>6}  {label(config):40} {tf['hopper']:7.1f} {tf['mma']:7.1f}"
              f" {tf['FLASH']:7.1f} {tf['cuDNN']:7.1f} {tf['EFF']:7.1f}  {tf['hopper'] / tf['FLASH']:7.2f}"
              f" {tf['hopper'] / tf['cuDNN']:7.2f}  {rel:8.1e}", flush=True)


def run(mod, config, problem, times):
    """One config on one problem `times` times (for a profiler to pick a launch)."""
    b, h, s, d, causal = problem
    config = {**{k: int(v) for k, v in (kv.split("=") for kv in config.split(","))}, "HEAD_DIM": d, "CAUSAL": causal}
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
    o = torch.empty_like(q)
    launch = Hopper(mod, mod.load("flash_attn_hopper", **config), q, k, v, o, causal)
    for _ in range(times):
        launch()
    torch.cuda.synchronize()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["check", "bench", "run"])
    ap.add_argument("module")
    ap.add_argument("mma_module", nargs="?")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--config", help="run: BLOCK_N=128,CONSUMERS=2,STAGES=3,PIPELINE=1")
    ap.add_argument("--problem", help="run: B,H,S,D,causal")
    args = ap.parse_args()
    mod = load(args.module, "fa_hopper")
    if args.what == "check":
        raise SystemExit(0 if check(mod) else 1)
    if args.what == "run":
        run(mod, args.config, tuple(int(x) for x in args.problem.split(",")), args.runs)
        return
    bench(mod, load(args.mma_module, "fa_kernels"), args.runs)


if __name__ == "__main__":
    main()
