//! The nvcc releases kart installs from PyPI, each as a set of wheels known to work
//! together (they were built, tested and compared byte for byte by kart's own test
//! suite). A set is pinned to exact versions: changing one changes the toolchain's
//! fingerprint and so every action key.

/// One installable nvcc release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KnownRelease {
    /// The release as `kart.toml` pins it (`[toolchain] nvcc = "13.0"`).
    pub release: &'static str,
    /// The wheels, `name==version`.
    pub wheels: &'static [&'static str],
    /// nvcc inside the installed tree.
    pub nvcc: &'static str,
}

/// Every release `kart toolchain install` knows, oldest first.
///
/// 12.x is not here: PyPI's `nvidia-cuda-nvcc-cu12` wheels (12.1 to 12.9) carry
/// `ptxas` and libNVVM for JIT use but no `nvcc` driver and no `cicc`, so no `.cu` file
/// compiles with them; use a CUDA install (`CUDA_HOME`, `--nvcc`) for 12.x.
pub const KNOWN_RELEASES: &[KnownRelease] = &[KnownRelease {
    release: "13.0",
    wheels: &[
        "nvidia-cuda-nvcc==13.0.88",
        "nvidia-cuda-crt==13.0.88",
        "nvidia-nvvm==13.0.88",
        "nvidia-cuda-runtime==13.0.96",
        "nvidia-cuda-cccl==13.0.85",
    ],
    nvcc: "nvidia/cu13/bin/nvcc",
}];

/// The known release `release` names, if any.
pub fn known(release: &str) -> Option<&'static KnownRelease> {
    KNOWN_RELEASES.iter().find(|r| r.release == release)
}
