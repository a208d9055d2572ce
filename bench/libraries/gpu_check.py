"""GPU correctness of the three public kernel libraries built by bench/libraries/build.sh,
through kart's exported Python modules only (no nvcc, no JIT), against PyTorch:

    python3 bench/libraries/gpu_check.py bench/libraries/out

The folder holds sgemm.py, llmc.py and deepgemm.py (`kart export --python
--all-configs`, written by build.sh); a module that is missing is reported as a failure.
One line per check (`ok` or `FAIL`, what was launched and the error against the
reference); exit 1 if any check failed.

- sgemm (siboehm/SGEMM_CUDA kernel 10): every exported config, C = alpha*A@B + beta*C in
  fp32 through `launch()` with [launch] geometry, against float64; relative L2 error
  below 1e-5.
- llmc (karpathy/llm.c): gelu forward (every precision and block size, through
  `launch()`) against F.gelu(approximate="tanh"); gelu backward against autograd;
  layernorm forward kernel3 and kernel6 against F.layer_norm (output, mean, rstd);
  residual forward against a + b. Max abs error below 1e-5 (fp32), 2e-3 (fp16) and
  2e-2 (bf16) on data of unit scale, relative to the output's magnitude where it grows.
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


PRECISIONS = {"ENABLE_BF16": ("bfloat16", 2e-2), "ENABLE_FP16": ("float16", 2e-3), "ENABLE_FP32": ("float32", 1e-5)}


def llmc(mod, torch):
    import torch.nn.functional as F

    g = torch.Generator(device="cuda").manual_seed(1)
    configs = mod.kernels()
    for config in configs["gelu"]:
        dtype, tol = PRECISIONS[config["PRECISION"]]
        dtype = getattr(torch, dtype)
        n = 8 * 512 * 64
        x = (torch.randn(n, device="cuda", generator=g) * 2).to(dtype)
        out = torch.full_like(x, float("nan"))
        mod.launch("gelu", out, x, problem=dict(N=n, ELEM=x.element_size()), **config)
        torch.cuda.synchronize()
        ref = F.gelu(x.float(), approximate="tanh")
        err = (out.float() - ref).abs().max().item()
        check(f"gelu_forward_kernel2[{text(config)}] N={n}", err < tol, f"max abs error {err:.2e} (limit {tol:.0e})")
        # backward, in place: d = d * gelu'(x), through the raw launcher and its own grid
        xr = x.float().requires_grad_()
        dout = torch.randn(n, device="cuda", generator=g).to(dtype)
        F.gelu(xr, approximate="tanh").backward(dout.float())
        d = dout.clone()
        back = mod.load("gelu", entry="gelu_backward_inplace_kernel", **config)
        block = config["BLOCK"]
        back((n // (block * (16 // x.element_size())),), (block,), d, x)
        torch.cuda.synchronize()
        err = (d.float() - xr.grad).abs().max().item() / max(1.0, xr.grad.abs().max().item())
        check(f"gelu_backward_inplace_kernel[{text(config)}] N={n}", err < tol,
              f"max abs error {err:.2e} relative to max |grad| (limit {tol:.0e})")
    for config in configs["layernorm"]:
        dtype, tol = PRECISIONS[config["PRECISION"]]
        dtype = getattr(torch, dtype)
        rows, c = 4 * 64, 768
        inp = torch.randn(rows, c, device="cuda", generator=g).to(dtype)
        w = (1 + 0.1 * torch.randn(c, device="cuda", generator=g)).to(dtype)
        b = (0.1 * torch.randn(c, device="cuda", generator=g)).to(dtype)
        ref = F.layer_norm(inp.float(), (c,), w.float(), b.float(), eps=1e-5)
        ref_mean = inp.float().mean(-1)
        ref_rstd = torch.rsqrt(inp.float().var(-1, unbiased=False) + 1e-5)
        esize = inp.element_size()
        for entry, grid, block, smem in [
            ("layernorm_forward_kernel3", ((rows * 32 + 255) // 256,), (256,), 0),
            ("layernorm_forward_kernel6", ((rows + 7) // 8,), (32, 8), (2 + 8) * c * esize),
        ]:
            out = torch.full_like(inp, float("nan"))
            mean = torch.full((rows,), float("nan"), device="cuda")
            rstd = torch.full((rows,), float("nan"), device="cuda")
            k = mod.load("layernorm", entry=entry, **config)
            k(grid, block, out, mean, rstd, inp, w, b, rows, c, shared_mem=smem)
            torch.cuda.synchronize()
            err = (out.float() - ref).abs().max().item() / max(1.0, ref.abs().max().item())
            stats = max((mean - ref_mean).abs().max().item(), ((rstd - ref_rstd) / ref_rstd).abs().max().item())
            check(f"{entry}[{text(config)}] rows={rows} C={c}", err < tol and stats < 1e-3,
                  f"max abs error {err:.2e} relative to max |out| (limit {tol:.0e}); mean/rstd {stats:.1e} (limit 1e-3)")
        n = rows * c
        other = torch.randn(rows, c, device="cuda", generator=g).to(dtype)
        out = torch.full_like(inp, float("nan"))
        k = mod.load("layernorm", entry="residual_forward_kernel", **config)
        k((n // (256 * (16 // esize)),), (256,), out, inp, other)
        torch.cuda.synchronize()
        err = (out.float() - (inp.float() + other.float()).to(dtype).float()).abs().max().item()
        check(f"residual_forward_kernel[{text(config)}] N={n}", err <= tol, f"max abs error {err:.2e} (limit {tol:.0e})")


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
    for name, run in (("sgemm", sgemm), ("llmc", llmc), ("deepgemm", deepgemm)):
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
