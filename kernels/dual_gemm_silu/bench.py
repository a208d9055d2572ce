"""The fused FP8 dual GEMM + SiLU against the team's version, in one process:

    python3 kernels/dual_gemm_silu/bench.py dual_gemm_kernels.py

(the module `kart export --python -o dual_gemm_kernels.py dual_gemm_silu --all-configs`
wrote, with the tuning records; it holds the split-K variant dual_gemm_silu_splitk too,
and best() picks either). For each benchmark shape, then for the four more of
common.MORE_SHAPES (few output tiles over a long K; the large problems), both run as
CUDA graphs (the fused kernel through examples/python/dual_gemm/submission.py, the baseline two
`torch._scaled_mm` and the SiLU-multiply through baseline.py, and "concat": one
`_scaled_mm` over B1 and B2 concatenated beforehand, fp32 out, the scales applied in the
SiLU-multiply), each replay timed with CUDA events after the L2 is flushed, median of
50, interleaved. Speed of light per shape:
max(FLOPs / the FP8 dense peak, bytes / the bandwidth measured here with a device copy).
Then accuracy on every test shape: worst |C - ref| / max(|ref|, 1e-2) against float64
for both.
"""
import importlib.util
import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "python", "dual_gemm")
# Dense FP8 tensor-core peak of the SXM parts (NVIDIA's data sheets), TFLOP/s.
FP8_PEAK = {"H100": 1979.0, "H200": 1979.0}


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bandwidth_gbs():
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    times = []
    for _ in range(20):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return 2 * src.numel() / times[len(times) // 2] / 1e9


def graph_of(fn, data):
    """A callable replaying a CUDA graph of `fn(data)` (plans, tensor maps and cuBLAS's
    choice made before the capture)."""
    fn(data)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(data)
    return graph.replay


def _geomean(values):
    product = 1.0
    for v in values:
        product *= v
    return product ** (1 / len(values))


def _implementation(kernels, launcher):
    """The config, after the kernel's name where best() chose the split-K variant."""
    text = kernels._config_text(launcher.config)
    return text if launcher.kernel == "dual_gemm_silu" else f"{launcher.kernel}[{text}]"


def concatenated(data):
    """The baseline with one GEMM: A·[B1; B2]ᵀ by one `_scaled_mm` (B1 and B2
    concatenated once, outside the timed graph), then silu(·sB1) * (·sB2)."""
    a, b1, b2, sa, sb1, sb2, c = data
    n = b1.shape[0]
    both, one = torch.cat([b1, b2]), torch.ones(1, device="cuda")

    def run(_):
        r = torch._scaled_mm(a, both.t(), scale_a=sa, scale_b=one, out_dtype=torch.float32)
        c.copy_(torch.nn.functional.silu(r[:, :n] * sb1) * (r[:, n:] * sb2))

    return run


def main(module_path):
    target = os.path.join(EXAMPLE, "dual_gemm_kernels.py")
    if not os.path.exists(target) or not os.path.samefile(module_path, target):
        shutil.copy(module_path, target)
    sys.path.insert(0, EXAMPLE)
    from common import BENCH_SHAPES, MORE_SHAPES, TEST_SHAPES, make_inputs, reference, scaled_error, worst_error

    ours = load("submission", os.path.join(EXAMPLE, "submission.py"))
    base = load("baseline", os.path.join(EXAMPLE, "baseline.py"))
    name = torch.cuda.get_device_name()
    peak = next((v for k, v in FP8_PEAK.items() if k in name), None)
    bw = bandwidth_gbs()
    print(f"{name}, torch {torch.__version__}; device copy bandwidth {bw:.0f} GB/s; FP8 dense peak {peak} TFLOP/s")
    generator = torch.Generator(device="cuda").manual_seed(1)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    print(f"{'M':>5} {'N':>5} {'K':>5}  {'fused µs':>9} {'baseline µs':>11} {'speedup':>7}  {'concat µs':>9} "
          f"{'speedup':>7}  {'SOL µs':>7} {'fused/SOL':>9}  config")
    ratios = []
    for m, n, k in BENCH_SHAPES + MORE_SHAPES:
        data = make_inputs(m, n, k, generator)
        # The baseline captures its own graph at its first call; each call replays it.
        base.custom_kernel(data)
        graphs = {"fused": graph_of(ours.custom_kernel, data), "baseline": lambda: base.custom_kernel(data),
                  "concat": graph_of(concatenated(data), data)}
        times = {key: [] for key in graphs}
        for _ in range(50):
            for key, graph in graphs.items():
                flush.random_(0, 255)
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                graph()
                end.record()
                end.synchronize()
                times[key].append(start.elapsed_time(end) * 1e3)
        med = {key: sorted(v)[len(v) // 2] for key, v in times.items()}
        flops, moved = 4.0 * m * n * k, m * k + 2 * n * k + 2 * m * n
        sol = max(flops / (peak * 1e12) if peak else 0, moved / (bw * 1e9)) * 1e6
        launcher = ours.kernels.best("dual_gemm_silu", M=m, N=n, K=k)
        ratios.append(med["baseline"] / med["fused"])
        print(f"{m:5d} {n:5d} {k:5d}  {med['fused']:9.1f} {med['baseline']:11.1f} {ratios[-1]:6.2f}x  "
              f"{med['concat']:9.1f} {med['concat'] / med['fused']:6.2f}x  {sol:7.1f} "
              f"{med['fused'] / sol:8.2f}x  {_implementation(ours.kernels, launcher)}")
        ours._plans.clear()
    print(f"geometric mean speedup over the baseline: {_geomean(ratios[:len(BENCH_SHAPES)]):.2f}x on the "
          f"{len(BENCH_SHAPES)} benchmark shapes, {_geomean(ratios):.2f}x on all {len(ratios)}")

    print("accuracy against float64: worst |C - ref| / max(|ref|, 1e-2) (and / max |ref|), same inputs")
    for m, n, k in TEST_SHAPES:
        data = make_inputs(m, n, k, generator)
        ref = reference(data)
        errs = {}
        for key, module in (("fused", ours), ("cuBLAS", base)):
            data[6].fill_(float("nan"))
            try:
                out = module.custom_kernel(data)
            except RuntimeError as e:
                errs[key] = (None, str(e).splitlines()[0])
                continue
            torch.cuda.synchronize()
            errs[key] = (worst_error(out, ref), scaled_error(out, ref))
        (fw, fs), (cw, cs) = errs["fused"], errs["cuBLAS"]
        if cw is None:
            print(f"  M={m:5d} N={n:5d} K={k:5d}: fused {fw:.2e} ({fs:.1e}); cuBLAS refuses: {cs}")
        else:
            verdict = "ok" if fw <= 2 * cw else "WORSE than 2x cuBLAS"
            print(f"  M={m:5d} N={n:5d} K={k:5d}: fused {fw:.2e} ({fs:.1e}), cuBLAS {cw:.2e} ({cs:.1e}): {verdict}")
        ours._plans.clear()


if __name__ == "__main__":
    main(sys.argv[1])
