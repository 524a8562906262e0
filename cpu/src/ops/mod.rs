//! Operation kernels by family, the table that lists them (`registry`), and what kernels
//! share: the kernel's view of one operation ([`OpCtx`]), layouts and index stepping.

use std::borrow::Cow;

use crate::error::ExecError;
use crate::model::{Graph, Lifetime, Operand, OperandType, Operation};
use crate::tensor::{Buf, Data, Tensor};

mod broadcast;
mod compare;
mod conv;
pub(crate) use conv::{
    gemm_weights_operand, half_kernel, pack_q8_weights, pack_weights, pack_weights_f16,
};
mod conv_variants;
mod detection;
mod elementwise;
mod fgemm;
pub use fgemm::PackedGemm;
mod gemm;
mod hgemm;
#[cfg(test)]
pub(crate) use conv::with_half_kernel;
#[cfg(test)]
pub(crate) use hgemm::Kernel as HalfKernel;
mod lookup;
mod lstm;
mod minmax;
mod movement;
mod normalization;
mod opdef;
mod pool;
mod qgemm;
pub(crate) use qgemm::QWeights;
pub(crate) mod quant;
mod reduce;
pub(crate) mod registry;
mod resize;
mod rnn;
mod shape;
mod softmax;

thread_local! {
    static PACKINGS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Counts one packing of constant weights on this thread (see [`packings_on_this_thread`]).
pub(crate) fn count_packing() {
    PACKINGS.with(|c| c.set(c.get() + 1));
}

/// How many weight operands this thread has packed: at preparation, for the compilation
/// cache, or by an 8-bit execution that found none prepared (it packs them for itself). A
/// diagnostic for tests and benchmarks, which check that executions pack nothing.
pub fn packings_on_this_thread() -> u64 {
    PACKINGS.with(std::cell::Cell::get)
}

/// What a kernel sees: the operation, the graph's operand declarations and the current values.
pub(crate) struct OpCtx<'a> {
    pub(crate) graph: &'a Graph,
    pub(crate) op: &'a Operation,
    pub(crate) index: usize,
    pub(crate) values: &'a [Option<Cow<'a, Tensor>>],
    /// The operation's constant float weights as `[k][n]`, when prepared (see
    /// [`pack_weights`]).
    pub(crate) weights_t: Option<&'a [f32]>,
    /// The operation's constant float weights as halves, when prepared for the float16 GEMM
    /// of a relaxed model (see [`pack_weights_f16`]).
    pub(crate) weights_h: Option<&'a [u16]>,
    /// The operation's constant 8-bit weights packed for the quantized GEMM, when prepared
    /// (see [`pack_q8_weights`]).
    pub(crate) qweights: Option<&'a QWeights>,
    /// Where the 8-bit kernels keep what they derive from the operation's constants once made
    /// (see [`QuantCache`]), when everything it derives from is fixed for the prepared model.
    pub(crate) kept: Option<&'a QuantCache>,
}

/// What one 8-bit operation derives from its constants, made by the first execution and
/// reused by the others: the epilogue (per-channel multipliers, shifts, bias, bounds; made on
/// every execution it cost about a sixth of a batch-1 int8 FULLY_CONNECTED network) and, for a
/// DEPTHWISE_CONV_2D, its filter in the kernel's layout (about 1% of an int8 MobileNetV2).
/// Kept only for operations whose every input but input 0 is a constant (weights, bias, the
/// activation and the other scalars): the scales and zero points are fixed by the operand
/// types, so nothing it reads can change.
#[derive(Debug, Default)]
pub(crate) struct QuantCache {
    pub(crate) epilogue: std::sync::OnceLock<QEpilogue>,
    pub(crate) depthwise_filter: std::sync::OnceLock<conv::DepthwiseFilter>,
}
pub(crate) use qgemm::Epilogue as QEpilogue;

/// Whether operation `op` of `graph` may keep what it derives from its constants
/// ([`QuantCache`]).
pub(crate) fn quant_cacheable(graph: &Graph, op: &Operation) -> bool {
    use crate::model::OperationType as O;
    matches!(op.op, O::FullyConnected | O::Conv2d | O::DepthwiseConv2d)
        && op.inputs.iter().skip(1).all(|&i| {
            graph.operands.get(i as usize).is_some_and(|o| {
                matches!(
                    o.lifetime,
                    Lifetime::ConstantCopy { .. }
                        | Lifetime::ConstantReference { .. }
                        | Lifetime::NoValue
                )
            })
        })
}

/// What an 8-bit operation derives from its constants and may keep ([`QuantCache`]), for the
/// tests that count how often each is made.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Derived {
    Epilogue,
    DepthwiseFilter,
}

#[cfg(test)]
thread_local! {
    static MADE: std::cell::Cell<[u64; 2]> = const { std::cell::Cell::new([0; 2]) };
}

/// Counts one `what` made on this thread (tests).
pub(crate) fn count_made(what: Derived) {
    #[cfg(test)]
    MADE.with(|c| {
        let mut made = c.get();
        made[what as usize] += 1;
        c.set(made);
    });
    #[cfg(not(test))]
    let _ = what;
}

/// How many of `what` this thread has made.
#[cfg(test)]
pub(crate) fn made_on_this_thread(what: Derived) -> u64 {
    MADE.with(std::cell::Cell::get)[what as usize]
}

pub(crate) type KResult<T> = Result<T, ExecError>;

impl<'a> OpCtx<'a> {
    /// An InvalidArgument error naming this operation.
    pub(crate) fn err(&self, msg: impl std::fmt::Display) -> ExecError {
        ExecError::InvalidArgument(format!(
            "operation {} ({}): {msg}",
            self.index,
            self.op.op.name()
        ))
    }

    pub(crate) fn n_inputs(&self) -> usize {
        self.op.inputs.len()
    }

    /// Operand index of the operation's `what` ("input", "output") number `i`, listed in
    /// `indexes`.
    fn index_of(&self, indexes: &[u32], what: &str, i: usize) -> KResult<usize> {
        let idx = indexes
            .get(i)
            .ok_or_else(|| self.err(format!("missing {what} {i}")))?;
        Ok(*idx as usize)
    }

    /// Declaration of the operation's `what` number `i`, listed in `indexes`.
    fn declared(&self, indexes: &[u32], what: &str, i: usize) -> KResult<&'a Operand> {
        let idx = self.index_of(indexes, what, i)?;
        self.graph
            .operands
            .get(idx)
            .ok_or_else(|| self.err(format!("{what} {i} out of range")))
    }

    /// Declaration of input `i`.
    pub(crate) fn operand(&self, i: usize) -> KResult<&'a Operand> {
        self.declared(&self.op.inputs, "input", i)
    }

    /// Declaration of output `k`.
    pub(crate) fn out(&self, k: usize) -> KResult<&'a Operand> {
        self.declared(&self.op.outputs, "output", k)
    }

    /// Whether optional input `i` is present and has a value.
    pub(crate) fn has(&self, i: usize) -> bool {
        match self.op.inputs.get(i) {
            Some(&idx) => {
                matches!(self.values.get(idx as usize), Some(Some(_)))
                    && self
                        .graph
                        .operands
                        .get(idx as usize)
                        .is_some_and(|o| o.lifetime != Lifetime::NoValue)
            }
            None => false,
        }
    }

    /// Value of input `i`.
    pub(crate) fn t(&self, i: usize) -> KResult<&'a Tensor> {
        let idx = self.index_of(&self.op.inputs, "input", i)?;
        match self.values.get(idx) {
            Some(Some(v)) => Ok(v.as_ref()),
            _ => Err(self.err(format!("input {i} (operand {idx}) has no value"))),
        }
    }

    pub(crate) fn f32s(&self, i: usize) -> KResult<(&'a [u32], &'a [f32])> {
        let t = self.t(i)?;
        match &t.data {
            Data::F32(v) => Ok((&t.dims, v)),
            _ => Err(self.err(format!("input {i} is not float32"))),
        }
    }

    pub(crate) fn i32s(&self, i: usize) -> KResult<(&'a [u32], &'a [i32])> {
        let t = self.t(i)?;
        match &t.data {
            Data::I32(v) => Ok((&t.dims, v)),
            _ => Err(self.err(format!("input {i} is not int32"))),
        }
    }

    pub(crate) fn scalar_i32(&self, i: usize) -> KResult<i32> {
        match &self.t(i)?.data {
            Data::I32(v) if v.len() == 1 => Ok(v[0]),
            _ => Err(self.err(format!("input {i} is not an INT32 scalar"))),
        }
    }

    pub(crate) fn scalar_f32(&self, i: usize) -> KResult<f32> {
        match &self.t(i)?.data {
            Data::F32(v) if v.len() == 1 => Ok(v[0]),
            _ => Err(self.err(format!("input {i} is not a FLOAT32 scalar"))),
        }
    }

    pub(crate) fn scalar_bool(&self, i: usize) -> KResult<bool> {
        match &self.t(i)?.data {
            Data::U8(v) if v.len() == 1 => Ok(v[0] != 0),
            _ => Err(self.err(format!("input {i} is not a BOOL scalar"))),
        }
    }

    /// Optional BOOL input `i`, `default` when absent.
    pub(crate) fn opt_bool(&self, i: usize, default: bool) -> KResult<bool> {
        if self.has(i) {
            self.scalar_bool(i)
        } else {
            Ok(default)
        }
    }

    /// Non-negative INT32 scalar as usize.
    pub(crate) fn scalar_usize(&self, i: usize, what: &str) -> KResult<usize> {
        let v = self.scalar_i32(i)?;
        usize::try_from(v).map_err(|_| self.err(format!("{what} must be >= 0, got {v}")))
    }

    /// Positive INT32 scalar as usize.
    pub(crate) fn scalar_pos(&self, i: usize, what: &str) -> KResult<usize> {
        let v = self.scalar_i32(i)?;
        if v <= 0 {
            return Err(self.err(format!("{what} must be > 0, got {v}")));
        }
        Ok(v as usize)
    }

    /// Type of input `i` (declared).
    pub(crate) fn ty(&self, i: usize) -> KResult<OperandType> {
        Ok(self.operand(i)?.ty)
    }

    pub(crate) fn act_f32(&self, i: usize) -> KResult<(f32, f32)> {
        let a = self.scalar_i32(i)?;
        quant::act_range_f32(a).map_err(|e| self.err(e))
    }

    /// Quantized activation range of output 0 for the activation at input `i`.
    pub(crate) fn act_q(&self, i: usize, qmin: i32, qmax: i32) -> KResult<(i32, i32)> {
        let a = self.scalar_i32(i)?;
        let o = self.out(0)?;
        quant::act_range_q(a, o.scale, o.zero_point, qmin, qmax).map_err(|e| self.err(e))
    }
}

/// Runs one operation, returning its outputs in order.
pub(crate) fn run(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    match registry::find(ctx.op.op) {
        Some(def) => (def.run)(ctx),
        None => Err(ExecError::Failed(format!(
            "operation {} ({}) has no CPU kernel",
            ctx.index,
            ctx.op.op.name()
        ))),
    }
}

/// Row-major strides of `dims`.
pub(crate) fn strides(dims: &[u32]) -> Vec<usize> {
    let mut s = vec![1usize; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1] as usize;
    }
    s
}

/// Splits `dims` around `axis` into (outer, axis extent, inner).
pub(crate) fn split_axis(dims: &[u32], axis: usize) -> (usize, usize, usize) {
    let outer: usize = dims[..axis].iter().map(|&d| d as usize).product();
    let inner: usize = dims[axis + 1..].iter().map(|&d| d as usize).product();
    (outer, dims[axis] as usize, inner)
}

/// Resolves a possibly negative axis against `rank`.
pub(crate) fn resolve_axis(ctx: &OpCtx<'_>, axis: i32, rank: usize) -> KResult<usize> {
    let r = rank as i64;
    let a = i64::from(axis);
    if a < -r || a >= r {
        return Err(ctx.err(format!("axis {axis} out of range for rank {rank}")));
    }
    Ok(if a < 0 { (a + r) as usize } else { a as usize })
}

/// Checked element count of `dims` for an output (InvalidArgument when too large).
pub(crate) fn count(ctx: &OpCtx<'_>, dims: &[u32]) -> KResult<usize> {
    crate::tensor::num_elements(dims).ok_or_else(|| ctx.err(format!("tensor {dims:?} too large")))
}

/// Converts a usize extent to u32 or fails.
pub(crate) fn to_u32(ctx: &OpCtx<'_>, v: usize) -> KResult<u32> {
    u32::try_from(v).map_err(|_| ctx.err(format!("extent {v} too large")))
}

/// The value of input `i` when it is a CONSTANT_COPY operand (for checks of constant
/// arguments), decoded.
pub(crate) fn const_data(c: &crate::check::Ck<'_>, i: usize) -> Option<Data> {
    let o = c.inp(i).ok()?;
    let Lifetime::ConstantCopy { offset, length } = o.lifetime else {
        return None;
    };
    let bytes =
        c.g.operand_values
            .get(offset..offset.checked_add(length)?)?;
    Some(Data::decode(o.ty, bytes))
}

/// NCHW → NHWC permutation of a 4-D tensor's elements.
pub(crate) fn nchw_to_nhwc<T: Copy>(v: &[T], d: &[u32]) -> (Vec<u32>, Vec<T>) {
    let (n, c, h, w) = (d[0] as usize, d[1] as usize, d[2] as usize, d[3] as usize);
    let mut out = Vec::with_capacity(v.len());
    for b in 0..n {
        for y in 0..h {
            for x in 0..w {
                for ch in 0..c {
                    out.push(v[((b * c + ch) * h + y) * w + x]);
                }
            }
        }
    }
    (vec![d[0], d[2], d[3], d[1]], out)
}

/// Steps the row-major multi-index `pos` over `dims` to the next element, moving each offset
/// `offs[j]` along its per-dimension strides `strides[j]` (a dimension that wraps takes back
/// its whole extent). Offset arithmetic saturates instead of overflowing.
#[inline]
pub(crate) fn advance<const N: usize>(
    pos: &mut [u32],
    dims: &[u32],
    strides: [&[usize]; N],
    offs: &mut [usize; N],
) {
    let mut k = pos.len();
    while k > 0 {
        k -= 1;
        pos[k] += 1;
        for (o, s) in offs.iter_mut().zip(&strides) {
            *o = o.saturating_add(s[k]);
        }
        if pos[k] < dims[k] {
            return;
        }
        for (o, s) in offs.iter_mut().zip(&strides) {
            *o = o.saturating_sub(s[k].saturating_mul(dims[k] as usize));
        }
        pos[k] = 0;
    }
}

/// NHWC → NCHW permutation of a 4-D tensor's elements.
pub(crate) fn nhwc_to_nchw<T: Copy>(v: &[T], d: &[u32]) -> (Vec<u32>, Vec<T>) {
    let (n, h, w, c) = (d[0] as usize, d[1] as usize, d[2] as usize, d[3] as usize);
    let mut out = Vec::with_capacity(v.len());
    for b in 0..n {
        for ch in 0..c {
            for y in 0..h {
                for x in 0..w {
                    out.push(v[((b * h + y) * w + x) * c + ch]);
                }
            }
        }
    }
    (vec![d[0], d[3], d[1], d[2]], out)
}

/// NHWC results back in the operation's layout: NCHW when its layout argument asked for it.
pub(crate) fn to_layout<T: Copy>(
    od: Vec<u32>,
    out: impl Into<Buf<T>>,
    nchw: bool,
) -> (Vec<u32>, Buf<T>) {
    let out = out.into();
    if nchw {
        let (d, v) = nhwc_to_nchw(&out, &od);
        (d, v.into())
    } else {
        (od, out)
    }
}

/// Checks that input `t` is 4-D and returns its dimensions in NHWC order, both as declared
/// extents and as `[batch, height, width, depth]`; an NCHW input's dimensions are reordered.
pub(crate) fn nhwc_input(
    ctx: &OpCtx<'_>,
    t: &Tensor,
    nchw: bool,
) -> KResult<(Vec<u32>, [usize; 4])> {
    check4(ctx, &t.dims, t.data.len(), "input")?;
    let d = if nchw {
        vec![t.dims[0], t.dims[2], t.dims[3], t.dims[1]]
    } else {
        t.dims.clone()
    };
    let nhwc = [0, 1, 2, 3].map(|i| d[i] as usize);
    Ok((d, nhwc))
}

/// Whether `ty` is one of the 8-bit asymmetric quantized types.
pub(crate) fn is_quant8(ty: OperandType) -> bool {
    matches!(
        ty,
        OperandType::TensorQuant8Asymm | OperandType::TensorQuant8AsymmSigned
    )
}

/// The value range of an 8-bit quantized type.
pub(crate) fn q8_range(ty: OperandType) -> (i32, i32) {
    if ty == OperandType::TensorQuant8AsymmSigned {
        (-128, 127)
    } else {
        (0, 255)
    }
}

/// Builds an 8-bit tensor of type `ty` from already clamped values.
pub(crate) fn q8_tensor(ty: OperandType, dims: Vec<u32>, v: Vec<i32>) -> Tensor {
    if ty == OperandType::TensorQuant8AsymmSigned {
        Tensor::new(dims, Data::I8(v.into_iter().map(|x| x as i8).collect()))
    } else {
        Tensor::new(dims, Data::U8(v.into_iter().map(|x| x as u8).collect()))
    }
}

/// Checks that `dims` is 4-D and its element count matches `len`.
pub(crate) fn check4(ctx: &OpCtx<'_>, dims: &[u32], len: usize, what: &str) -> KResult<()> {
    if dims.len() != 4 {
        return Err(ctx.err(format!("{what} must be 4-D, got {dims:?}")));
    }
    if count(ctx, dims)? != len {
        return Err(ctx.err(format!("{what} data does not match {dims:?}")));
    }
    Ok(())
}

#[cfg(test)]
#[path = "type_coverage_tests.rs"]
mod type_coverage_tests;

#[cfg(test)]
#[path = "family_tests.rs"]
mod family_tests;
