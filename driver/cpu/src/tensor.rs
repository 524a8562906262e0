//! Runtime tensor values: typed element storage decoded from little-endian bytes.

use crate::model::OperandType;

/// Largest number of elements one tensor may have (guards allocations driven by input values).
pub(crate) const MAX_ELEMENTS: usize = 1 << 28;

/// Typed element storage. Several operand types share one storage kind (see [`kind_of`]).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Data {
    /// FLOAT32, TENSOR_FLOAT32.
    F32(Vec<f32>),
    /// INT32, UINT32 (bit pattern), TENSOR_INT32.
    I32(Vec<i32>),
    /// TENSOR_QUANT8_ASYMM, BOOL, TENSOR_BOOL8.
    U8(Vec<u8>),
    /// TENSOR_QUANT8_SYMM, TENSOR_QUANT8_SYMM_PER_CHANNEL, TENSOR_QUANT8_ASYMM_SIGNED.
    I8(Vec<i8>),
    /// TENSOR_QUANT16_SYMM.
    I16(Vec<i16>),
    /// TENSOR_QUANT16_ASYMM, FLOAT16 and TENSOR_FLOAT16 (raw bits).
    U16(Vec<u16>),
}

/// Storage kind tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    F32,
    I32,
    U8,
    I8,
    I16,
    U16,
}

pub(crate) fn kind_of(ty: OperandType) -> Kind {
    use OperandType::*;
    match ty {
        Float32 | TensorFloat32 => Kind::F32,
        Int32 | Uint32 | TensorInt32 => Kind::I32,
        TensorQuant8Asymm | Bool | TensorBool8 => Kind::U8,
        TensorQuant8Symm | TensorQuant8SymmPerChannel | TensorQuant8AsymmSigned => Kind::I8,
        TensorQuant16Symm => Kind::I16,
        TensorQuant16Asymm | Float16 | TensorFloat16 => Kind::U16,
    }
}

impl Data {
    pub(crate) fn kind(&self) -> Kind {
        match self {
            Data::F32(_) => Kind::F32,
            Data::I32(_) => Kind::I32,
            Data::U8(_) => Kind::U8,
            Data::I8(_) => Kind::I8,
            Data::I16(_) => Kind::I16,
            Data::U16(_) => Kind::U16,
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Data::F32(v) => v.len(),
            Data::I32(v) => v.len(),
            Data::U8(v) => v.len(),
            Data::I8(v) => v.len(),
            Data::I16(v) => v.len(),
            Data::U16(v) => v.len(),
        }
    }

    pub(crate) fn byte_len(&self) -> usize {
        match self {
            Data::F32(v) => v.len() * 4,
            Data::I32(v) => v.len() * 4,
            Data::U8(v) => v.len(),
            Data::I8(v) => v.len(),
            Data::I16(v) => v.len() * 2,
            Data::U16(v) => v.len() * 2,
        }
    }

    /// Decodes `bytes` (exact length) as elements of `kind`.
    pub(crate) fn decode(kind: Kind, bytes: &[u8]) -> Data {
        match kind {
            Kind::F32 => Data::F32(
                bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            ),
            Kind::I32 => Data::I32(
                bytes
                    .chunks_exact(4)
                    .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            ),
            Kind::U8 => Data::U8(bytes.to_vec()),
            Kind::I8 => Data::I8(bytes.iter().map(|&b| b as i8).collect()),
            Kind::I16 => Data::I16(
                bytes
                    .chunks_exact(2)
                    .map(|c| i16::from_le_bytes([c[0], c[1]]))
                    .collect(),
            ),
            Kind::U16 => Data::U16(
                bytes
                    .chunks_exact(2)
                    .map(|c| u16::from_le_bytes([c[0], c[1]]))
                    .collect(),
            ),
        }
    }

    /// Encodes into `out`, which must be at least `byte_len()` long.
    pub(crate) fn encode(&self, out: &mut [u8]) {
        match self {
            Data::F32(v) => {
                for (o, x) in out.chunks_exact_mut(4).zip(v) {
                    o.copy_from_slice(&x.to_le_bytes());
                }
            }
            Data::I32(v) => {
                for (o, x) in out.chunks_exact_mut(4).zip(v) {
                    o.copy_from_slice(&x.to_le_bytes());
                }
            }
            Data::U8(v) => {
                for (o, x) in out.iter_mut().zip(v) {
                    *o = *x;
                }
            }
            Data::I8(v) => {
                for (o, x) in out.iter_mut().zip(v) {
                    *o = *x as u8;
                }
            }
            Data::I16(v) => {
                for (o, x) in out.chunks_exact_mut(2).zip(v) {
                    o.copy_from_slice(&x.to_le_bytes());
                }
            }
            Data::U16(v) => {
                for (o, x) in out.chunks_exact_mut(2).zip(v) {
                    o.copy_from_slice(&x.to_le_bytes());
                }
            }
        }
    }

    /// Gathers elements by index: `out[i] = self[idx[i]]` (same kind).
    pub(crate) fn gather(&self, idx: &[usize]) -> Data {
        fn g<T: Copy>(v: &[T], idx: &[usize]) -> Vec<T> {
            idx.iter().map(|&i| v[i]).collect()
        }
        match self {
            Data::F32(v) => Data::F32(g(v, idx)),
            Data::I32(v) => Data::I32(g(v, idx)),
            Data::U8(v) => Data::U8(g(v, idx)),
            Data::I8(v) => Data::I8(g(v, idx)),
            Data::I16(v) => Data::I16(g(v, idx)),
            Data::U16(v) => Data::U16(g(v, idx)),
        }
    }
}

/// A runtime value: dimensions plus elements.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Tensor {
    pub dims: Vec<u32>,
    pub data: Data,
}

impl Tensor {
    pub(crate) fn new(dims: Vec<u32>, data: Data) -> Self {
        Tensor { dims, data }
    }
}

/// Product of extents with overflow and size-cap checks.
pub(crate) fn num_elements(dims: &[u32]) -> Option<usize> {
    let mut n: usize = 1;
    for &d in dims {
        n = n.checked_mul(d as usize)?;
    }
    if n > MAX_ELEMENTS { None } else { Some(n) }
}

/// Converts an IEEE half-precision bit pattern to f32.
pub(crate) fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h >> 15) & 1) as u32;
    let exp = ((h >> 10) & 0x1f) as u32;
    let frac = (h & 0x3ff) as u32;
    let bits = if exp == 0 {
        if frac == 0 {
            sign << 31
        } else {
            // subnormal: normalise
            let mut e: i32 = -14;
            let mut f = frac;
            while f & 0x400 == 0 {
                f <<= 1;
                e -= 1;
            }
            f &= 0x3ff;
            (sign << 31) | (((e + 127) as u32) << 23) | (f << 13)
        }
    } else if exp == 0x1f {
        (sign << 31) | (0xff << 23) | (frac << 13)
    } else {
        (sign << 31) | ((exp + 127 - 15) << 23) | (frac << 13)
    };
    f32::from_bits(bits)
}
