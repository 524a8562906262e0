//! Constant GEMM weights packed once at preparation into the kernels' layouts (one copy per
//! constant, shared by every operation that reads it), and their portable form,
//! [`PackedWeights`], which a compilation cache stores so that a cache hit skips packing.
//!
//! The portable form names, per packed operand, the kernel family ([`KIND_F32`], [`KIND_Q8`]),
//! the family's layout version (declared next to its packing: `ops::gemm` for float,
//! `ops::qgemm` for 8-bit), the shape facts the kernel needs (`n` output channels, `k`
//! reduction length) and the bytes. `PreparedGraph::with_packed` takes an entry only
//! when everything checks out against the graph and this build; anything else is packed afresh.

use crate::model::{Graph, Lifetime, Operand};
use crate::ops::{self, QWeights};
use crate::tensor::{Data, Kind, Tensor, kind_of};

/// Float weights (`TENSOR_FLOAT32`, and `TENSOR_FLOAT16` computed in f32): `[k][n]` f32
/// little-endian.
pub const KIND_F32: u32 = 1;
/// 8-bit weights (QUANT8_ASYMM, QUANT8_ASYMM_SIGNED, QUANT8_SYMM_PER_CHANNEL), centered and
/// in the quantized GEMM's panels: i16 little-endian.
pub const KIND_Q8: u32 = 2;

/// Constant GEMM weights in a kernel's layout.
#[derive(Debug)]
pub(crate) enum Packed {
    F32(Box<[f32]>),
    Q8(QWeights),
}

impl Packed {
    /// Bytes held.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        match self {
            Packed::F32(w) => std::mem::size_of_val::<[f32]>(w),
            Packed::Q8(w) => w.bytes(),
        }
    }

    /// The packed float weights, if these are.
    pub(crate) fn f32(&self) -> Option<&[f32]> {
        match self {
            Packed::F32(w) => Some(w),
            Packed::Q8(_) => None,
        }
    }

    /// The packed 8-bit weights, if these are.
    pub(crate) fn q8(&self) -> Option<&QWeights> {
        match self {
            Packed::Q8(w) => Some(w),
            Packed::F32(_) => None,
        }
    }
}

/// One packed weight operand in portable form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackedWeight {
    /// 0 for the root graph, `r + 1` for referenced graph `r`.
    pub subgraph: u32,
    /// The operand's index in that graph.
    pub operand: u32,
    /// [`KIND_F32`] or [`KIND_Q8`].
    pub kind: u32,
    /// The kind's layout version in the build that packed it.
    pub layout: u32,
    /// Output channels (the weights' first dimension).
    pub n: u64,
    /// Reduction length (the product of the other dimensions).
    pub k: u64,
    /// The packed values, little-endian.
    pub bytes: Vec<u8>,
}

/// The packed weights of a prepared graph, in portable form (see the module documentation).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PackedWeights {
    /// One entry per packed operand.
    pub entries: Vec<PackedWeight>,
}

pub use crate::ops::packings_on_this_thread;

/// Packs constant weights of declaration `decl` and value `t` for the kernel that reads them
/// (float or 8-bit); None when no kernel takes them packed.
fn pack(decl: &Operand, t: &Tensor) -> Option<Packed> {
    ops::count_packing();
    match ops::pack_weights(t) {
        Some(v) => Some(Packed::F32(v.into_boxed_slice())),
        None => ops::pack_q8_weights(decl, t).map(Packed::Q8),
    }
}

/// Whether some operation of `graph` reads operand `w` as its GEMM weights.
fn is_gemm_weights(graph: &Graph, w: usize) -> bool {
    graph
        .operations
        .iter()
        .any(|op| ops::gemm_weights_operand(graph, op) == Some(w))
}

/// The value of CONSTANT_REFERENCE operand `decl` read from `pools`; None for another lifetime
/// or a pool or range that `pools` does not hold (the execution reports those).
fn pool_value(decl: &Operand, pools: &[&[u8]]) -> Option<Tensor> {
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

/// The packed weights of one graph: `given[w]` where set (already checked by [`adopt`]), else
/// each constant that some FULLY_CONNECTED or CONV_2D reads as weights packed now (once, however
/// many operations read it). `consts` holds the decoded CONSTANT_COPY values; weights read from
/// constant pools (CONSTANT_REFERENCE) are read from `pools`, those every execution will pass.
pub(crate) fn pack_graph(
    graph: &Graph,
    consts: &[Option<Tensor>],
    pools: &[&[u8]],
    mut given: Vec<Option<Packed>>,
) -> Vec<Option<Packed>> {
    given.resize_with(graph.operands.len(), || None);
    for op in &graph.operations {
        let Some(w) = ops::gemm_weights_operand(graph, op) else {
            continue;
        };
        let (Some(slot @ None), Some(decl)) = (given.get_mut(w), graph.operands.get(w)) else {
            continue;
        };
        *slot = match consts.get(w) {
            Some(Some(t)) => pack(decl, t),
            _ => pool_value(decl, pools).and_then(|t| pack(decl, &t)),
        };
    }
    given
}

/// The kind and shape facts `(kind, n, k)` packing operand `decl` would give, from its
/// declaration alone: fully specified dimensions, `n` the first.
fn expected_shape(decl: &Operand) -> Option<(u32, usize, usize)> {
    let kind = match kind_of(decl.ty) {
        Kind::F32 => KIND_F32,
        Kind::U8 | Kind::I8 => KIND_Q8,
        _ => return None,
    };
    let (&n, rest) = decl.dimensions.split_first()?;
    let n = usize::try_from(n).ok().filter(|&n| n > 0)?;
    let k = rest.iter().try_fold(1usize, |acc, &d| {
        usize::try_from(d)
            .ok()
            .filter(|&d| d > 0)
            .and_then(|d| acc.checked_mul(d))
    })?;
    n.checked_mul(k)?;
    Some((kind, n, k))
}

/// Entry `e` as the kernel's packed form for operand `e.operand` of `graph`, or None unless
/// everything checks out: the operand exists, is a constant that some operation reads as GEMM
/// weights, the kind and layout version are this build's for its type, `n` and `k` are those
/// of its declaration, and the bytes have exactly the packed length (8-bit values within the
/// kernel's bound).
fn check_entry(graph: &Graph, e: &PackedWeight) -> Option<Packed> {
    let w = usize::try_from(e.operand).ok()?;
    let decl = graph.operands.get(w)?;
    if !matches!(
        decl.lifetime,
        Lifetime::ConstantCopy { .. } | Lifetime::ConstantReference { .. }
    ) || !is_gemm_weights(graph, w)
    {
        return None;
    }
    let (kind, n, k) = expected_shape(decl)?;
    if (e.kind, e.n, e.k) != (kind, n as u64, k as u64) {
        return None;
    }
    match kind {
        KIND_F32 if e.layout == ops::F32_LAYOUT_VERSION => {
            if Some(e.bytes.len()) != (n * k).checked_mul(4) {
                return None;
            }
            let v: Box<[f32]> = e
                .bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            Some(Packed::F32(v))
        }
        KIND_Q8 if e.layout == ops::Q8_LAYOUT_VERSION => {
            QWeights::from_le_bytes(n, k, &e.bytes).map(Packed::Q8)
        }
        _ => None,
    }
}

/// The entries of `weights` for graph `subgraph` (0 root, `r + 1` referenced `r`) that check
/// out against `graph` ([`check_entry`]), as the slots [`pack_graph`] starts from; the first
/// entry of an operand wins. Entries are taken out of `weights` (their bytes are not copied
/// twice).
pub(crate) fn adopt(
    graph: &Graph,
    subgraph: u32,
    weights: &mut PackedWeights,
) -> Vec<Option<Packed>> {
    let mut slots: Vec<Option<Packed>> = std::iter::repeat_with(|| None)
        .take(graph.operands.len())
        .collect();
    let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut weights.entries)
        .into_iter()
        .partition(|e| e.subgraph == subgraph);
    weights.entries = rest;
    for e in mine {
        if let Some(slot @ None) = usize::try_from(e.operand)
            .ok()
            .and_then(|w| slots.get_mut(w))
        {
            *slot = check_entry(graph, &e);
        }
    }
    slots
}

/// The portable entry of packed weights `p` (operand `operand` of graph `subgraph`).
pub(crate) fn export(subgraph: u32, operand: usize, p: &Packed, k: usize) -> Option<PackedWeight> {
    let (kind, layout, n, k, bytes) = match p {
        Packed::F32(v) => {
            let n = v.len().checked_div(k)?;
            (
                KIND_F32,
                ops::F32_LAYOUT_VERSION,
                n,
                k,
                v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            )
        }
        Packed::Q8(q) => (KIND_Q8, ops::Q8_LAYOUT_VERSION, q.n, q.k, q.to_le_bytes()),
    };
    Some(PackedWeight {
        subgraph,
        operand: u32::try_from(operand).ok()?,
        kind,
        layout,
        n: n as u64,
        k: k as u64,
        bytes,
    })
}

/// The portable packed weights of one graph: its packed slots, and the weights it reads from
/// constant pools (CONSTANT_REFERENCE, not packed at preparation) packed now from `pools`.
pub(crate) fn export_graph(
    graph: &Graph,
    subgraph: u32,
    packed: &[Option<Packed>],
    pools: &[&[u8]],
    out: &mut Vec<PackedWeight>,
) {
    for (w, decl) in graph.operands.iter().enumerate() {
        let Some((_, _, k)) = expected_shape(decl) else {
            continue;
        };
        let entry = match packed.get(w).and_then(Option::as_ref) {
            Some(p) => export(subgraph, w, p, k),
            None if is_gemm_weights(graph, w) => pool_value(decl, pools)
                .and_then(|t| pack(decl, &t))
                .and_then(|p| export(subgraph, w, &p, k)),
            None => continue,
        };
        out.extend(entry);
    }
}
