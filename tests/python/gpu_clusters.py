"""Cluster and programmatic dependent launches of an exported module, on a real GPU
(run by the GPU test `cluster_and_pdl_launches_from_launch_rules`):

    kart export --python -o ck.py ranks:CLUSTER=2 ranks:CLUSTER=4 chain
    python3 tests/python/gpu_clusters.py ck.py

`ranks` writes, per block, `clusterid.x * 65536 + cluster size * 256 + rank`; its
[launch] says `cluster = ["CLUSTER", 1, 1]`, so every launch below launches in clusters
without the caller passing one: `launch()`, `torch_op`, and a `torch_op` captured in a
CUDA graph and replayed. `chain` (y = x + 1, [launch] pdl = true) is launched twice on
one stream with programmatic dependent launch. Exits 1 on the first failure.
"""
import importlib.util
import sys


def main(module_path):
    def check(what, ok, detail=""):
        print(("ok   " if ok else "FAIL ") + what + (f": {detail}" if detail and not ok else ""))
        if not ok:
            sys.exit(1)

    spec = importlib.util.spec_from_file_location("ck", module_path)
    ck = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ck)
    import torch

    n = 16

    def want(c):
        return [(b // c) * 65536 + c * 256 + b % c for b in range(n)]

    for c in (2, 4):
        out = torch.full((n,), -1, dtype=torch.int32, device="cuda")
        ck.launch("ranks", out, n, problem=dict(N=n), CLUSTER=c)
        torch.cuda.synchronize()
        check(f"launch(): clusters of {c} from [launch]", out.tolist() == want(c), out.tolist())
        try:
            ck.launch("ranks", out, n, problem=dict(N=c + 1), CLUSTER=c)
            check(f"a grid of {c + 1} blocks in clusters of {c} is refused", False)
        except ck.KartError as e:
            check(f"a grid of {c + 1} blocks in clusters of {c} is refused, naming both",
                  f"grid ({c + 1}, 1, 1) is not a whole number of clusters ({c}, 1, 1)" in str(e)
                  and f"ranks[CLUSTER={c}]" in str(e), e)

    op = ck.torch_op("ranks", mutates=[0], problem=("N",), name="ranks4", CLUSTER=4)
    out = torch.full((n,), -1, dtype=torch.int32, device="cuda")
    op(out, n, n)
    torch.cuda.synchronize()
    check("torch_op: clusters of 4", out.tolist() == want(4), out.tolist())

    out.fill_(-1)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        op(out, n, n)
    out.fill_(-1)
    torch.cuda.synchronize()
    graph.replay()
    torch.cuda.synchronize()
    check("a CUDA graph of the torch_op replays clusters of 4", out.tolist() == want(4), out.tolist())

    count = 1 << 20
    x = torch.arange(count, device="cuda", dtype=torch.float32) % 1000
    y = torch.full_like(x, float("nan"))
    z = torch.full_like(x, float("nan"))
    chain = ck.load("chain")
    check("chain's [launch] allows programmatic dependent launch",
          ck._geometry("chain", chain._env, {"N": count})[4] is True)
    ck.launch("chain", x, y, count, problem=dict(N=count))
    ck.launch("chain", y, z, count, problem=dict(N=count))
    torch.cuda.synchronize()
    check("two launches with programmatic dependent launch: z = x + 2", torch.equal(z, x + 2))
    print("all cluster checks passed")


if __name__ == "__main__":
    main(sys.argv[1])
