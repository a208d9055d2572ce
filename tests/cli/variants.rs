//! Variants (`variant_of`) and the arguments kart makes (`[launch.args]`): a base
//! kernel for every GPU and an `sm_90a` variant that takes a tensor map and a computed
//! count, both called with (x, out, n); built with the real nvcc, recorded in the lock,
//! exported together, and chosen per GPU by the exported module's `best()`.

use crate::harness::{TestProject, stderr, stdout, text};

const BASE_CU: &str = "extern \"C\" __global__ void fwd(const float* x, float* out, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) out[i] = 2.0f * x[i];\n}\n";

const FAST_CU: &str = "#include <cuda.h>\nextern \"C\" __global__ void fwd(const __grid_constant__ CUtensorMap x, float* out, int n, int halves) {\n  if (threadIdx.x == 0 && blockIdx.x == 0 && halves < 0) out[0] = (float)n + (float)(size_t)&x;\n}\n";

const TUNE: &str = "[tune]\nexact = { WIDTH = \"W\" }\nnearest = [\"N\"]\n";

fn family_project() -> TestProject {
    let p = TestProject::new(&["sm_80", "sm_90"]);
    p.write("kernels/base/base.cu", BASE_CU);
    p.write(
        "kernels/base/kernel.toml",
        &format!(
            "name = \"base\"\nsources = [\"base.cu\"]\nentry = [\"fwd\"]\ndefault = {{ WIDTH = 32 }}\n[params]\nWIDTH = [32, 64]\n[signature]\nfwd = [\"ptr\", \"ptr\", \"i32\"]\n[launch]\ngrid = [\"cdiv(N, 128)\"]\nblock = [\"128\"]\n{TUNE}"
        ),
    );
    p.write("kernels/fast/fast.cu", FAST_CU);
    p.write(
        "kernels/fast/kernel.toml",
        &format!(
            "name = \"fast\"\nvariant_of = \"base\"\nsources = [\"fast.cu\"]\nentry = [\"fwd\"]\ntargets = [\"sm_90a\"]\ndefault = {{ WIDTH = 32, TILE = 64 }}\n[params]\nWIDTH = [32]\nTILE = [64]\n[signature]\nfwd = [\"tensormap\", \"ptr\", \"i32\", \"i32\"]\n[launch]\ngrid = [\"min(cdiv(N, TILE), SMS)\"]\nblock = [\"128\"]\n[launch.args]\nfwd = [\n  {{ tensormap = \"f32\", shape = [\"N / WIDTH\", \"WIDTH\"], tile = [\"TILE\", 32], swizzle = 128 }},\n  \"pass\",\n  \"pass\",\n  {{ value = \"N / 2\" }},\n]\n{TUNE}"
        ),
    );
    p
}

#[test]
fn a_variant_is_built_locked_exported_and_chosen_per_gpu() {
    let p = family_project();
    p.ok(&["build"]);
    let lock = p.read("kart.lock");
    assert!(
        lock.contains("tensormap = \"f32\"") && lock.contains("value = \"N / 2\""),
        "the lock records [launch.args]:\n{lock}"
    );
    p.ok(&["build", "--locked"]);
    // Editing [launch.args] alone changes no key, but --locked still sees it.
    let toml = p.read("kernels/fast/kernel.toml");
    p.write("kernels/fast/kernel.toml", &toml.replace("N / 2", "N / 4"));
    let out = p.kart(&["build", "--locked"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("fast: [launch] differs"),
        "{}",
        text(&out)
    );
    p.write("kernels/fast/kernel.toml", &toml);

    // A tuning record whose winner is the variant: listed under the base, naming the
    // variant's config, and not stale.
    let lock = p.read("kart.lock");
    let at = lock.find("kernel = \"fast\"").unwrap();
    let digest = lock[at..].split("digest = \"").nth(1).unwrap()[..64].to_string();
    p.write(
        "kart.tune",
        &format!(
            "version = 2\n\n[[record]]\nkernel = \"base\"\ngpu = \"NVIDIA H200\"\nvariant = \"fast\"\ntarget = \"sm_90a\"\ndigest = \"{digest}\"\nmedian_us = 3.5\ntimed = 3\n\n[record.problem]\nN = 4096\nW = 32\n\n[record.config]\nTILE = 64\nWIDTH = 32\n"
        ),
    );
    let out = p.ok(&["tune"]);
    let listing = stdout(&out);
    let row = listing
        .lines()
        .find(|l| l.starts_with("base"))
        .unwrap_or_default();
    assert!(
        row.contains("fast[TILE=64,WIDTH=32]") && row.trim_end().ends_with('-'),
        "{listing}"
    );
    // The columns line up with the header, in characters (the header has a `µ`).
    let header = listing.lines().next().unwrap_or_default();
    let stale_at = header[..header.find("STALE").unwrap()].chars().count();
    assert_eq!(row.chars().count() - 1, stale_at, "{listing}");

    // Exporting the base brings its variant.
    let module = p.root().join("family.py");
    let out = p.ok(&["export", "--python", "-o", module.to_str().unwrap(), "base"]);
    assert!(
        stderr(&out).contains("3 cubins") && !stderr(&out).contains("warning"),
        "{}",
        text(&out)
    );
    let script = r#"
import importlib.util, sys
spec = importlib.util.spec_from_file_location("family", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
assert mod._TUNE_SPEC["fast"]["variant_of"] == "base", mod._TUNE_SPEC
# The record names the variant: best() of the problem recorded gives it, whatever the GPU.
recorded = mod.best("base", gpu="NVIDIA H200", capability=(8, 0), W=32, N=4096)
assert (recorded.kernel, recorded.config) == ("fast", {"TILE": 64, "WIDTH": 32}), recorded
mod._best_memo.clear()
assert mod._family("base") == ["base", "fast"]
# No tuning record: the default of the kernel whose cubin the GPU prefers.
on_h100 = mod.best("base", gpu="H100", capability=(9, 0), W=32, N=4096)
assert (on_h100.kernel, on_h100.config) == ("fast", {"TILE": 64, "WIDTH": 32}), on_h100
on_ada = mod.best("base", gpu="L4", capability=(8, 9), W=32, N=4096)
assert (on_ada.kernel, on_ada.config) == ("base", {"WIDTH": 32}), on_ada
try:
    mod.best("base", gpu="B200", capability=(10, 0), W=32, N=4096)
    raise SystemExit("a GPU no cubin fits was given a launcher")
except mod.NoCubinForThisGPU as e:
    assert "base, fast" in str(e), e
# The made parameters, evaluated without a GPU (swizzle and L2 promotion last): the
# caller passes three.
plan = on_h100._plan(("k",), {"N": 4096, "W": 32}, 0)
assert plan == [("map", "f32", (128, 32), (64, 32), 128, 128), ("pass",), ("pass",), ("value", 2048)], plan
try:
    on_h100.launch(1, 2, problem={"N": 4096, "W": 32})
    raise SystemExit("a call with two arguments was launched")
except TypeError as e:
    assert "called with 3 arguments" in str(e) and "got 2" in str(e), e
assert mod._driver is None, "nothing above touched the driver"
print("family checks passed")
"#;
    let check = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&module)
        .output()
        .unwrap();
    assert!(
        check.status.success() && stdout(&check).contains("family checks passed"),
        "{}",
        text(&check)
    );

    // Once the lock names another artifact (its kernel changed since the record was
    // timed) the record is stale: `kart tune` marks it and export warns about it.
    let tune = p.read("kart.tune");
    p.write("kart.tune", &tune.replace(&digest, &"ab".repeat(32)));
    let out = p.ok(&["tune"]);
    assert!(
        stdout(&out)
            .lines()
            .any(|l| l.starts_with("base") && l.trim_end().ends_with("yes")),
        "{}",
        text(&out)
    );
    let out = p.ok(&["export", "--python", "-o", module.to_str().unwrap(), "base"]);
    assert!(
        stderr(&out)
            .contains("warning: 1 record(s) of kart.tune time blobs kart.lock no longer names"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_variant_called_differently_is_refused_at_its_variant_of_line() {
    let p = family_project();
    let toml = p.read("kernels/fast/kernel.toml");
    // Without [launch.args] the variant takes a tensor map and one more int.
    let start = toml.find("[launch.args]").unwrap();
    let end = toml.find("[tune]").unwrap();
    p.write(
        "kernels/fast/kernel.toml",
        &format!("{}{}", &toml[..start], &toml[end..]),
    );
    let out = p.kart(&["ls"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = stderr(&out);
    assert!(
        err.contains("kernels/fast/kernel.toml:2:")
            && err.contains("`fwd` is called with [ptr, ptr, i32] in `base` but [tensormap, ptr, i32, i32] in `fast`"),
        "{err}"
    );
    // A variant of a variant, and of nothing.
    p.write(
        "kernels/fast/kernel.toml",
        &toml.replace("variant_of = \"base\"", "variant_of = \"fast\""),
    );
    let err = stderr(&p.kart(&["ls"]));
    assert!(err.contains("itself a variant"), "{err}");
    p.write(
        "kernels/fast/kernel.toml",
        &toml.replace("variant_of = \"base\"", "variant_of = \"nothing\""),
    );
    let err = stderr(&p.kart(&["ls"]));
    assert!(
        err.contains("`nothing`, which is not a kernel") && err.contains("base, fast"),
        "{err}"
    );
}
