//! Element-wise, activation, shape and data-movement operations that map one to one (or
//! nearly) onto NNAPI operations.

use nnaccel_hal::{OperandType, OperationType};

use super::LowerError;
use super::build::{Builder, is_float, plain};
use super::conv::reshape_target;
use crate::graph::{Activation, Options};

type Result<T> = std::result::Result<T, LowerError>;

/// Unary operation with the same input and output: `op(x) -> y`.
pub(super) fn unary(b: &mut Builder<'_>, ty: OperationType) -> Result<()> {
    let (x, y) = b.unary_io()?;
    b.op(ty, vec![x], vec![y]);
    Ok(())
}

/// RELU, RELU1, RELU6. NNAPI's quantized forms keep the input's scale and zero point, while
/// TFLite's may requantize: then the operation writes a temporary with the input's
/// quantization, and a requantization (DEQUANTIZE, QUANTIZE) makes the output's.
pub(super) fn relu_family(b: &mut Builder<'_>, ty: OperationType) -> Result<()> {
    let (x, y) = b.unary_io()?;
    if is_float(b.ty(x)) || b.same_quantization(x, y) {
        b.op(ty, vec![x], vec![y]);
        return Ok(());
    }
    let t = b.temp_same(x);
    b.op(ty, vec![x], vec![t]);
    b.requantize(t, y);
    Ok(())
}

/// Binary operation with a fused activation code: ADD, SUB, MUL, DIV.
pub(super) fn arithmetic(b: &mut Builder<'_>, ty: OperationType) -> Result<()> {
    b.arity(2..=2, 1)?;
    let act = match b.cur()?.options {
        Options::Activation(a) => a,
        Options::None => Activation::None,
        ref other => return Err(b.err(format!("options {other:?}"))),
    };
    let a = b.value(b.input(0)?)?;
    let c = b.value(b.input(1)?)?;
    let y = b.define(b.output(0)?)?;
    let fused = b.fuse(y, act)?;
    let code = b.int(fused.code);
    b.op_fused(ty, vec![a, c, code], &fused);
    Ok(())
}

/// Binary operation without an activation: MAXIMUM, comparisons, LOGICAL_*, POW, PRELU.
pub(super) fn binary(b: &mut Builder<'_>, ty: OperationType) -> Result<()> {
    b.arity(2..=2, 1)?;
    let a = b.value(b.input(0)?)?;
    let c = b.value(b.input(1)?)?;
    let y = b.define(b.output(0)?)?;
    b.op(ty, vec![a, c], vec![y]);
    Ok(())
}

/// SQUARED_DIFFERENCE: (a − b)², a SUB then a MUL of the difference with itself.
pub(super) fn squared_difference(b: &mut Builder<'_>) -> Result<()> {
    b.arity(2..=2, 1)?;
    let a = b.value(b.input(0)?)?;
    let c = b.value(b.input(1)?)?;
    let y = b.define(b.output(0)?)?;
    if !is_float(b.ty(y)) {
        return Err(b.err("a quantized SQUARED_DIFFERENCE (the difference has no quantization)"));
    }
    let d = b.temp_same(y);
    let none = b.int(0);
    b.op(OperationType::Sub, vec![a, c, none], vec![d]);
    b.op(OperationType::Mul, vec![d, d, none], vec![y]);
    Ok(())
}

/// CONCATENATION: the inputs, then the axis (made non-negative); an activation becomes its
/// own operation.
pub(super) fn concatenation(b: &mut Builder<'_>) -> Result<()> {
    let Options::Concatenation { axis, activation } = b.cur()?.options else {
        return Err(b.err("no CONCATENATION options"));
    };
    let n = b.cur()?.inputs.len();
    if n == 0 {
        return Err(b.err("no inputs"));
    }
    b.arity(n..=n, 1)?;
    let mut args = Vec::with_capacity(n + 1);
    for k in 0..n {
        args.push(b.value(b.input(k)?)?);
    }
    let yt = b.output(0)?;
    let rank = b.shape(yt)?.len().max(1) as i32;
    let axis = normalize_axis(b, axis, rank)?;
    let y = b.define(yt)?;
    let fused = b.separate(y, activation)?;
    args.push(b.int(axis));
    b.op_fused(OperationType::Concatenation, args, &fused);
    Ok(())
}

/// `axis` in `[0, rank)`, from TFLite's `[-rank, rank)`.
pub(super) fn normalize_axis(b: &Builder<'_>, axis: i32, rank: i32) -> Result<i32> {
    let a = if axis < 0 { axis + rank } else { axis };
    if (0..rank).contains(&a) {
        Ok(a)
    } else {
        Err(b.err(format!("axis {axis} outside rank {rank}")))
    }
}

/// RESHAPE: the new shape from the constant shape tensor, else the options, else the output.
pub(super) fn reshape(b: &mut Builder<'_>) -> Result<()> {
    b.arity(1..=2, 1)?;
    let xt = b.input(0)?;
    let yt = b.output(0)?;
    let shape = match b.opt_input(1)? {
        Some(st) if b.is_constant(st) => b.const_ints(st)?,
        _ => match &b.cur()?.options {
            Options::Reshape { new_shape } if !new_shape.is_empty() => new_shape.clone(),
            _ => reshape_target(b, yt)?,
        },
    };
    emit_reshape(b, xt, yt, shape)
}

/// A RESHAPE of tensor `xt` into tensor `yt` with the new shape `shape` (`[]`: `[1]`).
fn emit_reshape(b: &mut Builder<'_>, xt: usize, yt: usize, shape: Vec<i32>) -> Result<()> {
    let shape = if shape.is_empty() { vec![1] } else { shape };
    let x = b.value(xt)?;
    let y = b.define(yt)?;
    let s = b.ints(&shape);
    b.op(OperationType::Reshape, vec![x, s], vec![y]);
    Ok(())
}

/// EXPAND_DIMS, SQUEEZE: a RESHAPE to the shape computed from the input's (its signature,
/// -1 where unknown) with a 1 inserted at the axis or the squeezed dimensions removed; the
/// output's own shape when that has more than one unknown dimension.
pub(super) fn expand_or_squeeze(b: &mut Builder<'_>, expand: bool) -> Result<()> {
    b.arity(if expand { 2..=2 } else { 1..=1 }, 1)?;
    let xt = b.input(0)?;
    let yt = b.output(0)?;
    let input = reshape_source(b, xt)?;
    let rank = input.len() as i32;
    let mut shape = input.clone();
    if expand {
        let axis = match b.const_ints(b.input(1)?)?[..] {
            [a] => a,
            ref other => return Err(b.err(format!("axis {other:?} is not one value"))),
        };
        // EXPAND_DIMS's axis is in [-rank - 1, rank].
        let at = normalize_axis(b, axis, rank + 1)?;
        shape.insert(at as usize, 1);
    } else {
        let dims = match &b.cur()?.options {
            Options::Squeeze { squeeze_dims } => squeeze_dims.clone(),
            _ => Vec::new(),
        };
        let mut drop = vec![false; input.len()];
        if dims.is_empty() {
            for (d, &n) in drop.iter_mut().zip(&input) {
                *d = n == 1;
            }
        }
        for d in dims {
            let a = normalize_axis(b, d, rank)? as usize;
            if input[a] != 1 {
                return Err(b.err(format!("dimension {d} of {input:?} is not 1")));
            }
            drop[a] = true;
        }
        shape = input
            .iter()
            .zip(&drop)
            .filter(|(_, d)| !**d)
            .map(|(&n, _)| n)
            .collect();
    }
    if shape.iter().filter(|&&d| d < 0).count() > 1 {
        shape = reshape_target(b, yt)?;
    }
    emit_reshape(b, xt, yt, shape)
}

/// The shape of tensor `t` for computing another from: its signature (-1 where unknown) when
/// it has one of the same rank, else its stored shape.
fn reshape_source(b: &Builder<'_>, t: usize) -> Result<Vec<i32>> {
    let tensor = b.tensor(t)?;
    let sig = &tensor.shape_signature;
    Ok(if !sig.is_empty() && sig.len() == tensor.shape.len() {
        sig.clone()
    } else {
        tensor.shape.clone()
    })
}

/// SOFTMAX: input, beta (in the input's float precision).
pub(super) fn softmax(b: &mut Builder<'_>) -> Result<()> {
    b.arity(1..=1, 1)?;
    let beta = match b.cur()?.options {
        Options::Softmax { beta } => beta,
        _ => 1.0,
    };
    let x = b.value(b.input(0)?)?;
    let y = b.define(b.output(0)?)?;
    let beta = b.float_like(b.ty(x), beta);
    b.op(OperationType::Softmax, vec![x, beta], vec![y]);
    Ok(())
}

/// LOG_SOFTMAX: input, beta 1, axis -1.
pub(super) fn log_softmax(b: &mut Builder<'_>) -> Result<()> {
    let (x, y) = b.unary_io()?;
    let beta = b.float_like(b.ty(x), 1.0);
    let axis = b.int(-1);
    b.op(OperationType::LogSoftmax, vec![x, beta, axis], vec![y]);
    Ok(())
}

/// ELU: input, alpha 1. NNAPI's ELU is float only: a quantized ELU runs in float32 between a
/// DEQUANTIZE and a QUANTIZE (TFLite's own kernel is a table of the same float function).
pub(super) fn elu(b: &mut Builder<'_>) -> Result<()> {
    let (x, y) = b.unary_io()?;
    if is_float(b.ty(x)) {
        let alpha = b.float_like(b.ty(x), 1.0);
        b.op(OperationType::Elu, vec![x, alpha], vec![y]);
        return Ok(());
    }
    let dims = b.dims(x).to_vec();
    let fx = b.push_operand(plain(OperandType::TensorFloat32, dims.clone()));
    let fy = b.push_operand(plain(OperandType::TensorFloat32, dims));
    b.op(OperationType::Dequantize, vec![x], vec![fx]);
    let alpha = b.float_like(OperandType::TensorFloat32, 1.0);
    b.op(OperationType::Elu, vec![fx, alpha], vec![fy]);
    b.op(OperationType::Quantize, vec![fy], vec![y]);
    Ok(())
}

/// LEAKY_RELU: PRELU with a constant alpha of the input's type (quantized exactly: scale
/// |alpha|, the value ±1).
pub(super) fn leaky_relu(b: &mut Builder<'_>) -> Result<()> {
    b.arity(1..=1, 1)?;
    let Options::LeakyRelu { alpha } = b.cur()?.options else {
        return Err(b.err("no LEAKY_RELU options"));
    };
    let x = b.value(b.input(0)?)?;
    let y = b.define(b.output(0)?)?;
    let ty = b.ty(x);
    let mut o = plain(ty, vec![1]);
    let bytes = match ty {
        OperandType::TensorFloat32 => alpha.to_le_bytes().to_vec(),
        OperandType::TensorFloat16 => nnaccel_cpu::f32_to_f16(alpha).to_le_bytes().to_vec(),
        OperandType::TensorQuant8Asymm | OperandType::TensorQuant8AsymmSigned
            if alpha != 0.0 && alpha.is_finite() =>
        {
            o.scale = alpha.abs();
            let sign: i32 = if alpha < 0.0 { -1 } else { 1 };
            if ty == OperandType::TensorQuant8Asymm {
                o.zero_point = 128;
                vec![(128 + sign) as u8]
            } else {
                vec![sign as i8 as u8]
            }
        }
        OperandType::TensorQuant8Asymm | OperandType::TensorQuant8AsymmSigned => {
            // alpha 0 is RELU.
            b.op(OperationType::Relu, vec![x], vec![y]);
            return Ok(());
        }
        other => return Err(b.err(format!("LEAKY_RELU of {other:?}"))),
    };
    let a = b.constant(o, bytes);
    b.op(OperationType::Prelu, vec![x, a], vec![y]);
    Ok(())
}

/// QUANTIZE: float → quantized is NNAPI's QUANTIZE; quantized → quantized (requantizing)
/// is a DEQUANTIZE to float32 then a QUANTIZE.
pub(super) fn quantize(b: &mut Builder<'_>) -> Result<()> {
    let (x, y) = b.unary_io()?;
    if is_float(b.ty(x)) {
        b.op(OperationType::Quantize, vec![x], vec![y]);
    } else {
        b.requantize(x, y);
    }
    Ok(())
}

/// DEQUANTIZE of a tensor computed at run time (constants are folded): NNAPI's DEQUANTIZE,
/// or a CAST for FLOAT16 → FLOAT32.
pub(super) fn dequantize(b: &mut Builder<'_>) -> Result<()> {
    let (x, y) = b.unary_io()?;
    let ty = if b.ty(x) == OperandType::TensorFloat16 {
        OperationType::Cast
    } else {
        OperationType::Dequantize
    };
    b.op(ty, vec![x], vec![y]);
    Ok(())
}

/// RESIZE_BILINEAR, RESIZE_NEAREST_NEIGHBOR: input, width, height, layout, align corners,
/// half-pixel centres; the size tensor ([height, width]) must be constant.
pub(super) fn resize(b: &mut Builder<'_>, ty: OperationType) -> Result<()> {
    b.arity(2..=2, 1)?;
    let (align, half) = match b.cur()?.options {
        Options::Resize {
            align_corners,
            half_pixel_centers,
        } => (align_corners, half_pixel_centers),
        _ => (false, false),
    };
    let size = b.const_ints(b.input(1)?)?;
    let [h, w] = size[..] else {
        return Err(b.err(format!("size {size:?} is not [height, width]")));
    };
    let x = b.value(b.input(0)?)?;
    let y = b.define(b.output(0)?)?;
    let mut args = vec![x, b.int(w), b.int(h), b.boolean(false)];
    args.push(b.boolean(align));
    args.push(b.boolean(half));
    b.op(ty, args, vec![y]);
    Ok(())
}

/// PAD, PADV2: input, paddings ([rank, 2] INT32), and for PADV2 the pad value as a scalar
/// (FLOAT32/FLOAT16 for floats, the quantized INT32 value for quantized tensors).
pub(super) fn pad(b: &mut Builder<'_>, v2: bool) -> Result<()> {
    b.arity(2..=3, 1)?;
    let xt = b.input(0)?;
    let pt = b.input(1)?;
    let pads = b.const_ints(pt)?;
    let rank = b.shape(xt)?.len();
    if pads.len() != rank * 2 {
        return Err(b.err(format!("{} padding values for rank {rank}", pads.len())));
    }
    let x = b.value(xt)?;
    let y = b.define(b.output(0)?)?;
    let mut o = plain(OperandType::TensorInt32, vec![rank as u32, 2]);
    o.scale = 0.0;
    let bytes = pads.iter().flat_map(|v| v.to_le_bytes()).collect();
    let p = b.constant(o, bytes);
    match (v2, b.opt_input(2)?) {
        (true, Some(vt)) => {
            let bytes = b.const_bytes(vt)?;
            let ty = b.ty(x);
            let value = match ty {
                OperandType::TensorFloat32 if bytes.len() == 4 => b.float_like(
                    ty,
                    f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
                ),
                OperandType::TensorFloat16 if bytes.len() == 2 => b.float_like(
                    ty,
                    nnaccel_cpu::f16_to_f32(u16::from_le_bytes([bytes[0], bytes[1]])),
                ),
                OperandType::TensorQuant8Asymm if bytes.len() == 1 => b.int(i32::from(bytes[0])),
                OperandType::TensorQuant8AsymmSigned if bytes.len() == 1 => {
                    b.int(i32::from(bytes[0] as i8))
                }
                _ => {
                    return Err(b.err(format!("pad value of {} bytes for {ty:?}", bytes.len())));
                }
            };
            b.op(OperationType::PadV2, vec![x, p, value], vec![y]);
        }
        _ => b.op(OperationType::Pad, vec![x, p], vec![y]),
    }
    Ok(())
}

/// MEAN (keep_dims as INT32) and REDUCE_* (keep_dims as BOOL): input, axes, keep_dims.
pub(super) fn reduce(b: &mut Builder<'_>, ty: OperationType) -> Result<()> {
    b.arity(2..=2, 1)?;
    let keep = match b.cur()?.options {
        Options::Reducer { keep_dims } => keep_dims,
        _ => false,
    };
    let axes = b.const_ints(b.input(1)?)?;
    let x = b.value(b.input(0)?)?;
    let y = b.define(b.output(0)?)?;
    let axes = b.ints(&axes);
    let keep = if ty == OperationType::Mean {
        b.int(i32::from(keep))
    } else {
        b.boolean(keep)
    };
    b.op(ty, vec![x, axes, keep], vec![y]);
    Ok(())
}
