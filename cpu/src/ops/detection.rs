//! Detection and regions of interest: ROI_ALIGN, ROI_POOLING, AXIS_ALIGNED_BBOX_TRANSFORM,
//! BOX_WITH_NMS_LIMIT, GENERATE_PROPOSALS, HEATMAP_MAX_KEYPOINT and DETECTION_POSTPROCESSING.
//!
//! Boxes are `[x1, y1, x2, y2]` in image coordinates. Quantized boxes (and image sizes) are
//! TENSOR_QUANT16_ASYMM with scale 0.125 and zero point 0, as NNAPI requires; the kernels work
//! on their real values and requantize at the end.

use super::opdef::OpDef;
use super::{KResult, OpCtx, const_data};
use crate::check::{Ck, Issue};
use crate::model::{OperandType, OperationType};
use crate::tensor::{Data, Tensor};

mod bbox;
mod keypoint;
mod postprocess;
mod proposals;
mod roi;

use OperandType as T;

pub(crate) static DEFS: &[OpDef] = &[
    OpDef {
        op: OperationType::RoiAlign,
        types: roi::TYPES,
        check: roi::check_align,
        run: roi::roi_align,
    },
    OpDef {
        op: OperationType::RoiPooling,
        types: roi::TYPES,
        check: roi::check_pooling,
        run: roi::roi_pooling,
    },
    OpDef {
        op: OperationType::AxisAlignedBboxTransform,
        types: bbox::TRANSFORM_TYPES,
        check: bbox::check_transform,
        run: bbox::transform,
    },
    OpDef {
        op: OperationType::BoxWithNmsLimit,
        types: bbox::NMS_TYPES,
        check: bbox::check_nms,
        run: bbox::box_with_nms_limit,
    },
    OpDef {
        op: OperationType::GenerateProposals,
        types: proposals::TYPES,
        check: proposals::check,
        run: proposals::generate_proposals,
    },
    OpDef {
        op: OperationType::HeatmapMaxKeypoint,
        types: keypoint::TYPES,
        check: keypoint::check,
        run: keypoint::heatmap_max_keypoint,
    },
    OpDef {
        op: OperationType::DetectionPostprocessing,
        types: postprocess::TYPES,
        check: postprocess::check,
        run: postprocess::detection_postprocessing,
    },
];

/// The scale NNAPI fixes for TENSOR_QUANT16_ASYMM boxes and image sizes.
const BOX_SCALE: f32 = 0.125;

/// Input `i`, a TENSOR_QUANT16_ASYMM box tensor, must have scale 0.125 and zero point 0.
fn check_box_quant(c: &Ck<'_>, i: usize, what: &str) -> Result<(), Issue> {
    let o = c.inp(i)?;
    if o.ty == T::TensorQuant16Asymm && (o.scale != BOX_SCALE || o.zero_point != 0) {
        return Err(Issue::Invalid(format!(
            "input {i} ({what}) of type TENSOR_QUANT16_ASYMM must have scale 0.125 and zero \
             point 0, has {} and {}",
            o.scale, o.zero_point
        )));
    }
    Ok(())
}

/// Output `k` must be of type `t`; a TENSOR_QUANT16_ASYMM box output must have scale 0.125
/// and zero point 0.
fn check_out(c: &Ck<'_>, k: usize, t: OperandType, what: &str) -> Result<(), Issue> {
    let o = c.out(k)?;
    if o.ty != t {
        return Err(Issue::Invalid(format!(
            "output {k} ({what}) must be {}, is {}",
            t.name(),
            o.ty.name()
        )));
    }
    if t == T::TensorQuant16Asymm && (o.scale != BOX_SCALE || o.zero_point != 0) {
        return Err(Issue::Invalid(format!(
            "output {k} ({what}) of type TENSOR_QUANT16_ASYMM must have scale 0.125 and zero \
             point 0"
        )));
    }
    Ok(())
}

/// Input `i`'s declared rank must be `rank` when its rank is known.
fn check_rank(c: &Ck<'_>, i: usize, rank: usize, what: &str) -> Result<(), Issue> {
    let d = &c.inp(i)?.dimensions;
    if !d.is_empty() && d.len() != rank {
        return Err(Issue::Invalid(format!(
            "input {i} ({what}) must have rank {rank}, has rank {}",
            d.len()
        )));
    }
    Ok(())
}

fn const_i32(c: &Ck<'_>, i: usize) -> Option<i32> {
    match const_data(c, i)? {
        Data::I32(v) if v.len() == 1 => Some(v[0]),
        _ => None,
    }
}

fn const_f32(c: &Ck<'_>, i: usize) -> Option<f32> {
    match const_data(c, i)? {
        Data::F32(v) if v.len() == 1 => Some(v[0]),
        _ => None,
    }
}

/// The type of input 0 when it is TENSOR_FLOAT32, TENSOR_FLOAT16 or 8-bit asymmetric
/// quantized; otherwise why it is refused, naming the input as `what`.
pub(super) fn float_or_q8(c: &Ck<'_>, what: &str) -> Result<OperandType, Issue> {
    let t = c.ty(0)?;
    match t {
        T::TensorFloat32 | T::TensorFloat16 => Ok(t),
        T::TensorQuant8Asymm | T::TensorQuant8AsymmSigned => Ok(t),
        other => Err(Issue::Invalid(format!(
            "{what} must be TENSOR_FLOAT32, TENSOR_FLOAT16, TENSOR_QUANT8_ASYMM or \
             TENSOR_QUANT8_ASYMM_SIGNED, is {}",
            other.name()
        ))),
    }
}

/// Whether `t` is one of the 8-bit asymmetric quantized types.
pub(super) fn is_q8(t: OperandType) -> bool {
    matches!(t, T::TensorQuant8Asymm | T::TensorQuant8AsymmSigned)
}

/// A constant INT32 argument `i` must be > 0 (or >= 0 when `zero_ok`).
fn check_const_pos(c: &Ck<'_>, i: usize, what: &str, zero_ok: bool) -> Result<(), Issue> {
    match const_i32(c, i) {
        Some(v) if v < 0 || (v == 0 && !zero_ok) => Err(Issue::Invalid(format!(
            "{what} must be {} 0, is {v}",
            if zero_ok { ">=" } else { ">" }
        ))),
        _ => Ok(()),
    }
}

/// A constant float argument `i` must be > 0.
fn check_const_fpos(c: &Ck<'_>, i: usize, what: &str) -> Result<(), Issue> {
    match const_f32(c, i) {
        Some(v) if v.is_nan() || v <= 0.0 => {
            Err(Issue::Invalid(format!("{what} must be > 0, is {v}")))
        }
        _ => Ok(()),
    }
}

/// Input `i` as real values: floats as they are, quantized values dequantized with the
/// operand's scale and zero point.
fn real_values(ctx: &OpCtx<'_>, i: usize) -> KResult<Vec<f32>> {
    let o = ctx.operand(i)?;
    let (s, z) = (o.scale, o.zero_point);
    let dq = |q: i32| (q - z) as f32 * s;
    Ok(match &ctx.t(i)?.data {
        Data::F32(v) => v.to_vec(),
        Data::U8(v) => v.iter().map(|&q| dq(i32::from(q))).collect(),
        Data::I8(v) => v.iter().map(|&q| dq(i32::from(q))).collect(),
        Data::U16(v) => v.iter().map(|&q| dq(i32::from(q))).collect(),
        Data::I16(v) => v.iter().map(|&q| dq(i32::from(q))).collect(),
        Data::I32(_) => return Err(ctx.err(format!("input {i} is not a float or quantized"))),
    })
}

/// Real values as TENSOR_QUANT16_ASYMM boxes (scale 0.125, zero point 0), rounded half away
/// from zero and saturated.
fn quant16_boxes(dims: Vec<u32>, v: &[f32]) -> Tensor {
    let q = v
        .iter()
        .map(|&x| super::quant::quantize_val(x, BOX_SCALE, 0, 0, 65535) as u16)
        .collect();
    Tensor::new(dims, Data::U16(q))
}

/// Dimensions of input `i`, which must have rank `rank`.
fn dims_of<'a>(ctx: &OpCtx<'a>, i: usize, rank: usize, what: &str) -> KResult<&'a [u32]> {
    let t = ctx.t(i)?;
    if t.dims.len() != rank {
        return Err(ctx.err(format!(
            "{what} must have rank {rank}, has shape {:?}",
            t.dims
        )));
    }
    Ok(&t.dims)
}

#[cfg(test)]
#[path = "detection_tests.rs"]
mod tests;
