"""The FlashAttention family on a GPU machine, from one exported module: the second
Hopper kernel (kernels/flash_attn_hopper2), the first (kernels/flash_attn_hopper) and the
mma.sync kernel (kernels/flash_attn), all called the same way, against PyTorch SDPA:

    kart export --python -o fa.py flash_attn --all-configs --target sm_90 --target sm_90a
    python3 kernels/flash_attn_hopper2/bench.py fa.py [--runs 30] [--by LAZY,SCHED] [--rows causal]

Per row (B x H x S x D, causal or not: the 20 rows of kernels/flash_attn_hopper's
benchmark and 2 x 16 x 4096 with D in {64, 128}, causal or not): every config of each
kernel with that D and causality timed and each kernel's fastest kept; the config
`best("flash_attn")` picks from the tuning records embedded in the module, timed the
same way; SDPA with FLASH and cuDNN forced. Each run alone between CUDA events after a
256 MiB buffer is zeroed (the L2 flushed; the timer of kernels/flash_attn/bench_vs_sdpa.py),
medians of --runs; TFLOP/s counted as 4*B*H*S^2*D (halved when causal). The output of
the row's fastest config of the second kernel and of best()'s pick are checked against
SDPA's math backend in float32 (relative L2 error printed; above 2e-3 the row says
WRONG). With --by, under each row the second kernel's fastest config for each
combination of those params' values. Prints figures; asserts nothing.
"""
import argparse
import importlib.util
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "flash_attn"))
from bench_vs_sdpa import l2_flushed_timer  # noqa: E402  (kernels/flash_attn's timer)

KERNELS = ("flash_attn_hopper2", "flash_attn_hopper", "flash_attn")
SHORT = {"flash_attn_hopper2": "hopper2", "flash_attn_hopper": "hopper", "flash_attn": "mma"}


def load(path):
    spec = importlib.util.spec_from_file_location("fa", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def label(config):
    return ",".join(f"{k}={v}" for k, v in sorted(config.items()) if k not in ("HEAD_DIM", "CAUSAL", "BLOCK_N",
                                                                              "STAGES", "PIPELINE"))


def rows(which):
    out = [(b, h, 512, d, c) for b, h in ((32, 32), (8, 16), (1, 8)) for d in (64, 128) for c in (0, 1)]
    out += [(b, h, 2048, d, c) for b, h in ((8, 16), (1, 8)) for d in (64, 128) for c in (0, 1)]
    out += [(2, 16, 4096, d, c) for d in (64, 128) for c in (0, 1)]
    if which == "causal":
        out = [r for r in out if r[4] == 1]
    return out


def sdpa(q, k, v, causal, timed):
    results = {}
    for name, backend in (("FLASH", SDPBackend.FLASH_ATTENTION), ("cuDNN", SDPBackend.CUDNN_ATTENTION)):
        try:
            with sdpa_kernel(backend):
                def run():
                    F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
                run()
                results[name] = timed(run)
        except RuntimeError:
            results[name] = float("nan")
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("module")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--by", default="", help="the second kernel's fastest per value of these params: LAZY,SCHED")
    ap.add_argument("--rows", choices=["all", "causal"], default="all")
    args = ap.parse_args()
    mod = load(args.module)
    by = tuple(p for p in args.by.split(",") if p)
    timed = l2_flushed_timer(args.runs, warmup=3)
    available = mod.kernels()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; TFLOP/s, median of {args.runs} runs, "
          "L2 flushed")
    print("configs per kernel: " + ", ".join(f"{k} {len(available.get(k, []))}" for k in KERNELS))
    print(f"{'B':>3} {'H':>3} {'S':>5} {'D':>4} {'c':>2}  {'hopper2':>7} {'hopper':>7} {'mma':>7} {'best()':>7}"
          f" {'FLASH':>7} {'cuDNN':>7}  {'h2/cuDNN':>8} {'h1/cuDNN':>8} {'best/cuDNN':>10}  {'rel err':>8}"
          "  hopper2 config | best() picks")
    for b, h, s, d, causal in rows(args.rows):
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
        o = torch.full_like(q, float("nan"))
        flops = 4 * b * h * s * s * d / (2 if causal else 1)
        problem = dict(B=b, H=h, S=s, D=d, causal=causal)
        with sdpa_kernel(SDPBackend.MATH):
            ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=bool(causal))

        def error(launcher):
            o.fill_(float("nan"))
            launcher.launch(q, k, v, o, s, problem=problem)
            torch.cuda.synchronize()
            return float((o.float() - ref).norm() / ref.norm())

        fastest, trials = {}, []
        for kernel in KERNELS:
            for config in available.get(kernel, []):
                if config["HEAD_DIM"] != d or config["CAUSAL"] != causal:
                    continue
                launcher = mod.load(kernel, **config)
                run = lambda launcher=launcher: launcher.launch(q, k, v, o, s, problem=problem)  # noqa: E731
                run()
                us = timed(run)
                if kernel == KERNELS[0]:
                    trials.append((us, config))
                if kernel not in fastest or us < fastest[kernel][0]:
                    fastest[kernel] = (us, config, launcher)
        picked = mod.best("flash_attn", **problem)
        results = {name: fastest[kernel][0] if kernel in fastest else float("nan")
                   for kernel, name in SHORT.items()}
        results["best"] = timed(lambda: picked.launch(q, k, v, o, s, problem=problem))
        results.update(sdpa(q, k, v, causal, timed))
        tf = {n: flops / (us * 1e-6) / 1e12 for n, us in results.items()}
        errors = [error(picked)]
        config = "-"
        if KERNELS[0] in fastest:
            errors.append(error(fastest[KERNELS[0]][2]))
            config = label(fastest[KERNELS[0]][1])
        worst = max(errors)
        print(f"{b:>3} {h:>3} {s:>5} {d:>4} {causal:>2}  {tf['hopper2']:7.1f} {tf['hopper']:7.1f} {tf['mma']:7.1f}"
              f" {tf['best']:7.1f} {tf['FLASH']:7.1f} {tf['cuDNN']:7.1f}  {tf['hopper2'] / tf['cuDNN']:8.3f}"
              f" {tf['hopper'] / tf['cuDNN']:8.3f} {tf['best'] / tf['cuDNN']:10.3f}  {worst:8.1e}"
              f"{' WRONG' if worst >= 2e-3 else ''}  {config} | {picked.kernel}[{label(picked.config)}]", flush=True)
        if by:
            best_of = {}
            for us, cfg in trials:
                key = tuple(cfg[p] for p in by)
                if key not in best_of or us < best_of[key][0]:
                    best_of[key] = (us, cfg)
            for key, (us, cfg) in sorted(best_of.items()):
                values = ",".join(f"{p}={v}" for p, v in zip(by, key))
                print(f"{'':>20}{values:24} {flops / (us * 1e-6) / 1e12:7.1f}  {label(cfg)}", flush=True)


if __name__ == "__main__":
    main()
