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

/// kart's own sha256 of each wheel of [`KNOWN_RELEASES`], by file name: a download is
/// checked against these, not only against what the index says.
const PINNED_SHA256: &[(&str, &str)] = &[
    (
        "nvidia_cuda_nvcc-13.0.88-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        "56fe502eb77625a12f25172caa3cdddb4e4c8ba2c8c17dba44b164761b380f03",
    ),
    (
        "nvidia_cuda_nvcc-13.0.88-py3-none-manylinux2014_aarch64.manylinux_2_17_aarch64.whl",
        "c7ff28f86a24effdc6c034fa15230c549a273e4771b10a7fec14996f8cf3307f",
    ),
    (
        "nvidia_cuda_crt-13.0.88-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        "2c8043c7c9e02492716426e9919fc78d2c5b3b2a7a768a88e952676b08aa55a4",
    ),
    (
        "nvidia_cuda_crt-13.0.88-py3-none-manylinux2014_aarch64.manylinux_2_17_aarch64.whl",
        "ee2ea2a97073e02ee62bb27841f437332be2c248e3eac013df07997ada39c003",
    ),
    (
        "nvidia_nvvm-13.0.88-py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64.whl",
        "c5f41ffeb6466944a026dfa5317d7d85355c119bbec279205d22f1869d1054e0",
    ),
    (
        "nvidia_nvvm-13.0.88-py3-none-manylinux2014_aarch64.manylinux_2_17_aarch64.whl",
        "c4376a291d72d22a315d9d2f69bdae8f8cd83a627f75bad395cee49a0fe65dc1",
    ),
    (
        "nvidia_cuda_runtime-13.0.96-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        "7f82250d7782aa23b6cfe765ecc7db554bd3c2870c43f3d1821f1d18aebf0548",
    ),
    (
        "nvidia_cuda_runtime-13.0.96-py3-none-manylinux2014_aarch64.manylinux_2_17_aarch64.whl",
        "ef9bcbe90493a2b9d810e43d249adb3d02e98dd30200d86607d8d02687c43f55",
    ),
    (
        "nvidia_cuda_cccl-13.0.85-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        "e0da7ad981f3a8aff08241b5bfc1af868742a63e2762f53a5171c492ef242649",
    ),
    (
        "nvidia_cuda_cccl-13.0.85-py3-none-manylinux2014_aarch64.manylinux_2_17_aarch64.whl",
        "6f0203e29fed809ee2b7fe9b1344df66ecab990c37d6a2e0e189b26d6c97ed7c",
    ),
];

/// kart's pinned sha256 of the wheel file `filename`, if it is one of a known release.
pub fn pinned_sha256(filename: &str) -> Option<&'static str> {
    PINNED_SHA256
        .iter()
        .find(|(name, _)| *name == filename)
        .map(|(_, sha)| *sha)
}
