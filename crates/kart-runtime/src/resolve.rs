//! Which artifact a device can run: the resolution rules and the driver floor. Pure
//! functions, tested against the table in this crate's `tests/data/resolution.json`
//! (which the Python loader's tests reuse).

use crate::model::ArtifactKind;
use crate::target::{ArchVariant, TargetArch};

/// Whether the driver may JIT-compile PTX. Off unless the caller asks: a JIT on the
/// hot path is what kart exists to remove.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum JitPolicy {
    /// Cubins only.
    #[default]
    Forbid,
    /// PTX may be used when no cubin fits and the kernel kept PTX.
    AllowPtx,
}

/// A device's compute capability.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Capability {
    /// Major (9 on an H100).
    pub major: u32,
    /// Minor (0 on an H100).
    pub minor: u32,
}

impl std::fmt::Display for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl Capability {
    /// The plain target of this capability (`sm_90`).
    pub fn target(&self) -> TargetArch {
        TargetArch {
            major: self.major,
            minor: self.minor,
            variant: ArchVariant::Plain,
        }
    }
}

/// Whether a cubin for `target` runs on `device`, and how well it fits (higher is
/// better): `a` only on exactly its capability; `f` and plain on the same major with an
/// equal or lower minor; never across majors.
pub fn cubin_fit(target: TargetArch, device: Capability) -> Option<(u32, u32)> {
    if target.major != device.major || target.minor > device.minor {
        return None;
    }
    let variant_rank = match target.variant {
        ArchVariant::Specific if target.minor == device.minor => 3,
        ArchVariant::Specific => return None,
        ArchVariant::Family => 2,
        ArchVariant::Plain => 1,
    };
    Some((target.minor, variant_rank))
}

/// Whether PTX for `target`'s virtual architecture can be JIT-compiled for `device`:
/// plain PTX on any equal or newer capability; `a` PTX only on exactly its capability;
/// `f` PTX on the same major, equal or higher minor.
pub fn ptx_fit(target: TargetArch, device: Capability) -> Option<(u32, u32)> {
    let t = (target.major, target.minor);
    let d = (device.major, device.minor);
    let ok = match target.variant {
        ArchVariant::Plain => t <= d,
        ArchVariant::Specific => t == d,
        ArchVariant::Family => target.major == device.major && target.minor <= device.minor,
    };
    ok.then_some((target.number(), 0))
}

/// Picks the artifact to load from `available` (target, kind) pairs. Cubins first (the
/// best fit), then PTX only under [`JitPolicy::AllowPtx`]. `None` when nothing fits.
pub fn resolve(
    device: Capability,
    available: &[(TargetArch, ArtifactKind)],
    policy: JitPolicy,
) -> Option<(TargetArch, ArtifactKind)> {
    let best_cubin = available
        .iter()
        .filter(|(_, k)| *k == ArtifactKind::Cubin)
        .filter_map(|&(t, k)| cubin_fit(t, device).map(|fit| (fit, t, k)))
        .max_by_key(|(fit, _, _)| *fit);
    if let Some((_, t, k)) = best_cubin {
        return Some((t, k));
    }
    if policy == JitPolicy::AllowPtx {
        return available
            .iter()
            .filter(|(_, k)| *k == ArtifactKind::Ptx)
            .filter_map(|&(t, k)| ptx_fit(t, device).map(|fit| (fit, t, k)))
            .max_by_key(|(fit, _, _)| *fit)
            .map(|(_, t, k)| (t, k));
    }
    None
}

/// The oldest CUDA version (as `cuDriverGetVersion` reports it, 13000 for 13.0) whose
/// driver loads cubins from nvcc `release` (`13.0.88`): the same major. Within a major,
/// CUDA's minor-version compatibility lets an older driver load a newer minor's cubins.
pub fn required_driver_version(release: &str) -> Option<i32> {
    let major: i32 = release.split('.').next()?.parse().ok()?;
    Some(major * 1000)
}

/// The driver branch that first supported a CUDA major, for messages.
pub fn driver_branch(cuda_major: i32) -> &'static str {
    match cuda_major {
        13 => "580",
        12 => "525",
        11 => "450",
        _ => "a matching",
    }
}

/// `13.0` from 13000.
pub fn format_cuda_version(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize)]
    struct Case {
        device: String,
        available: Vec<String>,
        policy: String,
        expect: Option<String>,
        why: String,
    }

    fn parse_available(s: &str) -> (TargetArch, ArtifactKind) {
        match s.strip_suffix(":ptx") {
            Some(t) => (t.parse().unwrap(), ArtifactKind::Ptx),
            None => (s.parse().unwrap(), ArtifactKind::Cubin),
        }
    }

    #[test]
    fn resolution_table() {
        let cases: Vec<Case> =
            serde_json::from_str(include_str!("../tests/data/resolution.json")).unwrap();
        assert!(cases.len() >= 15);
        for c in cases {
            let (major, minor) = c.device.split_once('.').unwrap();
            let device = Capability {
                major: major.parse().unwrap(),
                minor: minor.parse().unwrap(),
            };
            let available: Vec<_> = c.available.iter().map(|s| parse_available(s)).collect();
            let policy = match c.policy.as_str() {
                "forbid" => JitPolicy::Forbid,
                "allow_ptx" => JitPolicy::AllowPtx,
                p => panic!("policy {p}"),
            };
            let got = resolve(device, &available, policy).map(|(t, k)| match k {
                ArtifactKind::Cubin => t.to_string(),
                ArtifactKind::Ptx => format!("{t}:ptx"),
            });
            assert_eq!(
                got,
                c.expect,
                "{} on {} ({})",
                c.available.join(","),
                c.device,
                c.why
            );
        }
    }

    #[test]
    fn driver_floor() {
        assert_eq!(required_driver_version("13.0.88"), Some(13000));
        assert_eq!(required_driver_version("12.8.93"), Some(12000));
        assert_eq!(required_driver_version("x"), None);
        assert_eq!(format_cuda_version(12040), "12.4");
        assert_eq!(driver_branch(13), "580");
    }
}
