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

/// The most output channels a node may have when its bias is made here.
const MAX_CHANNELS: u32 = 1 << 24;

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
        Some(t) if b.tensor(t)?.element_type == crate::graph::ElementType::Int32 => {
            if super::build::is_float(in_ty) {
                return Err(b.err("an INT32 bias for a float convolution"));
            }
            // NNAPI checks the bias scale exactly: this node gets its own operand at the
            // scale it wants (TFLite stores the same product, rounded its own way).
            let mut operand = b.describe(t)?;
            operand.scale = quant_scale;
            if !b.is_constant(t) {
                return Err(b.err("a quantized bias computed at run time"));
            }
            let bytes = b.const_bytes(t)?;
            if super::build::byte_len(&operand) != Some(bytes.len()) {
                return Err(b.err(format!(
                    "bias tensor {t}: {} bytes for shape {:?}",
                    bytes.len(),
                    operand.dimensions
                )));
            }
            Ok(b.constant(operand, bytes))
        }
        Some(t) => b.value(t),
        None => {
            // The zero bias is allocated here: bound it by what a filter could hold.
            if channels > MAX_CHANNELS {
                return Err(b.err(format!("{channels} output channels")));
            }
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
    let f = b.weights(x, ft)?;
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
    b.op_fused(ty, args, &fused);
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
    b.op_fused(OperationType::TransposeConv2d, args, &fused);
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
    b.op_fused(ty, args, &fused);
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
    let w = b.weights(x, wt)?;
    let units = dim(b, wt, 0)?;
    let bias = bias(b, 2, x, w, units)?;
    emit_fully_connected(b, [x, w, bias], units, yt, activation)
}

/// A FULLY_CONNECTED of `x`, `w`, `bias` into output tensor `yt` ([batch, units] for NNAPI;
/// a RESHAPE after when `yt` has another rank).
fn emit_fully_connected(
    b: &mut Builder<'_>,
    [x, w, bias]: [u32; 3],
    units: u32,
    yt: usize,
    activation: crate::graph::Activation,
) -> Result<()> {
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
    b.op_fused(
        OperationType::FullyConnected,
        vec![x, w, bias, code],
        &fused,
    );
    if !direct {
        let shape = reshape_target(b, yt)?;
        let shape = b.ints(&shape);
        b.op(OperationType::Reshape, vec![dest, shape], vec![y]);
    }
    Ok(())
}

/// BATCH_MATMUL with a constant right-hand side (NNAPI has no batched matrix product; a
/// constant one is FULLY_CONNECTED's weights): the right-hand side transposed to [N, K] at
/// import (unless adj_y), the left flattened by FULLY_CONNECTED, a RESHAPE after.
pub(super) fn batch_matmul(b: &mut Builder<'_>) -> Result<()> {
    b.arity(2..=2, 1)?;
    let Options::BatchMatMul { adj_x, adj_y } = b.cur()?.options else {
        return Err(b.err("no BATCH_MATMUL options"));
    };
    if adj_x {
        return Err(b.err("adj_x (a transposed left-hand side)"));
    }
    let (xt, wt, yt) = (b.input(0)?, b.input(1)?, b.output(0)?);
    if !b.is_constant(wt) {
        return Err(b.err(
            "a right-hand side computed at run time (only a constant one maps, onto \
             FULLY_CONNECTED)",
        ));
    }
    let tensor = b.tensor(wt)?;
    let shape = &tensor.shape;
    let lead = shape.len().saturating_sub(2);
    if shape.len() < 2 || shape[..lead].iter().any(|&d| d != 1) {
        return Err(b.err(format!(
            "right-hand side of shape {shape:?} (only one matrix maps)"
        )));
    }
    let (r, c) = (dim(b, wt, lead)?, dim(b, wt, lead + 1)?);
    let (k, n) = if adj_y { (c, r) } else { (r, c) };
    let x = b.value(xt)?;
    let mut operand = b.describe(wt)?;
    if operand.extra_params.is_some() {
        return Err(b.err("a per-channel quantized right-hand side"));
    }
    let mut bytes = b.const_bytes(wt)?;
    if super::build::is_float(b.ty(x)) && !super::build::is_float(operand.operand_type) {
        bytes = super::fold::dequantize(tensor, &bytes).map_err(|why| b.err(why))?;
        operand = plain(OperandType::TensorFloat32, Vec::new());
    }
    let size = operand.operand_type.element_size();
    let want = (k as usize)
        .checked_mul(n as usize)
        .and_then(|e| e.checked_mul(size));
    if want != Some(bytes.len()) {
        return Err(b.err(format!("{} bytes for a {r}x{c} matrix", bytes.len())));
    }
    if !adj_y {
        // [K, N] → [N, K].
        let mut t = vec![0u8; bytes.len()];
        for i in 0..k as usize {
            for j in 0..n as usize {
                let from = (i * n as usize + j) * size;
                let to = (j * k as usize + i) * size;
                t[to..to + size].copy_from_slice(&bytes[from..from + size]);
            }
        }
        bytes = t;
    }
    operand.dimensions = vec![n, k];
    let w = b.constant(operand, bytes);
    let bias = bias(b, usize::MAX, x, w, n)?;
    emit_fully_connected(b, [x, w, bias], n, yt, crate::graph::Activation::None)
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
