//! Hopper's tensor memory accelerator from the host: tensor maps (TMA descriptors) made
//! with `cuTensorMapEncodeTiled`, passed to kernels as `const __grid_constant__
//! CUtensorMap` parameters, with no C++ host code.

use cudarc::driver::sys;

use crate::error::{Error, Result};

/// The element type of a tensor map. FP8 data travels as `U8`: TMA only moves bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TmaType {
    /// 1 byte (also FP8).
    U8,
    /// 2 bytes.
    U16,
    /// 4 bytes.
    U32,
    /// `int`.
    I32,
    /// 8 bytes.
    U64,
    /// `long long`.
    I64,
    /// `__half`.
    F16,
    /// `float`.
    F32,
    /// `double`.
    F64,
    /// `__nv_bfloat16`.
    Bf16,
}

impl TmaType {
    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            TmaType::U8 => 1,
            TmaType::U16 | TmaType::F16 | TmaType::Bf16 => 2,
            TmaType::U32 | TmaType::I32 | TmaType::F32 => 4,
            TmaType::U64 | TmaType::I64 | TmaType::F64 => 8,
        }
    }

    /// The names `from_name` takes, as `[launch.args]` and the exported module's
    /// `tensor_map` write them.
    pub const NAMES: [&'static str; 10] = [
        "u8", "u16", "u32", "i32", "u64", "i64", "f16", "bf16", "f32", "f64",
    ];

    /// From its name in `[launch.args]` and the exported module (one of [`Self::NAMES`]).
    pub fn from_name(name: &str) -> Option<TmaType> {
        Some(match name {
            "u8" => TmaType::U8,
            "u16" => TmaType::U16,
            "u32" => TmaType::U32,
            "i32" => TmaType::I32,
            "u64" => TmaType::U64,
            "i64" => TmaType::I64,
            "f16" => TmaType::F16,
            "bf16" => TmaType::Bf16,
            "f32" => TmaType::F32,
            "f64" => TmaType::F64,
            _ => return None,
        })
    }

    fn driver(self) -> sys::CUtensorMapDataType {
        use sys::CUtensorMapDataType as T;
        match self {
            TmaType::U8 => T::CU_TENSOR_MAP_DATA_TYPE_UINT8,
            TmaType::U16 => T::CU_TENSOR_MAP_DATA_TYPE_UINT16,
            TmaType::U32 => T::CU_TENSOR_MAP_DATA_TYPE_UINT32,
            TmaType::I32 => T::CU_TENSOR_MAP_DATA_TYPE_INT32,
            TmaType::U64 => T::CU_TENSOR_MAP_DATA_TYPE_UINT64,
            TmaType::I64 => T::CU_TENSOR_MAP_DATA_TYPE_INT64,
            TmaType::F16 => T::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
            TmaType::F32 => T::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
            TmaType::F64 => T::CU_TENSOR_MAP_DATA_TYPE_FLOAT64,
            TmaType::Bf16 => T::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        }
    }
}

/// How a box is laid out in shared memory. The swizzle must match the layout the
/// kernel reads (`128B` for the K-major layouts `wgmma` reads fastest).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Swizzle {
    /// Row after row.
    None,
    /// 32-byte swizzle.
    B32,
    /// 64-byte swizzle.
    B64,
    /// 128-byte swizzle: the box's inner extent is at most 128 bytes.
    B128,
}

impl Swizzle {
    /// From bytes: 0, 32, 64 or 128.
    pub fn from_bytes(bytes: u32) -> Option<Swizzle> {
        match bytes {
            0 => Some(Swizzle::None),
            32 => Some(Swizzle::B32),
            64 => Some(Swizzle::B64),
            128 => Some(Swizzle::B128),
            _ => None,
        }
    }

    fn bytes(self) -> u64 {
        match self {
            Swizzle::None => 0,
            Swizzle::B32 => 32,
            Swizzle::B64 => 64,
            Swizzle::B128 => 128,
        }
    }

    fn driver(self) -> sys::CUtensorMapSwizzle {
        use sys::CUtensorMapSwizzle as S;
        match self {
            Swizzle::None => S::CU_TENSOR_MAP_SWIZZLE_NONE,
            Swizzle::B32 => S::CU_TENSOR_MAP_SWIZZLE_32B,
            Swizzle::B64 => S::CU_TENSOR_MAP_SWIZZLE_64B,
            Swizzle::B128 => S::CU_TENSOR_MAP_SWIZZLE_128B,
        }
    }
}

/// How far the L2 cache is filled past what each TMA copy reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L2Promotion {
    /// No promotion.
    None,
    /// 64 bytes.
    B64,
    /// 128 bytes (what [`TensorMap::tiled`] uses).
    B128,
    /// 256 bytes.
    B256,
}

impl L2Promotion {
    /// From bytes: 0, 64, 128 or 256.
    pub fn from_bytes(bytes: u32) -> Option<L2Promotion> {
        match bytes {
            0 => Some(L2Promotion::None),
            64 => Some(L2Promotion::B64),
            128 => Some(L2Promotion::B128),
            256 => Some(L2Promotion::B256),
            _ => None,
        }
    }

    fn driver(self) -> sys::CUtensorMapL2promotion {
        use sys::CUtensorMapL2promotion as P;
        match self {
            L2Promotion::None => P::CU_TENSOR_MAP_L2_PROMOTION_NONE,
            L2Promotion::B64 => P::CU_TENSOR_MAP_L2_PROMOTION_L2_64B,
            L2Promotion::B128 => P::CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
            L2Promotion::B256 => P::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        }
    }
}

/// A tiled tensor map: 128 opaque bytes, aligned to 64, valid for as long as the memory
/// it describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct TensorMap(pub [u64; 16]);

impl TensorMap {
    /// Encodes a map of the tensor at device address `ptr` with `shape` and `strides`
    /// (in elements), both outermost first as PyTorch writes them, the innermost stride
    /// being 1; each TMA copy moves a `tile` (outermost first) into shared memory laid
    /// out by `swizzle`. Out-of-bounds elements read as zero. L2 promotion is 128 bytes
    /// ([`tiled_with`](Self::tiled_with) chooses it).
    pub fn tiled(
        dtype: TmaType,
        ptr: u64,
        shape: &[u64],
        strides: &[u64],
        tile: &[u32],
        swizzle: Swizzle,
    ) -> Result<TensorMap> {
        Self::tiled_with(dtype, ptr, shape, strides, tile, swizzle, L2Promotion::B128)
    }

    /// [`tiled`](Self::tiled) with the L2 promotion chosen.
    pub fn tiled_with(
        dtype: TmaType,
        ptr: u64,
        shape: &[u64],
        strides: &[u64],
        tile: &[u32],
        swizzle: Swizzle,
        l2_promotion: L2Promotion,
    ) -> Result<TensorMap> {
        let rank = shape.len();
        let bad = |why: String| {
            Error::usage(
                format!("tensor map of shape {shape:?}, strides {strides:?}, tile {tile:?}: {why}"),
                Some("see cuTensorMapEncodeTiled's requirements: rank 1 to 5, innermost stride 1, other strides multiples of 16 bytes, tile sides 1 to 256, global address aligned to 16 bytes".into()),
            )
        };
        if !(1..=5).contains(&rank) || strides.len() != rank || tile.len() != rank {
            return Err(bad(
                "shape, strides and tile need one entry per dimension, 1 to 5 dimensions".into(),
            ));
        }
        if strides[rank - 1] != 1 {
            return Err(bad("the innermost stride must be 1".into()));
        }
        if !ptr.is_multiple_of(16) {
            return Err(bad(format!(
                "the address {ptr:#x} is not aligned to 16 bytes"
            )));
        }
        let elem = dtype.size();
        // The driver takes dimensions innermost first and strides in bytes, without the
        // innermost one.
        let dims: Vec<u64> = shape.iter().rev().copied().collect();
        let byte_strides: Vec<u64> = strides.iter().rev().skip(1).map(|s| s * elem).collect();
        if let Some(s) = byte_strides.iter().find(|s| !s.is_multiple_of(16)) {
            return Err(bad(format!(
                "a stride of {s} bytes is not a multiple of 16"
            )));
        }
        let boxes: Vec<u32> = tile.iter().rev().copied().collect();
        if boxes.iter().any(|b| *b == 0 || *b > 256) {
            return Err(bad("every tile side must be 1 to 256".into()));
        }
        if swizzle != Swizzle::None && u64::from(boxes[0]) * elem > swizzle.bytes() {
            return Err(bad(format!(
                "the tile's inner side is {} bytes, more than the {}-byte swizzle",
                u64::from(boxes[0]) * elem,
                swizzle.bytes()
            )));
        }
        let element_strides = vec![1u32; rank];
        let mut map = std::mem::MaybeUninit::<sys::CUtensorMap>::zeroed();
        // SAFETY: every array holds `rank` entries (strides `rank - 1`), as the driver
        // reads them; `map` is writable and aligned as CUtensorMap requires.
        unsafe {
            sys::cuTensorMapEncodeTiled(
                map.as_mut_ptr(),
                dtype.driver(),
                rank as u32,
                ptr as *mut std::ffi::c_void,
                dims.as_ptr(),
                byte_strides.as_ptr(),
                boxes.as_ptr(),
                element_strides.as_ptr(),
                sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
                swizzle.driver(),
                l2_promotion.driver(),
                sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            )
        }
        .result()
        .map_err(|e| Error::Driver {
            call: "cuTensorMapEncodeTiled",
            message: e.to_string(),
        })?;
        // SAFETY: the driver wrote all 128 bytes.
        let map = unsafe { map.assume_init() };
        Ok(TensorMap(map.opaque))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_type_names_are_the_exported_modules() {
        for name in TmaType::NAMES {
            assert!(TmaType::from_name(name).is_some(), "{name}");
        }
        assert_eq!(TmaType::from_name("f8"), None);
    }
}
