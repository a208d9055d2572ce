"""The FlashAttention family from an exported module, on a real GPU (run by the GPU test
`python_variants_are_called_alike_and_chosen_by_best`):

    kart export --python -o fa.py flash_attn --all-configs --target sm_90 --target sm_90a
    python3 tests/python/gpu_variants.py fa.py

Exporting `flash_attn` brings its variant `flash_attn_hopper`. `best("flash_attn", ...)`
picks a kernel and config (the Hopper variant on a 9.0 GPU when no record says
otherwise), and both kernels are called alike with (q, k, v, o, S) and the problem; kart
makes the variant's tensor maps. Checked against PyTorch's attention in float32, for
`launch()`, a chosen launcher of each kernel and `torch_op`; bad tensors are refused
before the driver; the tensor maps of a repeated call are reused. Prints the CPU cost of
a launch of each kernel (a figure, not a bound). Exits 1 on the first failure.
"""
import importlib.util
import sys
import time


def main(module_path):
    def check(what, ok, detail=""):
        print(("ok   " if ok else "FAIL ") + what + (f": {detail}" if detail and not ok else ""))
        if not ok:
            sys.exit(1)

    spec = importlib.util.spec_from_file_location("fa", module_path)
    fa = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fa)
    import torch
    import torch.nn.functional as F

    check("exporting flash_attn brings its variant", "flash_attn_hopper" in fa.kernels(), sorted(fa.kernels()))
    major, _ = torch.cuda.get_device_capability()
    b, h, s, d, causal = 2, 3, 300, 64, 1
    problem = dict(B=b, H=h, S=s, D=d, causal=causal)
    # Without tuning records: the default of the kernel whose cubin this GPU prefers.
    records = list(fa._TUNING)
    fa._TUNING.clear()
    picked = fa.best("flash_attn", **problem)
    want = "flash_attn_hopper" if major == 9 else "flash_attn"
    check(f"without records best() picks {want} on compute capability {major}.x", picked.kernel == want,
          f"{picked.kernel} {picked.config}")
    # With them: the recorded winner of the nearest problem, whichever kernel it is.
    fa._TUNING.extend(records)
    fa._tuning_index.clear()
    tuned = fa.best("flash_attn", B=32, H=32, S=512, D=d, causal=causal)
    print(f"     with kart.tune's records, 32x32x512: {tuned.kernel}[{fa._config_text(tuned.config)}]")
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)

    def error(o):
        return float((o.float() - ref).norm() / ref.norm())

    mma = fa.load("flash_attn", **fa._default_config("flash_attn", problem))
    for name, run in [
        ("launch()", lambda o: fa.launch("flash_attn", q, k, v, o, s, problem=problem)),
        ("the tuned pick's launcher", lambda o: tuned.launch(q, k, v, o, s, problem=problem)),
        (f"{picked.kernel}'s launcher", lambda o: picked.launch(q, k, v, o, s, problem=problem)),
        ("flash_attn's launcher", lambda o: mma.launch(q, k, v, o, s, problem=problem)),
    ]:
        o = torch.full_like(q, float("nan"))
        run(o)
        torch.cuda.synchronize()
        check(f"{name} matches PyTorch's attention", error(o) < 2e-3, error(o))
    op = fa.torch_op("flash_attn", mutates=[3], problem=("B", "H", "S", "D", "causal"))
    o = torch.full_like(q, float("nan"))
    op(q, k, v, o, s, b, h, s, d, causal)
    torch.cuda.synchronize()
    check("torch_op over the family takes the call's arguments", error(o) < 2e-3, error(o))
    if picked.kernel == "flash_attn_hopper":
        check("the tensor maps of repeated calls are reused", len(picked._maps) == 3, len(picked._maps))
        for bad, kind, phrase in [
            (q.float(), TypeError, "torch.float32 tensor"),
            (q.transpose(1, 2), ValueError, "not contiguous"),
            (q[:1], ValueError, "of 115200 elements"),
        ]:
            try:
                picked.launch(bad, k, v, o, s, problem=problem)
                check(f"a bad q ({phrase}) is refused", False, "launched")
            except kind as e:
                check(f"a bad q ({phrase}) is refused", phrase in str(e), e)
    for launcher in (picked, mma):
        o = torch.empty_like(q)
        launcher.launch(q, k, v, o, s, problem=problem)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(2000):
            launcher.launch(q, k, v, o, s, problem=problem)
        cost = (time.perf_counter() - start) / 2000 * 1e6
        torch.cuda.synchronize()
        print(f"     {launcher.kernel}: {cost:.1f} µs of CPU per launch() (2000 calls)")
    print("all variant checks passed")


if __name__ == "__main__":
    main(sys.argv[1])
