//! Elementwise kernels: broadcast arithmetic, activations, (de)quantization, softmax, L2 norm.

use super::broadcast::broadcast;
use super::quant::{act_range_q, mbqm, q8_values, quantize_multiplier, quantize_val};
use super::{KResult, OpCtx, count, q8_range, q8_tensor, resolve_axis, split_axis};
use crate::model::{OperandType, OperationType};
use crate::tensor::{Data, Tensor};

fn floor_div(ctx: &OpCtx<'_>, a: i32, b: i32) -> KResult<i32> {
    if b == 0 {
        return Err(ctx.err("integer division by zero"));
    }
    let q = a.wrapping_div(b);
    if a.wrapping_rem(b) != 0 && ((a < 0) != (b < 0)) {
        Ok(q.wrapping_sub(1))
    } else {
        Ok(q)
    }
}

/// ADD, SUB, MUL, DIV.
pub(crate) fn binary(ctx: &OpCtx<'_>) -> KResult<Tensor> {
    let op = ctx.op.op;
    let ty = ctx.ty(0)?;
    match ty {
        OperandType::TensorFloat32 | OperandType::TensorFloat16 => {
            let (ad, a) = ctx.f32s(0)?;
            let (bd, b) = ctx.f32s(1)?;
            let (lo, hi) = ctx.act_f32(2)?;
            let f: fn(f32, f32) -> f32 = match op {
                OperationType::Add => |x, y| x + y,
                OperationType::Sub => |x, y| x - y,
                OperationType::Mul => |x, y| x * y,
                _ => |x, y| x / y,
            };
            let (od, v) = broadcast(ctx, (ad, a), (bd, b), |x, y| f(x, y).max(lo).min(hi))?;
            Ok(Tensor::new(od, Data::F32(v)))
        }
        OperandType::TensorInt32 => {
            let (ad, a) = ctx.i32s(0)?;
            let (bd, b) = ctx.i32s(1)?;
            if ctx.scalar_i32(2)? != 0 {
                return Err(ctx.err("fused activation must be NONE for TENSOR_INT32"));
            }
            let mut div_err = None;
            let (od, v) = broadcast(ctx, (ad, a), (bd, b), |x: i32, y: i32| match op {
                OperationType::Add => x.wrapping_add(y),
                OperationType::Sub => x.wrapping_sub(y),
                OperationType::Mul => x.wrapping_mul(y),
                _ => match floor_div(ctx, x, y) {
                    Ok(q) => q,
                    Err(e) => {
                        div_err = Some(e);
                        0
                    }
                },
            })?;
            if let Some(e) = div_err {
                return Err(e);
            }
            Ok(Tensor::new(od, Data::I32(v)))
        }
        OperandType::TensorQuant8Asymm | OperandType::TensorQuant8AsymmSigned => {
            binary_quant8(ctx, ty)
        }
        _ => Err(ctx.err(format!("unsupported type {}", ty.name()))),
    }
}

fn binary_quant8(ctx: &OpCtx<'_>, ty: OperandType) -> KResult<Tensor> {
    let (ad, a) = q8_values(ctx, 0)?;
    let (bd, b) = q8_values(ctx, 1)?;
    let (o1, o2, out) = (ctx.operand(0)?, ctx.operand(1)?, ctx.out(0)?);
    let (qmin, qmax) = q8_range(ty);
    let (lo, hi) = ctx.act_q(2, qmin, qmax)?;
    let off1 = -o1.zero_point;
    let off2 = -o2.zero_point;
    let out_off = out.zero_point;
    match ctx.op.op {
        OperationType::Add | OperationType::Sub => {
            let left_shift = 20;
            let twice_max = 2.0 * f64::from(o1.scale.max(o2.scale));
            let (m1, s1) = quantize_multiplier(f64::from(o1.scale) / twice_max);
            let (mut m2, s2) = quantize_multiplier(f64::from(o2.scale) / twice_max);
            let (mo, so) = quantize_multiplier(
                twice_max / (f64::from(1 << left_shift) * f64::from(out.scale)),
            );
            if ctx.op.op == OperationType::Sub {
                m2 = -m2;
            }
            let (od, v) = broadcast(ctx, (&ad, &a), (&bd, &b), |x, y| {
                let x = (x + off1) * (1 << left_shift);
                let y = (y + off2) * (1 << left_shift);
                let sx = mbqm(x, m1, s1);
                let sy = mbqm(y, m2, s2);
                let raw = mbqm(sx.saturating_add(sy), mo, so).saturating_add(out_off);
                raw.clamp(lo, hi)
            })?;
            Ok(q8_tensor(ty, od, v))
        }
        OperationType::Mul => {
            let real = f64::from(o1.scale) * f64::from(o2.scale) / f64::from(out.scale);
            let (m, s) = quantize_multiplier(real);
            let (od, v) = broadcast(ctx, (&ad, &a), (&bd, &b), |x, y| {
                let p = (x + off1) * (y + off2);
                mbqm(p, m, s).saturating_add(out_off).clamp(lo, hi)
            })?;
            Ok(q8_tensor(ty, od, v))
        }
        _ => {
            // DIV on quantized tensors: through float.
            let (od, v) = broadcast(ctx, (&ad, &a), (&bd, &b), |x, y| {
                let fx = (x - o1.zero_point) as f32 * o1.scale;
                let fy = (y - o2.zero_point) as f32 * o2.scale;
                quantize_val(fx / fy, out.scale, out.zero_point, lo, hi)
            })?;
            Ok(q8_tensor(ty, od, v))
        }
    }
}

/// RELU, RELU1, RELU6, LOGISTIC, TANH, FLOOR.
pub(crate) fn unary(ctx: &OpCtx<'_>) -> KResult<Tensor> {
    use OperationType as O;
    let op = ctx.op.op;
    let ty = ctx.ty(0)?;
    match ty {
        OperandType::TensorFloat32 | OperandType::TensorFloat16 => {
            let (d, x) = ctx.f32s(0)?;
            let f: fn(f32) -> f32 = match op {
                O::Relu => |v| v.max(0.0),
                O::Relu1 => |v| v.clamp(-1.0, 1.0),
                O::Relu6 => |v| v.clamp(0.0, 6.0),
                O::Logistic => |v| 1.0 / (1.0 + (-v).exp()),
                O::Tanh => f32::tanh,
                O::Abs => f32::abs,
                O::Exp => f32::exp,
                O::Log => f32::ln,
                O::Neg => |v| -v,
                O::Rsqrt => |v| 1.0 / v.sqrt(),
                O::Sin => f32::sin,
                O::Sqrt => f32::sqrt,
                O::HardSwish => |v| v * (v + 3.0).clamp(0.0, 6.0) / 6.0,
                O::Floor => f32::floor,
                _ => return Err(ctx.err("no float kernel")),
            };
            Ok(Tensor::new(
                d.to_vec(),
                Data::F32(x.iter().map(|&v| f(v)).collect()),
            ))
        }
        // NNAPI lists TENSOR_INT32 for ABS (feature level 4) and NEG (level 3). The most
        // negative value has no positive counterpart: it wraps to itself, as two's
        // complement does (TFLite's std::abs leaves it undefined).
        OperandType::TensorInt32 => {
            let (d, x) = ctx.i32s(0)?;
            let f: fn(i32) -> i32 = match op {
                O::Abs => i32::wrapping_abs,
                O::Neg => i32::wrapping_neg,
                _ => return Err(ctx.err("no TENSOR_INT32 kernel")),
            };
            Ok(Tensor::new(
                d.to_vec(),
                Data::I32(x.iter().map(|&v| f(v)).collect()),
            ))
        }
        OperandType::TensorQuant8Asymm | OperandType::TensorQuant8AsymmSigned => {
            let (d, x) = q8_values(ctx, 0)?;
            let inp = ctx.operand(0)?;
            let out = ctx.out(0)?;
            let (qmin, qmax) = q8_range(ty);
            let deq = |v: i32| (v - inp.zero_point) as f32 * inp.scale;
            let v: Vec<i32> = match op {
                O::Relu | O::Relu1 | O::Relu6 => {
                    let act = match op {
                        O::Relu => 1,
                        O::Relu1 => 2,
                        _ => 3,
                    };
                    let (lo, hi) = act_range_q(act, inp.scale, inp.zero_point, qmin, qmax)
                        .map_err(|e| ctx.err(e))?;
                    let same = inp.scale == out.scale && inp.zero_point == out.zero_point;
                    x.iter()
                        .map(|&v| {
                            let c = v.clamp(lo, hi);
                            if same {
                                c
                            } else {
                                quantize_val(deq(c), out.scale, out.zero_point, qmin, qmax)
                            }
                        })
                        .collect()
                }
                O::Logistic => x
                    .iter()
                    .map(|&v| {
                        let s = 1.0 / (1.0 + (-deq(v)).exp());
                        quantize_val(s, out.scale, out.zero_point, qmin, qmax)
                    })
                    .collect(),
                O::Tanh => x
                    .iter()
                    .map(|&v| quantize_val(deq(v).tanh(), out.scale, out.zero_point, qmin, qmax))
                    .collect(),
                _ => return Err(ctx.err("unsupported type for FLOOR")),
            };
            Ok(q8_tensor(ty, d, v))
        }
        _ => Err(ctx.err(format!("unsupported type {}", ty.name()))),
    }
}

/// DEQUANTIZE to TENSOR_FLOAT32.
pub(crate) fn dequantize(ctx: &OpCtx<'_>) -> KResult<Tensor> {
    let inp = ctx.operand(0)?;
    let t = ctx.t(0)?;
    let (scale, zp) = (inp.scale, inp.zero_point);
    let v: Vec<f32> = match (&t.data, &inp.channel_quant) {
        (Data::I8(x), Some(cq)) => {
            let st = super::strides(&t.dims);
            let dim = cq.channel_dim as usize;
            let (s, n) = match (st.get(dim), t.dims.get(dim)) {
                (Some(&s), Some(&n)) => (s, n as usize),
                _ => return Err(ctx.err("channel dimension out of range")),
            };
            if cq.scales.len() != n {
                return Err(ctx.err("per-channel scale count mismatch"));
            }
            x.iter()
                .enumerate()
                .map(|(i, &q)| f32::from(q) * cq.scales[(i / s) % n])
                .collect()
        }
        (Data::U8(x), _) => x
            .iter()
            .map(|&q| (i32::from(q) - zp) as f32 * scale)
            .collect(),
        (Data::I8(x), None) => x
            .iter()
            .map(|&q| (i32::from(q) - zp) as f32 * scale)
            .collect(),
        (Data::I16(x), _) => x
            .iter()
            .map(|&q| (i32::from(q) - zp) as f32 * scale)
            .collect(),
        (Data::U16(x), _) if inp.ty == OperandType::TensorQuant16Asymm => x
            .iter()
            .map(|&q| (i32::from(q) - zp) as f32 * scale)
            .collect(),
        _ => return Err(ctx.err(format!("unsupported input type {}", inp.ty.name()))),
    };
    Ok(Tensor::new(t.dims.clone(), Data::F32(v)))
}

/// QUANTIZE from TENSOR_FLOAT32 to 8-bit asymmetric.
pub(crate) fn quantize(ctx: &OpCtx<'_>) -> KResult<Tensor> {
    let (d, x) = ctx.f32s(0)?;
    let out = ctx.out(0)?;
    let (qmin, qmax) = q8_range(out.ty);
    let v = x
        .iter()
        .map(|&f| quantize_val(f, out.scale, out.zero_point, qmin, qmax))
        .collect();
    Ok(q8_tensor(out.ty, d.to_vec(), v))
}

/// Input `i` as floats (8-bit values dequantized), checked against its dimensions.
pub(crate) fn float_view(ctx: &OpCtx<'_>, i: usize) -> KResult<(Vec<u32>, Vec<f32>)> {
    let op = ctx.operand(i)?;
    let t = ctx.t(i)?;
    let v = match &t.data {
        Data::F32(v) => v.clone(),
        Data::U8(v) => v
            .iter()
            .map(|&q| (i32::from(q) - op.zero_point) as f32 * op.scale)
            .collect(),
        Data::I8(v) => v
            .iter()
            .map(|&q| (i32::from(q) - op.zero_point) as f32 * op.scale)
            .collect(),
        _ => return Err(ctx.err("unsupported input type")),
    };
    if count(ctx, &t.dims)? != v.len() {
        return Err(ctx.err("operand data does not match its dimensions"));
    }
    Ok((t.dims.clone(), v))
}

/// `v` as output 0: floats, or quantized to the output's 8-bit type.
pub(crate) fn float_result(ctx: &OpCtx<'_>, dims: Vec<u32>, v: Vec<f32>) -> KResult<Tensor> {
    let out = ctx.out(0)?;
    match out.ty {
        OperandType::TensorFloat32 | OperandType::TensorFloat16 => {
            Ok(Tensor::new(dims, Data::F32(v)))
        }
        OperandType::TensorQuant8Asymm | OperandType::TensorQuant8AsymmSigned => {
            let (qmin, qmax) = q8_range(out.ty);
            let q = v
                .iter()
                .map(|&f| quantize_val(f, out.scale, out.zero_point, qmin, qmax))
                .collect();
            Ok(q8_tensor(out.ty, dims, q))
        }
        t => Err(ctx.err(format!("unsupported output type {}", t.name()))),
    }
}

/// [`split_axis`](super::split_axis) at the axis given by optional INT32 input `i` (default: the last one).
fn split_at_axis_arg(ctx: &OpCtx<'_>, dims: &[u32], i: usize) -> KResult<(usize, usize, usize)> {
    let axis = if ctx.has(i) { ctx.scalar_i32(i)? } else { -1 };
    if dims.is_empty() {
        return Err(ctx.err("input must have rank >= 1"));
    }
    let axis = resolve_axis(ctx, axis, dims.len())?;
    Ok(split_axis(dims, axis))
}

/// SOFTMAX(input, beta, [axis]).
pub(crate) fn softmax(ctx: &OpCtx<'_>) -> KResult<Tensor> {
    let (d, x) = float_view(ctx, 0)?;
    let beta = ctx.scalar_f32(1)?;
    let (outer, n, inner) = split_at_axis_arg(ctx, &d, 2)?;
    let mut out = vec![0f32; x.len()];
    for o in 0..outer {
        for i in 0..inner {
            let base = o * n * inner + i;
            let mut mx = f32::NEG_INFINITY;
            for k in 0..n {
                mx = mx.max(x[base + k * inner]);
            }
            let mut sum = 0f32;
            for k in 0..n {
                let e = ((x[base + k * inner] - mx) * beta).exp();
                out[base + k * inner] = e;
                sum += e;
            }
            for k in 0..n {
                out[base + k * inner] /= sum;
            }
        }
    }
    float_result(ctx, d, out)
}

/// L2_NORMALIZATION(input, [axis]).
pub(crate) fn l2_normalization(ctx: &OpCtx<'_>) -> KResult<Tensor> {
    let (d, x) = float_view(ctx, 0)?;
    let (outer, n, inner) = split_at_axis_arg(ctx, &d, 1)?;
    let mut out = vec![0f32; x.len()];
    for o in 0..outer {
        for i in 0..inner {
            let base = o * n * inner + i;
            let mut sum = 0f32;
            for k in 0..n {
                let v = x[base + k * inner];
                sum += v * v;
            }
            let norm = sum.sqrt().max(1e-6);
            for k in 0..n {
                out[base + k * inner] = x[base + k * inner] / norm;
            }
        }
    }
    float_result(ctx, d, out)
}

/// ELU(input, alpha).
pub(crate) fn elu(ctx: &OpCtx<'_>) -> KResult<Tensor> {
    let (d, x) = ctx.f32s(0)?;
    let alpha = ctx.scalar_f32(1)?;
    let v = x
        .iter()
        .map(|&v| if v < 0.0 { alpha * (v.exp() - 1.0) } else { v })
        .collect();
    Ok(Tensor::new(d.to_vec(), Data::F32(v)))
}
