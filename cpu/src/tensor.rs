//! Runtime tensor values: typed element storage decoded from little-endian bytes.

use crate::model::OperandType;

/// Largest number of elements one tensor may have (guards allocations driven by input values).
const MAX_ELEMENTS: usize = 1 << 28;

/// Typed element storage. Several operand types share one storage kind (see [`kind_of`]).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Data {
    /// FLOAT32, TENSOR_FLOAT32; also FLOAT16, TENSOR_FLOAT16 (widened on decode).
    F32(Vec<f32>),
    /// INT32, UINT32 (bit pattern), TENSOR_INT32.
    I32(Vec<i32>),
    /// TENSOR_QUANT8_ASYMM, BOOL, TENSOR_BOOL8.
    U8(Vec<u8>),
    /// TENSOR_QUANT8_SYMM, TENSOR_QUANT8_SYMM_PER_CHANNEL, TENSOR_QUANT8_ASYMM_SIGNED.
    I8(Vec<i8>),
    /// TENSOR_QUANT16_SYMM.
    I16(Vec<i16>),
    /// TENSOR_QUANT16_ASYMM.
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
        Float32 | TensorFloat32 | Float16 | TensorFloat16 => Kind::F32,
        Int32 | Uint32 | TensorInt32 => Kind::I32,
        // SUBGRAPH operands hold no elements; U8 keeps their (empty) data harmless.
        TensorQuant8Asymm | Bool | TensorBool8 | Subgraph => Kind::U8,
        TensorQuant8Symm | TensorQuant8SymmPerChannel | TensorQuant8AsymmSigned => Kind::I8,
        TensorQuant16Symm => Kind::I16,
        TensorQuant16Asymm => Kind::U16,
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

    /// Decodes little-endian `bytes` holding elements of operand type `ty`.
    pub(crate) fn decode(ty: OperandType, bytes: &[u8]) -> Data {
        if matches!(ty, OperandType::Float16 | OperandType::TensorFloat16) {
            return Data::F32(
                bytes
                    .chunks_exact(2)
                    .map(|c| f16_to_f32(u16::from_le_bytes([c[0], c[1]])))
                    .collect(),
            );
        }
        match kind_of(ty) {
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

    /// Encodes as elements of operand type `ty` into `out` (at least `len() * element_size`).
    pub(crate) fn encode(&self, ty: OperandType, out: &mut [u8]) {
        /// Writes each `x` of `v` as its `N` bytes `le(x)` into consecutive chunks of `out`.
        fn put<T: Copy, const N: usize>(out: &mut [u8], v: &[T], le: impl Fn(T) -> [u8; N]) {
            for (o, &x) in out.chunks_exact_mut(N).zip(v) {
                o.copy_from_slice(&le(x));
            }
        }
        match (self, ty) {
            (Data::F32(v), OperandType::Float16 | OperandType::TensorFloat16) => {
                put(out, v, |x| f32_to_f16(x).to_le_bytes())
            }
            (Data::F32(v), _) => put(out, v, f32::to_le_bytes),
            (Data::I32(v), _) => put(out, v, i32::to_le_bytes),
            (Data::U8(v), _) => put(out, v, |x| [x]),
            (Data::I8(v), _) => put(out, v, i8::to_le_bytes),
            (Data::I16(v), _) => put(out, v, i16::to_le_bytes),
            (Data::U16(v), _) => put(out, v, u16::to_le_bytes),
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
    pub(crate) dims: Vec<u32>,
    pub(crate) data: Data,
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
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1f);
    let frac = u32::from(h & 0x3ff);
    let bits = if exp == 0 {
        if frac == 0 {
            sign
        } else {
            // subnormal: value = frac * 2^-24
            return if sign != 0 { -1.0 } else { 1.0 } * frac as f32 * 2f32.powi(-24);
        }
    } else if exp == 0x1f {
        sign | (0xff << 23) | (frac << 13)
    } else {
        sign | ((exp + 127 - 15) << 23) | (frac << 13)
    };
    f32::from_bits(bits)
}

/// Converts f32 to IEEE half precision, rounding to nearest even.
pub fn f32_to_f16(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32;
    let mant = b & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if mant != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        let m = mant | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = m >> shift;
        let rem = m & ((1 << shift) - 1);
        let halfway = 1 << (shift - 1);
        let r = if rem > halfway || (rem == halfway && half & 1 == 1) {
            half + 1
        } else {
            half
        };
        return sign | r as u16;
    }
    let mut r = ((e as u32) << 10) | (mant >> 13);
    let rem = mant & 0x1fff;
    if rem > 0x1000 || (rem == 0x1000 && r & 1 == 1) {
        r += 1;
    }
    sign | r as u16
}

/// Whether `ty` is a floating-point tensor type (FLOAT32 or FLOAT16 storage widened to f32).
pub(crate) fn is_float(ty: OperandType) -> bool {
    matches!(ty, OperandType::TensorFloat32 | OperandType::TensorFloat16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_precision_conversions_round_trip() {
        for v in [
            0.0f32,
            1.0,
            -2.5,
            65504.0,
            0.000_061_035_156,
            5.960_464_5e-8,
            0.1,
        ] {
            let h = f32_to_f16(v);
            let back = f16_to_f32(h);
            assert!(
                (back - v).abs() <= v.abs() * 1e-3 + 1e-7,
                "{v} -> {h:#x} -> {back}"
            );
        }
        assert_eq!(f32_to_f16(1.0), 0x3c00);
        assert_eq!(f32_to_f16(-2.0), 0xc000);
        assert_eq!(f32_to_f16(1e6), 0x7c00);
        assert_eq!(f16_to_f32(0x3555), 0.333_251_95);
    }
}
