//! Constant GEMM weights packed once at preparation into the kernels' layouts: one copy per
//! constant, shared by every operation that reads it, whether the constant is a value of the
//! model (CONSTANT_COPY) or in a constant pool (CONSTANT_REFERENCE, read from the pools given
//! to `PreparedGraph::with_pools`). Executions then never pack (`packings_on_this_thread`
//! counts the packings, for tests and benchmarks).

use crate::model::{Graph, Lifetime, Operand};
use crate::ops::{self, QWeights};
use crate::tensor::{Data, Tensor};

pub use crate::ops::packings_on_this_thread;

/// Constant GEMM weights in a kernel's layout.
#[derive(Debug)]
pub(crate) enum Packed {
    F32(Box<[f32]>),
    /// Float weights as halves, for the float16 GEMM of a relaxed model.
    F16(Box<[u16]>),
    Q8(QWeights),
}

impl Packed {
    /// Bytes held.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        match self {
            Packed::F32(w) => std::mem::size_of_val::<[f32]>(w),
            Packed::F16(w) => std::mem::size_of_val::<[u16]>(w),
            Packed::Q8(w) => w.bytes(),
        }
    }

    /// The packed float weights, if these are.
    pub(crate) fn f32(&self) -> Option<&[f32]> {
        match self {
            Packed::F32(w) => Some(w),
            Packed::F16(_) | Packed::Q8(_) => None,
        }
    }

    /// The packed float weights as halves, if these are.
    pub(crate) fn f16(&self) -> Option<&[u16]> {
        match self {
            Packed::F16(w) => Some(w),
            Packed::F32(_) | Packed::Q8(_) => None,
        }
    }

    /// The packed 8-bit weights, if these are.
    pub(crate) fn q8(&self) -> Option<&QWeights> {
        match self {
            Packed::Q8(w) => Some(w),
            Packed::F32(_) | Packed::F16(_) => None,
        }
    }
}

/// Packs constant weights of declaration `decl` and value `t` for the kernel that reads them
/// (float32, float16 when `half`, or 8-bit); None when no kernel takes them packed.
fn pack(decl: &Operand, t: &Tensor, half: bool) -> Option<Packed> {
    ops::count_packing();
    if half && let Some(v) = ops::pack_weights_f16(t) {
        return Some(Packed::F16(v.into_boxed_slice()));
    }
    match ops::pack_weights(t) {
        Some(v) => Some(Packed::F32(v.into_boxed_slice())),
        None => ops::pack_q8_weights(decl, t).map(Packed::Q8),
    }
}

/// The value of CONSTANT_REFERENCE operand `decl` read from `pools`; None for another lifetime
/// or a pool or range that `pools` does not hold (the execution reports those).
pub(crate) fn pool_value(decl: &Operand, pools: &[&[u8]]) -> Option<Tensor> {
    let Lifetime::ConstantReference {
        pool,
        offset,
        length,
    } = decl.lifetime
    else {
        return None;
    };
    let bytes = pools
        .get(pool as usize)
        .and_then(|p| p.get(offset..offset.checked_add(length)?))?;
    Some(Tensor::new(
        decl.dimensions.clone(),
        Data::decode(decl.ty, bytes),
    ))
}

/// The packed weights of one graph: each constant that some FULLY_CONNECTED or CONV_2D reads as
/// weights, packed (once, however many operations read it), from `consts`, the graph's decoded
/// constants (CONSTANT_COPY ones, and CONSTANT_REFERENCE ones read from the pools given at
/// preparation, those every execution will pass).
/// Float weights are packed as halves when the graph is relaxed and the CPU computes in float16
/// (`ops::half_kernel`).
pub(crate) fn pack_graph(graph: &Graph, consts: &[Option<Tensor>]) -> Vec<Option<Packed>> {
    let half = ops::half_kernel(graph.relax_float32_to_float16).is_some();
    let mut packed: Vec<Option<Packed>> = std::iter::repeat_with(|| None)
        .take(graph.operands.len())
        .collect();
    for op in &graph.operations {
        let Some(w) = ops::gemm_weights_operand(graph, op) else {
            continue;
        };
        let (Some(slot @ None), Some(decl)) = (packed.get_mut(w), graph.operands.get(w)) else {
            continue;
        };
        if let Some(Some(t)) = consts.get(w) {
            *slot = pack(decl, t, half);
        }
    }
    packed
}
