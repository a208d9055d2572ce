//! What a launch is given: its geometry ([`LaunchDims`]) and its arguments
//! ([`KernelArg`]), checked against the entry's declared kinds or the cubin's parameter
//! sizes before the driver sees them.

use crate::error::{Error, Result};
use crate::signature::ParamKind;

/// Grid, block and dynamic shared memory of a launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchDims {
    /// Blocks in x, y, z.
    pub grid: (u32, u32, u32),
    /// Threads per block in x, y, z.
    pub block: (u32, u32, u32),
    /// Dynamic shared memory per block, bytes.
    pub shared_bytes: u32,
}

/// One kernel argument for [`LoadedArtifact::launch`](crate::runtime::LoadedArtifact::launch).
#[derive(Clone, Debug, PartialEq)]
pub enum KernelArg {
    /// A device pointer (`CUdeviceptr`).
    Ptr(u64),
    /// `int8_t`.
    I8(i8),
    /// `uint8_t`.
    U8(u8),
    /// `int16_t`.
    I16(i16),
    /// `uint16_t`.
    U16(u16),
    /// `__half`, as its bits.
    F16(u16),
    /// `__nv_bfloat16`, as its bits.
    Bf16(u16),
    /// `int`.
    I32(i32),
    /// `unsigned`.
    U32(u32),
    /// `float`.
    F32(f32),
    /// `long long`.
    I64(i64),
    /// `unsigned long long`.
    U64(u64),
    /// `double`.
    F64(f64),
    /// A TMA descriptor for a `const __grid_constant__ CUtensorMap` parameter.
    TensorMap(crate::runtime::tma::TensorMap),
    /// A struct passed by value: its bytes, laid out as the kernel's C++ struct.
    Struct(Vec<u8>),
}

impl KernelArg {
    /// Its kind.
    pub fn kind(&self) -> ParamKind {
        match self {
            KernelArg::Ptr(_) => ParamKind::Ptr,
            KernelArg::I8(_) => ParamKind::I8,
            KernelArg::U8(_) => ParamKind::U8,
            KernelArg::I16(_) => ParamKind::I16,
            KernelArg::U16(_) => ParamKind::U16,
            KernelArg::F16(_) => ParamKind::F16,
            KernelArg::Bf16(_) => ParamKind::Bf16,
            KernelArg::I32(_) => ParamKind::I32,
            KernelArg::U32(_) => ParamKind::U32,
            KernelArg::F32(_) => ParamKind::F32,
            KernelArg::I64(_) => ParamKind::I64,
            KernelArg::U64(_) => ParamKind::U64,
            KernelArg::F64(_) => ParamKind::F64,
            KernelArg::TensorMap(_) => ParamKind::TensorMap,
            KernelArg::Struct(bytes) => ParamKind::Struct {
                size: bytes.len() as u32,
                align: 1,
            },
        }
    }

    /// An integer of `kind` holding `v`, if it fits.
    pub fn integer(kind: ParamKind, v: i64) -> Option<KernelArg> {
        Some(match kind {
            ParamKind::I8 => KernelArg::I8(v.try_into().ok()?),
            ParamKind::U8 => KernelArg::U8(v.try_into().ok()?),
            ParamKind::I16 => KernelArg::I16(v.try_into().ok()?),
            ParamKind::U16 => KernelArg::U16(v.try_into().ok()?),
            ParamKind::I32 => KernelArg::I32(v.try_into().ok()?),
            ParamKind::U32 => KernelArg::U32(v.try_into().ok()?),
            ParamKind::I64 => KernelArg::I64(v),
            ParamKind::U64 => KernelArg::U64(v.try_into().ok()?),
            _ => return None,
        })
    }

    /// Whether it can be passed as `kind` (a struct by its size: its alignment is the
    /// kernel's business).
    fn fits(&self, kind: ParamKind) -> bool {
        match (self, kind) {
            (KernelArg::Struct(bytes), ParamKind::Struct { size, .. }) => {
                bytes.len() == size as usize
            }
            _ => self.kind() == kind,
        }
    }

    /// A scalar's bytes in the low end of a little-endian 64-bit word (0 for tensor
    /// maps and structs, which are passed from their own bytes).
    pub(crate) fn bits(&self) -> u64 {
        match *self {
            KernelArg::TensorMap(_) | KernelArg::Struct(_) => 0,
            KernelArg::Ptr(v) | KernelArg::U64(v) => v,
            KernelArg::I8(v) => v as u8 as u64,
            KernelArg::U8(v) => v as u64,
            KernelArg::I16(v) => v as u16 as u64,
            KernelArg::U16(v) | KernelArg::F16(v) | KernelArg::Bf16(v) => v as u64,
            KernelArg::I32(v) => v as u32 as u64,
            KernelArg::U32(v) => v as u64,
            KernelArg::F32(v) => v.to_bits() as u64,
            KernelArg::I64(v) => v as u64,
            KernelArg::F64(v) => v.to_bits(),
        }
    }
}

/// Checks launch arguments against an entry's signature, else its parameter sizes.
pub fn check_args(
    artifact: &str,
    entry: &crate::cubin::EntryInfo,
    args: &[KernelArg],
) -> Result<()> {
    let given: Vec<std::borrow::Cow<str>> = args.iter().map(|a| a.kind().name()).collect();
    let wrong = |expected: String| Error::Usage {
        message: format!(
            "{artifact}: `{}` takes {expected}; the call passes {} arguments [{}]",
            entry.name,
            args.len(),
            given.join(", ")
        ),
        hint: None,
    };
    if let Some(signature) = &entry.signature {
        let fits =
            args.len() == signature.len() && args.iter().zip(signature).all(|(a, k)| a.fits(*k));
        if !fits {
            let names: Vec<std::borrow::Cow<str>> = signature.iter().map(|k| k.name()).collect();
            return Err(wrong(format!(
                "{} arguments [{}]",
                signature.len(),
                names.join(", ")
            )));
        }
        return Ok(());
    }
    let sizes: Vec<u32> = args.iter().map(|a| a.kind().size()).collect();
    if !entry.params.is_empty() && sizes != entry.params {
        return Err(wrong(format!(
            "{} arguments of sizes {:?} (no [signature] declared)",
            entry.params.len(),
            entry.params
        )));
    }
    Ok(())
}
