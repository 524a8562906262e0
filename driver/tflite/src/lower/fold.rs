//! Constants computed at import: DEQUANTIZE of a constant (float16 or quantized weights to
//! float32). DENSIFY of a sparse constant is [`crate::densify`]'s.

use crate::graph::{ElementType, Tensor};

/// The float32 bytes of constant `from` (its dense bytes `bytes`) dequantized: FLOAT16
/// widened; INT8, UINT8 and INT16 as `(q - zero_point) * scale`, per tensor or per channel
/// along the quantized dimension.
pub(super) fn dequantize(from: &Tensor, bytes: &[u8]) -> Result<Vec<u8>, String> {
    let values: Vec<f32> = match from.element_type {
        ElementType::Float16 => bytes
            .chunks_exact(2)
            .map(|c| nnaccel_cpu::f16_to_f32(u16::from_le_bytes([c[0], c[1]])))
            .collect(),
        ElementType::Int8 => affine(from, bytes.iter().map(|&b| i32::from(b as i8)))?,
        ElementType::UInt8 => affine(from, bytes.iter().map(|&b| i32::from(b)))?,
        ElementType::Int16 => affine(
            from,
            bytes
                .chunks_exact(2)
                .map(|c| i32::from(i16::from_le_bytes([c[0], c[1]]))),
        )?,
        other => {
            return Err(format!(
                "dequantizing a constant of type {} (FLOAT16, INT8, UINT8 and INT16 fold)",
                other.name()
            ));
        }
    };
    Ok(values.iter().flat_map(|v| v.to_le_bytes()).collect())
}

/// `(q - zero_point) * scale` for each element, the scale and zero point of its channel.
fn affine(from: &Tensor, q: impl ExactSizeIterator<Item = i32>) -> Result<Vec<f32>, String> {
    let quant = &from.quantization;
    if !quant.is_quantized() {
        return Err("dequantizing a constant that has no quantization".into());
    }
    if quant.zero_points.len() > 1 && quant.zero_points.len() != quant.scales.len() {
        return Err(format!(
            "{} zero points for {} scales",
            quant.zero_points.len(),
            quant.scales.len()
        ));
    }
    // Elements per step of the channel index: the product of the dimensions after the axis.
    let (channels, inner) = if quant.is_per_channel() {
        let axis = usize::try_from(quant.axis)
            .ok()
            .filter(|&a| a < from.shape.len())
            .ok_or_else(|| format!("quantized dimension {} outside the shape", quant.axis))?;
        let dim = |d: &i32| usize::try_from(*d).map_err(|_| format!("dimension {d}"));
        let channels = dim(&from.shape[axis])?;
        let mut inner = 1usize;
        for d in &from.shape[axis + 1..] {
            inner = inner.saturating_mul(dim(d)?);
        }
        if channels != quant.scales.len() {
            return Err(format!(
                "{} scales for {channels} channels",
                quant.scales.len()
            ));
        }
        (channels, inner.max(1))
    } else {
        (1, 1)
    };
    Ok(q.enumerate()
        .map(|(i, v)| {
            let c = (i / inner) % channels;
            let scale = quant.scales.get(c).copied().unwrap_or(0.0);
            let zp = quant
                .zero_points
                .get(c)
                .or(quant.zero_points.first())
                .copied()
                .unwrap_or(0);
            (i64::from(v).saturating_sub(zp) as f32) * scale
        })
        .collect())
}
