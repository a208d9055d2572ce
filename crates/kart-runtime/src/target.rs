//! GPU architectures (`sm_90`, `sm_90a`, `sm_100f`) and what nvcc needs to hear for each.

use std::fmt;
use std::str::FromStr;

/// The variant of a real architecture: plain, architecture-specific (`a`) or family (`f`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ArchVariant {
    /// `sm_90`: runs on the same major with an equal or higher minor.
    Plain,
    /// `sm_90a`: uses features of exactly this capability; runs only there.
    Specific,
    /// `sm_100f`: family-portable within the major, equal or higher minor.
    Family,
}

/// A real GPU architecture, the thing a cubin is built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TargetArch {
    /// Compute capability major (9 for `sm_90`).
    pub major: u32,
    /// Compute capability minor (0 for `sm_90`).
    pub minor: u32,
    /// Plain, `a` or `f`.
    pub variant: ArchVariant,
}

impl TargetArch {
    /// The number nvcc and the ELF header use: 90 for `sm_90`, 100 for `sm_100`.
    pub fn number(&self) -> u32 {
        self.major * 10 + self.minor
    }

    fn suffix(&self) -> &'static str {
        match self.variant {
            ArchVariant::Plain => "",
            ArchVariant::Specific => "a",
            ArchVariant::Family => "f",
        }
    }

    /// `compute_90a`: the virtual architecture nvcc compiles through.
    pub fn compute_name(&self) -> String {
        format!("compute_{}{}", self.number(), self.suffix())
    }

    /// The plain `sm_XX` of the same capability, as nvcc's `--list-gpu-code` lists it.
    pub fn base_name(&self) -> String {
        format!("sm_{}", self.number())
    }

    /// nvcc's `-gencode` argument producing a cubin for this target.
    pub fn gencode_cubin(&self) -> String {
        format!("-gencode=arch={},code={}", self.compute_name(), self)
    }

    /// nvcc's `-gencode` argument producing PTX for this target's virtual architecture.
    pub fn gencode_ptx(&self) -> String {
        format!(
            "-gencode=arch={},code={}",
            self.compute_name(),
            self.compute_name()
        )
    }
}

impl fmt::Display for TargetArch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sm_{}{}", self.number(), self.suffix())
    }
}

/// Why a string is not a target.
#[derive(Debug, PartialEq, Eq)]
pub struct BadTarget(pub String);

impl fmt::Display for BadTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadTarget {}

impl FromStr for TargetArch {
    type Err = BadTarget;

    fn from_str(s: &str) -> Result<Self, BadTarget> {
        let bad = || {
            BadTarget(format!(
                "`{s}` is not a target: write `sm_` and the compute capability's digits, \
                 optionally followed by `a` or `f` (`sm_80`, `sm_90a`, `sm_100f`)"
            ))
        };
        let rest = s.strip_prefix("sm_").ok_or_else(bad)?;
        let (digits, variant) = match rest.as_bytes().last() {
            Some(b'a') => (&rest[..rest.len() - 1], ArchVariant::Specific),
            Some(b'f') => (&rest[..rest.len() - 1], ArchVariant::Family),
            _ => (rest, ArchVariant::Plain),
        };
        if digits.len() < 2 || digits.len() > 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let number: u32 = digits.parse().map_err(|_| bad())?;
        let target = TargetArch {
            major: number / 10,
            minor: number % 10,
            variant,
        };
        if target.major == 0 {
            return Err(bad());
        }
        if variant == ArchVariant::Specific && target.major < 9 {
            return Err(BadTarget(format!(
                "`{s}`: architecture-specific (`a`) targets exist from sm_90a on"
            )));
        }
        if variant == ArchVariant::Family && target.major < 10 {
            return Err(BadTarget(format!(
                "`{s}`: family (`f`) targets exist from sm_100f on"
            )));
        }
        Ok(target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_round_trip() {
        for s in [
            "sm_80", "sm_86", "sm_90", "sm_90a", "sm_100a", "sm_100f", "sm_120",
        ] {
            let t: TargetArch = s.parse().unwrap();
            assert_eq!(t.to_string(), s);
        }
        let t: TargetArch = "sm_90a".parse().unwrap();
        assert_eq!((t.major, t.minor, t.variant), (9, 0, ArchVariant::Specific));
        assert_eq!(t.gencode_cubin(), "-gencode=arch=compute_90a,code=sm_90a");
        assert_eq!(
            t.gencode_ptx(),
            "-gencode=arch=compute_90a,code=compute_90a"
        );
        let t: TargetArch = "sm_121".parse().unwrap();
        assert_eq!((t.major, t.minor), (12, 1));
    }

    #[test]
    fn rejects_malformed_targets() {
        for s in [
            "",
            "sm",
            "sm_",
            "sm_9",
            "compute_90",
            "SM_90",
            "sm_90b",
            "sm_9000",
            "sm_80a",
            "sm_90f",
            "sm_x0",
            "sm_05",
        ] {
            assert!(s.parse::<TargetArch>().is_err(), "{s} parsed");
        }
    }
}
