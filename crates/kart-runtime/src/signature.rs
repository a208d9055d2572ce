//! Kernel parameter signatures: the kinds a `kernel.toml` declares for an entry
//! (`signature.axpb = ["ptr", "ptr", "f32", "f32", "i32"]`), checked at build time
//! against the parameter sizes the cubin itself records, and used by the launch APIs
//! (Rust and the exported Python loader) to refuse calls with the wrong number or kinds
//! of arguments.

use serde::{Deserialize, Serialize};

/// The kind of one kernel parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
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
    /// A TMA descriptor, `const __grid_constant__ CUtensorMap` (128 bytes, aligned to
    /// 64), made with `cuTensorMapEncodeTiled`.
    TensorMap,
    /// A struct passed by value, of `size` bytes aligned to `align` (`struct:16:8`).
    Struct {
        /// Bytes.
        size: u32,
        /// Alignment, a power of two.
        align: u32,
    },
}

impl From<ParamKind> for String {
    fn from(k: ParamKind) -> String {
        k.to_string()
    }
}

impl TryFrom<String> for ParamKind {
    type Error = String;
    fn try_from(s: String) -> Result<ParamKind, String> {
        s.parse()
    }
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
            ParamKind::TensorMap => 128,
            ParamKind::Struct { size, .. } => size,
            ParamKind::I8 | ParamKind::U8 => 1,
            ParamKind::I16 | ParamKind::U16 | ParamKind::F16 | ParamKind::Bf16 => 2,
            ParamKind::I32 | ParamKind::U32 | ParamKind::F32 => 4,
            ParamKind::Ptr | ParamKind::I64 | ParamKind::U64 | ParamKind::F64 => 8,
        }
    }

    /// Whether it is an integer (`i8` to `u64`).
    pub fn is_integer(self) -> bool {
        matches!(
            self,
            ParamKind::I8
                | ParamKind::U8
                | ParamKind::I16
                | ParamKind::U16
                | ParamKind::I32
                | ParamKind::U32
                | ParamKind::I64
                | ParamKind::U64
        )
    }

    /// Its name in `kernel.toml`.
    pub fn name(self) -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Borrowed(match self {
            ParamKind::TensorMap => "tensormap",
            ParamKind::Struct { size, align } => {
                return std::borrow::Cow::Owned(format!("struct:{size}:{align}"));
            }
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
        })
    }
}

impl std::str::FromStr for ParamKind {
    type Err = String;
    fn from_str(s: &str) -> Result<ParamKind, String> {
        if s == "tensormap" {
            return Ok(ParamKind::TensorMap);
        }
        if let Some(rest) = s.strip_prefix("struct:") {
            let mut parts = rest.split(':').map(str::parse::<u32>);
            let size = parts.next().and_then(|r| r.ok());
            let align = match parts.next() {
                None => Some(8),
                Some(r) => r.ok(),
            };
            return match (size, align, parts.next()) {
                (Some(size), Some(align), None)
                    if size > 0
                        && size <= 4096
                        && align.is_power_of_two()
                        && align <= 128
                        && size % align == 0 =>
                {
                    Ok(ParamKind::Struct { size, align })
                }
                _ => Err(format!(
                    "`{s}` is not a struct kind: write struct:SIZE or struct:SIZE:ALIGN (bytes; ALIGN a power of two up to 128 that divides SIZE; SIZE at most 4096)"
                )),
            };
        }
        ALL_KINDS
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                format!(
                    "`{s}` is not a parameter kind (one of {}, tensormap, struct:SIZE:ALIGN)",
                    ALL_KINDS.map(ParamKind::name).join(", ")
                )
            })
    }
}

impl std::fmt::Display for ParamKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

/// Checks a declared signature against the parameter sizes a cubin records for the
/// entry; the error says what differs.
pub fn check_signature(entry: &str, declared: &[ParamKind], sizes: &[u32]) -> Result<(), String> {
    let want: Vec<u32> = declared.iter().map(|k| k.size()).collect();
    if want == sizes {
        return Ok(());
    }
    let names: Vec<String> = declared.iter().map(|k| k.to_string()).collect();
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
        let tma: Vec<ParamKind> = ["tensormap", "struct:12:4", "struct:16"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        assert!(check_signature("tma", &tma, &[128, 12, 16]).is_ok());
        assert_eq!(tma[2].to_string(), "struct:16:8");
        for bad in [
            "struct:",
            "struct:12:8",
            "struct:0",
            "struct:16:3",
            "struct:8:8:8",
        ] {
            assert!(bad.parse::<ParamKind>().is_err(), "{bad}");
        }
        let json = serde_json::to_string(&tma).unwrap();
        assert_eq!(json, r#"["tensormap","struct:12:4","struct:16:8"]"#);
        assert_eq!(serde_json::from_str::<Vec<ParamKind>>(&json).unwrap(), tma);
    }
}
