//! The build on small grid kernels: what a rebuild compiles again (and does not), includes
//! and entries checked, a failing config alone, shards, PTX, the grid's `require` and
//! `[derived]`, and compiler errors shown once.

use crate::harness::{TestProject, stderr, stdout, text};
use crate::{GRID, GRID_BODY, grid_project};

#[test]
fn builds_a_grid_for_two_targets_and_a_noop_rebuild_runs_no_nvcc() {
    let p = grid_project();
    p.ok(&["build", "--jobs", "2"]);
    // 2×2 grid minus one excluded config, × 2 targets.
    assert_eq!(p.compiles(), 6);
    // Each action entry records how long its compile took (the next build starts the
    // slowest kernels first from it).
    let actions = p.root().join("artifacts/v1/actions");
    let mut entries = 0;
    for shard in std::fs::read_dir(&actions).unwrap().flatten() {
        for f in std::fs::read_dir(shard.path()).unwrap().flatten() {
            let e: serde_json::Value =
                serde_json::from_slice(&std::fs::read(f.path()).unwrap()).unwrap();
            assert_eq!(e["format"], 3, "{e:#}");
            assert!(e["compile_ms"].as_u64().is_some_and(|ms| ms > 0), "{e:#}");
            entries += 1;
        }
    }
    assert_eq!(entries, 6);
    let lock = p.read("kart.lock");
    assert_eq!(lock.matches("[[artifact]]").count(), 6, "{lock}");
    assert!(
        !lock.contains("A = 2\nB = 32"),
        "excluded config built:\n{lock}"
    );
    let ls = stdout(&p.ok(&["ls"]));
    assert_eq!(ls.lines().count(), 7, "{ls}");
    assert!(ls.contains("A=1,B=16") && ls.contains("sm_90"), "{ls}");
    let json: serde_json::Value = serde_json::from_str(&stdout(&p.ok(&["ls", "--json"]))).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 6);

    p.clear_log();
    let lock_before = p.read("kart.lock");
    let out = p.ok(&["build"]);
    assert_eq!(
        p.compiles(),
        0,
        "no-op rebuild ran nvcc: {:?}",
        p.compile_lines()
    );
    assert!(
        std::fs::read_to_string(&p.nvcc_log)
            .unwrap_or_default()
            .is_empty(),
        "no-op rebuild ran nvcc at all (even --version)"
    );
    assert!(
        stderr(&out).contains("0 compiled, 6 from the store"),
        "{}",
        text(&out)
    );
    assert_eq!(p.read("kart.lock"), lock_before);
}

#[test]
fn adding_a_grid_value_builds_only_the_new_configs() {
    let p = grid_project();
    p.ok(&["build"]);
    p.clear_log();
    p.write(
        "kernels/grid/kernel.toml",
        &format!(
            "name = \"grid\"\nsources = [\"grid.cu\"]\nentry = [\"grid\"]\n{}",
            GRID.replace("A = [1, 2]", "A = [1, 2, 3]")
        ),
    );
    p.ok(&["build"]);
    // A=3 with B=16 and B=32, for two targets.
    assert_eq!(p.compiles(), 4, "{:?}", p.compile_lines());
    assert!(p.compile_lines().iter().all(|l| l.contains("-DA=3")));
}

#[test]
fn editing_a_declared_include_rebuilds_exactly_the_kernels_that_declare_it() {
    let p = TestProject::new(&["sm_90"]);
    p.write("kernels/common/scale.h", "#define SCALE 2\n");
    p.write(
        "kernels/uses/uses.cu",
        "#include \"scale.h\"\nextern \"C\" __global__ void uses(float* o) { o[0] = SCALE; }\n",
    );
    p.write(
        "kernels/uses/kernel.toml",
        "name = \"uses\"\nsources = [\"uses.cu\"]\nentry = [\"uses\"]\ninclude = [\"../common\"]\n",
    );
    p.kernel("plain", "out[0] = 1;", "");
    p.ok(&["build"]);
    assert_eq!(p.compiles(), 2);
    p.clear_log();
    p.write("kernels/common/scale.h", "#define SCALE 3\n");
    p.ok(&["build"]);
    let lines = p.compile_lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("uses.cu"));
}

#[test]
fn a_variant_including_its_base_kernels_folder_keys_only_the_bases_sources() {
    let p = TestProject::new(&["sm_90"]);
    p.write(
        "kernels/base/base.cu",
        "extern \"C\" __global__ void base(float* o) { o[0] = 1; }\n",
    );
    p.write(
        "kernels/base/kernel.toml",
        "name = \"base\"\nsources = [\"base.cu\"]\nentry = [\"base\"]\n",
    );
    p.write("kernels/base/RESULTS.md", "# figures\n");
    p.write("kernels/base/notes.txt", "read by nobody\n");
    // The variant compiles the base's source, renamed by a macro.
    p.write(
        "kernels/variant/variant.cu",
        "#define base variant\n#include \"base.cu\"\n",
    );
    p.write(
        "kernels/variant/kernel.toml",
        "name = \"variant\"\nsources = [\"variant.cu\"]\nentry = [\"variant\"]\ninclude = [\"../base\"]\n",
    );
    p.ok(&["build"]);
    assert_eq!(p.compiles(), 2);
    // The base's results are not inputs of the variant's key.
    p.write("kernels/base/RESULTS.md", "# new figures\n");
    p.write("kernels/base/results.log", "a run\n");
    p.ok(&["build", "--locked"]);
    // Its source is.
    p.clear_log();
    p.write(
        "kernels/base/base.cu",
        "extern \"C\" __global__ void base(float* o) { o[0] = 2; }\n",
    );
    p.ok(&["build"]);
    assert_eq!(p.compiles(), 2, "{:?}", p.compile_lines());
    // A file of the base's folder that is not one of its sources cannot be read.
    p.write(
        "kernels/variant/variant.cu",
        "#include \"notes.txt\"\n#define base variant\n#include \"base.cu\"\n",
    );
    p.write("kernels/base/notes.txt", "// read now\n");
    let out = p.kart(&["build"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = stderr(&out);
    assert!(
        err.contains("`kernels/base/notes.txt` is read by the compile but is not one of the `sources` of `kernels/base/kernel.toml`"),
        "{err}"
    );
}

#[test]
fn an_undeclared_include_is_an_error_naming_the_folder_to_add() {
    let p = TestProject::new(&["sm_90"]);
    p.write("kernels/common/scale.h", "#define SCALE 2\n");
    p.write(
        "kernels/sneaky/sneaky.cu",
        "#include \"../common/scale.h\"\nextern \"C\" __global__ void sneaky(float* o) { o[0] = SCALE; }\n",
    );
    p.write(
        "kernels/sneaky/kernel.toml",
        "name = \"sneaky\"\nsources = [\"sneaky.cu\"]\nentry = [\"sneaky\"]\n",
    );
    let out = p.kart(&["build"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = stderr(&out);
    assert!(
        err.contains("undeclared include `kernels/common/scale.h`"),
        "{err}"
    );
    assert!(err.contains("include = [\"../common\"]"), "{err}");
    assert!(
        !p.root().join("kart.lock").exists(),
        "a failed build wrote the lock"
    );
}

#[test]
fn a_missing_entry_symbol_fails_and_names_what_is_there() {
    let p = TestProject::new(&["sm_90"]);
    p.kernel("k", "out[0] = 1;", "");
    p.write(
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\", \"nope\"]\n",
    );
    let out = p.kart(&["build"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = stderr(&out);
    assert!(err.contains("missing entry symbol `nope`"), "{err}");
    assert!(err.contains("defines: k"), "{err}");
}

#[test]
fn a_config_that_does_not_compile_fails_alone() {
    let p = TestProject::new(&["sm_80", "sm_90"]);
    p.kernel(
        "k",
        "#if V == 2\n    this does not compile;\n#endif\n    out[0] = V;",
        "[params]\nV = [1, 2, 3]\n",
    );
    let out = p.kart(&["build"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = stderr(&out);
    assert!(err.contains("2 of 6 artifacts failed"), "{err}");
    assert!(err.contains("k[V=2] sm_80: nvcc failed"), "{err}");
    assert!(err.contains("│"), "nvcc's stderr is not framed:\n{err}");
    // The failed build wrote no lock; the four that compiled wait in the store.
    assert!(!p.root().join("kart.lock").exists());
    // Without the failing value, the rest comes from the store: no compile.
    p.write(
        "kernels/k/kernel.toml",
        "name = \"k\"\nsources = [\"k.cu\"]\nentry = [\"k\"]\n[params]\nV = [1, 3]\n",
    );
    p.clear_log();
    let out = p.ok(&["build"]);
    assert_eq!(p.compiles(), 0, "{}", text(&out));
    let lock = p.read("kart.lock");
    assert_eq!(lock.matches("[[artifact]]").count(), 4, "{lock}");
}

#[test]
fn two_clean_builds_in_two_folders_are_byte_identical() {
    let a = grid_project();
    let b = grid_project();
    b.write("kart.toml", &a.read("kart.toml"));
    a.ok(&["build", "--jobs", "1"]);
    b.ok(&["build", "--jobs", "2"]);
    assert_eq!(a.read("kart.lock"), b.read("kart.lock"));
    let (ba, bb) = (a.blobs(), b.blobs());
    assert_eq!(ba.len(), 6);
    assert!(ba == bb, "blobs differ between the two folders");
    assert!(!a.read("kart.lock").contains(a.root().to_str().unwrap()));
}

#[test]
fn shards_meet_in_one_store_and_give_the_single_machine_lock() {
    let single = grid_project();
    single.ok(&["build"]);
    let p = grid_project();
    p.ok(&["build", "--shard", "1/2"]);
    let first = p.compiles();
    assert!(
        !p.root().join("kart.lock").exists(),
        "a shard wrote the lock"
    );
    p.ok(&["build", "--shard", "2/2"]);
    assert_eq!(p.compiles(), 6, "shards overlap or miss artifacts");
    assert!((2..=4).contains(&first), "unbalanced shard: {first}");
    p.clear_log();
    p.ok(&["build"]);
    assert_eq!(p.compiles(), 0);
    assert_eq!(p.read("kart.lock"), single.read("kart.lock"));
    let out = p.kart(&["build", "--shard", "3/2"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

#[test]
fn ptx_is_kept_when_asked() {
    let p = TestProject::new(&["sm_90"]);
    p.kernel("k", "out[0] = 1;", "ptx = true\n");
    p.ok(&["build"]);
    let lock = p.read("kart.lock");
    assert!(
        lock.contains("kind = \"ptx\"") && lock.contains("kind = \"cubin\""),
        "{lock}"
    );
}

#[test]
fn a_signature_that_does_not_match_the_cubin_fails_the_build() {
    let p = TestProject::new(&["sm_90"]);
    // `grid(float* out)` takes one pointer; the signature claims a float too.
    p.kernel(
        "grid",
        GRID_BODY,
        &format!("[signature]\ngrid = [\"ptr\", \"f32\"]\n{GRID}"),
    );
    let out = p.kart(&["build"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = stderr(&out);
    assert!(
        err.contains("signature of `grid` is [ptr, f32]")
            && err.contains("takes 1 parameters of sizes [8]"),
        "{err}"
    );
    p.kernel(
        "grid",
        GRID_BODY,
        &format!("[signature]\ngrid = [\"ptr\"]\n{GRID}"),
    );
    p.ok(&["build"]);
    let lock = p.read("kart.lock");
    assert!(
        lock.contains("params = [8]\nsignature = [\"ptr\"]"),
        "{lock}"
    );
}

/// A kernel whose grid is narrowed by `require` and which derives a param.
fn rules_project(require: &str) -> TestProject {
    let p = TestProject::new(&["sm_90"]);
    p.kernel(
        "tile",
        "out[threadIdx.x] = BM * 1000 + WARPS * 10 + ROWS;",
        &format!(
            "require = [{require}]\n[derived]\nROWS = \"BM / WARPS\"\n[params]\nBM = [32, 64, 128]\nWARPS = [1, 2, 4, 8]\n"
        ),
    );
    p
}

#[test]
fn require_filters_the_grid_and_derived_params_reach_nvcc_the_lock_and_ls() {
    let p = rules_project("\"ROWS == 16 || ROWS == 32\", \"WARPS <= 4\"");
    let out = p.ok(&["build", "--explain-grid"]);
    let shown = stdout(&out);
    assert!(
        shown.contains("tile: 12 raw combinations")
            && shown.contains("require \"ROWS == 16 || ROWS == 32\"  removes 6")
            && shown.contains("removes 1\n")
            && shown.contains("5 configs kept, each with derived ROWS"),
        "{shown}"
    );
    assert_eq!(p.compiles(), 0, "--explain-grid compiles nothing");
    p.ok(&["build"]);
    // Kept: (32,1) (32,2) (64,2) (64,4) (128,4); (128,8) is removed by WARPS <= 4.
    assert_eq!(p.compiles(), 5);
    let lines = p.compile_lines();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("-DBM=64") && l.contains("-DROWS=16")),
        "{lines:?}"
    );
    let lock = p.read("kart.lock");
    assert!(lock.contains("[artifact.derived]\nROWS = 32"), "{lock}");
    let out = p.ok(&["ls", "--json"]);
    let rows: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 5);
    assert!(
        rows.as_array()
            .unwrap()
            .iter()
            .all(|r| r["derived"]["ROWS"].is_number())
    );
    let out = p.ok(&["ls"]);
    assert!(stdout(&out).contains("BM=64,WARPS=4 "), "{}", stdout(&out));
    // --wide: a column per param and derived param.
    let wide = stdout(&p.ok(&["ls", "--wide"]));
    let header: Vec<&str> = wide.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(&header[..4], ["KERNEL", "BM", "WARPS", "ROWS"], "{wide}");
    assert!(
        wide.lines()
            .any(|l| l.split_whitespace().take(4).eq(["tile", "64", "4", "16"])),
        "{wide}"
    );
    let out = p.ok(&["explain", "tile", "-p", "BM=64", "-p", "WARPS=2"]);
    assert!(
        stdout(&out).contains("derived ROWS: 32"),
        "{}",
        stdout(&out)
    );
    let out = p.ok(&["explain", "tile", "-p", "BM=64", "-p", "WARPS=2", "--json"]);
    let explained: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(
        explained["inputs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["name"] == "derived ROWS" && i["value"] == "32"),
        "{explained}"
    );
    assert!(
        explained["lock"]
            .as_str()
            .unwrap()
            .starts_with("matches kart.lock")
    );
    let out = p.ok(&["build", "--json"]);
    let built: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(built["summary"]["selected"], 5, "{built}");
    assert_eq!(built["summary"]["compiled"], 0, "{built}");

    // Rules written differently that keep the same configs change no key.
    let before = p.read("kart.lock");
    let q = rules_project("\"BM / WARPS >= 16 && BM / WARPS <= 32\", \"WARPS * 2 <= 8\"");
    std::fs::copy(
        q.root().join("kernels/tile/kernel.toml"),
        p.root().join("kernels/tile/kernel.toml"),
    )
    .unwrap();
    p.ok(&["build", "--locked"]);
    p.clear_log();
    p.ok(&["build"]);
    assert_eq!(p.compiles(), 0);
    assert_eq!(p.read("kart.lock"), before);
}

#[test]
fn one_compiler_error_is_shown_once_and_fail_fast_stops_at_it() {
    let p = TestProject::new(&["sm_80", "sm_90"]);
    // A is read (a -D macro), so each config is a compile of its own.
    p.kernel(
        "broken",
        "    this does not compile;\n    out[0] = A;",
        "[params]\nA = [1, 2, 3]\n",
    );
    let out = p.kart(&["build"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = stderr(&out);
    assert!(err.contains("6 of 6 artifacts failed"), "{err}");
    // nvcc's message appears once; the other five name the config it was shown for.
    assert_eq!(
        err.matches("errors detected in the compilation").count(),
        1,
        "{err}"
    );
    assert_eq!(err.matches("(the same nvcc output as").count(), 5, "{err}");
    p.clear_log();
    let out = p.kart(&["build", "--fail-fast", "--jobs", "1"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(p.compiles(), 1, "{}", text(&out));
    assert!(
        stderr(&out).contains("--fail-fast: 5 artifact(s) not compiled"),
        "{}",
        text(&out)
    );
}

#[test]
fn explain_grid_prints_json_when_asked() {
    let p = rules_project("\"BM % (16 * WARPS) == 0\"");
    let out = p.ok(&["build", "--explain-grid", "--json"]);
    let reports: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let first = &reports[0];
    assert!(first["raw"].as_u64().unwrap() >= first["kept"].as_u64().unwrap());
    assert!(
        first["steps"].as_array().is_some_and(|s| !s.is_empty()),
        "{reports}"
    );
}

/// `kart ls --json` says of every record what kart.lock says (read here with a general
/// TOML parser): its identity, size, digest, derived params, entries, and the most
/// registers and shared memory and the spills of its entries; and whether its blob is
/// in the store.
#[test]
fn ls_json_is_the_lock_record_by_record() {
    let p = rules_project("\"WARPS <= 4\"");
    p.ok(&["build"]);
    let lock: toml::Value = toml::from_str(&p.read("kart.lock")).unwrap();
    let records = lock["artifact"].as_array().unwrap();
    assert_eq!(records.len(), 9);
    // One blob gone from the store: its row says so, the others' do not.
    let gone = records[4]["digest"].as_str().unwrap().to_string();
    for name in [gone.clone(), format!("{gone}.zst")] {
        let _ = std::fs::remove_file(
            p.root()
                .join("artifacts/v1/blobs")
                .join(&gone[..2])
                .join(name),
        );
    }
    let rows: serde_json::Value = serde_json::from_str(&stdout(&p.ok(&["ls", "--json"]))).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), records.len());
    let int = |v: &toml::Value| v.as_integer().unwrap();
    for (row, record) in rows.iter().zip(records) {
        // Every field, and no other (listed sorted, as serde_json's map holds them).
        let keys: Vec<&str> = row
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "attested",
                "config",
                "derived",
                "digest",
                "entries",
                "kernel",
                "kind",
                "local",
                "registers",
                "shared_bytes",
                "size",
                "spill_bytes",
                "target"
            ],
            "{row:#}"
        );
        for field in ["kernel", "target", "kind", "digest"] {
            assert_eq!(row[field].as_str(), record[field].as_str(), "{field}");
        }
        assert_eq!(row["size"].as_i64(), Some(int(&record["size"])));
        for (name, value) in record["config"].as_table().unwrap() {
            assert_eq!(row["config"][name].as_i64(), Some(int(value)), "{name}");
        }
        assert_eq!(
            row["config"].as_object().unwrap().len(),
            record["config"].as_table().unwrap().len()
        );
        let derived = record["derived"].as_table().unwrap();
        assert_eq!(row["derived"].as_object().unwrap().len(), derived.len());
        assert_eq!(row["derived"]["ROWS"].as_i64(), Some(int(&derived["ROWS"])));
        let entries = record["entries"].as_array().unwrap();
        let most = |field: &str| entries.iter().map(|e| int(&e[field])).max().unwrap();
        assert_eq!(row["registers"].as_i64(), Some(most("registers")));
        assert_eq!(row["shared_bytes"].as_i64(), Some(most("shared_bytes")));
        let spills: i64 = entries
            .iter()
            .map(|e| int(&e["spill_store_bytes"]) + int(&e["spill_load_bytes"]))
            .sum();
        assert_eq!(row["spill_bytes"].as_i64(), Some(spills));
        let names: Vec<&str> = entries
            .iter()
            .map(|e| e.get("instance").unwrap_or(&e["name"]).as_str().unwrap())
            .collect();
        let shown: Vec<&str> = row["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e.as_str().unwrap())
            .collect();
        assert_eq!(shown, names);
        assert_eq!(row["attested"], serde_json::json!([]));
        assert_eq!(
            row["local"].as_bool(),
            Some(record["digest"].as_str() != Some(&gone))
        );
    }
}
