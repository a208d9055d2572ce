//! Malformed inputs: each one exits 2 with a message naming the file and line, and
//! none panics.

use crate::harness::{TestProject, stderr, text};

const GOOD_KERNEL: &str = "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\n";

/// (what, file to write, its text, the file:line the message must name, a phrase).
const CASES: &[(&str, &str, &str, &str, &str)] = &[
    (
        "expression syntax",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\nrequire = [\"A +\"]\n[params]\nA = [1, 2]\n",
        "kernel.toml:4:16:",
        "ends too soon",
    ),
    (
        "expression unknown name",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\nrequire = [\"Z > 1\"]\n[params]\nA = [1, 2]\n",
        "kernel.toml:4:13:",
        "unknown name `Z`",
    ),
    (
        "expression division by zero",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\nrequire = [\"8 / (A - 1) > 0\"]\n[params]\nA = [1, 2]\n",
        "kernel.toml:4:13:",
        "for config A=1: division by zero in `8 / (A - 1)`",
    ),
    (
        "expression on an identifier",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\nrequire = [\"A > 1\"]\n[params]\nA = [\"half\"]\n",
        "kernel.toml:4:13:",
        "not an integer",
    ),
    (
        "expression overflow",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\nrequire = [\"A * 9223372036854775807 > 0\"]\n[params]\nA = [2]\n",
        "kernel.toml:4:13:",
        "64-bit",
    ),
    (
        "require removes every config",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\nrequire = [\"A > 5\"]\n[params]\nA = [1, 2]\n",
        "kernel.toml:1:1:",
        "leave no config",
    ),
    (
        "derived cycle",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\n[params]\nA = [1]\n[derived]\nX = \"Y + 1\"\nY = \"X\"\n",
        "kernel.toml:7:",
        "depends on itself",
    ),
    (
        "derived shadows a param",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\n[params]\nA = [1]\n[derived]\nA = \"2\"\n",
        "kernel.toml:7:",
        "also a param",
    ),
    (
        "derived division by zero",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\n[params]\nA = [0, 1]\n[derived]\nX = \"4 % A\"\n",
        "kernel.toml:7:6:",
        "for config A=0",
    ),
    (
        "launch with no grid",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\n[launch]\ngrid = []\nblock = [\"32\"]\n",
        "kernel.toml:5:",
        "1 to 3 expressions",
    ),
    (
        "launch syntax",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\n[launch]\ngrid = [\"cdiv(S)\"]\nblock = [\"32\"]\n",
        "kernel.toml:5:",
        "two arguments",
    ),
    (
        "toml syntax",
        "kernels/k/kernel.toml",
        "name = \"k\nsources = [\"k.cu\"]\n",
        "kernel.toml:1:",
        "string",
    ),
    (
        "unknown key",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\nflagz = []\n",
        "kernel.toml:4:",
        "unknown key `flagz`\nhint: did you mean `flags`?",
    ),
    (
        "wrong type",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = \"k.cu\"\nentry = [\"k\"]\n",
        "kernel.toml:2:",
        "invalid type",
    ),
    (
        "name not an identifier",
        "kernels/k/kernel.toml",
        "name = \"my-kernel\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\n",
        "kernel.toml:1:",
        "not a C identifier",
    ),
    (
        "param not an identifier",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\n[params]\n2BAD = [1]\n",
        "kernel.toml:5:",
        "not a C identifier",
    ),
    (
        "empty grid",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\n[params]\nA = []\n",
        "kernel.toml:5:",
        "has no values",
    ),
    (
        "bad value",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\n[params]\nA = [\"a b\"]\n",
        "kernel.toml:5:",
        "neither an integer",
    ),
    (
        "float value",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\n[params]\nA = [1.5]\n",
        "kernel.toml:5:",
        "integers or identifier",
    ),
    (
        "malformed target",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\ntargets = [\"sm90\"]\n",
        "kernel.toml:4:",
        "is not a target",
    ),
    (
        "a target before sm_90",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\ntargets = [\"sm_80a\"]\n",
        "kernel.toml:4:",
        "from sm_90a on",
    ),
    (
        "source escapes the project",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"../../../etc/passwd\"]\nentry = [\"k\"]\n",
        "kernel.toml:2:",
        "outside the project",
    ),
    (
        "absolute source",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"/etc/passwd\"]\nentry = [\"k\"]\n",
        "kernel.toml:2:",
        "must be a relative path",
    ),
    (
        "missing source",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"nope.cu\"]\nentry = [\"k\"]\n",
        "kernel.toml:2:",
        "does not exist",
    ),
    (
        "include escapes",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\ninclude = [\"../../..\"]\n",
        "kernel.toml:4:",
        "outside the project",
    ),
    (
        "signature for no entry",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\n[signature]\nother = [\"ptr\"]\n",
        "kernel.toml:5:",
        "not an entry",
    ),
    (
        "signature with an unknown kind",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\n[signature]\nk = [\"ptr\", \"float\"]\n",
        "kernel.toml:5:",
        "not a parameter kind",
    ),
    (
        "default outside the grid",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\ndefault = { A = 3 }\n[params]\nA = [1, 2]\n",
        "kernel.toml:4:",
        "not a config of the grid",
    ),
    (
        "default names no param",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\ndefault = { B = 1 }\n[params]\nA = [1, 2]\n",
        "kernel.toml:4:",
        "not a param",
    ),
    (
        "exclude names no param",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\n[params]\nA = [1]\n[[exclude]]\nB = 1\n",
        "kernel.toml:7:",
        "not a param",
    ),
    (
        "exclude value not in grid",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\n[params]\nA = [1, 2]\n[[exclude]]\nA = 3\n",
        "kernel.toml:7:",
        "has no value",
    ),
    (
        "reserved flag",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\nflags = [\"-O3\", \"-arch=sm_80\"]\n",
        "kernel.toml:4:",
        "not allowed",
    ),
    (
        "empty entry",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = []\n",
        "kernel.toml:3:",
        "`entry` is empty",
    ),
    (
        "duplicate param value",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\n[params]\nA = [1, 1]\n",
        "kernel.toml:5:",
        "twice",
    ),
    (
        "project unknown key",
        "kart.toml",
        "[project]\ntargets = [\"sm_90\"]\ncolour = 1\n",
        "kart.toml:3:",
        "unknown key `colour`\nhint: remove or correct it; keys here:",
    ),
    (
        "project empty targets",
        "kart.toml",
        "[project]\ntargets = []\n",
        "kart.toml:2:",
        "`targets` is empty",
    ),
    (
        "project bad target",
        "kart.toml",
        "[project]\ntargets = [\"sm_90\", \"compute_90\"]\n",
        "kart.toml:2:",
        "is not a target",
    ),
    (
        "not UTF-8",
        "kernels/k/kernel.toml",
        "(replaced below)",
        "kernel.toml:1:",
        "UTF-8",
    ),
    (
        "lock with a bad digest",
        "kart.lock",
        "version = 1\n\n[[artifact]]\nkernel = \"k\"\ntarget = \"sm_90\"\nkind = \"cubin\"\nkey = \"../../x\"\ndigest = \"zz\"\nsize = 1\nnvcc = \"13.0.88\"\n[artifact.config]\n[[artifact.entries]]\nname = \"k\"\nregisters = 1\nshared_bytes = 0\nstack_bytes = 0\nspill_store_bytes = 0\nspill_load_bytes = 0\n",
        "kart.lock:3:",
        "64 lower-case hex",
    ),
    (
        "lock syntax",
        "kart.lock",
        "version = 1\n[[artifact]\n",
        "kart.lock:2:",
        "",
    ),
    (
        "lock unknown key",
        "kart.lock",
        "version = 1\nextra = true\n",
        "kart.lock:2:",
        "unknown key `extra`",
    ),
    (
        "lock from the future",
        "kart.lock",
        "version = 99\n",
        "kart.lock:1:",
        "lock version 99",
    ),
    (
        "lock digest with a path in it",
        "kart.lock",
        "version = 1\n\n[[artifact]]\nkernel = \"k\"\ntarget = \"sm_90\"\nkind = \"cubin\"\nkey = \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\ndigest = \"../../../../etc/passwd\"\nsize = 1\nnvcc = \"13.0.88\"\n[artifact.config]\n[[artifact.entries]]\nname = \"k\"\nregisters = 1\nshared_bytes = 0\nstack_bytes = 0\nspill_store_bytes = 0\nspill_load_bytes = 0\n",
        "kart.lock:3:",
        "64 lower-case hex",
    ),
    (
        "lock digest in upper case",
        "kart.lock",
        "version = 1\n\n[[artifact]]\nkernel = \"k\"\ntarget = \"sm_90\"\nkind = \"cubin\"\nkey = \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\ndigest = \"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"\nsize = 1\nnvcc = \"13.0.88\"\n[artifact.config]\n[[artifact.entries]]\nname = \"k\"\nregisters = 1\nshared_bytes = 0\nstack_bytes = 0\nspill_store_bytes = 0\nspill_load_bytes = 0\n",
        "kart.lock:3:",
        "64 lower-case hex",
    ),
    (
        "lock with an absurd size",
        "kart.lock",
        "version = 1\n\n[[artifact]]\nkernel = \"k\"\ntarget = \"sm_90\"\nkind = \"cubin\"\nkey = \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\ndigest = \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\nsize = 9223372036854775807\nnvcc = \"13.0.88\"\n[artifact.config]\n[[artifact.entries]]\nname = \"k\"\nregisters = 1\nshared_bytes = 0\nstack_bytes = 0\nspill_store_bytes = 0\nspill_load_bytes = 0\n",
        "kart.lock:3:",
        "more than kart reads",
    ),
    (
        "lock with a negative size",
        "kart.lock",
        "version = 1\n\n[[artifact]]\nkernel = \"k\"\ntarget = \"sm_90\"\nkind = \"cubin\"\nkey = \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\ndigest = \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\nsize = -1\nnvcc = \"13.0.88\"\n[artifact.config]\n[[artifact.entries]]\nname = \"k\"\nregisters = 1\nshared_bytes = 0\nstack_bytes = 0\nspill_store_bytes = 0\nspill_load_bytes = 0\n",
        "kart.lock:",
        "invalid value",
    ),
    (
        "lock with a bad target",
        "kart.lock",
        "version = 1\n\n[[artifact]]\nkernel = \"k\"\ntarget = \"sm_9x\"\nkind = \"cubin\"\nkey = \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\ndigest = \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\nsize = 1\nnvcc = \"13.0.88\"\n[artifact.config]\n[[artifact.entries]]\nname = \"k\"\nregisters = 1\nshared_bytes = 0\nstack_bytes = 0\nspill_store_bytes = 0\nspill_load_bytes = 0\n",
        "kart.lock:3:",
        "not a target",
    ),
    (
        "deeply nested kart.toml",
        "kart.toml",
        "[project]\ntargets = [\"sm_90\"]\nx = [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]\n",
        "kart.toml:3:",
        "recursion",
    ),
    (
        "integer too large",
        "kart.toml",
        "[project]\ntargets = [\"sm_90\"]\n[toolchain]\nnvcc = 99999999999999999999999\n",
        "kart.toml:4:",
        "",
    ),
    (
        "attestation with a path for a digest",
        "kart.attest",
        "version = 1\n[[attestation]]\ndigest = \"../../etc/passwd\"\ngpu = \"NVIDIA H200\"\ncapability = \"9.0\"\ndriver = \"580.159.04\"\nkart = \"0.1.0\"\nartifact = \"k[-] sm_90\"\ncheck = \"loaded\"\n",
        "kart.attest:3:",
        "64 lower-case hex",
    ),
    (
        "attestation with an unknown check",
        "kart.attest",
        "version = 1\n[[attestation]]\ndigest = \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\ngpu = \"NVIDIA H200\"\ncapability = \"9.0\"\ndriver = \"580.159.04\"\nkart = \"0.1.0\"\nartifact = \"k[-] sm_90\"\ncheck = \"trusted\"\n",
        "kart.attest:",
        "unknown variant",
    ),
    (
        "attestation from the future",
        "kart.attest",
        "version = 7\n",
        "kart.attest:1:",
        "attestation version 7",
    ),
    (
        "tuning record with a bad digest",
        "kart.tune",
        "version = 2\n[[record]]\nkernel = \"k\"\ngpu = \"NVIDIA H200\"\ntarget = \"sm_90\"\ndigest = \"x\"\nmedian_us = 1.0\ntimed = 1\n[record.problem]\nB = 1\n[record.config]\n",
        "kart.tune:",
        "the digest is not 64 lower-case hex digits",
    ),
    (
        "a quoted integer in a grid",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\n[params]\nBLOCK = [\"32\", 64]\n",
        "kernel.toml:5:10:",
        "is a string, and kart keeps integers and names apart",
    ),
    (
        "tuning record whose GPU name drives the terminal",
        "kart.tune",
        "version = 2\n[[record]]\nkernel = \"k\"\ngpu = \"H200\\u001b]0;x\\u0007\"\ntarget = \"sm_90\"\ndigest = \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\nmedian_us = 1.0\ntimed = 1\n[record.problem]\nB = 1\n[record.config]\n",
        "kart.tune:",
        "has control characters",
    ),
    (
        "tuning record with a config value for a shell",
        "kart.tune",
        "version = 2\n[[record]]\nkernel = \"k\"\ngpu = \"H200\"\ntarget = \"sm_90\"\ndigest = \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\nmedian_us = 1.0\ntimed = 1\n[record.problem]\nB = 1\n[record.config]\nX = \"$(id)\"\n",
        "kart.tune:",
        "neither an integer nor a name",
    ),
    (
        "tuning record that is not a number",
        "kart.tune",
        "version = 2\n[[record]]\nkernel = \"k\"\ngpu = \"NVIDIA H200\"\ntarget = \"sm_90\"\ndigest = \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\nmedian_us = \"fast\"\ntimed = 1\n[record.problem]\nB = 1\n[record.config]\n",
        "kart.tune:",
        "invalid type",
    ),
    (
        "tune exact names no param",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\n[tune]\nexact = { BLOCK = \"B\" }\n",
        "kernel.toml:5:",
        "not a param",
    ),
    (
        "launch args of an entry without a signature",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\n[launch]\ngrid = [\"1\"]\nblock = [\"1\"]\n[launch.args]\nk = [\"pass\"]\n",
        "kernel.toml:8:",
        "not an entry with a [signature]",
    ),
    (
        "launch args slot count",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\n[signature]\nk = [\"ptr\"]\n[launch]\ngrid = [\"1\"]\nblock = [\"1\"]\n[launch.args]\nk = [\"pass\", \"pass\"]\n",
        "kernel.toml:10:",
        "has 2 slots, but its [signature] has 1",
    ),
    (
        "launch args value into a pointer",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\n[signature]\nk = [\"ptr\"]\n[launch]\ngrid = [\"1\"]\nblock = [\"1\"]\n[launch.args]\nk = [{ value = \"N\" }]\n",
        "kernel.toml:10:",
        "a computed value goes only into an integer parameter",
    ),
    (
        "launch args tensor map type",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\n[signature]\nk = [\"tensormap\"]\n[launch]\ngrid = [\"1\"]\nblock = [\"1\"]\n[launch.args]\nk = [{ tensormap = \"f8\", shape = [\"N\"], tile = [1] }]\n",
        "kernel.toml:10:",
        "`f8` is not a tensor map element type",
    ),
    (
        "launch args expression",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\n[signature]\nk = [\"i32\"]\n[launch]\ngrid = [\"1\"]\nblock = [\"1\"]\n[launch.args]\nk = [{ value = \"N +\" }]\n",
        "kernel.toml:10:",
        "value = \"N +\"",
    ),
    (
        "launch name neither a param nor a problem key",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\n[params]\nBM = [64]\n[launch]\ngrid = [\"cdiv(N, BM * BK)\"]\nblock = [\"BM\"]\nproblem = [\"N\"]\n",
        "kernel.toml:7:23:",
        "uses `BK`, which is neither a param, a derived param, `SMS` nor a problem key\nhint: did you mean `BM`?",
    ),
    (
        "launch problem key that is a param",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\n[params]\nBM = [64]\n[launch]\ngrid = [\"BM\"]\nblock = [\"BM\"]\nproblem = [\"BM\"]\n",
        "kernel.toml:9:",
        "problem key `BM` is also a param",
    ),
    (
        "variant of an unknown kernel",
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\nvariant_of = \"gone\"\n",
        "kernel.toml:4:",
        "`gone`, which is not a kernel",
    ),
    (
        "remote url not a string",
        "kart.toml",
        "[project]\ntargets = [\"sm_90\"]\n[remote]\nurl = 5\n",
        "kart.toml:4:",
        "invalid type",
    ),
];

#[test]
fn malformed_inputs_exit_2_naming_file_and_line() {
    assert!(CASES.len() >= 40, "{} cases", CASES.len());
    let mut failures = Vec::new();
    for (what, file, content, location, phrase) in CASES {
        let p = TestProject::new(&["sm_90"]);
        p.kernel("k", "out[0] = 1;", "");
        p.write("kernels/k/kernel.toml", GOOD_KERNEL);
        let path = p.root().join(file);
        std::fs::write(&path, content.as_bytes()).unwrap();
        // `not UTF-8` needs a real invalid byte, which a &str cannot hold.
        if *what == "not UTF-8" {
            std::fs::write(&path, b"name = \"k\xff\"\n").unwrap();
        }
        // The lock is read by `--locked`; the manifests by any command.
        let args: &[&str] = if file.ends_with("kart.lock") {
            &["build", "--locked"]
        } else if file.ends_with("kart.tune") {
            &["tune"]
        } else {
            &["ls"]
        };
        let out = p.kart(args);
        let err = stderr(&out);
        let ok = out.status.code() == Some(2)
            && err.contains(location)
            && err.contains(phrase)
            && !err.contains("panicked");
        if !ok {
            failures.push(format!("{what}:\n{}", text(&out)));
        }
    }
    assert!(
        failures.is_empty(),
        "{} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn a_symlink_out_of_the_project_is_refused() {
    let p = TestProject::new(&["sm_90"]);
    p.kernel("k", "out[0] = 1;", "");
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("x.cu"), "// outside").unwrap();
    std::os::unix::fs::symlink(outside.path(), p.root().join("kernels/k/link")).unwrap();
    p.write(
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"link/x.cu\"]\nentry = [\"k\"]\n",
    );
    let out = p.kart(&["ls"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        stderr(&out).contains("outside the project"),
        "{}",
        text(&out)
    );
}

#[test]
fn no_project_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kart"))
        .arg("ls")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(stderr(&out).contains("no `kart.toml`"), "{}", text(&out));
}

/// `(((…1…)))` nested `n` levels.
fn nested(n: usize) -> String {
    format!("{}1{}", "(".repeat(n), ")".repeat(n))
}

#[test]
fn expressions_100000_levels_deep_are_errors_at_their_line_not_a_crash() {
    let deep = nested(100_000);
    let kernel_tomls = [
        (
            "require",
            format!("{GOOD_KERNEL}require = [\"{deep}\"]\n[params]\nA = [1, 2]\n"),
        ),
        (
            "derived",
            format!("{GOOD_KERNEL}[params]\nA = [1, 2]\n[derived]\nX = \"{deep}\"\n"),
        ),
        (
            "launch",
            format!(
                "{GOOD_KERNEL}[params]\nA = [1, 2]\n[launch]\nproblem = [\"N\"]\ngrid = [\"{deep}\"]\nblock = [\"A\"]\n"
            ),
        ),
    ];
    for (what, manifest) in &kernel_tomls {
        let p = TestProject::new(&["sm_90"]);
        p.kernel("k", "out[0] = 1;", "");
        p.write("kernels/k/kernel.toml", manifest);
        for args in [&["ls"][..], &["build", "--explain-grid"]] {
            let out = p.kart(args);
            let err = stderr(&out);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{what} {args:?}: {}",
                text(&out)
            );
            assert!(
                err.contains("kernels/k/kernel.toml:") && err.contains("nests more than 64 levels"),
                "{what} {args:?}: {}",
                text(&out)
            );
        }
    }

    // The lock's copy of `[launch]`, read by every command.
    let p = TestProject::new(&["sm_90"]);
    p.kernel("k", "out[0] = 1;", "");
    p.write(
        "kart.lock",
        &format!(
            "version = 3\n\n[[kernel]]\nname = \"k\"\n\n[kernel.launch]\ngrid = [\"{deep}\"]\nblock = [\"1\"]\nshared_mem = \"0\"\n"
        ),
    );
    let out = p.kart(&["ls"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        stderr(&out).contains("kart.lock:4:") && stderr(&out).contains("nests more than"),
        "{}",
        text(&out)
    );

    // A bundle's lock, read by `bundle --inspect` (and by the runtime, which the runtime
    // crate's own test covers): a section of the bundle, read as kart.lock is.
    use kart::store::bundle::{BUNDLE_FORMAT, BundleIndex, bundle_bytes};
    let lock = p.read("kart.lock");
    let index = BundleIndex {
        format: BUNDLE_FORMAT,
        kart: "0.1.0".into(),
        made_for: Vec::new(),
        tune: String::new(),
        attest: String::new(),
    };
    let bundle = bundle_bytes(&index, &lock, Vec::new()).unwrap();
    std::fs::write(p.root().join("deep.kartbundle"), bundle).unwrap();
    let out = p.kart(&["bundle", "--inspect", "deep.kartbundle"]);
    assert!(
        out.status.code().is_some_and(|c| (1..128).contains(&c)),
        "{}",
        text(&out)
    );
    assert!(stderr(&out).contains("nests more than"), "{}", text(&out));
}

/// The runtime parses the records a lookup touches: a malformed record of another
/// kernel does not stop a program loading this one, and a lookup that touches it is
/// refused with the file, the line and what is wrong, as `kart build --locked` refuses
/// the whole lock.
#[test]
fn the_runtime_reports_a_malformed_lock_record_when_touched_and_only_then() {
    use kart::model::{Config, ParamValue};
    use kart::resolve::{Capability, JitPolicy};
    let p = TestProject::new(&["sm_90"]);
    p.kernel("good", "out[0] = A;", "[params]\nA = [1, 2]\n");
    p.kernel("other", "out[0] = A + 1;", "[params]\nA = [1, 2]\n");
    p.ok(&["build"]);
    let lock = p.read("kart.lock");
    let other = lock.find("kernel = \"other\"").unwrap();
    let digest = other + lock[other..].find("digest = \"").unwrap();
    let line = lock[..digest].lines().count() + 1;
    let bad = format!(
        "{}digest = \"not hex\"{}",
        &lock[..digest],
        &lock[digest..][75..]
    );
    p.write("kart.lock", &bad);
    let h100 = Capability { major: 9, minor: 0 };
    let config = |a: i64| Config::from([("A".to_string(), ParamValue::Int(a))]);
    let rt = kart::runtime::Runtime::open(p.root()).expect("opens: no record read yet");
    let a = rt
        .select("good", &config(2), h100, JitPolicy::Forbid)
        .unwrap();
    let bytes = rt.blobs().read_blob(&a.digest, Some(a.size)).unwrap();
    assert_eq!(kart::digest::sha256_hex(&bytes), a.digest);
    assert_eq!(rt.kernels().unwrap(), ["good", "other"]);
    let err = rt
        .select("other", &config(1), h100, JitPolicy::Forbid)
        .unwrap_err()
        .to_string();
    assert!(err.contains("64 lower-case hex"), "{err}");
    // The whole parse points at the record's `[[artifact]]` header, a few lines above.
    let at: usize = err
        .split("kart.lock:")
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no kart.lock:LINE in {err}"));
    assert!(at < line && line - at < 10, "{err} (digest on line {line})");
    assert!(rt.lock().is_err());
    let out = p.kart(&["build", "--locked"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(stderr(&out).contains("64 lower-case hex"), "{}", text(&out));
}
