
from __future__ import annotations

import base64
import ctypes
import hashlib
import json
import math
import os
import struct
import sys
import threading
import zlib

__all__ = ["ExprError", "KartError", "Launcher", "NoCubinForThisGPU", "TensorMap", "WrongDevice", "best", "kernels",
           "launch", "load", "preload", "tensor_map", "torch_op"]


class KartError(RuntimeError):
    """A kernel cannot be loaded or launched here; the message says why and what to do."""


class NoCubinForThisGPU(KartError):
    """None of the exported cubins of a kernel config runs on this GPU."""


class WrongDevice(KartError, ValueError):
    """A tensor or array lives on another device than the launch (launching would run
    the kernel on one GPU with another's pointers: an illegal memory access that
    poisons the context)."""


# --- Expressions of kernel.toml ([launch]), with the same rules as kart's evaluator:
# 64-bit integers, `/` and `%` truncating toward zero as in C, cdiv rounding up,
# comparisons and logic giving 1 or 0, overflow and division by zero as errors. The
# table crates/kart-runtime/tests/data/expr.json is checked against both.


class ExprError(KartError):
    """An expression failed: `kind` is syntax, unknown_name, division_by_zero,
    not_integer or overflow; `at` is the byte offset in the expression's text."""

    def __init__(self, kind, message, at):
        super().__init__(message)
        self.kind, self.at = kind, at


_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
_OPS = ("&&", "||", "==", "!=", "<=", ">=", "<", ">", "+", "-", "*", "/", "%", "!", "(", ")", ",")


def _tokens(text):
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c in " \t\r\n":
            i += 1
        elif c.isascii() and c.isdigit():
            j = i
            while j < len(text) and text[j].isascii() and text[j].isalnum():
                j += 1
            word = text[i:j]
            if not word.isdigit():
                raise ExprError("syntax", f"`{word}` is not an integer", i)
            if int(word) > _I64_MAX:
                raise ExprError("overflow", f"`{word}` does not fit in a 64-bit integer", i)
            out.append(("int", int(word), i, j))
            i = j
        elif c.isascii() and (c.isalpha() or c == "_"):
            j = i
            while j < len(text) and text[j].isascii() and (text[j].isalnum() or text[j] == "_"):
                j += 1
            out.append(("name", text[i:j], i, j))
            i = j
        else:
            op = next((o for o in _OPS if text.startswith(o, i)), None)
            if op is None:
                raise ExprError("syntax", f"unexpected `{c}`", i)
            out.append(("op", op, i, i + len(op)))
            i += len(op)
    return out


def _checked(value, at):
    if not _I64_MIN <= value <= _I64_MAX:
        raise ExprError("overflow", "the result does not fit in a 64-bit integer", at)
    return value


def _tdiv(a, b, at):
    if b == 0:
        raise ExprError("division_by_zero", "division by zero", at)
    q = abs(a) // abs(b)
    return _checked(q if (a < 0) == (b < 0) else -q, at)


def _trem(a, b, at):
    if b == 0:
        raise ExprError("division_by_zero", "division by zero", at)
    return a - b * _tdiv(a, b, at)


def _cdiv(a, b, at):
    q = _tdiv(a, b, at)
    return _checked(q + 1 if a % b != 0 and (a < 0) == (b < 0) else q, at)


class _Parser:
    """Recursive descent over the same grammar as kart's: || < && < comparison (not
    chained) < + - < * / % < unary ! - < atoms (ints, names, calls, parentheses). The
    result is a tree of tuples (start, kind, ...) evaluated by `_eval`."""

    _COMPARE = ("==", "!=", "<=", ">=", "<", ">")

    def __init__(self, text):
        self.text, self.toks, self.pos = text, _tokens(text), 0

    def peek(self):
        t = self.toks[self.pos] if self.pos < len(self.toks) else None
        return t[1] if t and t[0] == "op" else None

    def here(self):
        return self.toks[self.pos][2] if self.pos < len(self.toks) else len(self.text)

    def eat(self, op):
        if self.peek() == op:
            self.pos += 1
            return True
        return False

    def parse(self):
        node = self.binary(0)
        if self.pos < len(self.toks):
            t = self.toks[self.pos]
            raise ExprError("syntax", f"unexpected `{self.text[t[2]:t[3]]}`", t[2])
        return node

    _LEVELS = (("||",), ("&&",), None, ("+", "-"), ("*", "/", "%"))

    def binary(self, level):
        if level == 2:
            return self.comparison()
        if level == len(self._LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while self.peek() in self._LEVELS[level]:
            op = self.toks[self.pos][1]
            self.pos += 1
            left = (left[0], "bin", op, left, self.binary(level + 1))
        return left

    def comparison(self):
        left = self.binary(3)
        op = self.peek()
        if op in self._COMPARE:
            self.pos += 1
            right = self.binary(3)
            if self.peek() in self._COMPARE:
                raise ExprError("syntax", "comparisons do not chain: write `a < b && b < c`", self.here())
            return (left[0], "bin", op, left, right)
        return left

    def unary(self):
        start = self.here()
        for op in ("!", "-"):
            if self.eat(op):
                return (start, op, self.unary())
        return self.atom()

    def atom(self):
        if self.pos >= len(self.toks):
            raise ExprError("syntax", "the expression ends too soon", len(self.text))
        kind, value, start, _ = self.toks[self.pos]
        self.pos += 1
        if kind == "int":
            return (start, "int", value)
        if kind == "op" and value == "(":
            inner = self.binary(0)
            if not self.eat(")"):
                raise ExprError("syntax", "missing `)`", self.here())
            return inner
        if kind == "name" and self.peek() == "(":
            if value not in ("min", "max", "cdiv"):
                raise ExprError("syntax", f"unknown function `{value}` (there are min, max, cdiv)", start)
            self.pos += 1
            args = []
            if not self.eat(")"):
                while True:
                    args.append(self.binary(0))
                    if self.eat(")"):
                        break
                    if not self.eat(","):
                        raise ExprError("syntax", "expected `,` or `)`", self.here())
            if (value == "cdiv" and len(args) != 2) or not args:
                raise ExprError("syntax", f"`{value}` takes {'two arguments' if value == 'cdiv' else 'one or more arguments'}", start)
            return (start, "call", value, args)
        if kind == "name":
            return (start, "name", value)
        raise ExprError("syntax", f"unexpected `{value}`", start)


def _eval(node, env):
    at, kind = node[0], node[1]
    if kind == "int":
        return node[2]
    if kind == "name":
        if node[2] not in env:
            raise ExprError("unknown_name", f"unknown name `{node[2]}`", at)
        value = env[node[2]]
        if isinstance(value, bool) or not isinstance(value, int):
            raise ExprError("not_integer", f"`{node[2]}` is `{value}`, not an integer", at)
        return value
    if kind == "!":
        return int(_eval(node[2], env) == 0)
    if kind == "-":
        return _checked(-_eval(node[2], env), at)
    if kind == "call":
        values = [_eval(a, env) for a in node[3]]
        return {"min": min, "max": max}[node[2]](values) if node[2] != "cdiv" else _cdiv(*values, at)
    op, left = node[2], node[3]
    if op == "&&":
        return int(_eval(left, env) != 0 and _eval(node[4], env) != 0)
    if op == "||":
        return int(_eval(left, env) != 0 or _eval(node[4], env) != 0)
    a, b = _eval(left, env), _eval(node[4], env)
    if op in ("/", "%"):
        return (_tdiv if op == "/" else _trem)(a, b, at)
    return _checked({"+": a + b, "-": a - b, "*": a * b, "==": int(a == b), "!=": int(a != b),
                     "<": int(a < b), "<=": int(a <= b), ">": int(a > b), ">=": int(a >= b)}[op], at)


def evaluate(text, env):
    """The value of expression `text` over `env` (a dict of names to ints)."""
    return _eval(_Parser(text).parse(), env)


_parsed = {}
_sm_counts = {}  # device argument -> multiprocessors
_ATTR_MULTIPROCESSORS = 16


def _multiprocessors(device):
    count = _sm_counts.get(device)
    if count is None:
        lib = _cuda()
        _, ordinal = _current_context(lib, device)
        dev, value = ctypes.c_int(), ctypes.c_int()
        _check(lib, lib.cuDeviceGet(ctypes.byref(dev), ordinal), "cuDeviceGet")
        _check(lib, lib.cuDeviceGetAttribute(ctypes.byref(value), _ATTR_MULTIPROCESSORS, dev), "cuDeviceGetAttribute")
        count = _sm_counts[device] = value.value
    return count


def _geometry(kernel, config, problem, device=0, name=None):
    """(grid, block, shared_mem, cluster, pdl) from the kernel's [launch] over a config
    (params and derived params, which win) and a problem: cluster is None without
    `cluster`, pdl whether programmatic dependent launch is allowed. `SMS` is the
    multiprocessor count of GPU `device` unless the problem names it (persistent kernels
    size their grid by it). `name` (kernel[config].entry) is what errors call it."""
    spec = _LAUNCH.get(kernel)
    if spec is None:
        raise KartError(f"{kernel} declares no [launch] in its kernel.toml: pass grid and block yourself")
    name = name or kernel
    cluster_texts, pdl_text = spec.get("cluster", []), spec.get("pdl")
    texts = [*spec["grid"], *spec["block"], spec["shared_mem"], *cluster_texts, pdl_text or ""]
    if "SMS" not in problem and any("SMS" in text for text in texts):
        problem = {**problem, "SMS": _multiprocessors(device)}
    env = {**problem, **config}
    trees = _parsed.get(kernel)
    if trees is None:
        trees = _parsed[kernel] = (
            [_Parser(t).parse() for t in spec["grid"]],
            [_Parser(t).parse() for t in spec["block"]],
            _Parser(spec["shared_mem"]).parse(),
            [_Parser(t).parse() for t in cluster_texts],
            None if pdl_text is None else _Parser(pdl_text).parse(),
        )

    def value(tree, what, text, low):
        try:
            v = _eval(tree, env)
        except ExprError as e:
            keys = ", ".join(sorted(problem)) or "no keys"
            raise ExprError(e.kind, f"{name}: [launch] {what} = \"{text}\": {e} (the problem has {keys})",
                            e.at) from None
        if not low <= v <= 0xFFFFFFFF:
            raise KartError(f"{name}: [launch] {what} is {v}, outside what a launch takes")
        return v

    def three(what, index):
        values = tuple(value(t, f"{what}[{i}]", spec[what][i], 1) for i, t in enumerate(trees[index]))
        return values + (1,) * (3 - len(values))

    grid, block = three("grid", 0), three("block", 1)
    shared = value(trees[2], "shared_mem", spec["shared_mem"], 0)
    cluster = three("cluster", 3) if cluster_texts else None
    if cluster is not None and any(g % c for g, c in zip(grid, cluster)):
        raise KartError(f"{name}: [launch] grid {grid} is not a whole number of clusters {cluster}: each grid side "
                        "must be a multiple of the cluster's")
    pdl = trees[4] is not None and value(trees[4], "pdl", pdl_text, 0) != 0
    return grid, block, shared, cluster, pdl


# --- Resolution: which exported cubin a GPU can run (the same rules as kart's runtime).


def _parse_target(target):
    """`sm_90a` -> (9, 0, "a"); `sm_100f` -> (10, 0, "f"); `sm_80` -> (8, 0, "")."""
    digits = target[3:]
    variant = digits[-1] if digits[-1] in "af" else ""
    number = int(digits[:-1] if variant else digits)
    return number // 10, number % 10, variant


def _cubin_fit(target, device):
    """How well a cubin for `target` fits a GPU of capability `device` (higher is
    better), or None when it cannot run there: `a` only on its exact capability, `f`
    and plain on the same major with an equal or lower minor, never across majors."""
    major, minor, variant = _parse_target(target)
    if major != device[0] or minor > device[1]:
        return None
    if variant == "a":
        return (minor, 3) if minor == device[1] else None
    return (minor, 2 if variant == "f" else 1)


def _ptx_fit(target, device):
    major, minor, variant = _parse_target(target)
    if variant == "a":
        ok = (major, minor) == tuple(device)
    elif variant == "f":
        ok = major == device[0] and minor <= device[1]
    else:
        ok = (major, minor) <= tuple(device)
    return (major * 10 + minor, 0) if ok else None


def _resolve(device, available, allow_ptx=False):
    """The best of `available` (targets, `sm_80:ptx` for PTX) for `device` (major,
    minor): a cubin if any fits, PTX only when allowed (this module holds cubins only)."""
    cubins = [(_cubin_fit(t, device), t) for t in available if not t.endswith(":ptx")]
    cubins = [(fit, t) for fit, t in cubins if fit is not None]
    if cubins:
        return max(cubins)[1]
    if allow_ptx:
        ptx = [(_ptx_fit(t[:-4], device), t) for t in available if t.endswith(":ptx")]
        ptx = [(fit, t) for fit, t in ptx if fit is not None]
        if ptx:
            return max(ptx)[1]
    return None


# --- The CUDA driver, through ctypes (nothing is loaded until the first kernel is).

_lock = threading.RLock()
_driver = None
_modules = {}  # (context, sha256) -> CUmodule
_functions = {}  # (context, sha256, entry) -> CUfunction
_shared_allowed = {}  # (context, sha256, entry) -> bytes of dynamic shared memory allowed

_ATTR_CC_MAJOR, _ATTR_CC_MINOR = 75, 76
_FUNC_ATTR_MAX_DYNAMIC_SHARED = 8
_DEFAULT_SHARED_LIMIT = 48 * 1024


def _cuda():
    global _driver, _get_context, _launch_ex
    with _lock:
        if _driver is None:
            names = ["nvcuda.dll"] if sys.platform == "win32" else ["libcuda.so.1", "libcuda.so"]
            for name in names:
                try:
                    lib = ctypes.CDLL(name)
                    break
                except OSError:
                    continue
            else:
                raise KartError(
                    "no CUDA driver: libcuda could not be loaded; "
                    "run on a machine with an NVIDIA GPU and its driver"
                )
            _declare(lib)
            _check(lib, lib.cuInit(0), "cuInit")
            _get_context, _launch_ex = _unchecked(lib, "cuCtxGetCurrent"), _unchecked(lib, "cuLaunchKernelEx")
            _driver = lib
        return _driver


def _declare(lib):
    p, u, i = ctypes.c_void_p, ctypes.c_uint, ctypes.c_int
    pp = ctypes.POINTER(ctypes.c_void_p)
    signatures = {
        "cuInit": [u],
        "cuDriverGetVersion": [ctypes.POINTER(i)],
        "cuGetErrorName": [i, ctypes.POINTER(ctypes.c_char_p)],
        "cuCtxGetCurrent": [pp],
        "cuCtxSetCurrent": [p],
        "cuCtxGetDevice": [ctypes.POINTER(i)],
        "cuDeviceGet": [ctypes.POINTER(i), i],
        "cuDeviceGetAttribute": [ctypes.POINTER(i), i, i],
        "cuDeviceGetName": [ctypes.c_char_p, i, i],
        "cuDevicePrimaryCtxRetain": [pp, i],
        "cuModuleLoadData": [pp, ctypes.c_char_p],
        "cuModuleGetFunction": [pp, p, ctypes.c_char_p],
        "cuFuncSetAttribute": [p, i, i],
        "cuLaunchKernel": [p, u, u, u, u, u, u, u, p, pp, pp],
        "cuPointerGetAttribute": [p, i, ctypes.c_uint64],
        "cuTensorMapEncodeTiled": [p, i, u, p, p, p, p, p, i, i, i, i],
        "cuLaunchKernelEx": [p, p, pp, pp],
    }
    for name, argtypes in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, i
    if hasattr(lib, "cuFuncLoad"):  # CUDA 12.4+
        lib.cuFuncLoad.argtypes, lib.cuFuncLoad.restype = [p], i


def _unchecked(lib, name):
    """Driver function `name` without argtypes, for arguments already converted to
    ctypes: ctypes' per-call conversion costs about as much as a launch itself."""
    fn = lib[name]  # indexing makes a new function object
    fn.restype = ctypes.c_int
    return fn


_get_context = _launch_ex = None  # cuCtxGetCurrent and cuLaunchKernelEx, unchecked


def _check(lib, result, call):
    if result != 0:
        name = ctypes.c_char_p()
        lib.cuGetErrorName(result, ctypes.byref(name))
        text = name.value.decode() if name.value else "unknown"
        raise KartError(f"{call} failed: CUDA error {result} ({text})")


def _current_context(lib, device):
    """The calling thread's current context (PyTorch's or CuPy's), else device
    `device`'s primary context, made current."""
    ctx = ctypes.c_void_p()
    _check(lib, lib.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
    if not ctx.value:
        dev = ctypes.c_int()
        _check(lib, lib.cuDeviceGet(ctypes.byref(dev), device), f"cuDeviceGet({device})")
        _check(lib, lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        _check(lib, lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    ordinal = ctypes.c_int()
    _check(lib, lib.cuCtxGetDevice(ctypes.byref(ordinal)), "cuCtxGetDevice")
    return ctx.value, ordinal.value


def _capability(lib, ordinal):
    dev, major, minor = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    _check(lib, lib.cuDeviceGet(ctypes.byref(dev), ordinal), "cuDeviceGet")
    _check(lib, lib.cuDeviceGetAttribute(ctypes.byref(major), _ATTR_CC_MAJOR, dev), "cuDeviceGetAttribute")
    _check(lib, lib.cuDeviceGetAttribute(ctypes.byref(minor), _ATTR_CC_MINOR, dev), "cuDeviceGetAttribute")
    return major.value, minor.value


def _check_driver_floor(lib, artifact):
    """A cubin from nvcc 13.x needs a driver for CUDA 13 (r580+), 12.x one for CUDA 12
    (r525+): say so before the driver is asked."""
    version = ctypes.c_int()
    _check(lib, lib.cuDriverGetVersion(ctypes.byref(version)), "cuDriverGetVersion")
    major = int(artifact["nvcc"].split(".")[0])
    if version.value < major * 1000:
        branch = {12: "r525", 13: "r580"}.get(major, "a newer driver")
        have = f"{version.value // 1000}.{version.value % 1000 // 10}"
        raise KartError(
            f"{_describe(artifact)} was built by nvcc {artifact['nvcc']}, which needs a driver "
            f"for CUDA {major}.0 or newer ({branch}+); this driver supports CUDA {have}: "
            "update the NVIDIA driver"
        )


# --- The data: artifact records and cubins, kept in comment lines at the end of this
# file (which Python's compiler skips and a .pyc does not hold) and read on first use:
# importing costs nothing per artifact, load() finds a config's records by bisection
# of their index (a few short reads, whatever the number of configs) and parses only
# them, and a launcher's first call reads and decodes only its own cubin.

_INDEX_ROW = 25  # b"#I " + 12 hex digits of offset + b" " + 8 of length + b"\n"

_records_lock = threading.Lock()
_by_config = {}  # 'kernel {"A":1}' -> [line, ...] once the records are read
_all_records = []  # every record, once something lists them


def _data(offset, length):
    """`length` bytes of this file at `offset` (counted from its start)."""
    try:
        with open(__file__, "rb") as f:
            f.seek(offset)
            data = f.read(length)
    except (OSError, TypeError) as e:
        raise KartError(f"cannot read the exported data in {__file__}: {e}; "
                        "ship the module's .py file itself (its data is in its comments)") from e
    if len(data) != length:
        raise KartError(f"{__file__} is shorter than its header says: export the module again")
    return data


def _record_lines():
    """The records' lines, indexed by kernel and config (read once)."""
    with _records_lock:
        if not _by_config:
            block = _data(_DATA_AT, _INDEX_AT - _DATA_AT)
            if not block.startswith(b"#R "):
                raise KartError(f"{__file__}: no artifact records where its header says; export the module again")
            for line in block.splitlines():
                key, _, record = line[3:].partition(b"\t")
                _by_config.setdefault(key, []).append(record)
        return _by_config


def _config_key(kernel, config):
    return f"{kernel} {json.dumps(dict(sorted(config.items())), separators=(',', ':'))}".encode()


def _indexed(key):
    """The record lines of `key`, found by bisection of the index (sorted by key);
    None when a line read is not laid out as kart writes it (the caller then reads
    every record line)."""
    span = _BLOBS_AT - _INDEX_AT
    if span < 0 or span % _INDEX_ROW:
        return None
    rows = span // _INDEX_ROW
    try:
        f = open(__file__, "rb")
    except (OSError, TypeError):
        return None
    with f:
        def row(i):
            f.seek(_INDEX_AT + i * _INDEX_ROW)
            entry = f.read(_INDEX_ROW)
            if len(entry) != _INDEX_ROW or entry[:3] != b"#I " or entry[15:16] != b" " or entry[-1:] != b"\n":
                return None
            try:
                at, length = int(entry[3:15], 16), int(entry[16:24], 16)
            except ValueError:
                return None
            if at < 0 or length < 5 or at + length > _INDEX_AT - _DATA_AT:
                return None
            f.seek(_DATA_AT + at)
            line = f.read(length)
            if len(line) != length or line[:3] != b"#R " or line[-1:] != b"\n" or b"\t" not in line:
                return None
            found, _, record = line[3:-1].partition(b"\t")
            return found, record

        lo, hi = 0, rows
        while lo < hi:
            mid = (lo + hi) // 2
            got = row(mid)
            if got is None:
                return None
            if got[0] < key:
                lo = mid + 1
            else:
                hi = mid
        lines = []
        while lo < rows:
            got = row(lo)
            if got is None:
                return None
            if got[0] != key:
                break
            lines.append(got[1])
            lo += 1
        return lines


def _parse_record(line, key):
    try:
        record = json.loads(line)
    except ValueError as e:
        raise KartError(f"{__file__}: the exported record of {key.decode(errors='replace')} is corrupt ({e}); "
                        "export the module again") from e
    if not isinstance(record, dict):
        raise KartError(f"{__file__}: the exported record of {key.decode(errors='replace')} is not an object; "
                        "export the module again")
    return record


def _matching(kernel, config):
    """The records of (kernel, config): one per target."""
    key = _config_key(kernel, config)
    lines = _indexed(key)
    if lines is None:
        lines = _record_lines().get(key, [])
    found = [_parse_record(r, key) for r in lines]
    if found:
        return found
    # A config spelled otherwise (True for 1, say): compared as before, record by record.
    return [a for a in _artifacts() if a["kernel"] == kernel and a["config"] == config]


def _artifacts():
    """Every exported record (parsed once, when something lists them all)."""
    lines = _record_lines()
    with _records_lock:
        if not _all_records:
            _all_records.extend(_parse_record(r, key) for key, records in lines.items() for r in records)
        return _all_records


def _cubin(artifact):
    """The embedded cubin, decompressed and checked against its sha256 before any
    driver sees it (the driver loads corrupted cubins without complaint)."""
    offset, length = artifact["blob"]
    try:
        data = zlib.decompress(base64.b64decode(_data(_BLOBS_AT + offset, length), validate=True))
    except (ValueError, zlib.error) as e:
        raise KartError(
            f"the embedded cubin of {_describe(artifact)} is corrupt: {e}; export the module again"
        ) from e
    actual = hashlib.sha256(data).hexdigest()
    if len(data) != artifact["size"] or actual != artifact["sha256"]:
        raise KartError(
            f"the embedded cubin of {_describe(artifact)} is corrupt: sha256 {actual}, "
            f"expected {artifact['sha256']}; export the module again"
        )
    return data


def _function(lib, ctx, artifact, entry):
    key = (ctx, artifact["sha256"], entry)
    with _lock:
        if key in _functions:
            return _functions[key]
        module = _modules.get(key[:2])
        if module is None:
            _check_driver_floor(lib, artifact)
            image = _cubin(artifact)
            handle = ctypes.c_void_p()
            _check(lib, lib.cuModuleLoadData(ctypes.byref(handle), image), "cuModuleLoadData")
            module = _modules[key[:2]] = handle.value
        function = ctypes.c_void_p()
        # A template entry's symbol is mangled; callers only ever see its name.
        info = next((e for e in artifact["entries"] if e["name"] == entry), {})
        symbol = info.get("symbol", entry)
        _check(lib, lib.cuModuleGetFunction(ctypes.byref(function), module, symbol.encode()),
               f"cuModuleGetFunction({info.get('instance', entry)})")
        # With lazy loading a function loads at its first launch; load it now, so a
        # broken image fails here and not inside a timed region or a graph capture.
        if hasattr(lib, "cuFuncLoad"):
            _check(lib, lib.cuFuncLoad(function), f"cuFuncLoad({entry})")
        _functions[key] = function.value
        return function.value


# --- Arguments: packed by the entry's declared kinds, else by the cubin's sizes.

_CTYPES = {
    "ptr": ctypes.c_uint64, "i8": ctypes.c_int8, "u8": ctypes.c_uint8,
    "i16": ctypes.c_int16, "u16": ctypes.c_uint16, "f16": ctypes.c_uint16,
    "bf16": ctypes.c_uint16, "i32": ctypes.c_int32, "u32": ctypes.c_uint32,
    "f32": ctypes.c_float, "i64": ctypes.c_int64, "u64": ctypes.c_uint64,
    "f64": ctypes.c_double,
}
_INT_RANGES = {
    "i8": (-(1 << 7), 1 << 7), "u8": (0, 1 << 8), "i16": (-(1 << 15), 1 << 15),
    "u16": (0, 1 << 16), "i32": (-(1 << 31), 1 << 31), "u32": (0, 1 << 32),
    "i64": (-(1 << 63), 1 << 63), "u64": (0, 1 << 64),
}


def _device_pointer(arg):
    if hasattr(arg, "data_ptr"):  # torch.Tensor
        return arg.data_ptr()
    interface = getattr(arg, "__cuda_array_interface__", None)  # CuPy, Numba, ...
    if interface is not None:
        return interface["data"][0]
    if isinstance(arg, int) and not isinstance(arg, bool):  # a raw CUdeviceptr
        return arg
    return None


def _is_array(arg):
    return hasattr(arg, "data_ptr") or hasattr(arg, "__cuda_array_interface__")


def _kinds(info, args):
    """The kind of each parameter: declared, else inferred from the cubin's sizes and
    the Python values (an array for 8 bytes is a pointer; an int for 4 bytes is i32)."""
    if info.get("signature"):
        return info["signature"]
    inferred = []
    for size, arg in zip(info["params"], args):
        if size == 8:
            inferred.append("ptr" if _is_array(arg) else "f64" if isinstance(arg, float) else "i64")
        elif size == 4:
            inferred.append("f32" if isinstance(arg, float) else "i32")
        elif size == 2:
            inferred.append("f16" if isinstance(arg, float) else "i16")
        else:
            inferred.append("i8")
    return inferred


# --- Hopper: tensor maps (TMA descriptors) and thread-block clusters.

_TMA_TYPES = {"u8": (0, 1), "u16": (1, 2), "u32": (2, 4), "i32": (3, 4), "u64": (4, 8), "i64": (5, 8),
              "f16": (6, 2), "f32": (7, 4), "f64": (8, 8), "bf16": (9, 2)}
# torch dtypes by name; FP8 and int8 travel as bytes (TMA only moves them).
_TORCH_TMA = {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64", "int32": "i32",
              "int64": "i64", "uint8": "u8", "int8": "u8", "float8_e4m3fn": "u8", "float8_e5m2": "u8",
              "int16": "u16", "uint16": "u16", "uint32": "u32", "uint64": "u64"}
_SWIZZLES = {0: 0, 32: 1, 64: 2, 128: 3}
_L2_PROMOTIONS = {0: 0, 64: 1, 128: 2, 256: 3}


class TensorMap:
    """A TMA descriptor for a `const __grid_constant__ CUtensorMap` kernel parameter
    (kind "tensormap"): 128 bytes, aligned to 64. It keeps the tensor it describes alive."""

    __slots__ = ("_buffer", "raw", "tensor", "shape", "tile", "device")

    def __init__(self):
        self.device = None  # the ordinal of the GPU its tensor is on, when known
        self._buffer = (ctypes.c_uint8 * 192)()
        aligned = (ctypes.addressof(self._buffer) + 63) & ~63
        self.raw = (ctypes.c_uint64 * 16).from_address(aligned)

    def __repr__(self):
        return f"<kart TensorMap shape {self.shape}, tile {self.tile}>"


class _LaunchAttribute(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("x", ctypes.c_uint), ("y", ctypes.c_uint),
                ("z", ctypes.c_uint), ("rest", ctypes.c_char * 52)]


class _LaunchConfig(ctypes.Structure):
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_LaunchAttribute)),
                ("count", ctypes.c_uint)]


_CLUSTER_DIMENSION = 4
_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # its value: an int at the cluster's x


def _attributes(cluster, pdl):
    """The launch attributes of cuLaunchKernelEx: (array pointer, count)."""
    attrs = []
    if cluster is not None:
        attrs.append(_LaunchAttribute(id=_CLUSTER_DIMENSION, x=cluster[0], y=cluster[1], z=cluster[2]))
    if pdl:
        attrs.append(_LaunchAttribute(id=_PROGRAMMATIC_STREAM_SERIALIZATION, x=1))
    array = (_LaunchAttribute * len(attrs))(*attrs)
    return array, ctypes.cast(array, ctypes.POINTER(_LaunchAttribute)), len(attrs)


def tensor_map(tensor, tile, swizzle=128, dtype=None, shape=None, strides=None, l2_promotion=128):
    """A tensor map of `tensor` (a torch tensor, or a raw device pointer with `dtype`,
    `shape` and `strides` in elements) whose TMA copies move boxes of `tile` (one side
    per dimension, outermost first, as the shape) into shared memory with a `swizzle`
    of 0, 32, 64 or 128 bytes, promoting `l2_promotion` bytes (0, 64, 128 or 256) into
    L2 past each copy. Out-of-bounds elements read as zero."""
    if hasattr(tensor, "data_ptr"):
        pointer = tensor.data_ptr()
        dtype = dtype or _TORCH_TMA.get(str(tensor.dtype).rsplit(".", 1)[-1])
        shape = tuple(tensor.shape) if shape is None else tuple(shape)
        strides = tuple(tensor.stride()) if strides is None else tuple(strides)
        if dtype is None:
            raise TypeError(f"tensor_map: no TMA element type for {tensor.dtype}; pass dtype= (one of "
                            f"{', '.join(_TMA_TYPES)})")
    elif isinstance(tensor, int) and dtype and shape is not None and strides is not None:
        pointer, shape, strides = tensor, tuple(shape), tuple(strides)
    else:
        raise TypeError("tensor_map needs a torch tensor, or a device pointer with dtype, shape and strides")
    if dtype not in _TMA_TYPES:
        raise TypeError(f"tensor_map: dtype {dtype!r} is not one of {', '.join(_TMA_TYPES)}")
    code, size = _TMA_TYPES[dtype]
    tile = tuple(tile)
    rank = len(shape)
    where = f"tensor_map(shape {shape}, strides {strides}, tile {tile})"
    if not 1 <= rank <= 5 or len(strides) != rank or len(tile) != rank:
        raise ValueError(f"{where}: shape, strides and tile need one entry per dimension, 1 to 5 dimensions")
    if strides[-1] != 1:
        raise ValueError(f"{where}: the innermost stride must be 1")
    if pointer % 16:
        raise ValueError(f"{where}: the address {pointer:#x} is not aligned to 16 bytes")
    if any(s * size % 16 for s in strides[:-1]):
        raise ValueError(f"{where}: every stride but the innermost must be a multiple of 16 bytes")
    if any(not 1 <= t <= 256 for t in tile):
        raise ValueError(f"{where}: every tile side must be 1 to 256")
    if swizzle not in _SWIZZLES:
        raise ValueError(f"{where}: swizzle must be 0, 32, 64 or 128 bytes")
    if l2_promotion not in _L2_PROMOTIONS:
        raise ValueError(f"{where}: l2_promotion must be 0, 64, 128 or 256 bytes")
    if swizzle and tile[-1] * size > swizzle:
        raise ValueError(f"{where}: the tile's inner side is {tile[-1] * size} bytes, more than the swizzle")
    lib = _cuda()
    u64, u32 = ctypes.c_uint64, ctypes.c_uint32
    dims = (u64 * rank)(*reversed(shape))
    byte_strides = (u64 * max(rank - 1, 1))(*[s * size for s in reversed(strides[:-1])])
    boxes = (u32 * rank)(*reversed(tile))
    ones = (u32 * rank)(*([1] * rank))
    result = TensorMap()
    _check(lib, lib.cuTensorMapEncodeTiled(ctypes.addressof(result.raw), code, rank, pointer, dims, byte_strides,
                                           boxes, ones, 0, _SWIZZLES[swizzle], _L2_PROMOTIONS[l2_promotion], 0),
           f"cuTensorMapEncodeTiled ({where})")
    result.tensor, result.shape, result.tile = tensor, shape, tile
    return result


def _pack(name, info, args):
    kinds = _kinds(info, args)
    if len(args) != len(kinds) or (not info.get("signature") and len(args) != len(info["params"])):
        raise TypeError(
            f"{name} takes {len(kinds) if info.get('signature') else len(info['params'])} "
            f"arguments ({', '.join(kinds) or 'none'}), got {len(args)}"
        )
    packed = []
    for i, (kind, arg) in enumerate(zip(kinds, args)):
        where = f"{name}: argument {i} ({kind})"
        if kind == "ptr":
            pointer = _device_pointer(arg)
            if pointer is None:
                raise TypeError(f"{where} must be a tensor, an array with "
                                f"__cuda_array_interface__ or a device pointer, not {type(arg).__name__}")
            packed.append(ctypes.c_uint64(pointer))
        elif kind == "tensormap":
            if not isinstance(arg, TensorMap):
                raise TypeError(f"{where} must be a TensorMap (kart's tensor_map()), not {type(arg).__name__}")
            packed.append(arg.raw)
        elif kind.startswith("struct:"):
            size = int(kind.split(":")[1])
            if not isinstance(arg, (bytes, bytearray, memoryview)) or len(arg) != size:
                raise TypeError(f"{where} must be {size} bytes (bytes, bytearray or memoryview, as "
                                f"struct.pack or ctypes.Structure gives), not {type(arg).__name__}")
            packed.append((ctypes.c_char * size).from_buffer_copy(arg))
        elif kind in ("f32", "f64", "f16", "bf16"):
            if isinstance(arg, bool) or not isinstance(arg, (int, float)) and not hasattr(arg, "__float__"):
                raise TypeError(f"{where} must be a number, not {type(arg).__name__}")
            value = float(arg)
            if kind == "f16":
                packed.append(ctypes.c_uint16(_f16_bits(value)))
            elif kind == "bf16":
                packed.append(ctypes.c_uint16(_bf16_bits(value)))
            else:
                packed.append(_CTYPES[kind](value))
        else:
            if isinstance(arg, bool) or not hasattr(arg, "__index__"):
                raise TypeError(f"{where} must be an integer, not {type(arg).__name__}")
            value = arg.__index__()
            low, high = _INT_RANGES[kind]
            if not low <= value < high:
                raise OverflowError(f"{where}: {value} does not fit")
            packed.append(_CTYPES[kind](value))
    return packed


# The fast path packs every argument into one 8-byte slot of a buffer made once per
# launcher, with one struct call: each kind's format and its padding to 8 bytes.
_SLOT_FORMATS = {
    "ptr": "Q", "i8": "b7x", "u8": "B7x", "i16": "h6x", "u16": "H6x", "f16": "H6x",
    "bf16": "H6x", "i32": "i4x", "u32": "I4x", "f32": "f4x", "i64": "q", "u64": "Q",
    "f64": "d", "tensormap": "8x",  # its slot unused: the parameter points at the map's own bytes
}
_POINTER_ATTR_DEVICE_ORDINAL = 9

# type -> how to read a pointer argument: 1 torch tensor, 2 other CUDA array, 3 raw int.
_pointer_kinds = {int: 3, bool: 0}


def _pointer_kind(arg):
    t = type(arg)
    kind = _pointer_kinds.get(t)
    if kind is None:
        if hasattr(arg, "data_ptr") and hasattr(arg, "get_device"):
            kind = 1
        elif hasattr(arg, "__cuda_array_interface__"):
            kind = 2
        else:
            kind = 0
        _pointer_kinds[t] = kind
    return kind


_stream_reader = None


def _raw_stream_reader():
    """A function giving PyTorch's current raw stream for a device ordinal (the
    capturing stream inside a CUDA-graph capture) once torch is in use, else None (the
    default stream). Looked up once."""
    global _stream_reader
    if _stream_reader is None:
        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_available():
            return None
        fast = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        _stream_reader = fast or (lambda ordinal: torch.cuda.current_stream(ordinal).cuda_stream)
    return _stream_reader


def _pointer_of(arg, index, ordinal, name):
    """A pointer argument that is not a torch tensor or an int: a CUDA array (its
    device checked by the driver), else refused."""
    how = _pointer_kind(arg)
    if how == 1:
        if arg.get_device() != ordinal:
            raise _wrong_device(name, index, arg.get_device(), ordinal)
        return arg.data_ptr()
    if how == 2:
        pointer = arg.__cuda_array_interface__["data"][0]
        where = ctypes.c_int()
        if pointer and _driver.cuPointerGetAttribute(ctypes.byref(where), _POINTER_ATTR_DEVICE_ORDINAL,
                                                     pointer) == 0 and where.value != ordinal:
            raise _wrong_device(name, index, where.value, ordinal)
        return pointer
    if how == 3:
        return arg  # a raw CUdeviceptr: the caller vouches for it
    raise TypeError("pointer")  # the general path words it


def _f16_bits(value):
    return struct.unpack("<H", struct.pack("<e", float(value)))[0]


def _bf16_bits(value):
    bits = struct.unpack("<I", struct.pack("<f", float(value)))[0]
    return (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16


def _slot_packer(name, kinds, format, slots, params):
    """A function (args, ordinal) that packs one launch's arguments into `slots` with
    the cheap checks: the count (unpacking), each kind (struct refuses what does not
    fit), no bools, pointers of torch tensors on the launch's device. Written out per
    signature, because a loop over kinds costs more than the launch it guards; any
    error but WrongDevice sends the call to the general path, which words it."""
    names = [f"a{i}" for i in range(len(kinds))]
    lines = ["def pack(args, ordinal):", f"    {', '.join(names)}{',' if len(names) == 1 else ''} = args"
             if names else "    if args: raise TypeError('count')"]
    for i, kind in enumerate(kinds):
        a = names[i]
        if kind == "ptr":
            lines += [f"    t = kind_of(type({a}))",
                      "    if t == 1:",
                      f"        if {a}.get_device() != ordinal:",
                      f"            raise wrong(name, {i}, {a}.get_device(), ordinal)",
                      f"        {a} = {a}.data_ptr()",
                      "    elif t != 3:",
                      f"        {a} = pointer_of({a}, {i}, ordinal, name)"]
        elif kind == "tensormap":
            lines += [f"    if type({a}) is not TensorMap: raise TypeError('tensormap')",
                      f"    if {a}.device is not None and {a}.device != ordinal:",
                      f"        raise wrong(name, {i}, {a}.device, ordinal)",
                      f"    params[{i}] = addressof({a}.raw)"]
        else:
            lines.append(f"    if type({a}) is bool: raise TypeError('bool')")
            if kind in ("f16", "bf16"):
                lines.append(f"    {a} = {kind}_bits({a})")
    values = [a for a, kind in zip(names, kinds) if kind != "tensormap"]
    lines.append(f"    pack_into(format, slots, 0, {', '.join(values)})")
    scope = {"kind_of": _pointer_kinds.get, "wrong": _wrong_device, "pointer_of": _pointer_of, "name": name,
             "f16_bits": _f16_bits, "bf16_bits": _bf16_bits, "pack_into": struct.pack_into,
             "format": format, "slots": slots, "params": params, "TensorMap": TensorMap,
             "addressof": ctypes.addressof}
    exec("\n".join(lines), scope)
    return scope["pack"]


# --- The trace (KART_TRACE): one JSON line per distinct (kernel, config, target,
# problem, GPU) launched and per best() answer without a record of its own, in the
# runtime crate's format (`kart coverage --trace`, `kart bundle --trace` read it).
# Written only when something new is seen (a launcher's first launch on a device, a
# new problem's geometry, a best() miss): never a file write on a repeated launch.

_TRACE_PATH = os.environ.get("KART_TRACE") or None


def _trace(record):
    """Appends one record as one write of one line (several processes may share the
    file); a record that cannot be written (a problem value that is no integer, a full
    disk) is reported and never fails the launch."""
    try:
        line = (json.dumps(record, separators=(",", ":"), default=int) + "\n").encode()
        fd = os.open(_TRACE_PATH, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    except (OSError, TypeError, ValueError) as e:
        sys.stderr.write(f"kart: cannot write the trace {_TRACE_PATH!r}: {e}\n")


def _trace_launch(artifact, problem, device):
    major, minor = _device_capability(device)
    _trace({"event": "launch", "kernel": artifact["kernel"], "config": artifact["config"],
            "target": artifact["target"], "digest": artifact["sha256"],
            "problem": dict(problem) if problem is not None else None,
            "gpu": _gpu_name(device), "capability": f"{major}.{minor}"})


class _Bound:
    """What a launcher keeps per CUDA context: everything a launch needs that cannot
    change while the context lives."""

    __slots__ = ("lib", "ctx", "ordinal", "artifact", "function", "shared_allowed", "calls")

    def __init__(self, lib, ctx, ordinal, artifact, function):
        self.lib, self.ctx, self.ordinal = lib, ctx, ordinal
        self.artifact, self.function, self.shared_allowed = artifact, function, _DEFAULT_SHARED_LIMIT
        # (grid, block, shared memory, stream) as the caller gave them -> the
        # arguments of cuLaunchKernelEx, converted to ctypes once: a launch
        # configuration built beforehand, the function and the parameter pointers
        # (four arguments cost ctypes less than cuLaunchKernel's eleven).
        self.calls = {}


def _current_stream():
    """PyTorch's current stream when torch is in use, else the default stream."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return torch.cuda.current_stream().cuda_stream
    return 0


def _config_text(config):
    return ",".join(f"{k}={v}" for k, v in config.items()) or "-"


def _describe(artifact):
    return f"{artifact['kernel']}[{_config_text(artifact['config'])}] {artifact['target']}"


# --- The public API.


class Launcher:
    """One entry of one config of a kernel, ready to launch on any GPU that one of its
    exported cubins fits. Nothing touches the GPU until the first call (or `load_now`)."""

    def __init__(self, kernel, config, entry, artifacts):
        self.kernel, self.config, self.entry = kernel, dict(config), entry
        self._artifacts = artifacts  # target -> artifact
        first = next(iter(artifacts.values()))
        self._env = {**first.get("derived", {}), **self.config}
        self._info = next(e for e in next(iter(artifacts.values()))["entries"] if e["name"] == entry)
        self._name = f"{kernel}[{_config_text(config)}].{entry}"
        self._bound = {}  # context handle -> _Bound
        self._geometry = {}  # problem items -> (grid, block, shared_mem) of [launch]
        # [launch.args]: how the kernel's parameters are made from the caller's
        # arguments (tensor maps over pointers, values of the problem), if declared.
        self._made = ((_LAUNCH.get(kernel) or {}).get("args") or {}).get(entry)
        self._plans = {}  # problem items -> the made parameters' evaluated sizes
        self._maps = {}  # (parameter, pointer, device, sizes) -> TensorMap
        self._mutex = threading.Lock()  # guards the reused argument buffers below
        self._ctx = ctypes.c_void_p()
        self._ctx_ref = ctypes.byref(self._ctx)
        kinds = self._info.get("signature")
        # With a declared signature of scalars, pointers and tensor maps, packing is
        # prepared once: one struct format, one buffer of 8-byte slots and the pointer
        # array into it (a tensor map's entry is pointed at its bytes per call).
        # Otherwise kinds are inferred from each call's values, and structs are passed
        # from their own bytes (the general path).
        if kinds and not all(k in _SLOT_FORMATS for k in kinds):
            kinds = None
        self._kinds = tuple(kinds) if kinds else None
        if kinds:
            self._format = "<" + "".join(_SLOT_FORMATS[k] for k in kinds)
            self._slots = (ctypes.c_uint64 * max(len(kinds), 1))()
            base = ctypes.addressof(self._slots)
            self._params = (ctypes.c_void_p * max(len(kinds), 1))(*[base + 8 * i for i in range(len(kinds))])
            self._pack_slots = _slot_packer(self._name, self._kinds, self._format, self._slots, self._params)

    def __repr__(self):
        return f"<kart kernel {self._name}, targets {', '.join(sorted(self._artifacts))}>"

    def _bind(self, device):
        lib = _cuda()
        ctx, ordinal = _current_context(lib, device)
        capability = _capability(lib, ordinal)
        target = _resolve(capability, list(self._artifacts))
        if target is None:
            want = f"sm_{capability[0]}{capability[1]}"
            raise NoCubinForThisGPU(
                f"no exported cubin of {self._name} runs on GPU {ordinal} (compute capability "
                f"{capability[0]}.{capability[1]}, {want}); exported: {', '.join(sorted(self._artifacts))}. "
                f"Build and export one: `kart build {self.kernel} --target {want}`, then "
                f"`kart export --python --target {want} ...`"
            )
        artifact = self._artifacts[target]
        function = _function(lib, ctx, artifact, self.entry)
        if _TRACE_PATH is not None:
            _trace_launch(artifact, None, device)
        return lib, ctx, artifact, function

    def load_now(self, device=0):
        """Load (verify, load, resolve) for the current context now."""
        self._bind(device)
        return self

    def __call__(self, grid, block, *args, shared_mem=0, stream=None, device=0, cluster=None, pdl=False):
        """Launch on `grid` x `block` (ints or tuples of up to 3) with `args` (tensors,
        arrays, ints, floats, TensorMaps, bytes for structs), `shared_mem` bytes of
        dynamic shared memory, on `stream` (a CUstream handle or an object with
        `.cuda_stream`/`.ptr`; default: PyTorch's current stream, else the default
        stream), in thread-block clusters of `cluster` blocks if given, and allowing
        programmatic dependent launch if `pdl` (both through cuLaunchKernelEx's launch
        attributes). A tensor or array on another GPU than the launch's is refused
        before anything reaches the driver."""
        if cluster is not None or pdl:
            g, b = _dims(grid, "grid"), _dims(block, "block")
            c = None if cluster is None else _dims(cluster, "cluster")
            if c is not None and any(gi % ci for gi, ci in zip(g, c)):
                raise ValueError(f"{self._name}: grid {g} is not a whole number of clusters {c}")
            lib = _cuda()
            with self._mutex:
                lib.cuCtxGetCurrent(ctypes.byref(self._ctx))
                bound = self._bound.get(self._ctx.value) or self._bind_context(device)
                return self._launch_general(bound, g, b, args, shared_mem, stream, c, bool(pdl))
        if _driver is None:
            # The first launch in this process: every argument is checked before the
            # driver is even loaded (the general path raises the exact error).
            _dims(grid, "grid"), _dims(block, "block")
            _pack(self._name, self._info, args)
            _cuda()
        with self._mutex:
            _get_context(self._ctx_ref)
            bound = self._bound.get(self._ctx.value)
            if bound is None:
                bound = self._bind_context(device)
            if self._kinds is None:
                return self._launch_general(bound, _dims(grid, "grid"), _dims(block, "block"), args,
                                            shared_mem, stream)
            if stream is None:
                reader = _stream_reader or _raw_stream_reader()
                stream = reader(bound.ordinal) if reader else 0
            elif type(stream) is not int:
                stream = getattr(stream, "cuda_stream", getattr(stream, "ptr", stream))
            try:
                self._pack_slots(args, bound.ordinal)
            except WrongDevice:
                raise
            except (struct.error, TypeError, OverflowError, ValueError):
                # The general path says exactly what is wrong (or packs what struct
                # refuses to, such as a float beyond f32's range, as ctypes would).
                return self._launch_general(bound, _dims(grid, "grid"), _dims(block, "block"), args,
                                            shared_mem, stream)
            # Keyed as the caller wrote grid and block: a repeated launch validates
            # nothing it validated before.
            try:
                call = bound.calls.get((grid, block, shared_mem, stream))
            except TypeError:  # lists
                grid, block = _dims(grid, "grid"), _dims(block, "block")
                call = bound.calls.get((grid, block, shared_mem, stream))
            if call is None:
                g, b = _dims(grid, "grid"), _dims(block, "block")
                if shared_mem > bound.shared_allowed:
                    self._allow_shared(bound, shared_mem)
                if len(bound.calls) > 256:
                    bound.calls.clear()
                u3 = ctypes.c_uint * 3
                config = _LaunchConfig(u3(*g), u3(*b), shared_mem, stream or None, None, 0)
                call = bound.calls[(grid, block, shared_mem, stream)] = (
                    ctypes.byref(config), ctypes.c_void_p(bound.function), self._params, None)
            result = _launch_ex(*call)
        if result:
            _check(_driver, result, f"cuLaunchKernelEx({self._name})")

    def _bind_context(self, device):
        lib, ctx, artifact, function = self._bind(device)
        ordinal = ctypes.c_int()
        _check(lib, lib.cuCtxGetDevice(ctypes.byref(ordinal)), "cuCtxGetDevice")
        bound = _Bound(lib, ctx, ordinal.value, artifact, function)
        bound.shared_allowed = max(_DEFAULT_SHARED_LIMIT,
                                   _shared_allowed.get((ctx, artifact["sha256"], self.entry), 0))
        self._bound[ctx] = bound
        return bound

    def _allow_shared(self, bound, shared_mem):
        key = (bound.ctx, bound.artifact["sha256"], self.entry)
        if _shared_allowed.get(key, 0) < shared_mem:
            _check(bound.lib, bound.lib.cuFuncSetAttribute(bound.function, _FUNC_ATTR_MAX_DYNAMIC_SHARED, shared_mem),
                   f"cuFuncSetAttribute(max dynamic shared memory = {shared_mem})")
            _shared_allowed[key] = shared_mem
        bound.shared_allowed = shared_mem

    def _launch_general(self, bound, grid, block, args, shared_mem, stream, cluster=None, pdl=False):
        """Kinds inferred per call (no signature), tensor maps, structs, clusters and
        programmatic dependent launch, and every exact error message."""
        packed = _pack(self._name, self._info, args)
        for i, arg in enumerate(args):
            if _is_array(arg) and _pointer_kind(arg) == 1 and arg.get_device() != bound.ordinal:
                raise _wrong_device(self._name, i, arg.get_device(), bound.ordinal)
            if isinstance(arg, TensorMap) and arg.device is not None and arg.device != bound.ordinal:
                raise _wrong_device(self._name, i, arg.device, bound.ordinal)
        if shared_mem > bound.shared_allowed:
            self._allow_shared(bound, shared_mem)
        if stream is None:
            stream = _current_stream()
        stream = getattr(stream, "cuda_stream", getattr(stream, "ptr", stream))
        pointers = (ctypes.c_void_p * max(len(packed), 1))(
            *[ctypes.cast(ctypes.byref(p), ctypes.c_void_p) for p in packed])
        if cluster is not None or pdl:
            array, attrs, count = _attributes(cluster, pdl)
            config = _LaunchConfig((ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block), shared_mem,
                                   stream or None, attrs, count)
            what = ", ".join([f"cluster {cluster}"] * (cluster is not None) + ["pdl"] * bool(pdl))
            _check(bound.lib, bound.lib.cuLaunchKernelEx(ctypes.byref(config), bound.function,
                                                         ctypes.cast(pointers, ctypes.POINTER(ctypes.c_void_p)), None),
                   f"cuLaunchKernelEx({self._name}, {what})")
            del array  # alive until the launch returned
            return
        _check(bound.lib, bound.lib.cuLaunchKernel(bound.function, *grid, *block, shared_mem, stream or None,
                                                   ctypes.cast(pointers, ctypes.POINTER(ctypes.c_void_p)), None),
               f"cuLaunchKernel({self._name})")

    def dims(self, problem=None, **named):
        """(grid, block, shared_mem) that the kernel's [launch] computes for this config
        and a problem of named ints, on GPU 0 (for `SMS`): `problem=dict(B=8, S=512)` as
        `launch` and `best` take it, or the same as keywords (`B=8, S=512`)."""
        return _geometry(self.kernel, self._env, {**(problem or {}), **named}, name=self._name)[:3]

    def cluster(self, problem=None, **named):
        """The thread-block cluster (x, y, z) that the kernel's [launch] computes for
        this config and a problem, or None when it declares no `cluster`."""
        return _geometry(self.kernel, self._env, {**(problem or {}), **named}, name=self._name)[3]

    def launch(self, *args, problem, stream=None, device=0):
        """Launch with the geometry [launch] computes for `problem` (a dict of named
        ints): no grid, block or shared-memory arithmetic in the caller. With
        [launch.args], `args` are the call's (tensors for the tensor maps kart makes,
        nothing for the values it computes). A [launch] `cluster` launches in clusters
        and `pdl` allows programmatic dependent launch. The geometry of a repeated
        problem is a dictionary hit."""
        key = (device, *problem.items())
        if self._made is not None:
            args = self._call_args(key, args, problem, device)
        geometry = self._geometry.get(key)
        new = geometry is None
        if new:
            geometry = self._geometry[key] = _geometry(self.kernel, self._env, problem, device, self._name)
        grid, block, shared, cluster, pdl = geometry
        self(grid, block, *args, shared_mem=shared, stream=stream, device=device, cluster=cluster, pdl=pdl)
        if new and _TRACE_PATH is not None:
            target = _resolve(_device_capability(device), list(self._artifacts))
            _trace_launch(self._artifacts[target], problem, device)

    def _plan(self, key, problem, device):
        """Each made parameter with its sizes evaluated for `problem`: ("pass",),
        ("value", v) or ("map", dtype, shape, tile, swizzle, l2_promotion)."""
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        texts = [t for m in self._made if isinstance(m, dict)
                 for t in (m.get("shape", []) + m.get("tile", []) + [m.get("swizzle", 0), m.get("l2_promotion", 128)])]
        texts += [m["value"] for m in self._made if isinstance(m, dict) and "value" in m]
        if "SMS" not in problem and any("SMS" in str(t) for t in texts):
            problem = {**problem, "SMS": _multiprocessors(device)}
        env = {**problem, **self._env}

        def value(text, what):
            try:
                return evaluate(str(text), env)
            except ExprError as e:
                keys = ", ".join(sorted(problem)) or "no keys"
                raise ExprError(e.kind, f"{self._name}: [launch.args] {what} = \"{text}\": {e} (the problem has "
                                f"{keys})", e.at) from None

        plan = []
        for i, m in enumerate(self._made):
            if m == "pass":
                plan.append(("pass",))
            elif "value" in m:
                plan.append(("value", value(m["value"], f"parameter {i}")))
            else:
                sizes = [tuple(value(t, f"parameter {i} {what}[{d}]") for d, t in enumerate(m[what]))
                         for what in ("shape", "tile")]
                for what, values in zip(("shape", "tile"), sizes):
                    if any(v < 1 for v in values):
                        raise KartError(f"{self._name}: [launch.args] parameter {i} {what} is {values} for this "
                                        "problem: every size must be positive")
                chosen = []
                for what, legal, default in (("swizzle", _SWIZZLES, 0), ("l2_promotion", _L2_PROMOTIONS, 128)):
                    text = m.get(what, default)
                    v = value(text, f"parameter {i} {what}")
                    if v not in legal:
                        raise KartError(f"{self._name}: [launch.args] parameter {i} {what} = \"{text}\" is {v}, not a "
                                        f"legal {what} (one of {', '.join(map(str, legal))} bytes)")
                    chosen.append(v)
                plan.append(("map", m["tensormap"], sizes[0], sizes[1], *chosen))
        if len(self._plans) > 256:
            self._plans.clear()
        self._plans[key] = plan
        return plan

    def _call_args(self, key, args, problem, device):
        """The kernel's parameters from the call's `args`, by [launch.args]."""
        wanted = sum(1 for m in self._made if not (isinstance(m, dict) and "value" in m))
        if len(args) != wanted:
            raise TypeError(f"{self._name} is called with {wanted} arguments ([launch.args] makes the rest), "
                            f"got {len(args)}")
        plan = self._plan(key, problem, device)
        out, given = [], iter(enumerate(args))
        for slot, p in enumerate(plan):
            if p[0] == "value":
                out.append(p[1])
                continue
            index, arg = next(given)
            if p[0] == "pass":
                out.append(arg)
                continue
            _, dtype, shape, tile, swizzle, l2_promotion = p
            where = f"{self._name}: argument {index} (a tensor map of {dtype} {list(shape)} is made over it)"
            ordinal = None
            if hasattr(arg, "data_ptr"):
                if _TORCH_TMA.get(str(arg.dtype).rsplit(".", 1)[-1]) != dtype:
                    raise TypeError(f"{where} is a {arg.dtype} tensor")
                if arg.numel() != math.prod(shape) or not arg.is_contiguous():
                    raise ValueError(f"{where} is a tensor of shape {list(arg.shape)}"
                                     f"{'' if arg.is_contiguous() else ', not contiguous'}: pass a contiguous "
                                     f"tensor of {math.prod(shape)} elements")
                pointer = arg.data_ptr()
                ordinal = arg.get_device() if hasattr(arg, "get_device") else None
            else:
                pointer = _device_pointer(arg)
                if pointer is None:
                    raise TypeError(f"{where} must be a tensor, an array with __cuda_array_interface__ or a device "
                                    f"pointer, not {type(arg).__name__}")
            map_key = (slot, pointer, ordinal, shape, tile, swizzle, l2_promotion)
            made = self._maps.get(map_key)
            if made is None:
                strides = [1] * len(shape)
                for d in range(len(shape) - 2, -1, -1):
                    strides[d] = strides[d + 1] * shape[d + 1]
                made = tensor_map(pointer, tile, swizzle=swizzle, dtype=dtype, shape=shape, strides=strides,
                                  l2_promotion=l2_promotion)
                made.device = ordinal
                if len(self._maps) > 1024:
                    self._maps.clear()
                self._maps[map_key] = made
            out.append(made)
        return out


def launch(kernel, *args, problem, stream=None, device=0, **config):
    """One line for the common case: the tuned config for `problem` (as `best()`), or
    the one named by `config`, launched with the geometry of the kernel's [launch].
    `problem` is a dict of named ints (B=8, H=16, S=512, D=64, causal=0)."""
    launcher = load(kernel, **config) if config else best(kernel, device=device, problem=problem)
    launcher.launch(*args, problem=problem, stream=stream, device=device)
    return launcher


_torch_libraries = []  # torch.library.Library objects must outlive their ops
_INT_KINDS = ("i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64")


def torch_op(kernel, mutates, problem=(), name=None, **config):
    """Register `kernel` as a PyTorch custom op, `torch.ops.kart.<name>` (default: the
    kernel's name), so `torch.compile(fullgraph=True)` of a function that calls it
    compiles without a graph break and CUDA graphs capture it.

    The op takes the entry's parameters in order (pointers as tensors, integers as
    int, floating-point kinds as float), then one int per key of `problem`; it returns
    nothing and writes the tensors whose parameter indices are in `mutates` (its fake
    implementation, for tracing, therefore has nothing to compute). Each call picks the
    config with `best()` for the problem (or uses the one `config` names) and launches
    the kernel's first entry with its [launch] geometry on PyTorch's current stream.
    Needs the entry's declared [signature].

        op = kernels.torch_op("flash_attn", mutates=[3], problem=("B", "H", "S", "D", "causal"))
        op(q, k, v, o, S, B, H, S, D, causal)
    """
    import torch

    sample = next((a for a in _artifacts() if a["kernel"] == kernel), None)
    if sample is None:
        raise KartError(f"no kernel {kernel!r} was exported")
    info = sample["entries"][0]
    if not info.get("signature"):
        raise KartError(f"{kernel}: torch_op needs the entry's [signature] in kernel.toml")
    kinds, name = _call_kinds(kernel, info), name or kernel
    params, aliases = [], iter("abcdefghijklmnopqrstuvwxyz")
    for i, kind in enumerate(kinds):
        if kind == "ptr":
            params.append(f"Tensor({next(aliases)}!) a{i}" if i in mutates else f"Tensor a{i}")
        else:
            params.append(f"int a{i}" if kind in _INT_KINDS else f"float a{i}")
    params += [f"int {key}" for key in problem]
    library = torch.library.Library("kart", "FRAGMENT")
    library.define(f"{name}({', '.join(params)}) -> ()")
    count = len(kinds)

    def run(*args):
        values, asked = args[:count], dict(zip(problem, args[count:]))
        tensor = next((a for a in values if isinstance(a, torch.Tensor)), None)
        device = tensor.device.index if tensor is not None and tensor.device.index is not None else 0
        launch(kernel, *values, problem=asked, device=device, **config)

    def fake(*args):
        return None

    library.impl(name, run, "CUDA")
    torch.library.register_fake(f"kart::{name}", fake, lib=library)
    _torch_libraries.append(library)
    return getattr(torch.ops.kart, name)


def _call_kinds(kernel, info):
    """What the caller passes to an entry: its signature, with the tensor maps of
    [launch.args] as pointers and its computed values left out."""
    made = ((_LAUNCH.get(kernel) or {}).get("args") or {}).get(info["name"])
    if made is None:
        return list(info["signature"])
    return [("ptr" if isinstance(m, dict) else kind) for kind, m in zip(info["signature"], made)
            if not (isinstance(m, dict) and "value" in m)]


def _wrong_device(name, index, where, ordinal):
    place = "the CPU" if where < 0 else f"cuda:{where}"
    return WrongDevice(
        f"{name}: argument {index} is on {place}, but the launch is on cuda:{ordinal} "
        "(the current device): move it, or make its device current first"
    )


def _dims(value, what):
    dims = (value,) if isinstance(value, int) else tuple(value)
    if not 1 <= len(dims) <= 3 or any(not isinstance(d, int) or d < 1 for d in dims):
        raise ValueError(f"{what} must be 1 to 3 positive ints, not {value!r}")
    return dims + (1,) * (3 - len(dims))


def kernels():
    """{kernel: [config, ...]} of everything exported."""
    out = {}
    for a in _artifacts():
        configs = out.setdefault(a["kernel"], [])
        if a["config"] not in configs:
            configs.append(a["config"])
    return out


def load(kernel, entry=None, **config):
    """The launcher of `kernel`'s `entry` (default: its only or first entry) for the
    exported config with these params; params not given are taken from the kernel's
    `default` in its kernel.toml, where it has one."""
    default = (_TUNE_SPEC.get(kernel) or {}).get("default") or {}
    if default and set(config) != set(default):
        config = {**default, **config}
    matching = _matching(kernel, config)
    if not matching:
        known = kernels()
        if kernel not in known:
            raise KartError(f"no kernel {kernel!r} was exported; exported: {', '.join(sorted(known))}")
        shown = "; ".join(_config_text(c) for c in known[kernel])
        names = sorted(known[kernel][0])
        if sorted(config) != names:
            raise KartError(
                f"load() takes every param of {kernel} ({', '.join(names)}), "
                f"not {_config_text(config) or 'none'}; exported: {shown}"
            )
        where = os.path.basename(__file__)
        raise KartError(
            f"{kernel} has no exported config {_config_text(config)}; exported: {shown}. "
            f"If the lock has it (`kart ls {kernel}`), export it with the rest: "
            f"`kart export --python -o {where} {kernel}:{_config_text(config)} ...`"
        )
    entries = [e["name"] for e in matching[0]["entries"]]
    entry = entry or entries[0]
    if entry not in entries:
        shown = ", ".join(e["name"] + (f" ({e['instance']})" if "instance" in e else "")
                          for e in matching[0]["entries"])
        raise KartError(f"{kernel} has no entry {entry!r}; entries: {shown}")
    return Launcher(kernel, config, entry, {a["target"]: a for a in matching})


def preload(device=0):
    """Load every exported cubin that fits the current GPU now, so that nothing loads
    later inside a CUDA-graph capture or a timed region. Returns how many
    (config, entry) pairs were loaded; configs with no cubin for this GPU are skipped."""
    loaded = 0
    for kernel, configs in kernels().items():
        for config in configs:
            first = _matching(kernel, config)[0]
            for entry in first["entries"]:
                try:
                    load(kernel, entry=entry["name"], **config).load_now(device)
                    loaded += 1
                except NoCubinForThisGPU:
                    pass
    return loaded


def _gpu_name(device):
    lib = _cuda()
    _, ordinal = _current_context(lib, device)
    dev, name = ctypes.c_int(), ctypes.create_string_buffer(256)
    _check(lib, lib.cuDeviceGet(ctypes.byref(dev), ordinal), "cuDeviceGet")
    _check(lib, lib.cuDeviceGetName(name, 256, dev), "cuDeviceGetName")
    return name.value.decode()


_gpu_names = {}
_best_memo = {}
_tuning_index = {}


def _family(kernel):
    """`kernel` and the exported kernels whose kernel.toml says `variant_of` it."""
    return [kernel] + sorted(k for k, spec in _TUNE_SPEC.items() if spec.get("variant_of") == kernel)


def best(kernel, device=0, gpu=None, capability=None, problem=None, **named):
    """The launcher of the tuned config for `problem` (named ints, e.g. B=32, H=32,
    S=512, D=64, causal=0) on this GPU, from the tuning records embedded at export: the
    record for this problem, else the nearest one (same exact keys, e.g. D and causal;
    nearest on the others in log scale), else a default with its exact params set from
    the problem. With variants (kernels whose kernel.toml says `variant_of = kernel`,
    called the same way) the record may name one of them, and without a record the
    default is the one whose cubin this GPU prefers (an exact `sm_90a` before `sm_90` on
    9.0). Nothing is timed; a repeated problem is a dictionary hit (memoized per
    `device` argument, whose GPU name is read once). `gpu` and `capability` ((major,
    minor)) override the GPU's (tests). The problem comes as `problem=dict(...)`, as
    `launch` and `dims` take it, or as keywords."""
    problem = {**problem, **named} if problem is not None else named
    # Keyed in the caller's order of keywords (one call site keeps it): the same
    # problem spelled in another order is only another key with the same answer.
    key = (kernel, device, gpu, capability, *problem.items())
    hit = _best_memo.get(key)
    if hit is not None:
        return hit
    if gpu is None:
        gpu = _gpu_names.get(device)
        if gpu is None:
            gpu = _gpu_names[device] = _gpu_name(device)
    launcher = _best_uncached(kernel, gpu, problem, lambda: capability or _device_capability(device))
    _best_memo[key] = launcher
    return launcher


def _device_capability(device):
    lib = _cuda()
    _, ordinal = _current_context(lib, device)
    return _capability(lib, ordinal)


def _default_config(kernel, problem):
    """`kernel`'s default with its exact params from the problem, or the exported
    config with those exact params nearest to it; None without a default."""
    spec = _TUNE_SPEC[kernel]
    config = dict(spec["default"])
    if not config:
        # A kernel without params has one config, the empty one: its own default.
        return {} if {} in kernels().get(kernel, []) else None
    for param, key in spec["exact"].items():
        if key in problem:
            config[param] = problem[key]
    exported = kernels().get(kernel, [])
    if config not in exported:
        # The default with the problem's exact params may be outside the grid (a rule
        # removed it): take the exported config with those exact params that differs
        # from the default in the fewest params (the same choice as kart's best()).
        same = [c for c in exported if all(c.get(p) == config.get(p) for p in spec["exact"])]
        if same:
            config = min(same, key=lambda c: (sum(c.get(k) != v for k, v in spec["default"].items()),
                                              sorted(c.items())))
    return config


def _best_uncached(kernel, gpu, problem, capability=lambda: _device_capability(0)):
    """best() without the memo; `capability` gives (major, minor) when variants need it."""
    spec = _TUNE_SPEC.get(kernel)
    if spec is None:
        raise KartError(f"no kernel {kernel!r} was exported")
    exact_keys = list(spec["exact"].values())
    # Records indexed by (kernel, GPU, exact keys' values), built once: a new problem
    # is compared only with the records it could use.
    if not _tuning_index:
        for r in _TUNING:
            exact = tuple(r["problem"].get(k) for k in _TUNE_SPEC.get(r["kernel"], {}).get("exact", {}).values())
            _tuning_index.setdefault((r["kernel"], r["gpu"], exact), []).append(r)
        _tuning_index[None] = []  # built, even with no records
    candidates = _tuning_index.get((kernel, gpu, tuple(problem.get(k) for k in exact_keys)), [])

    def distance(record):
        return sum(abs(math.log(max(record["problem"].get(k, 1), 1)) - math.log(max(problem.get(k, 1), 1)))
                   for k in spec["nearest"])

    if candidates:
        record = min(candidates, key=distance)
        chosen = record.get("variant") or kernel
        if _TRACE_PATH is not None and record["problem"] != problem:
            _trace_fallback(kernel, problem, gpu, capability, chosen, record["config"], "nearest")
        return load(chosen, **record["config"])
    family = _family(kernel)
    defaults = [(k, c) for k, c in ((k, _default_config(k, problem)) for k in family) if c is not None]
    if not defaults:
        raise KartError(f"no tuning record of {kernel} fits this problem on {gpu}, and it has no default")
    if len(defaults) == 1:
        if _TRACE_PATH is not None:
            _trace_fallback(kernel, problem, gpu, capability, defaults[0][0], defaults[0][1], "default")
        return load(defaults[0][0], **defaults[0][1])
    # Variants: the default of the kernel whose cubin this GPU prefers.
    device = capability()
    targets = {}
    for k, config in defaults:
        for a in _matching(k, config):
            targets.setdefault(a["target"], (k, config))
    chosen = _resolve(device, list(targets))
    if chosen is None:
        raise NoCubinForThisGPU(f"no exported cubin of {', '.join(family)} runs on a GPU of compute capability "
                                f"{device[0]}.{device[1]}; exported: {', '.join(sorted(targets))}")
    k, config = targets[chosen]
    if _TRACE_PATH is not None:
        _trace_fallback(kernel, problem, gpu, lambda: device, k, config, "default")
    return load(k, **config)


def _trace_fallback(kernel, problem, gpu, capability, chose, config, source):
    major, minor = capability()
    _trace({"event": "fallback", "kernel": kernel, "problem": dict(problem), "gpu": gpu,
            "capability": f"{major}.{minor}", "chose": chose, "config": dict(config), "source": source})


# --- Data: what was exported (written by kart).
