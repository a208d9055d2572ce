"""FlashAttention through an exported module's [launch] geometry, on a real GPU:

    kart export --python -o fk.py flash_attn --all-configs --target sm_90
    python3 tests/python/gpu_flash_attn.py fk.py

Each call is one line with no grid, block or shared-memory arithmetic:
`fk.launch("flash_attn", q, k, v, o, S, problem=...)` picks the config with `best()`
(or takes the one named) and computes the launch from kernel.toml's [launch]. Outputs
start poisoned (NaN) and are compared with PyTorch's attention in float32. Exits 1 on
the first failure.
"""
import importlib.util
import sys


def main(module_path):
    def check(what, ok, detail=""):
        print(("ok   " if ok else "FAIL ") + what + (f": {detail}" if detail and not ok else ""))
        if not ok:
            sys.exit(1)

    spec = importlib.util.spec_from_file_location("fk", module_path)
    fk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fk)
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    shapes = [(2, 4, 128, 64, 0), (1, 8, 500, 128, 1), (3, 2, 17, 64, 1), (2, 2, 2048, 128, 0), (1, 1, 1, 64, 0)]
    for b, h, s, d, causal in shapes:
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=bool(causal))
        problem = dict(B=b, H=h, S=s, D=d, causal=causal)
        named = dict(HEAD_DIM=d, CAUSAL=causal, BLOCK_M=64, BLOCK_N=64, NUM_WARPS=4)
        for how, config in (("best()", {}), ("named config", named)):
            o = torch.full_like(q, float("nan"))
            launcher = fk.launch("flash_attn", q, k, v, o, s, problem=problem, **config)
            torch.cuda.synchronize()
            err = ((o.float() - ref).norm() / ref.norm()).item()
            grid, block, shared = launcher.dims(**problem)
            check(f"B={b} H={h} S={s} D={d} causal={causal}, {how} "
                  f"({fk._config_text(launcher.config)}; grid {grid}, block {block}, {shared} B shared): "
                  f"rel. error {err:.2e}", not torch.isnan(o).any().item() and err < 2e-3)
    print("all FlashAttention checks passed")


if __name__ == "__main__":
    main(sys.argv[1])
