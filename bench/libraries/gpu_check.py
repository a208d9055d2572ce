"""GPU correctness of the three public kernel libraries built by bench/libraries/build.sh,
through kart's exported Python modules only (no nvcc, no JIT), against PyTorch:

    python3 bench/libraries/gpu_check.py bench/libraries/out

The folder holds sgemm.py, llmc_dev.py and deepgemm.py (`kart export --python
--all-configs`, written by build.sh); a module that is missing is reported as a failure.
One line per check (`ok` or `FAIL`, what was launched and the error against the
reference); exit 1 if any check failed.

- sgemm (siboehm/SGEMM_CUDA kernel 10): every exported config, C = alpha*A@B + beta*C in
  fp32 through `launch()` with [launch] geometry, against float64; relative L2 error
  below 1e-5.
- llmc_dev (karpathy/llm.c dev/cuda): gelu forward kernel2 (bf16, every block size,
  through `launch()`) and kernel1 against F.gelu(approximate="tanh"), max abs error
  below 2e-2 of the largest output (bf16's precision); layernorm forward kernels 3 to 6
  (fp32) against F.layer_norm (output below 1e-4, mean and rstd below 1e-4); softmax
  kernels 4 and 7 (fp32) against float64 softmax, below 1e-6.
- deepgemm (DeepGEMM SM90 FP8 GEMM, 1D2D scaling): every exported config at M = 128 and
  4096 for its (N, K), D = A_fp8 * B_fp8^T with per-token 1x128 scales of A and 128x128
  block scales of B, through `launch()` (kart makes the four tensor maps and launches the
  cluster), against the dequantized product in fp32; DeepGEMM's own measure
  1 - 2*sum(x*y)/sum(x*x + y*y) below 1e-3 (its tests' limit), and no NaN left in D.
"""
import importlib.util
import os
import sys

FAILED = []


def check(what, ok, detail):
    print(("ok   " if ok else "FAIL ") + what + ": " + detail, flush=True)
    if not ok:
        FAILED.append(what)


def load_module(folder, name):
    path = os.path.join(folder, name + ".py")
    if not os.path.exists(path):
        check(name, False, f"{path} not found (run bench/libraries/build.sh {name} SRC_DIR first)")
        return None
    spec = importlib.util.spec_from_file_location("kart_lib_" + name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def text(config):
    return ",".join(f"{k}={v}" for k, v in sorted(config.items()))


def sgemm(mod, torch):
    torch.backends.cuda.matmul.allow_tf32 = False
    g = torch.Generator(device="cuda").manual_seed(0)
    alpha, beta = 1.5, 0.5
    for config in mod.kernels()["sgemm_warptiling"]:
        # The kernel has no bounds checks: sizes are multiples of every tile (128).
        for m, n, k in [(1024, 1024, 1024), (256, 2048, 512)]:
            a = torch.rand(m, k, device="cuda", generator=g) * 2 - 1
            b = torch.rand(k, n, device="cuda", generator=g) * 2 - 1
            c0 = torch.rand(m, n, device="cuda", generator=g) * 2 - 1
            c = c0.clone()
            mod.launch("sgemm_warptiling", m, n, k, alpha, a, b, beta, c,
                       problem=dict(M=m, N=n, K=k), **config)
            torch.cuda.synchronize()
            ref = alpha * (a.double() @ b.double()) + beta * c0.double()
            err = ((c.double() - ref).norm() / ref.norm()).item()
            check(f"sgemm_warptiling[{text(config)}] M={m} N={n} K={k}",
                  err < 1e-5 and not torch.isnan(c).any().item(), f"rel. L2 error {err:.2e} (limit 1e-5)")


def llmc_dev(mod, torch):
    import torch.nn.functional as F

    g = torch.Generator(device="cuda").manual_seed(1)
    configs = mod.kernels()
    n = 8 * 1024 * 96
    for config in configs["gelu_forward"]:
        # gelu_forward.cu defines ENABLE_BF16 itself: floatX is bf16
        x = (torch.randn(n, device="cuda", generator=g) * 2).to(torch.bfloat16)
        ref = F.gelu(x.float(), approximate="tanh")
        block = config["BLOCK"]
        for entry in ("gelu_forward_kernel2", "gelu_forward_kernel1"):
            out = torch.full_like(x, float("nan"))
            if entry == "gelu_forward_kernel2":  # through [launch], and the one-line form
                mod.launch("gelu_forward", out, x, n, problem=dict(N=n), **config)
            else:  # one element per thread, through the raw launcher and its own grid
                mod.load("gelu_forward", entry=entry, **config)(((n + block - 1) // block,), (block,), out, x, n)
            torch.cuda.synchronize()
            err = (out.float() - ref).abs().max().item() / max(1.0, ref.abs().max().item())
            check(f"{entry}[{text(config)}] N={n}", err < 2e-2,
                  f"max abs error {err:.2e} relative to max |gelu| (limit 2e-2, bf16)")
    rows, c = 4 * 64, 768
    inp = torch.randn(rows, c, device="cuda", generator=g)
    w = 1 + 0.1 * torch.randn(c, device="cuda", generator=g)
    b = 0.1 * torch.randn(c, device="cuda", generator=g)
    ref = F.layer_norm(inp, (c,), w, b, eps=1e-5)
    ref_mean = inp.double().mean(-1)
    ref_rstd = torch.rsqrt(inp.double().var(-1, unbiased=False) + 1e-5)
    for entry, grid, block, smem in [
        ("layernorm_forward_kernel3", ((rows * 32 + 255) // 256,), (256,), 0),
        ("layernorm_forward_kernel4", ((rows * 32 + 255) // 256,), (256,), 0),
        ("layernorm_forward_kernel5", (rows,), (256,), 0),
        ("layernorm_forward_kernel6", ((rows + 7) // 8,), (32, 8), (2 + 8) * c * 4),
    ]:
        out = torch.full_like(inp, float("nan"))
        mean = torch.full((rows,), float("nan"), device="cuda")
        rstd = torch.full((rows,), float("nan"), device="cuda")
        mod.load("layernorm_forward", entry=entry)(grid, block, out, mean, rstd, inp, w, b, rows, c, shared_mem=smem)
        torch.cuda.synchronize()
        err = (out - ref).abs().max().item()
        stats = max((mean - ref_mean).abs().max().item(), ((rstd - ref_rstd) / ref_rstd).abs().max().item())
        check(f"{entry} rows={rows} C={c}", err < 1e-4 and stats < 1e-4,
              f"max abs error {err:.2e} (limit 1e-4); mean/rstd {stats:.1e} (limit 1e-4)")
    rows, c = 1024, 1000
    inp = torch.randn(rows, c, device="cuda", generator=g) * 4
    ref = torch.softmax(inp.double(), -1)
    for entry, smem in [("softmax_forward_kernel4", 256 // 32 * 4), ("softmax_forward_kernel7", 2 * 256 // 32 * 4)]:
        out = torch.full_like(inp, float("nan"))
        mod.load("softmax_forward", entry=entry)((rows,), (256,), out, inp, rows, c, shared_mem=smem)
        torch.cuda.synchronize()
        err = (out.double() - ref).abs().max().item()
        check(f"{entry} rows={rows} C={c}", err < 1e-6, f"max abs error {err:.2e} (limit 1e-6)")


def deepgemm(mod, torch):
    g = torch.Generator(device="cuda").manual_seed(2)
    fp8 = torch.float8_e4m3fn
    for config in mod.kernels()["sm90_fp8_gemm_1d2d"]:
        n, k = config["SHAPE_N"], config["SHAPE_K"]
        kb, nb = k // 128, (n + 127) // 128
        b = torch.randn(n, k, device="cuda", generator=g)
        # 128x128 block scales of B, K-major: [cdiv(N, 128), K / 128]
        bp = torch.nn.functional.pad(b, (0, 0, 0, nb * 128 - n)).view(nb, 128, kb, 128)
        sfb = (bp.abs().amax(dim=(1, 3)).clamp(min=1e-4) / 448.0).contiguous()
        b8 = (bp / sfb[:, None, :, None]).view(nb * 128, k)[:n].to(fp8)
        b_deq = (b8.float().view(-1, kb, 128) * sfb.repeat_interleave(128, 0)[:n, :, None]).view(n, k)
        for m in (128, 4096):
            a = torch.randn(m, k, device="cuda", generator=g)
            # per-token 1x128 scales of A: [M, K / 128], passed M-major, M rounded up to 4
            sfa = a.view(m, kb, 128).abs().amax(-1).clamp(min=1e-4) / 448.0
            a8 = (a.view(m, kb, 128) / sfa[:, :, None]).view(m, k).to(fp8)
            a_deq = (a8.float().view(m, kb, 128) * sfa[:, :, None]).view(m, k)
            m4 = (m + 3) // 4 * 4
            sfa_t = torch.zeros(kb, m4, device="cuda")
            sfa_t[:, :m] = sfa.t()
            d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            mod.launch("sm90_fp8_gemm_1d2d", sfb, 0, m, n, k, a8, b8, d, sfa_t,
                       problem=dict(M=m, N=n, K=k), **config)
            torch.cuda.synchronize()
            ref = a_deq @ b_deq.t()
            x, y = d.double(), ref.double()
            diff = (1 - 2 * (x * y).sum() / (x * x + y * y).sum()).item()
            nan = torch.isnan(d).any().item()
            shown = {key: config[key] for key in ("BLOCK_M", "BLOCK_N", "MULTICAST", "SHAPE_N", "SHAPE_K")}
            check(f"sm90_fp8_gemm_1d2d[{text(shown)}] M={m}", diff < 1e-3 and not nan,
                  f"diff {diff:.2e} (limit 1e-3){', NaN left in D' if nan else ''}")


def main(folder):
    import torch

    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for name, run in (("sgemm", sgemm), ("llmc_dev", llmc_dev), ("deepgemm", deepgemm)):
        mod = load_module(folder, name)
        if mod is None:
            continue
        try:
            run(mod, torch)
        except Exception as e:  # one library's crash must not hide the others' results
            check(name, False, f"{type(e).__name__}: {e}")
    print(f"{len(FAILED)} check(s) failed" if FAILED else "all checks passed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
