"""Accuracy of every config of the fused FP8 dual GEMM + SiLU and of its split-K variant
on the long-K shapes, against float64 and cuBLAS on the same inputs (what promotion into
fp32 buys):

    python3 kernels/dual_gemm_silu/accuracy.py dual_gemm_kernels.py [KERNEL]

KERNEL (dual_gemm_silu or dual_gemm_silu_splitk) keeps that kernel's configs only.
"""
import importlib.util
import os
import sys

import torch

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python", "dual_gemm")


def main(module_path, only=None):
    sys.path.insert(0, EXAMPLE)
    from common import make_inputs, reference, scaled_error, worst_error

    spec = importlib.util.spec_from_file_location("kernels", module_path)
    kernels = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kernels)
    spec = importlib.util.spec_from_file_location("baseline", os.path.join(EXAMPLE, "baseline.py"))
    base = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(base)
    generator = torch.Generator(device="cuda").manual_seed(5)
    print(torch.cuda.get_device_name(), "| error: worst |C - ref| / max(|ref|, 1e-2), and / max |ref|")
    family = [name for name in sorted(kernels.kernels()) if name.startswith("dual_gemm_silu")]
    if only is not None:
        if only not in family:
            raise SystemExit(f"{only}: not exported to {module_path}; it holds {', '.join(family)}")
        family = [only]
    for m, n, k in [(1536, 512, 7168), (512, 768, 7168), (3072, 1024, 1536), (128, 2048, 7168)]:
        data = make_inputs(m, n, k, generator)
        ref = reference(data)
        base.custom_kernel(data)
        torch.cuda.synchronize()
        print(f"M={m} N={n} K={k}: cuBLAS {worst_error(data[6], ref):.2e} ({scaled_error(data[6], ref):.1e})")
        for name in family:
            for config in kernels.kernels()[name]:
                launcher = kernels.load(name, **config)
                a, b1, b2, sa, sb1, sb2, c = data
                c.fill_(float("nan"))
                maps = [kernels.tensor_map(t, tile=(config[side], 128), swizzle=128)
                        for t, side in ((a, "BM"), (b1, "BN"), (b2, "BN"))]
                launcher.launch(*maps, sa, sb1, sb2, c, m, n, k, problem=dict(M=m, N=n, K=k))
                torch.cuda.synchronize()
                text = kernels._config_text(config)
                if name != "dual_gemm_silu":
                    text = f"{name}[{text}]"
                print(f"  {text:40s} {worst_error(c, ref):.2e} ({scaled_error(c, ref):.1e})")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
