//! Locks for tests: records with made-up digests, and a generated lock of a few kernels.

use std::collections::BTreeMap;

use crate::cubin::EntryInfo;
use crate::model::{ArtifactKind, Config, ParamValue};
use crate::store::lockfile::{LockedArtifact, LockedKernel, Lockfile};

pub fn artifact(kernel: &str, config: Config, target: &str, kind: ArtifactKind) -> LockedArtifact {
    let seed = format!("{kernel}{config}{target}{kind}");
    LockedArtifact {
        kernel: kernel.into(),
        config,
        target: target.into(),
        kind,
        key: crate::digest::sha256_hex(format!("key {seed}").as_bytes()),
        digest: crate::digest::sha256_hex(seed.as_bytes()),
        size: 100 + seed.len() as u64,
        nvcc: "13.0.88".into(),
        entries: vec![EntryInfo {
            name: kernel.into(),
            registers: 32,
            params: vec![8, 4],
            ..EntryInfo::default()
        }],
        derived: BTreeMap::new(),
    }
}

pub fn launch(grid: &str) -> crate::launch::LaunchText {
    crate::launch::LaunchText {
        grid: vec![grid.into()],
        block: vec!["32".into()],
        shared_mem: "0".into(),
        args: BTreeMap::new(),
        ..Default::default()
    }
}

/// A lock of a few kernels over int and identifier params, several targets, PTX
/// and derived params, from a fixed pseudo-random sequence.
pub fn generated(seed: u64) -> Lockfile {
    let mut state = seed;
    let mut next = move |n: u64| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) % n
    };
    let mut artifacts = Vec::new();
    for kernel in ["attn", "gemm", "gemm_v2", "tiny"] {
        for _ in 0..(5 + next(20)) {
            let mut config: BTreeMap<String, ParamValue> = BTreeMap::new();
            config.insert("BLOCK".into(), ParamValue::Int(1 << next(8)));
            if next(2) == 0 {
                config.insert("A".into(), ParamValue::Int(next(1000) as i64 - 500));
            }
            if kernel != "tiny" {
                let dtype = ["f16", "bf16", "f32"][next(3) as usize];
                config.insert("DTYPE".into(), ParamValue::Ident(dtype.into()));
            }
            let config = Config::from(config);
            for target in ["sm_80", "sm_90", "sm_90a"] {
                if next(3) == 0 {
                    continue;
                }
                let mut a = artifact(kernel, config.clone(), target, ArtifactKind::Cubin);
                if next(4) == 0 {
                    a.derived.insert("STAGES".into(), next(5) as i64);
                }
                artifacts.push(a);
            }
            if next(5) == 0 {
                artifacts.push(artifact(kernel, config, "sm_80", ArtifactKind::Ptx));
            }
        }
    }
    Lockfile::new(artifacts).with_kernels(vec![
        LockedKernel {
            name: "gemm".into(),
            launch: launch("M / BLOCK"),
        },
        LockedKernel {
            name: "tiny".into(),
            launch: launch("1"),
        },
    ])
}
