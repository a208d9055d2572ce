//! Kernel parameter signatures: the kinds a `kernel.toml` declares for an entry
//! (`signature.axpb = ["ptr", "ptr", "f32", "f32", "i32"]`), checked at build time
//! against the parameter sizes the cubin itself records, and used by the launch APIs
//! (Rust and the exported Python loader) to refuse calls with the wrong number or kinds
//! of arguments.

use serde::{Deserialize, Serialize};

/// The kind of one kernel parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ParamKind {
    /// A device pointer (any element type).
    Ptr,
    /// `int8_t`.
    I8,
    /// `uint8_t`.
    U8,
    /// `int16_t`.
    I16,
    /// `uint16_t`.
    U16,
    /// `__half`, passed as its 16 bits.
    F16,
    /// `__nv_bfloat16`, passed as its 16 bits.
    Bf16,
    /// `int`.
    I32,
    /// `unsigned`.
    U32,
    /// `float`.
    F32,
    /// `long long`.
    I64,
    /// `unsigned long long`.
    U64,
    /// `double`.
    F64,
}

/// Every kind, in the order the docs list them.
pub const ALL_KINDS: [ParamKind; 13] = [
    ParamKind::Ptr,
    ParamKind::I8,
    ParamKind::U8,
    ParamKind::I16,
    ParamKind::U16,
    ParamKind::F16,
    ParamKind::Bf16,
    ParamKind::I32,
    ParamKind::U32,
    ParamKind::F32,
    ParamKind::I64,
    ParamKind::U64,
    ParamKind::F64,
];

impl ParamKind {
    /// Its size in bytes (pointers are 64-bit on every GPU kart targets).
    pub fn size(self) -> u32 {
        match self {
            ParamKind::I8 | ParamKind::U8 => 1,
            ParamKind::I16 | ParamKind::U16 | ParamKind::F16 | ParamKind::Bf16 => 2,
            ParamKind::I32 | ParamKind::U32 | ParamKind::F32 => 4,
            ParamKind::Ptr | ParamKind::I64 | ParamKind::U64 | ParamKind::F64 => 8,
        }
    }

    /// Its name in `kernel.toml`.
    pub fn name(self) -> &'static str {
        match self {
            ParamKind::Ptr => "ptr",
            ParamKind::I8 => "i8",
            ParamKind::U8 => "u8",
            ParamKind::I16 => "i16",
            ParamKind::U16 => "u16",
            ParamKind::F16 => "f16",
            ParamKind::Bf16 => "bf16",
            ParamKind::I32 => "i32",
            ParamKind::U32 => "u32",
            ParamKind::F32 => "f32",
            ParamKind::I64 => "i64",
            ParamKind::U64 => "u64",
            ParamKind::F64 => "f64",
        }
    }
}

impl std::str::FromStr for ParamKind {
    type Err = String;
    fn from_str(s: &str) -> Result<ParamKind, String> {
        ALL_KINDS
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                format!(
                    "`{s}` is not a parameter kind (one of {})",
                    ALL_KINDS.map(ParamKind::name).join(", ")
                )
            })
    }
}

impl std::fmt::Display for ParamKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Checks a declared signature against the parameter sizes a cubin records for the
/// entry; the error says what differs.
pub fn check_signature(entry: &str, declared: &[ParamKind], sizes: &[u32]) -> Result<(), String> {
    let want: Vec<u32> = declared.iter().map(|k| k.size()).collect();
    if want == sizes {
        return Ok(());
    }
    let names: Vec<&str> = declared.iter().map(|k| k.name()).collect();
    let first = want
        .iter()
        .zip(sizes)
        .position(|(a, b)| a != b)
        .map(|i| {
            format!(
                "; parameter {i} is `{}` ({} bytes) in the signature but {} bytes in the cubin",
                declared[i], want[i], sizes[i]
            )
        })
        .unwrap_or_default();
    Err(format!(
        "signature of `{entry}` is [{}] ({} parameters, sizes {want:?}), but the compiled function takes {} parameters of sizes {sizes:?}{first}",
        names.join(", "),
        want.len(),
        sizes.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_and_sizes_are_checked() {
        let sig: Vec<ParamKind> = ["ptr", "ptr", "f32", "f32", "i32"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        assert!(check_signature("axpb", &sig, &[8, 8, 4, 4, 4]).is_ok());
        let err = check_signature("axpb", &sig, &[8, 8, 8, 4, 4]).unwrap_err();
        assert!(err.contains("parameter 2 is `f32` (4 bytes)"), "{err}");
        let err = check_signature("axpb", &sig[..4], &[8, 8, 4, 4, 4]).unwrap_err();
        assert!(
            err.contains("4 parameters") && err.contains("takes 5"),
            "{err}"
        );
        assert!("float".parse::<ParamKind>().unwrap_err().contains("f32"));
    }
}
