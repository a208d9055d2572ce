"""Checks that a module written by `kart export --python` reads its data lazily (standard
library only). Run by the Rust test `an_exported_module_of_hundreds_of_configs...` in
tests/cli:

    python3 tests/python/check_export_lazy.py MODULE.py KERNEL PARAM=VALUE...

Importing reads no artifact record; load() of one config finds its records through the
module's index (reading no other record line) and decodes no cubin; a cubin corrupted
in a copy of the module is refused with a clear message when it is decoded, while
load() of its config and the other cubins still work; a record corrupted in a copy
fails only its own config's load(), with a clear message. Prints one line per check;
exits 1 on the first failure.
"""
import importlib.util
import os
import sys
import tempfile


def check(what, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + what + (f": {detail}" if detail and not ok else ""))
    if not ok:
        sys.exit(1)


def imported(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(module_path, kernel, *params):
    config = {k: int(v) for k, v in (p.split("=", 1) for p in params)}
    mod = imported("exported", module_path)
    check("import reads no artifact record", not mod._by_config and not mod._all_records)
    launcher = mod.load(kernel, **config)
    check("load() parses only its config's records", not mod._all_records and launcher.config == config)
    check("load() reads no record line but its config's (the index finds them)", not mod._by_config)
    victim = next(iter(launcher._artifacts.values()))
    check("its cubin verifies", len(mod._cubin(victim)) == victim["size"])
    # Another config, read through its own load().
    others = [c for c in mod.kernels()[kernel] if c != config]
    check("kernels() lists every config", len(others) >= 100, len(others))
    neighbour = next(iter(mod.load(kernel, **others[len(others) // 2])._artifacts.values()))

    with open(module_path, "rb") as f:
        text = bytearray(f.read())
    offset, length = victim["blob"]
    at = mod._BLOBS_AT + offset + length // 2
    text[at] = ord("A") if text[at] != ord("A") else ord("B")
    with tempfile.TemporaryDirectory() as folder:
        copy = os.path.join(folder, "corrupted.py")
        with open(copy, "wb") as f:
            f.write(bytes(text))
        bad = imported("corrupted", copy)
        launcher = bad.load(kernel, **config)
        check("load() of the corrupted cubin's config still works (nothing decoded)", launcher.config == config)
        check("another config's cubin still verifies", len(bad._cubin(neighbour)) == neighbour["size"])
        try:
            bad._cubin(victim)
            check("the corrupted cubin is refused", False)
        except bad.KartError as e:
            message = str(e)
            check("the corrupted cubin is refused, naming it and what to do",
                  f"{kernel}[" in message and "is corrupt" in message and "export the module again" in message,
                  message)

    # Another config's record line made unreadable (its JSON's first byte), the
    # module's length and every offset unchanged.
    spoiled = others[len(others) // 3]
    with open(module_path, "rb") as f:
        text = bytearray(f.read())
    line = b"#R " + mod._config_key(kernel, spoiled) + b"\t"
    at = text.find(line, mod._DATA_AT)
    check("the other config's record line is where the module says", mod._DATA_AT <= at < mod._INDEX_AT, at)
    text[at + len(line)] = ord("}")
    with tempfile.TemporaryDirectory() as folder:
        copy = os.path.join(folder, "spoiled.py")
        with open(copy, "wb") as f:
            f.write(bytes(text))
        bad = imported("spoiled", copy)
        launcher = bad.load(kernel, **config)
        check("a corrupt record of another config does not fail this load()",
              launcher.config == config and len(bad._cubin(next(iter(launcher._artifacts.values())))) > 0)
        try:
            bad.load(kernel, **spoiled)
            check("load() of the corrupt record's config fails", False)
        except bad.KartError as e:
            message = str(e)
            check("load() of the corrupt record's config fails, naming it and what to do",
                  "record of" in message and "is corrupt" in message and "export the module again" in message,
                  message)
    print("all checks passed")


if __name__ == "__main__":
    main(*sys.argv[1:])
