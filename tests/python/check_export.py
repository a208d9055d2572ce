"""Checks a module written by `kart export --python` without a GPU (standard library
only). Run by the Rust test `exports_a_python_module...` in tests/cli:

    python3 tests/python/check_export.py MODULE.py crates/kart-runtime/tests/data/resolution.json kart.lock crates/kart-runtime/tests/data/expr.json

It imports the module, runs the resolver and the expression evaluator over the shared
tables of cases (the same ones kart's own tests use), computes [launch] geometry, and checks
that bad calls are refused before the driver is touched and that a corrupted embedded
cubin is refused. Prints one line per check; exits 1 on the first failure.
"""
import hashlib
import importlib.util
import json
import sys


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
    import random

    rng = random.Random(7)
    for _ in range(200):
        problem = {"N": rng.randrange(1, 1 << 20), "M": rng.randrange(1, 64)}
        gpu = rng.choice(["NVIDIA H200", "NVIDIA H100 80GB HBM3"])
        first = mod.best("grid", gpu=gpu, **problem)
        again = mod.best("grid", gpu=gpu, **problem)
        slow = mod._best_uncached("grid", gpu, problem)
        if not (first is again and first.config == slow.config and first.entry == slow.entry):
            check("memoized best() answers what the unmemoized one does", False, problem)
    check("memoized best() answers what the unmemoized one does (200 random problems, repeats hit)", True)
    # The trace (KART_TRACE): a best() answer without a record of its own is written
    # once, as one line in the runtime crate's format; a repeat writes nothing.
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace.jsonl")
        mod._TRACE_PATH = trace
        try:
            mod.best("grid", gpu="NVIDIA H200", capability=(9, 0), N=77)
            mod.best("grid", gpu="NVIDIA H200", capability=(9, 0), N=77)
        finally:
            mod._TRACE_PATH = None
        with open(trace) as f:
            lines = [json.loads(line) for line in f]
        check("best() falling back to the default is traced once", lines == [{
            "event": "fallback", "kernel": "grid", "problem": {"N": 77}, "gpu": "NVIDIA H200",
            "capability": "9.0", "chose": "grid", "config": {"A": 1, "B": 16}, "source": "default"}], lines)
    check("tracing touched no GPU", mod._driver is None)
    launcher = mod.load("grid", A=1, B=16)
    check("a launcher is made without the GPU", mod._driver is None)
    dims = launcher.dims(N=100)
    check("[launch] geometry from the config, a derived param and the problem",
          dims == ((7, 2, 1), (16, 1, 1), 64), dims)
    check("dims() takes the problem as launch() does", launcher.dims(problem=dict(N=100)) == dims)
    check("best() takes the problem as launch() does",
          mod.best("grid", gpu="NVIDIA H200", problem=dict(N=4096)).config == {"A": 1, "B": 16})
    try:
        launcher.dims(M=100)
        check("a problem lacking a key is refused", False)
    except mod.ExprError as e:
        check("a problem lacking a key is refused, naming it", "unknown name `N`" in str(e) and "has M" in str(e), e)
    # SMS: the GPU's multiprocessors unless the problem names it (persistent kernels).
    saved = mod._LAUNCH["grid"]
    mod._LAUNCH["grid"] = {**saved, "grid": ["min(cdiv(N, B), SMS * WAYS)", "WAYS"]}
    mod._parsed.pop("grid", None)
    try:
        check("SMS from the problem", launcher.dims(N=10000, SMS=3) == ((6, 2, 1), (16, 1, 1), 64),
              launcher.dims(N=10000, SMS=3))
        try:
            got = launcher.dims(N=10000)
            check(f"SMS from the GPU: {got}", got[0][0] == min(625, 2 * mod._multiprocessors(0)))
        except mod.KartError as e:
            check(f"SMS without a GPU: a clear error: {e}", "no CUDA driver" in str(e) or "CUDA error" in str(e))
    finally:
        mod._LAUNCH["grid"], mod._sm_counts = saved, {}
        mod._parsed.pop("grid", None)
    try:
        mod.load("grid", A=3, B=16)
        check("an unexported config is refused", False)
    except mod.KartError as e:
        check("an unexported config is refused, naming what exists", "exported: A=1,B=16" in str(e), e)
        check("the export command it suggests writes a file", "kart export --python -o " in str(e), e)
    filled = mod.load("grid", A=1)
    check("a partial config is filled from the kernel's default", filled.config == {"A": 1, "B": 16}, filled.config)
    saved_spec = mod._TUNE_SPEC["grid"]
    mod._TUNE_SPEC["grid"] = {**saved_spec, "default": {}}
    try:
        mod.load("grid", A=1)
        check("a partial config without a default is refused", False)
    except mod.KartError as e:
        check("a partial config without a default is refused, naming every param",
              "takes every param of grid (A, B)" in str(e), e)
    finally:
        mod._TUNE_SPEC["grid"] = saved_spec
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
    for grid, block in (((0,), (32,)), ((1,), [32, 0]), ((1, 1, 1, 1), 32)):
        try:
            launcher(grid, block, 1 << 40, 5)
            check(f"refuses grid {grid}, block {block}", False)
        except ValueError as e:
            check(f"refuses grid {grid}, block {block} before the driver: {e}", mod._driver is None)
    # The fast path (a declared signature): one struct format into reused slots. Its
    # bytes equal the general path's, and it refuses a tensor on another device.
    import struct

    class FakeTensor:  # what the fast path reads of a torch tensor
        def __init__(self, pointer, device):
            self.pointer, self.device = pointer, device

        def data_ptr(self):
            return self.pointer

        def get_device(self):
            return self.device

    bound = mod._Bound(None, 1, 0, {"sha256": "0" * 64}, 1)
    for _ in range(200):
        args = (FakeTensor(rng.randrange(1, 1 << 48), 0), rng.randrange(-(1 << 31), 1 << 31))
        launcher._pack_slots(args, bound.ordinal)
        general = b"".join(bytes(c).ljust(8, b"\0") for c in mod._pack("grid", launcher._info, args))
        if bytes(launcher._slots) != general:
            check("the fast path packs what the general path packs", False, args)
    check("the fast path packs what the general path packs (200 random calls)", True)
    for device, place in ((1, "cuda:1"), (-1, "the CPU")):
        try:
            launcher._pack_slots((FakeTensor(1 << 40, device), 5), bound.ordinal)
            check(f"refuses a tensor on {place}", False)
        except mod.WrongDevice as e:
            check(f"refuses a tensor on {place}: {e}", place in str(e) and "cuda:0" in str(e))
    for args in [(1 << 40,), (object(), 7), (1 << 40, "seven"), (1 << 40, True)]:
        try:
            launcher._pack_slots(args, bound.ordinal)
            check(f"the fast path does not pack {args!r}", False)
        except (TypeError, ValueError, struct.error):
            pass
    check("the fast path hands every bad call to the general path's errors", True)
    # The packer written out for a signature of every slot kind packs what the general
    # path packs, and one of a single argument unpacks it as one.
    kinds = [k for k in mod._SLOT_FORMATS if k != "tensormap"]
    info = {"signature": kinds, "params": [8] * len(kinds)}
    fmt = "<" + "".join(mod._SLOT_FORMATS[k] for k in kinds)
    slots = (mod.ctypes.c_uint64 * len(kinds))()
    pack = mod._slot_packer("every", tuple(kinds), fmt, slots, (mod.ctypes.c_void_p * len(kinds))())
    for _ in range(200):
        args = []
        for kind in kinds:
            if kind == "ptr":
                args.append(FakeTensor(rng.randrange(1, 1 << 48), 0))
            elif kind in ("f16", "bf16", "f32", "f64"):
                args.append(rng.uniform(-1000.0, 1000.0))
            else:
                low, high = mod._INT_RANGES[kind]
                args.append(rng.randrange(low, high))
        pack(tuple(args), 0)
        general = b"".join(bytes(c).ljust(8, b"\0") for c in mod._pack("every", info, args))
        if bytes(slots) != general:
            check("the written-out packer packs what the general path packs", False, args)
    check("the written-out packer packs what the general path packs, every slot kind (200 calls)", True)
    # A tensor map's parameter points at the map's own bytes; a map of another GPU or
    # something else in its place goes to the general path's errors.
    params = (mod.ctypes.c_void_p * 2)()
    maps = mod._slot_packer("maps", ("tensormap", "i32"), "<8xi4x", (mod.ctypes.c_uint64 * 2)(), params)
    tmap = mod.TensorMap()
    maps((tmap, 3), 0)
    check("a tensor map's parameter points at its bytes", params[0] == mod.ctypes.addressof(tmap.raw))
    tmap.device = 1
    for args, error in [((tmap, 3), mod.WrongDevice), ((1 << 40, 3), TypeError)]:
        try:
            maps(args, 0)
            check(f"the packer refuses {error.__name__}", False)
        except error:
            check(f"the packer refuses {error.__name__}", True)
    one = mod._slot_packer("one", ("i32",), "<i4x", (mod.ctypes.c_uint64 * 1)(), (mod.ctypes.c_void_p * 1)())
    one((7,), 0)
    try:
        one((7, 8), 0)
        check("a one-argument packer refuses two", False)
    except ValueError:
        check("a one-argument packer refuses two", True)

    # A well-formed call reaches the driver; this machine may not have one.
    try:
        launcher(1, 32, 1 << 40, 5)
        check("launch on a GPU (no error)", True)
    except mod.KartError as e:
        check(f"without a driver, a clear error: {e}", "no CUDA driver" in str(e) or "CUDA error" in str(e))

    for artifact in mod._artifacts():
        check(f"embedded {artifact['target']} cubin verifies", len(mod._cubin(artifact)) == artifact["size"])
    check_corrupted_copy(module_path, mod._artifacts(), check)
    print("all checks passed")


def check_corrupted_copy(module_path, artifacts, check):
    """One character of one embedded cubin changed in a copy of the module: importing
    it reads no record, load() of that cubin's config still works (nothing decoded),
    the other cubins verify, and that one is refused with a clear message."""
    import os
    import tempfile

    with open(module_path, "rb") as f:
        text = bytearray(f.read())
    victim = artifacts[0]
    spec = importlib.util.spec_from_file_location("exported_original", module_path)
    original = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(original)
    offset, length = victim["blob"]
    at = original._BLOBS_AT + offset + length // 2
    text[at] = ord("A") if text[at] != ord("A") else ord("B")
    with tempfile.TemporaryDirectory() as folder:
        copy = os.path.join(folder, "corrupted.py")
        with open(copy, "wb") as f:
            f.write(bytes(text))
        spec = importlib.util.spec_from_file_location("corrupted", copy)
        bad = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(bad)
        check("import reads no artifact record", not bad._by_config and not bad._all_records)
        launcher = bad.load(victim["kernel"], **victim["config"])
        check("load() of the corrupted cubin's config decodes nothing", launcher.config == victim["config"])
        check("load() parses only its config's records", not bad._all_records)
        for other in (a for a in artifacts if a["sha256"] != victim["sha256"]):
            check(f"another cubin ({other['target']}) still verifies", len(bad._cubin(other)) == other["size"])
        try:
            bad._cubin(victim)
            check("a corrupted embedded cubin is refused", False)
        except bad.KartError as e:
            check("a corrupted embedded cubin is refused", "is corrupt" in str(e) and "export the module again" in str(e), e)


if __name__ == "__main__":
    main(*sys.argv[1:5])
