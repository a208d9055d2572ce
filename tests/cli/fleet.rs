//! `kart coverage`, `kart bundle` and the traces they read, against the repository's own
//! lock and sidecars (coverage) and a small project built with the real nvcc (bundles).

use std::collections::BTreeMap;
use std::path::Path;

use crate::harness::{TestProject, repo_root, stderr, stdout, text};

/// Three kinds of GPU: an A100 whose driver takes nvcc 13's cubins, one whose driver
/// (CUDA 12.4) does not, and an H200 (the GPU the repository's kart.tune and
/// kart.attest were recorded on).
const FLEET: &str = r#"
[[fleet]]
name = "NVIDIA A100-SXM4-80GB"
capability = "8.0"
driver = "580.65.06"

[[fleet]]
name = "NVIDIA A100-PCIE-40GB"
capability = "8.0"
cuda = "12.4"

[[fleet]]
name = "NVIDIA H200"
capability = "9.0"
driver = "580.159.04"
"#;

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// The repository's lock: kernel -> (configs, configs with an sm_80 cubin).
fn repository_configs() -> BTreeMap<String, (usize, usize)> {
    let lock: toml::Value =
        toml::from_str(&std::fs::read_to_string(repo_root().join("kart.lock")).unwrap()).unwrap();
    let mut configs: BTreeMap<String, BTreeMap<String, bool>> = BTreeMap::new();
    for a in lock["artifact"].as_array().unwrap() {
        let kernel = a["kernel"].as_str().unwrap().to_string();
        let config = a["config"].to_string();
        let sm80 = a["target"].as_str() == Some("sm_80") && a["kind"].as_str() == Some("cubin");
        *configs
            .entry(kernel)
            .or_default()
            .entry(config)
            .or_default() |= sm80;
    }
    configs
        .into_iter()
        .map(|(k, c)| (k, (c.len(), c.values().filter(|v| **v).count())))
        .collect()
}

#[test]
fn coverage_of_the_repository_over_three_gpus_says_what_loads_and_what_falls_back() {
    let tmp = tempfile::tempdir().unwrap();
    let fleet = write(tmp.path(), "fleet.toml", FLEET);
    // The first flash_attn record of kart.tune (H200), and a problem no record has.
    let problems = write(
        tmp.path(),
        "problems.toml",
        "[[problem]]\nkernel = \"flash_attn\"\nB = 1\nD = 64\nH = 8\nS = 512\ncausal = 0\n\n\
         [[problem]]\nkernel = \"flash_attn\"\nB = 3\nD = 64\nH = 5\nS = 700\ncausal = 0\n",
    );
    let repo = repo_root().display().to_string();
    let p = TestProject::new(&["sm_90"]);
    // `kart coverage ARGS` over the repository's lock and sidecars.
    let coverage = |args: &[&str]| {
        let mut all = vec!["-C", repo.as_str(), "coverage"];
        all.extend_from_slice(args);
        p.kart(&all)
    };
    let out = coverage(&["--fleet", &fleet, "--problems", &problems, "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = report["rows"].as_array().unwrap();
    let expected = repository_configs();
    assert_eq!(rows.len(), expected.len() * 3, "{report:#}");
    for row in rows {
        let kernel = row["kernel"].as_str().unwrap();
        let gpu = row["gpu"].as_str().unwrap();
        let (configs, sm80) = expected[kernel];
        let loads = &row["loads"];
        let count = |how: &str| loads[how].as_u64().unwrap_or(0) as usize;
        assert_eq!(row["configs"].as_u64(), Some(configs as u64));
        match gpu {
            // Every config with an sm_80 cubin loads it; the rest (sm_90a-only kernels)
            // have nothing.
            "NVIDIA A100-SXM4-80GB" => {
                assert_eq!(count("exact"), sm80, "{row:#}");
                assert_eq!(count("none"), configs - sm80, "{row:#}");
            }
            // The same cubins, but a CUDA 12.4 driver cannot load nvcc 13's.
            "NVIDIA A100-PCIE-40GB" => {
                assert_eq!(count("driver_too_old"), sm80, "{row:#}");
                assert_eq!(row["loadable"].as_u64(), Some(0), "{row:#}");
            }
            "NVIDIA H200" => assert_eq!(count("exact"), configs, "{row:#}"),
            other => panic!("unexpected GPU {other}"),
        }
        let gaps: Vec<&str> = row["gaps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g.as_str().unwrap())
            .collect();
        assert_eq!(
            gaps.contains(&"cubin"),
            count("exact") + count("compatible") < configs
        );
    }
    // best() on the listed problems: the recorded one exact on the H200, the other
    // from the nearest record; on an A100 (no records) both from the default.
    let flash = |gpu: &str| {
        rows.iter()
            .find(|r| r["kernel"] == "flash_attn" && r["gpu"] == gpu)
            .unwrap()
            .clone()
    };
    let sources = |row: &serde_json::Value| -> Vec<String> {
        row["problems"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["source"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(sources(&flash("NVIDIA H200")), ["exact", "nearest"]);
    assert_eq!(
        sources(&flash("NVIDIA A100-SXM4-80GB")),
        ["default", "default"]
    );
    assert!(flash("NVIDIA H200")["tune_records"].as_u64().unwrap() > 0);

    // As a CI gate: the sm_90a-only kernels leave the A100s without a cubin.
    let out = coverage(&["--fleet", &fleet, "--require", "cubin"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("flash_attn_hopper on NVIDIA A100-SXM4-80GB: cubin"),
        "{}",
        text(&out)
    );
    assert!(stdout(&out).contains("driver too old"), "{}", text(&out));
    // Only the H200, only the kernels that have every cubin: no gap to refuse.
    let h200 = write(
        tmp.path(),
        "h200.toml",
        "[[fleet]]\nname = \"NVIDIA H200\"\ncapability = \"9.0\"\n",
    );
    let out = coverage(&[
        "flash_attn",
        "cute_gemm",
        "--fleet",
        &h200,
        "--require",
        "cubin,tuned",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    // A bad need and a bad fleet file are refused with what to write.
    let out = coverage(&["--require", "fast"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let bad = write(
        tmp.path(),
        "bad.toml",
        "[[fleet]]\nname = \"NVIDIA H200\"\ncapability = \"9\"\n",
    );
    let out = coverage(&["--fleet", &bad]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(stderr(&out).contains("bad.toml:3:"), "{}", text(&out));
}

/// A project of four configs for sm_80 and sm_90, built with the real nvcc.
fn built_grid() -> TestProject {
    let p = TestProject::new(&["sm_80", "sm_90"]);
    p.kernel(
        "grid",
        "out[threadIdx.x] = A * 1000 + B;",
        "[params]\nA = [1, 2]\nB = [16, 32]\n",
    );
    p.ok(&["build"]);
    p
}

#[test]
fn a_bundle_holds_what_the_fleet_loads_round_trips_and_refuses_a_flipped_byte() {
    let p = built_grid();
    p.write(
        "fleet.toml",
        "[[fleet]]\nname = \"NVIDIA H100 80GB HBM3\"\ncapability = \"9.0\"\n",
    );
    p.ok(&["bundle", "--fleet", "fleet.toml", "-o", "h100.kartbundle"]);
    // Only the sm_90 cubins: what an H100 loads.
    let out = p.ok(&["bundle", "--inspect", "h100.kartbundle", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{report:#}");
    assert_eq!(rows[0]["target"], "sm_90");
    assert_eq!(rows[0]["artifacts"], 4);
    // The runtime crate reads it as it reads a store: the same bytes as the lock names.
    let path = p.root().join("h100.kartbundle");
    let rt = kart::runtime::Runtime::open_bundle(&path).unwrap();
    assert!(rt.store().is_none() && rt.bundle().is_some());
    assert_eq!(rt.lock().unwrap().artifacts.len(), 4);
    for a in &rt.lock().unwrap().artifacts {
        let bytes = rt.blobs().read_blob(&a.digest, Some(a.size)).unwrap();
        assert_eq!(kart::digest::sha256_hex(&bytes), a.digest);
    }
    // `--inspect` needs no project: a bundle is read where it is deployed.
    let elsewhere = tempfile::tempdir().unwrap();
    let out = p.kart(&[
        "-C",
        &elsewhere.path().display().to_string(),
        "bundle",
        "--inspect",
        &path.display().to_string(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stdout(&out).contains("every blob checked"),
        "{}",
        text(&out)
    );

    // One byte flipped in the last blob: opening still works (the index is intact),
    // reading that blob is refused, and so is `--inspect`.
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 3;
    bytes[last] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    let rt = kart::runtime::Runtime::open_bundle(&path).unwrap();
    let refused = rt
        .lock()
        .unwrap()
        .artifacts
        .iter()
        .filter_map(|a| rt.blobs().read_blob(&a.digest, Some(a.size)).err())
        .collect::<Vec<_>>();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        matches!(refused[0], kart::Error::CorruptBundle { .. }),
        "{}",
        refused[0]
    );
    let out = p.kart(&["bundle", "--inspect", "h100.kartbundle"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(stderr(&out).contains("is corrupt"), "{}", text(&out));
    // A truncated bundle and a file that is no bundle are refused when opened.
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let err = kart::runtime::Runtime::open_bundle(&path).err().unwrap();
    assert!(matches!(err, kart::Error::CorruptBundle { .. }), "{err}");
    std::fs::write(&path, b"#!/bin/sh\nrm -rf /\n").unwrap();
    let err = kart::runtime::Runtime::open_bundle(&path).err().unwrap();
    assert!(err.to_string().contains("not a kart bundle"), "{err}");
}

/// A bundle of 300 configs × 2 targets (a template kernel, built with the real nvcc)
/// answers every lookup as the project does, with the same bytes; a bundle cut inside
/// its blob table, one whose lock section is damaged and one of the older format are
/// refused with what is wrong and what to do.
#[test]
fn a_bundle_of_hundreds_of_configs_answers_as_the_project_does() {
    use kart::model::{Config, ParamValue};
    use kart::resolve::{Capability, JitPolicy};
    let p = TestProject::new(&["sm_80", "sm_90"]);
    p.write(
        "kernels/tiny/tiny.cu",
        "template <int A, int B>\n__global__ void tiny(int* out) { out[threadIdx.x] = A * 1000 + B; }\n",
    );
    let values = |n: i64| (0..n).map(|v| v.to_string()).collect::<Vec<_>>().join(", ");
    p.write(
        "kernels/tiny/kernel.toml",
        &format!(
            "name = \"tiny\"\nsources = [\"tiny.cu\"]\nentry = [\"tiny<A, B>\"]\n[params]\nA = [{}]\nB = [{}]\n",
            values(20),
            values(15)
        ),
    );
    p.ok(&["build"]);
    p.write(
        "fleet.toml",
        "[[fleet]]\nname = \"NVIDIA H100 80GB HBM3\"\ncapability = \"9.0\"\n\n\
         [[fleet]]\nname = \"NVIDIA A100-SXM4-80GB\"\ncapability = \"8.0\"\n",
    );
    p.ok(&["bundle", "--fleet", "fleet.toml", "-o", "all.kartbundle"]);
    let path = p.root().join("all.kartbundle");
    let project = kart::runtime::Runtime::open(p.root()).unwrap();
    let bundle = kart::runtime::Runtime::open_bundle(&path).unwrap();
    assert_eq!(bundle.kernels().unwrap(), ["tiny"]);
    for a in 0..20 {
        for b in 0..15 {
            let config = Config::from([("A", ParamValue::Int(a)), ("B", ParamValue::Int(b))]);
            for capability in [(8, 0), (9, 0)] {
                let capability = Capability {
                    major: capability.0,
                    minor: capability.1,
                };
                let want = project
                    .select("tiny", &config, capability, JitPolicy::Forbid)
                    .unwrap();
                let got = bundle
                    .select("tiny", &config, capability, JitPolicy::Forbid)
                    .unwrap();
                assert_eq!(got, want, "{config} on {capability}");
                let bytes = bundle
                    .blobs()
                    .read_blob(&got.digest, Some(got.size))
                    .unwrap();
                assert_eq!(kart::digest::sha256_hex(&bytes), want.digest);
            }
        }
    }
    // A config the project lacks is missing from the bundle alike, with the same message.
    let absent = Config::from([("A", ParamValue::Int(99))]);
    let h100 = Capability { major: 9, minor: 0 };
    let from_project = project.select("tiny", &absent, h100, JitPolicy::Forbid);
    let from_bundle = bundle.select("tiny", &absent, h100, JitPolicy::Forbid);
    assert_eq!(
        from_bundle.unwrap_err().to_string(),
        from_project.unwrap_err().to_string()
    );
    assert_eq!(bundle.lock().unwrap(), project.lock().unwrap());
    let out = p.ok(&["bundle", "--inspect", "all.kartbundle", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["rows"].as_array().unwrap().len(), 2, "{report:#}");

    let bytes = std::fs::read(&path).unwrap();
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
    let table = 56 + word(16) + word(24) + word(32) + word(40);
    assert_eq!(word(48), 600, "one row per blob");
    // Cut inside the blob table.
    std::fs::write(&path, &bytes[..table + 64 * 300 + 5]).unwrap();
    let out = p.kart(&["bundle", "--inspect", "all.kartbundle"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("a table of 600 blobs run past")
            && stderr(&out).contains("kart bundle"),
        "{}",
        text(&out)
    );
    // The lock section's version line damaged: refused at open, naming the section.
    let mut bad = bytes.clone();
    let lock_at = 56 + word(16);
    let version = lock_at
        + std::str::from_utf8(&bytes[lock_at..lock_at + word(24)])
            .unwrap()
            .find("version = ")
            .unwrap();
    bad[version] = b'#';
    std::fs::write(&path, &bad).unwrap();
    let out = p.kart(&["bundle", "--inspect", "all.kartbundle"]);
    assert_ne!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        stderr(&out).contains("all.kartbundle:kart.lock"),
        "{}",
        text(&out)
    );
    // A bundle of format 1 (a JSON index holding the lock as one string).
    let mut old = b"KARTBNDL".to_vec();
    old.extend_from_slice(&1u32.to_le_bytes());
    old.extend_from_slice(&2u64.to_le_bytes());
    old.extend_from_slice(b"{}");
    std::fs::write(&path, &old).unwrap();
    let out = p.kart(&["bundle", "--inspect", "all.kartbundle"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("bundle format 1, written by an older kart")
            && stderr(&out).contains("run `kart bundle` again"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_trace_narrows_a_bundle_to_the_configs_a_workload_launched() {
    let p = built_grid();
    let lock: toml::Value = toml::from_str(&p.read("kart.lock")).unwrap();
    let launched = lock["artifact"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| {
            a["target"].as_str() == Some("sm_90")
                && a["config"]["A"].as_integer() == Some(2)
                && a["config"]["B"].as_integer() == Some(16)
        })
        .unwrap();
    // What the runtime writes for one launch on an H100 (format: kart_runtime::trace),
    // then a torn line of a killed process.
    let record = serde_json::json!({
        "event": "launch", "kernel": "grid", "config": {"A": 2, "B": 16},
        "target": "sm_90", "digest": launched["digest"].as_str().unwrap(),
        "problem": {"N": 4096}, "gpu": "NVIDIA H100 80GB HBM3", "capability": "9.0",
    });
    p.write(
        "trace.jsonl",
        &format!("{record}\n{record}\n{{\"event\":\"lau"),
    );
    p.write(
        "fleet.toml",
        "[[fleet]]\nname = \"NVIDIA H100 80GB HBM3\"\ncapability = \"9.0\"\n\n\
         [[fleet]]\nname = \"NVIDIA A100-SXM4-80GB\"\ncapability = \"8.0\"\n",
    );
    p.ok(&[
        "bundle",
        "--fleet",
        "fleet.toml",
        "--trace",
        "trace.jsonl",
        "-o",
        "traced.kartbundle",
    ]);
    let rt = kart::runtime::Runtime::open_bundle(&p.root().join("traced.kartbundle")).unwrap();
    let mut held: Vec<String> = rt
        .lock()
        .unwrap()
        .artifacts
        .iter()
        .map(|a| format!("{} {}", a.config, a.target))
        .collect();
    held.sort();
    // The launched config, for each GPU of the fleet.
    assert_eq!(held, ["A=2,B=16 sm_80", "A=2,B=16 sm_90"]);
    // A hostile trace line is refused at its line, not spliced anywhere.
    p.write(
        "evil.jsonl",
        &format!(
            "{}\n",
            record.to_string().replace("\"grid\"", "\"grid; rm -rf ~\"")
        ),
    );
    let out = p.kart(&[
        "bundle",
        "--fleet",
        "fleet.toml",
        "--trace",
        "evil.jsonl",
        "-o",
        "evil.kartbundle",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(stderr(&out).contains("evil.jsonl:1:"), "{}", text(&out));
    assert!(!p.root().join("evil.kartbundle").exists());
}
