//! What an operation's static check sees: its operands as declared, with the helpers every
//! check uses (argument counts, types, optional arguments, fixed output quantization), the
//! operand-type groups kernels declare, and [`Issue`], the verdict.
//!
//! A leaf below both `validate` (which runs the checks over a graph) and `ops` (whose families
//! define them), so neither imports the other for it.

use crate::model::{Graph, Lifetime, Operand, OperandType, OperationType};

use OperandType as T;

pub(crate) const FLOAT: &[OperandType] = &[T::TensorFloat32, T::TensorFloat16];
/// Float tensors and TENSOR_INT32 (ABS, NEG).
pub(crate) const FLOAT_INT32: &[OperandType] =
    &[T::TensorFloat32, T::TensorFloat16, T::TensorInt32];
pub(crate) const F32_Q8: &[OperandType] = &[
    T::TensorFloat32,
    T::TensorFloat16,
    T::TensorQuant8Asymm,
    T::TensorQuant8AsymmSigned,
];
pub(crate) const ARITH: &[OperandType] = &[
    T::TensorFloat32,
    T::TensorFloat16,
    T::TensorInt32,
    T::TensorQuant8Asymm,
    T::TensorQuant8AsymmSigned,
];
pub(crate) const MOVE_TENSOR: &[OperandType] = &[
    T::TensorFloat32,
    T::TensorFloat16,
    T::TensorInt32,
    T::TensorQuant8Asymm,
    T::TensorQuant8AsymmSigned,
];
pub(crate) const DEQUANT_IN: &[OperandType] = &[
    T::TensorQuant8Asymm,
    T::TensorQuant8AsymmSigned,
    T::TensorQuant8Symm,
    T::TensorQuant8SymmPerChannel,
];

/// Why an operation cannot run here.
#[derive(Debug)]
pub(crate) enum Issue {
    /// The operation breaks its HAL definition.
    Invalid(String),
    /// The operation is valid but has no kernel for these types.
    Unsupported(String),
}

/// One operation's arguments as declared in its graph.
pub(crate) struct Ck<'a> {
    pub(crate) g: &'a Graph,
    pub(crate) ins: &'a [u32],
    pub(crate) outs: &'a [u32],
}

impl Ck<'_> {
    pub(crate) fn inp(&self, i: usize) -> Result<&Operand, Issue> {
        self.ins
            .get(i)
            .and_then(|&x| self.g.operands.get(x as usize))
            .ok_or_else(|| Issue::Invalid(format!("missing input {i}")))
    }
    pub(crate) fn out(&self, k: usize) -> Result<&Operand, Issue> {
        self.outs
            .get(k)
            .and_then(|&x| self.g.operands.get(x as usize))
            .ok_or_else(|| Issue::Invalid(format!("missing output {k}")))
    }
    pub(crate) fn ty(&self, i: usize) -> Result<OperandType, Issue> {
        Ok(self.inp(i)?.ty)
    }
    pub(crate) fn is(&self, i: usize, want: OperandType, what: &str) -> Result<(), Issue> {
        let o = self.inp(i)?;
        if o.ty != want {
            return Err(Issue::Invalid(format!(
                "input {i} ({what}) must be {}, is {}",
                want.name(),
                o.ty.name()
            )));
        }
        Ok(())
    }
    /// Optional trailing argument: absent, NO_VALUE, or of type `want`.
    pub(crate) fn opt(&self, i: usize, want: OperandType, what: &str) -> Result<(), Issue> {
        match self.ins.get(i) {
            None => Ok(()),
            Some(_) if self.inp(i)?.lifetime == Lifetime::NoValue => Ok(()),
            Some(_) => self.is(i, want, what),
        }
    }
    pub(crate) fn counts(&self, ins: &[usize], outs: usize) -> Result<(), Issue> {
        if !ins.contains(&self.ins.len()) {
            return Err(Issue::Invalid(format!(
                "{} inputs given, expected {ins:?}",
                self.ins.len()
            )));
        }
        if self.outs.len() != outs {
            return Err(Issue::Invalid(format!(
                "{} outputs given, expected {outs}",
                self.outs.len()
            )));
        }
        Ok(())
    }
    pub(crate) fn same_out(&self, t: OperandType) -> Result<(), Issue> {
        let o = self.out(0)?;
        if o.ty != t {
            return Err(Issue::Invalid(format!(
                "output type {} differs from input type {}",
                o.ty.name(),
                t.name()
            )));
        }
        Ok(())
    }
    /// Quantized output must carry the input's scale and zero point.
    pub(crate) fn same_quant(&self) -> Result<(), Issue> {
        let (i, o) = (self.inp(0)?, self.out(0)?);
        if o.ty.is_quantized() && (o.scale != i.scale || o.zero_point != i.zero_point) {
            return Err(Issue::Invalid(
                "output scale and zero point must equal the input's".into(),
            ));
        }
        Ok(())
    }
    /// Unsupported unless input 0's type is one of `types`, those `op` is implemented for.
    pub(crate) fn implemented(
        &self,
        op: OperationType,
        types: &[OperandType],
    ) -> Result<(), Issue> {
        let t0 = self.ty(0)?;
        if types.contains(&t0) {
            Ok(())
        } else {
            Err(Issue::Unsupported(format!(
                "{} on {} is not implemented",
                op.name(),
                t0.name()
            )))
        }
    }
    pub(crate) fn out_quant(&self, scale: f32, zp_unsigned: i32) -> Result<(), Issue> {
        let o = self.out(0)?;
        let zp = if o.ty == T::TensorQuant8AsymmSigned {
            zp_unsigned - 128
        } else {
            zp_unsigned
        };
        if o.ty.is_quantized() && (o.scale != scale || o.zero_point != zp) {
            return Err(Issue::Invalid(format!(
                "output must have scale {scale} and zero point {zp}"
            )));
        }
        Ok(())
    }
}

/// The scalar float type paired with a tensor type (FLOAT16 for TENSOR_FLOAT16).
pub(crate) fn float_scalar(t: OperandType) -> OperandType {
    if t == T::TensorFloat16 {
        T::Float16
    } else {
        T::Float32
    }
}

// ---------------------------------------------------------------- constant arguments

/// The bytes of input `i` when it is a CONSTANT_COPY operand of `len` bytes.
fn const_bytes<'a>(c: &Ck<'a>, i: usize, len: usize) -> Option<&'a [u8]> {
    let idx = *c.ins.get(i)? as usize;
    let o = c.g.operands.get(idx)?;
    match o.lifetime {
        Lifetime::ConstantCopy { offset, length } if length == len => {
            c.g.operand_values.get(offset..offset.checked_add(len)?)
        }
        _ => None,
    }
}

/// The value of INT32 scalar input `i` when it is a constant of the model.
pub(crate) fn const_i32(c: &Ck<'_>, i: usize) -> Option<i32> {
    if c.ty(i).ok()? != T::Int32 {
        return None;
    }
    let b = const_bytes(c, i, 4)?;
    Some(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// The value of BOOL scalar input `i` when it is a constant of the model.
pub(crate) fn const_bool(c: &Ck<'_>, i: usize) -> Option<bool> {
    if c.ty(i).ok()? != T::Bool {
        return None;
    }
    Some(const_bytes(c, i, 1)?[0] != 0)
}

/// The value of FLOAT32 or FLOAT16 scalar input `i` when it is a constant of the model.
pub(crate) fn const_f32(c: &Ck<'_>, i: usize) -> Option<f32> {
    match c.ty(i).ok()? {
        T::Float32 => {
            let b = const_bytes(c, i, 4)?;
            Some(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        }
        T::Float16 => {
            let b = const_bytes(c, i, 2)?;
            Some(crate::tensor::f16_to_f32(u16::from_le_bytes([b[0], b[1]])))
        }
        _ => None,
    }
}
