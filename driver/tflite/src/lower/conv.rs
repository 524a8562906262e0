//! Convolutions, pools and FULLY_CONNECTED: filter layouts, implicit padding, strides,
//! dilations, biases (a zero one when TFLite omits it) and fused activations.

use nnaccel_hal::{OperandType, OperationType};

use super::LowerError;
use super::build::{Builder, PADDING_SAME, PADDING_VALID, plain};
use crate::graph::{Options, Padding};

type Result<T> = std::result::Result<T, LowerError>;

fn padding_code(p: Padding) -> i32 {
    match p {
        Padding::Same => PADDING_SAME,
        Padding::Valid => PADDING_VALID,
    }
}

/// The bias operand: TFLite's (its scale set to input scale × filter scale for quantized
/// models, 0 with a per-channel filter, as NNAPI wants), or zeros of the right type when the
/// node has none.
fn bias(b: &mut Builder<'_>, k: usize, input: u32, filter: u32, channels: u32) -> Result<u32> {
    let in_ty = b.ty(input);
    let per_channel = b.ty(filter) == OperandType::TensorQuant8SymmPerChannel;
    let quant_scale = if per_channel {
        0.0
    } else {
        b.operands[input as usize].scale * b.operands[filter as usize].scale
    };
    match b.opt_input(k)? {
        Some(t) => {
            let o = b.value(t)?;
            if b.ty(o) == OperandType::TensorInt32 {
                if super::build::is_float(in_ty) {
                    return Err(b.err("an INT32 bias for a float convolution"));
                }
                if b.operands[o as usize].scale != quant_scale {
                    // NNAPI checks the bias scale exactly; give this node its own copy.
                    let mut operand = b.operands[o as usize].clone();
                    operand.scale = quant_scale;
                    let bytes = b.const_bytes(t)?;
                    return Ok(b.constant(operand, bytes));
                }
            }
            Ok(o)
        }
        None => {
            let dims = vec![channels];
            Ok(match in_ty {
                OperandType::TensorFloat32 => b.constant(
                    plain(OperandType::TensorFloat32, dims),
                    vec![0; 4 * channels as usize],
                ),
                OperandType::TensorFloat16 => b.constant(
                    plain(OperandType::TensorFloat16, dims),
                    vec![0; 2 * channels as usize],
                ),
                _ => {
                    let mut o = plain(OperandType::TensorInt32, dims);
                    o.scale = quant_scale;
                    b.constant(o, vec![0; 4 * channels as usize])
                }
            })
        }
    }
}

/// The filter or weights operand for input `x`: tensor `t`, or for a float input and
/// constant quantized weights (a hybrid, dynamic-range model) those weights dequantized to
/// float32 at import, as the float computation NNAPI's delegate makes of a hybrid node.
fn weights(b: &mut Builder<'_>, x: u32, t: usize) -> Result<u32> {
    let x_float = super::build::is_float(b.ty(x));
    let tensor = b.tensor(t)?;
    let quantized_const = !matches!(
        tensor.element_type,
        crate::graph::ElementType::Float32 | crate::graph::ElementType::Float16
    ) && b.is_constant(t);
    if x_float && quantized_const {
        if b.ty(x) != OperandType::TensorFloat32 {
            return Err(b.err("a FLOAT16 input with quantized weights"));
        }
        let bytes = b.const_bytes(t)?;
        let floats = super::fold::dequantize(tensor, &bytes).map_err(|why| b.err(why))?;
        let dims = super::build::dims_of(tensor).map_err(|why| b.err(why))?;
        return Ok(b.constant(plain(OperandType::TensorFloat32, dims), floats));
    }
    let w = b.value(t)?;
    if x_float != super::build::is_float(b.ty(w)) {
        return Err(
            b.err("a float input with quantized weights computed at run time, or the reverse")
        );
    }
    Ok(w)
}

/// A dimension of a stored shape as u32 (negative ones are an error).
fn dim(b: &Builder<'_>, t: usize, k: usize) -> Result<u32> {
    let shape = b.shape(t)?;
    shape
        .get(k)
        .and_then(|&d| u32::try_from(d).ok())
        .ok_or_else(|| b.err(format!("tensor {t} has shape {shape:?}, no dimension {k}")))
}

fn rank(b: &Builder<'_>, t: usize, want: usize) -> Result<()> {
    let shape = b.shape(t)?;
    if shape.len() != want {
        return Err(b.err(format!(
            "tensor {t} has shape {shape:?}, expected rank {want}"
        )));
    }
    Ok(())
}

/// CONV_2D (filter OHWI, as NNAPI's) and DEPTHWISE_CONV_2D (filter [1, H, W, C×m], the
/// multiplier from the shapes).
pub(super) fn conv(b: &mut Builder<'_>, depthwise: bool) -> Result<()> {
    b.arity(2..=3, 1)?;
    let (padding, sw, sh, dw, dh, act) = match b.cur()?.options {
        Options::Conv2d {
            padding,
            stride_w,
            stride_h,
            dilation_w,
            dilation_h,
            activation,
        } if !depthwise => (
            padding, stride_w, stride_h, dilation_w, dilation_h, activation,
        ),
        Options::DepthwiseConv2d {
            padding,
            stride_w,
            stride_h,
            dilation_w,
            dilation_h,
            activation,
            ..
        } if depthwise => (
            padding, stride_w, stride_h, dilation_w, dilation_h, activation,
        ),
        ref other => return Err(b.err(format!("options {other:?}"))),
    };
    let (xt, ft, yt) = (b.input(0)?, b.input(1)?, b.output(0)?);
    rank(b, xt, 4)?;
    rank(b, ft, 4)?;
    let x = b.value(xt)?;
    let f = weights(b, x, ft)?;
    let channels = dim(b, ft, if depthwise { 3 } else { 0 })?;
    let multiplier = if depthwise {
        let in_c = dim(b, xt, 3)?;
        if in_c == 0 || channels % in_c != 0 {
            return Err(b.err(format!(
                "{channels} output channels are not a multiple of {in_c} input channels"
            )));
        }
        Some(channels / in_c)
    } else {
        None
    };
    let bias = bias(b, 2, x, f, channels)?;
    let y = b.define(yt)?;
    let fused = b.fuse(y, act)?;
    let mut args = vec![x, f, bias];
    for v in [padding_code(padding), sw, sh] {
        args.push(b.int(v));
    }
    if let Some(m) = multiplier {
        args.push(b.int(m as i32));
    }
    args.push(b.int(fused.code));
    if (dw, dh) != (1, 1) {
        args.push(b.boolean(false));
        args.push(b.int(dw));
        args.push(b.int(dh));
    }
    let ty = if depthwise {
        OperationType::DepthwiseConv2d
    } else {
        OperationType::Conv2d
    };
    b.op(ty, args, vec![fused.target]);
    b.finish_fused(&fused);
    Ok(())
}

/// TRANSPOSE_CONV: TFLite's inputs are (output shape, filter, input[, bias]); NNAPI's
/// TRANSPOSE_CONV_2D takes (input, filter, bias, output shape, padding, strides, activation,
/// layout).
pub(super) fn transpose_conv(b: &mut Builder<'_>) -> Result<()> {
    b.arity(3..=4, 1)?;
    let Options::TransposeConv {
        padding,
        stride_w,
        stride_h,
        activation,
    } = b.cur()?.options
    else {
        return Err(b.err("no TRANSPOSE_CONV options"));
    };
    let (st, ft, xt, yt) = (b.input(0)?, b.input(1)?, b.input(2)?, b.output(0)?);
    rank(b, ft, 4)?;
    let shape = b.const_ints(st)?;
    let x = b.value(xt)?;
    let f = b.value(ft)?;
    let channels = dim(b, ft, 0)?;
    let bias = bias(b, 3, x, f, channels)?;
    let shape = b.ints(&shape);
    let y = b.define(yt)?;
    let fused = b.fuse(y, activation)?;
    let mut args = vec![x, f, bias, shape];
    for v in [padding_code(padding), stride_w, stride_h, fused.code] {
        args.push(b.int(v));
    }
    args.push(b.boolean(false));
    b.op(OperationType::TransposeConv2d, args, vec![fused.target]);
    b.finish_fused(&fused);
    Ok(())
}

/// AVERAGE_POOL_2D, MAX_POOL_2D, L2_POOL_2D.
pub(super) fn pool(b: &mut Builder<'_>, ty: OperationType) -> Result<()> {
    b.arity(1..=1, 1)?;
    let Options::Pool2d {
        padding,
        stride_w,
        stride_h,
        filter_w,
        filter_h,
        activation,
    } = b.cur()?.options
    else {
        return Err(b.err("no pool options"));
    };
    let x = b.value(b.input(0)?)?;
    let y = b.define(b.output(0)?)?;
    let fused = b.fuse(y, activation)?;
    let mut args = vec![x];
    for v in [
        padding_code(padding),
        stride_w,
        stride_h,
        filter_w,
        filter_h,
        fused.code,
    ] {
        args.push(b.int(v));
    }
    b.op(ty, args, vec![fused.target]);
    b.finish_fused(&fused);
    Ok(())
}

/// FULLY_CONNECTED: NNAPI flattens the input to [batch, input size] and writes [batch,
/// units]; an output of another rank (keep_num_dims) gets a RESHAPE after.
pub(super) fn fully_connected(b: &mut Builder<'_>) -> Result<()> {
    b.arity(2..=3, 1)?;
    let Options::FullyConnected {
        activation,
        shuffled_weights,
        ..
    } = b.cur()?.options
    else {
        return Err(b.err("no FULLY_CONNECTED options"));
    };
    if shuffled_weights {
        return Err(b.err("shuffled (SHUFFLED4x16INT8) weights"));
    }
    let (xt, wt, yt) = (b.input(0)?, b.input(1)?, b.output(0)?);
    rank(b, wt, 2)?;
    let x = b.value(xt)?;
    let w = weights(b, x, wt)?;
    let units = dim(b, wt, 0)?;
    let bias = bias(b, 2, x, w, units)?;
    let y = b.define(yt)?;
    let out_dims = b.dims(y).to_vec();
    let direct = out_dims.len() == 2;
    let dest = if direct {
        y
    } else {
        // [product of the leading dimensions, units]; 0 when one of them is unknown.
        let batch = out_dims
            .iter()
            .take(out_dims.len().saturating_sub(1))
            .try_fold(
                1u32,
                |acc, &d| if d == 0 { None } else { acc.checked_mul(d) },
            )
            .unwrap_or(0);
        b.temp_like(y, vec![batch, units])
    };
    let fused = b.fuse(dest, activation)?;
    let code = b.int(fused.code);
    b.op(
        OperationType::FullyConnected,
        vec![x, w, bias, code],
        vec![fused.target],
    );
    b.finish_fused(&fused);
    if !direct {
        let shape = reshape_target(b, yt)?;
        let shape = b.ints(&shape);
        b.op(OperationType::Reshape, vec![dest, shape], vec![y]);
    }
    Ok(())
}

/// The shape to RESHAPE into for tensor `t`: its signature (one -1 at most) or stored shape.
pub(super) fn reshape_target(b: &Builder<'_>, t: usize) -> Result<Vec<i32>> {
    let tensor = b.tensor(t)?;
    let sig = &tensor.shape_signature;
    let shape = if sig.len() == tensor.shape.len() && sig.iter().filter(|&&d| d < 0).count() == 1 {
        sig.clone()
    } else {
        tensor.shape.clone()
    };
    Ok(if shape.is_empty() { vec![1] } else { shape })
}
