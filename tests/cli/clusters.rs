//! Thread-block clusters, programmatic dependent launch and tensor-map numbers as
//! expressions (`[launch] cluster`, `pdl`, `[launch.args]` `swizzle` and
//! `l2_promotion`): parsed and checked when kernel.toml is read, recorded in the lock
//! (and absent from it when unused), compared by `--locked`, and carried into the
//! exported module, whose launch geometry checks clusters without a GPU.

use crate::harness::{TestProject, stderr, text};

const RANKS_CU: &str = "extern \"C\" __global__ void ranks(unsigned* out, int n) {\n  unsigned rank, id;\n  asm(\"mov.u32 %0, %%cluster_ctarank;\" : \"=r\"(rank));\n  asm(\"mov.u32 %0, %%clusterid.x;\" : \"=r\"(id));\n  if (threadIdx.x == 0 && blockIdx.x < n) out[blockIdx.x] = id * 256 + rank;\n}\n";

const RANKS_TOML: &str = "name = \"ranks\"\nsources = [\"ranks.cu\"]\nentry = [\"ranks\"]\ndefault = { CLUSTER = 2 }\n[params]\nCLUSTER = [2, 4]\n[signature]\nranks = [\"ptr\", \"i32\"]\n[launch]\ngrid = [\"cdiv(N, 32)\"]\nblock = [\"32\"]\ncluster = [\"CLUSTER\", 1, 1]\npdl = true\nproblem = [\"N\"]\n";

fn ranks_project(targets: &[&str], toml: &str) -> TestProject {
    let p = TestProject::new(targets);
    p.write("kernels/ranks/ranks.cu", RANKS_CU);
    p.write("kernels/ranks/kernel.toml", toml);
    p
}

/// Runs a Python snippet against the exported `module` (`mod` in the snippet);
/// returns its stdout, failing on a non-zero exit.
fn python(module: &std::path::Path, snippet: &str) -> String {
    let script = format!(
        "import importlib.util\nspec = importlib.util.spec_from_file_location('exported', {module:?})\nmod = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(mod)\n{snippet}\n"
    );
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_cluster_launch_is_locked_compared_and_exported() {
    let p = ranks_project(&["sm_90"], RANKS_TOML);
    p.ok(&["build"]);
    let lock = p.read("kart.lock");
    assert!(
        lock.contains("cluster = [\"CLUSTER\", \"1\", \"1\"]") && lock.contains("pdl = \"1\""),
        "the lock records cluster and pdl:\n{lock}"
    );
    p.ok(&["build", "--locked"]);
    // A different cluster changes no key but is a different launch rule.
    p.write(
        "kernels/ranks/kernel.toml",
        &RANKS_TOML.replace("[\"CLUSTER\", 1, 1]", "[\"CLUSTER\", 1]"),
    );
    let out = p.kart(&["build", "--locked"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("ranks: [launch] differs"),
        "{}",
        text(&out)
    );
    p.write("kernels/ranks/kernel.toml", RANKS_TOML);

    let module = p.root().join("ranks_kernels.py");
    p.ok(&[
        "export",
        "--python",
        "-o",
        module.to_str().unwrap(),
        "ranks:CLUSTER=2",
        "ranks:CLUSTER=4",
    ]);
    let got = python(
        &module,
        "print(mod._LAUNCH['ranks']['cluster'], mod._LAUNCH['ranks']['pdl'])\n\
         k = mod.load('ranks', CLUSTER=4)\n\
         print(k.dims(N=256), k.cluster(N=256), mod._geometry('ranks', k._env, {'N': 256})[4])\n\
         try:\n    k.dims(N=96)\n    print('no error')\n\
         except mod.KartError as e:\n    print(e)\n\
         print('driver untouched', mod._driver is None)",
    );
    let lines: Vec<&str> = got.lines().collect();
    assert_eq!(lines[0], "['CLUSTER', '1', '1'] 1", "{got}");
    assert_eq!(
        lines[1], "((8, 1, 1), (32, 1, 1), 0) (4, 1, 1) True",
        "{got}"
    );
    assert_eq!(
        lines[2],
        "ranks[CLUSTER=4].ranks: [launch] grid (3, 1, 1) is not a whole number of clusters (4, 1, 1): each grid side must be a multiple of the cluster's",
        "{got}"
    );
    assert_eq!(lines[3], "driver untouched True", "{got}");
}

#[test]
fn kernels_without_clusters_keep_their_lock_text() {
    let p = ranks_project(
        &["sm_90"],
        &RANKS_TOML
            .replace("cluster = [\"CLUSTER\", 1, 1]\n", "")
            .replace("pdl = true\n", "pdl = false\n"),
    );
    p.ok(&["build"]);
    let lock = p.read("kart.lock");
    assert!(
        !lock.contains("cluster")
            && !lock.contains("pdl")
            && lock.contains("grid = [\"cdiv(N, 32)\"]"),
        "{lock}"
    );
}

#[test]
fn clusters_and_pdl_below_sm_90_are_refused_naming_the_key_and_target() {
    for (toml, key, feature) in [
        (
            RANKS_TOML.replace("pdl = true\n", ""),
            "cluster",
            "thread-block clusters",
        ),
        (
            RANKS_TOML.replace("cluster = [\"CLUSTER\", 1, 1]\n", ""),
            "pdl",
            "programmatic dependent launch",
        ),
    ] {
        let p = ranks_project(&["sm_80", "sm_90"], &toml);
        let out = p.kart(&["build"]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        let err = stderr(&out);
        assert!(
            err.contains("kernels/ranks/kernel.toml:")
                && err.contains(&format!(
                    "[launch] {key}: {feature} need compute capability 9.0 or later, but `targets` lists sm_80"
                ))
                && err.contains("remove sm_80 from `targets`"),
            "{err}"
        );
        assert_eq!(p.compiles(), 0);
    }
}

#[test]
fn bad_clusters_are_refused_at_their_line() {
    for (cluster, want) in [
        ("[]", "[launch] cluster takes 1 to 3 expressions (x, y, z)"),
        (
            "[1, 1, 1, 1]",
            "[launch] cluster takes 1 to 3 expressions (x, y, z)",
        ),
        (
            "[\"CLUSTR\"]",
            "[launch] `CLUSTR` uses `CLUSTR`, which is neither a param",
        ),
        (
            "[true]",
            "[launch] cluster[0] must be an expression (a string) or an integer",
        ),
        ("[\"CLUSTER +\"]", "[launch] cluster[0] \"CLUSTER +\""),
        (
            "[\"CLUSTER - 2\"]",
            "kernel `ranks`: [launch] cluster[0] = \"CLUSTER - 2\" is 0 for config CLUSTER=2, outside 1 to 2^32 - 1",
        ),
    ] {
        let p = ranks_project(
            &["sm_90"],
            &RANKS_TOML.replace("[\"CLUSTER\", 1, 1]", cluster),
        );
        let out = p.kart(&["build"]);
        assert_eq!(out.status.code(), Some(2), "{cluster}: {}", text(&out));
        let err = stderr(&out);
        assert!(
            err.contains("kernels/ranks/kernel.toml:12:") && err.contains(want),
            "{cluster}: want {want}\n{err}"
        );
        assert_eq!(p.compiles(), 0);
    }
    let p = ranks_project(
        &["sm_90"],
        &RANKS_TOML.replace("pdl = true", "pdl = \"N >\""),
    );
    let out = p.kart(&["build"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        stderr(&out).contains("[launch] pdl \"N >\""),
        "{}",
        text(&out)
    );
}

const MAP_CU: &str = "#include <cuda.h>\nextern \"C\" __global__ void fwd(const __grid_constant__ CUtensorMap x, float* out, int n) {\n  if (threadIdx.x == 0 && blockIdx.x == 0 && n < 0) out[0] = (float)(size_t)&x;\n}\n";

fn map_project(slot: &str) -> TestProject {
    let p = TestProject::new(&["sm_90a"]);
    p.write("kernels/fwd/fwd.cu", MAP_CU);
    p.write(
        "kernels/fwd/kernel.toml",
        &format!(
            "name = \"fwd\"\nsources = [\"fwd.cu\"]\nentry = [\"fwd\"]\ndefault = {{ SW = 64 }}\n[params]\nSW = [64, 128]\n[signature]\nfwd = [\"tensormap\", \"ptr\", \"i32\"]\n[launch]\ngrid = [\"cdiv(N, 16)\"]\nblock = [\"128\"]\nproblem = [\"N\", \"L2\"]\n[launch.args]\nfwd = [\n  {slot},\n  \"pass\",\n  \"pass\",\n]\n"
        ),
    );
    p
}

#[test]
fn tensor_map_numbers_are_expressions_checked_per_config_and_per_launch() {
    let p = map_project(
        "{ tensormap = \"f32\", shape = [\"N\", 32], tile = [16, \"SW / 4\"], swizzle = \"SW\", l2_promotion = \"L2\" }",
    );
    p.ok(&["build"]);
    let lock = p.read("kart.lock");
    assert!(
        lock.contains("swizzle = \"SW\"") && lock.contains("l2_promotion = \"L2\""),
        "{lock}"
    );
    p.ok(&["build", "--locked"]);
    let module = p.root().join("fwd_kernels.py");
    p.ok(&[
        "export",
        "--python",
        "-o",
        module.to_str().unwrap(),
        "fwd:SW=64",
        "fwd:SW=128",
    ]);
    // The plan of a launch is made without a GPU: sizes, swizzle and L2 promotion.
    let got = python(
        &module,
        "k = mod.load('fwd', SW=128)\n\
         print(k._plan(('a',), {'N': 64, 'L2': 256}, 0)[0])\n\
         try:\n    k._plan(('b',), {'N': 64, 'L2': 100}, 0)\n    print('no error')\n\
         except mod.KartError as e:\n    print(e)",
    );
    let lines: Vec<&str> = got.lines().collect();
    assert_eq!(
        lines[0], "('map', 'f32', (64, 32), (16, 32), 128, 256)",
        "{got}"
    );
    assert_eq!(
        lines[1],
        "fwd[SW=128].fwd: [launch.args] parameter 0 l2_promotion = \"L2\" is 100, not a legal l2_promotion (one of 0, 64, 128, 256 bytes)",
        "{got}"
    );

    // Integers keep the lock's text of a literal swizzle, and an omitted
    // l2_promotion is absent from it.
    let p =
        map_project("{ tensormap = \"f32\", shape = [\"N\", 32], tile = [16, 16], swizzle = 64 }");
    p.ok(&["build"]);
    let lock = p.read("kart.lock");
    assert!(
        lock.contains("swizzle = 64") && !lock.contains("l2_promotion"),
        "{lock}"
    );
}

#[test]
fn illegal_tensor_map_numbers_are_refused_with_kernel_config_and_field() {
    for (slot, want) in [
        (
            "{ tensormap = \"f32\", shape = [\"N\", 32], tile = [16, 16], swizzle = \"SW / 2 + 1\" }",
            "kernel `fwd`: [launch.args] fwd parameter 0 swizzle = \"SW / 2 + 1\" is 33 for config SW=64, not a legal value (one of 0, 32, 64, 128 bytes)",
        ),
        (
            "{ tensormap = \"f32\", shape = [\"N\", 32], tile = [16, 16], swizzle = 48 }",
            "[launch.args] fwd parameter 0 (tensormap): `swizzle` is 48, not one of 0, 32, 64, 128 (bytes)",
        ),
        (
            "{ tensormap = \"f32\", shape = [\"N\", 32], tile = [16, 16], swizzle = 0, l2_promotion = \"SW + 1\" }",
            "kernel `fwd`: [launch.args] fwd parameter 0 l2_promotion = \"SW + 1\" is 65 for config SW=64, not a legal value (one of 0, 64, 128, 256 bytes)",
        ),
        (
            "{ tensormap = \"f32\", shape = [\"N\", 32], tile = [16, 16], swizzle = \"SWIZZLE\" }",
            "uses `SWIZZLE`, which is neither a param",
        ),
        (
            "{ tensormap = \"f32\", shape = [\"N\", 32], tile = [16, 16], swizzle = [128] }",
            "[launch.args] fwd parameter 0 (tensormap) swizzle must be an expression (a string) or an integer",
        ),
    ] {
        let p = map_project(slot);
        let out = p.kart(&["build"]);
        assert_eq!(out.status.code(), Some(2), "{slot}: {}", text(&out));
        let err = stderr(&out);
        assert!(
            err.contains("kernels/fwd/kernel.toml:") && err.contains(want),
            "{slot}: want {want}\n{err}"
        );
        assert_eq!(p.compiles(), 0);
    }
}
