"""Checks a module written by `kart export --python` without a GPU (standard library
only). Run by the Rust test `exports_a_python_module...` in tests/cli:

    python3 tests/python/check_export.py MODULE.py tests/data/resolution.json kart.lock tests/data/expr.json

It imports the module, runs the resolver and the expression evaluator over the shared
tables of cases (the same ones kart's own tests use), computes [launch] geometry, and checks
that bad calls are refused before the driver is touched and that a corrupted embedded
cubin is refused. Prints one line per check; exits 1 on the first failure.
"""
import base64
import hashlib
import importlib.util
import json
import sys
import zlib


def main(module_path, cases_path, lock_path, expr_path):
    spec = importlib.util.spec_from_file_location("exported", module_path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    def check(what, ok, detail=""):
        print(("ok   " if ok else "FAIL ") + what + (f": {detail}" if detail and not ok else ""))
        if not ok:
            sys.exit(1)

    check("import touches no GPU", mod._driver is None)
    with open(lock_path, "rb") as f:
        check("records the lock's sha256", mod.LOCK_SHA256 == hashlib.sha256(f.read()).hexdigest())
    check("records kart's version", bool(mod.KART_VERSION))

    with open(cases_path) as f:
        cases = json.load(f)
    for case in cases:
        device = tuple(int(x) for x in case["device"].split("."))
        got = mod._resolve(device, case["available"], allow_ptx=case["policy"] == "allow_ptx")
        check(f"resolution: {case['why']}", got == case["expect"], f"{case} -> {got}")

    with open(expr_path) as f:
        expr_cases = json.load(f)
    for case in expr_cases:
        try:
            got = mod.evaluate(case["expr"], case.get("env", {}))
            ok = "error" not in case and got == case["value"]
        except mod.ExprError as e:
            got = (e.kind, e.at, str(e))
            ok = e.kind == case.get("error") and case.get("at", e.at) == e.at
        check(f"expression {case['expr']!r}", ok, f"{case} -> {got}")

    exported = mod.kernels()
    check("lists the exported configs", exported == {"grid": [{"A": 1, "B": 16}, {"A": 2, "B": 16}]},
          exported)
    chosen = mod.best("grid", gpu="NVIDIA H200", N=4096)
    check("best() without records gives the default", chosen.config == {"A": 1, "B": 16}, chosen.config)
    launcher = mod.load("grid", A=1, B=16)
    check("a launcher is made without the GPU", mod._driver is None)
    dims = launcher.dims(N=100)
    check("[launch] geometry from the config, a derived param and the problem",
          dims == ((7, 2, 1), (16, 1, 1), 64), dims)
    try:
        launcher.dims(M=100)
        check("a problem lacking a key is refused", False)
    except mod.ExprError as e:
        check("a problem lacking a key is refused, naming it", "unknown name `N`" in str(e) and "has M" in str(e), e)
    try:
        mod.load("grid", A=3, B=16)
        check("an unexported config is refused", False)
    except mod.KartError as e:
        check("an unexported config is refused, naming what exists", "exported: A=1,B=16" in str(e), e)
    for args, error, what in [
        ((1 << 40,), TypeError, "the wrong number of arguments"),
        ((object(), 7), TypeError, "an object for a pointer"),
        ((1 << 40, "seven"), TypeError, "a string for an i32"),
        ((1 << 40, 1 << 40), OverflowError, "an int that does not fit an i32"),
        ((1 << 40, True), TypeError, "a bool for an i32"),
    ]:
        try:
            launcher((1,), (32,), *args)
            check(f"refuses {what}", False)
        except error as e:
            check(f"refuses {what}: {e}", mod._driver is None)
    # A well-formed call reaches the driver; this machine may not have one.
    try:
        launcher(1, 32, 1 << 40, 5)
        check("launch on a GPU (no error)", True)
    except mod.KartError as e:
        check(f"without a driver, a clear error: {e}", "no CUDA driver" in str(e) or "CUDA error" in str(e))

    for artifact in mod._ARTIFACTS:
        check(f"embedded {artifact['target']} cubin verifies", len(mod._cubin(artifact)) == artifact["size"])
    artifact = mod._ARTIFACTS[0]
    data = bytearray(zlib.decompress(base64.b64decode(mod._BLOBS[artifact["sha256"]])))
    data[len(data) // 2] ^= 0xFF
    mod._BLOBS[artifact["sha256"]] = base64.b64encode(zlib.compress(bytes(data)))
    try:
        mod._cubin(artifact)
        check("a corrupted embedded cubin is refused", False)
    except mod.KartError as e:
        check("a corrupted embedded cubin is refused", "corrupt" in str(e), e)
    print("all checks passed")


if __name__ == "__main__":
    main(*sys.argv[1:5])
