"""Inputs and the float64 reference of the FP8 dual GEMM + SiLU, shared by the harness
and the benchmark. Inputs as the competition makes them, adapted to FP8: normal random
data cast to e4m3 (its range holds them), per-tensor scales random in (0, 1], fresh per
call, never all zeros."""
import torch

# (M, N, K): the test shapes, then M and N off every tile (64 and 128).
TEST_SHAPES = [(256, 512, 256), (1536, 512, 7168), (3072, 1024, 1536), (7168, 1024, 256),
               (4608, 384, 7168), (512, 768, 7168), (4096, 768, 512), (300, 1000, 1040)]
BENCH_SHAPES = [(256, 4096, 7168), (512, 4096, 7168), (256, 3072, 4096), (512, 3072, 7168)]
# Where cuBLAS won before split-K and the persistent schedule: few output tiles over a
# long K (the first two), and the large problems on the H100.
MORE_SHAPES = [(128, 2048, 7168), (128, 4096, 7168), (2048, 7168, 4096), (1024, 4096, 7168)]


def make_inputs(m, n, k, generator):
    def fp8(rows):
        while True:
            x = torch.randn(rows, k, device="cuda", generator=generator).to(torch.float8_e4m3fn)
            if x.float().abs().sum() > 0:
                return x
    a, b1, b2 = fp8(m), fp8(n), fp8(n)
    scales = [(1 - torch.rand(1, device="cuda", generator=generator)).float() for _ in range(3)]
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    return (a, b1, b2, *scales, c)


def reference(data):
    """silu(A·B1ᵀ) * (A·B2ᵀ) in float64 of the exactly dequantized inputs."""
    a, b1, b2, sa, sb1, sb2, _ = data
    a64 = a.double() * sa.double()
    r1 = a64 @ (b1.double() * sb1.double()).T
    r2 = a64 @ (b2.double() * sb2.double()).T
    return r1 * torch.sigmoid(r1) * r2


def worst_error(c, ref):
    """max |c - ref| / max(|ref|, 1e-2), over the elements whose reference fits fp16.
    Harsh where A·B2ᵀ nearly cancels (any fp32 accumulation is off by more than the
    result there), so it compares kernels rather than judging one."""
    fits = ref.abs() < 65000
    err = (c.double() - ref).abs() / ref.abs().clamp_min(1e-2)
    return err[fits].max().item() if fits.any() else 0.0


def scaled_error(c, ref):
    """max |c - ref| / max |ref|, over the elements whose reference fits fp16: the
    check of a result (fp16 rounding alone gives up to 4.9e-4)."""
    fits = ref.abs() < 65000
    diff = (c.double() - ref).abs()
    return (diff[fits].max() / ref[fits].abs().max().clamp_min(1.0)).item() if fits.any() else 0.0
