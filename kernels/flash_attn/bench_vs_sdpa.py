"""FlashAttention forward: kart's tuned kernel against PyTorch SDPA with each backend
forced (FLASH, cuDNN, EFFICIENT), in one process on one GPU.

kart's kernel comes from a module written by `kart export --python` (the tuned
winners of kart.tune); `best()` picks the config per problem. fp16, S = 512,
D in {64, 128}, B x H in {32x32, 8x16, 1x8}, causal or not. Each run is timed alone
between CUDA events after the L2 is flushed (a 256 MB buffer is zeroed); medians of
--runs; TFLOP/s counted as 4*B*H*S^2*D (halved when causal). kart's output is checked
against SDPA's math backend in float32 first. Prints figures; asserts nothing.

    python3 kernels/flash_attn/bench_vs_sdpa.py --module flash_kernels.py [--runs 50]
"""
import argparse
import importlib.util
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def l2_flushed_runs(fn, n, flush):
    """`n` runs of `fn()`, each alone between CUDA events after `flush` (a buffer larger
    than the L2) is zeroed: their times in µs."""
    times = []
    for _ in range(n):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return times


def l2_flushed_timer(runs, warmup=5):
    """A function timing `fn()` alone between CUDA events after 256 MiB are zeroed (the
    L2 flushed): the median of `runs` after `warmup` untimed, in µs."""
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda")

    def timed(fn, n=runs):
        l2_flushed_runs(fn, warmup, flush)
        return statistics.median(l2_flushed_runs(fn, n, flush))

    return timed


def sdpa_us(q, k, v, causal, timed):
    """{"FLASH", "cuDNN", "EFF": µs} of PyTorch SDPA with each backend forced (nan where
    the backend refuses the problem)."""
    results = {}
    for name, backend in [("FLASH", SDPBackend.FLASH_ATTENTION), ("cuDNN", SDPBackend.CUDNN_ATTENTION),
                          ("EFF", SDPBackend.EFFICIENT_ATTENTION)]:
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
    ap.add_argument("--module", required=True)
    ap.add_argument("--runs", type=int, default=50)
    args = ap.parse_args()
    spec = importlib.util.spec_from_file_location("flash_kernels", args.module)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    timed = l2_flushed_timer(args.runs)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")

    header = (f"{'B':>3} {'H':>3} {'D':>4} {'causal':>6}  {'kart config':60} {'kart':>7} {'FLASH':>7}"
              f" {'cuDNN':>7} {'EFF':>7}  {'k/FLASH':>7} {'k/cuDNN':>7}  {'rel err':>8}")
    print("TFLOP/s (median of", args.runs, "runs, L2 flushed)")
    print(header)
    for b, h in [(32, 32), (8, 16), (1, 8)]:
        for d in [64, 128]:
            for causal in [0, 1]:
                s = 512
                q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
                o = torch.full_like(q, float("nan"))
                launcher = mod.best("flash_attn", B=b, H=h, S=s, D=d, causal=causal)
                cfg = launcher.config
                problem = dict(B=b, H=h, S=s, D=d, causal=causal)

                # The geometry (and, for a variant, its computed arguments) comes from the
                # chosen kernel's own [launch]: best() may answer flash_attn_hopper.
                def run_kart(launcher=launcher, problem=problem, o=o, q=q, k=k, v=v):
                    launcher.launch(q, k, v, o, s, problem=problem)

                run_kart()
                torch.cuda.synchronize()
                with sdpa_kernel(SDPBackend.MATH):
                    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=bool(causal))
                rel = float((o.float() - ref).norm() / ref.norm())
                flops = 4 * b * h * s * s * d / (2 if causal else 1)
                results = {"kart": timed(run_kart), **sdpa_us(q, k, v, causal, timed)}
                tf = {n: flops / (us * 1e-6) / 1e12 for n, us in results.items()}
                config = ",".join(f"{k_}={v_}" for k_, v_ in cfg.items() if k_ not in ("HEAD_DIM", "CAUSAL"))
                print(f"{b:>3} {h:>3} {d:>4} {causal:>6}  {config:60} {tf['kart']:7.1f} {tf['FLASH']:7.1f}"
                      f" {tf['cuDNN']:7.1f} {tf['EFF']:7.1f}  {tf['kart'] / tf['FLASH']:7.2f}"
                      f" {tf['kart'] / tf['cuDNN']:7.2f}  {rel:8.1e}")


if __name__ == "__main__":
    main()
