//! The graph interpreter: prepared graphs and their execution.

use std::borrow::Cow;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::control_flow::{
    self, CfCtx, DEFAULT_LOOP_TIMEOUT, MAX_LOOP_TIMEOUT, MAX_NESTING_DEPTH, SubgraphRunner,
};
use crate::error::{ExecError, GraphError, OutputShape};
use crate::model::{Graph, Lifetime, OperandType};
use crate::ops::{self, OpCtx};
use crate::packed::{self, Packed};
use crate::tensor::{self, Arena, Data, PLANNED_SLOT, Place, Tensor, kind_of, num_elements};
use crate::validate;

/// One execution input.
#[derive(Debug, Clone)]
pub enum InputArg<'a> {
    /// Raw little-endian bytes, exactly the size of the tensor.
    Value {
        /// The element bytes.
        data: &'a [u8],
        /// Fully specified dimensions, or empty to use the model's.
        dimensions: Vec<u32>,
    },
    /// The optional input is omitted.
    NoValue,
}

/// A validated graph ready to run many times, possibly from several threads at once.
#[derive(Debug)]
pub struct PreparedGraph {
    graph: Graph,
    /// The root graph's plan.
    main: Plan,
    /// One plan per referenced graph (IF and WHILE subgraphs), by index.
    referenced: Vec<Plan>,
    /// The activation buffers of finished executions, one arena per execution that ran at
    /// the same time as others (see [`Arena`]).
    arenas: Mutex<Vec<Arena>>,
}

/// What running one graph of the model needs beyond the graph itself, made once.
#[derive(Debug)]
struct Plan {
    /// Operation indexes in execution order.
    order: Vec<usize>,
    /// Decoded constants: every CONSTANT_COPY operand, and the CONSTANT_REFERENCE ones whose
    /// pool was given at preparation ([`PreparedGraph::with_pools`]).
    consts: Vec<Option<Tensor>>,
    /// For each operand, the position in `order` of its last reader (usize::MAX if none).
    last_use: Vec<usize>,
    /// For each operand, its constant value packed for the GEMM (`crate::packed`) when a
    /// FULLY_CONNECTED or CONV_2D reads it as weights: one copy per constant, shared by every
    /// operation reading it, made once instead of on every execution.
    packed: Vec<Option<Packed>>,
    /// For each operation, where its 8-bit epilogue and depthwise filter are kept when they may
    /// be (`ops::quant_cacheable`).
    kept: Vec<Option<ops::QuantCache>>,
    /// Where the large temporaries are computed.
    temps: Box<MemoryPlan>,
}

/// Offsets of a graph's large temporaries in one block of memory, made once when the graph is
/// prepared: a temporary's bytes may be those of one that died before it was computed. Why: a
/// buffer per size class (the [`Arena`]) hands a 4.8 MB activation the buffer it had an
/// inference ago, cold in memory, where a planned block hands it what its predecessors have
/// just left (MobileNetV2's 112×112×16→96 expansion: 740–773 µs inside the network against
/// 484–497 alone; docs/performance.md).
#[derive(Debug, Default)]
pub(crate) struct MemoryPlan {
    /// For each operand, its (offset, bytes) in the block, if planned.
    pub(crate) at: Vec<Option<(usize, usize)>>,
    /// The block's length.
    pub(crate) bytes: usize,
}

/// Temporaries smaller than this are left to the arena: planning them gains nothing, and a
/// graph of many small operations (100 000 ADDs of 4 floats) would make planning quadratic.
const PLANNED_FROM: usize = 16 * 1024;

/// At most this many temporaries are planned (the largest); the rest use the arena.
const PLANNED_AT_MOST: usize = 2048;

impl MemoryPlan {
    /// The plan of `graph` run in `order`, with `last_use` (as [`Plan::last_use`]): each
    /// temporary of known size of at least [`PLANNED_FROM`] bytes, computed by an operation of
    /// one output (the only ones offered a place) other than IF and WHILE, whose elements the
    /// executor keeps as they are stored, gets an offset; the largest first, each at the
    /// lowest offset (in cache lines) where it overlaps no planned temporary alive at the same
    /// time.
    fn new(graph: &Graph, order: &[usize], last_use: &[usize]) -> MemoryPlan {
        let mut wanted = Vec::new();
        for (pos, &opi) in order.iter().enumerate() {
            let op = &graph.operations[opi];
            let [out] = op.outputs[..] else { continue };
            if control_flow::is_control_flow(op.op) {
                continue;
            }
            let operand = &graph.operands[out as usize];
            if operand.lifetime != Lifetime::TemporaryVariable
                || !tensor::stored_as_kept(operand.ty)
                || operand.dimensions.contains(&0)
            {
                continue;
            }
            let Some(bytes) = num_elements(&operand.dimensions)
                .and_then(|n| n.checked_mul(operand.ty.element_size()))
                .and_then(|b| b.checked_next_multiple_of(crate::CACHE_LINE))
            else {
                continue;
            };
            if bytes >= PLANNED_FROM {
                // Alive from the operation computing it to its last reader (to the end when
                // nothing reads it).
                let last = last_use[out as usize].min(order.len());
                wanted.push((out as usize, bytes, pos, last));
            }
        }
        wanted.sort_by_key(|&(out, bytes, ..)| (std::cmp::Reverse(bytes), out));
        wanted.truncate(PLANNED_AT_MOST);
        let mut at = vec![None; graph.operands.len()];
        let mut placed: Vec<(usize, usize, usize, usize)> = Vec::with_capacity(wanted.len());
        let mut end = 0;
        for &(out, bytes, first, last) in &wanted {
            let mut busy: Vec<(usize, usize)> = placed
                .iter()
                .filter(|&&(_, _, f, l)| f <= last && first <= l)
                .map(|&(off, b, ..)| (off, off + b))
                .collect();
            busy.sort_unstable();
            let mut off = 0;
            for (lo, hi) in busy {
                if off + bytes <= lo {
                    break;
                }
                off = off.max(hi);
            }
            placed.push((off, bytes, first, last));
            at[out] = Some((off, bytes));
            end = end.max(off + bytes);
        }
        MemoryPlan { at, bytes: end }
    }
}

impl Plan {
    /// The plan of `graph` (of the model `root`): every operation supported, constants decoded,
    /// weights packed (those in constant pools read from `pools`).
    fn new(
        root: &Graph,
        graph: &Graph,
        order: Vec<usize>,
        pools: &[&[u8]],
    ) -> Result<Self, GraphError> {
        for i in 0..graph.operations.len() {
            if let Err(validate::Issue::Invalid(reason) | validate::Issue::Unsupported(reason)) =
                validate::check_operation_in(root, graph, i)
            {
                return Err(GraphError::Unsupported {
                    index: i,
                    op: validate::operation_label(graph, i),
                    reason,
                });
            }
        }
        let mut consts = vec![None; graph.operands.len()];
        for (i, operand) in graph.operands.iter().enumerate() {
            consts[i] = match operand.lifetime {
                Lifetime::ConstantCopy { offset, length } => {
                    // validate_graph checked the range and the length.
                    let bytes = offset
                        .checked_add(length)
                        .and_then(|end| graph.operand_values.get(offset..end))
                        .ok_or_else(|| GraphError::InvalidOperand {
                            index: i,
                            reason: "CONSTANT_COPY location outside operand_values".into(),
                        })?;
                    Some(Tensor::new(
                        operand.dimensions.clone(),
                        Data::decode(operand.ty, bytes),
                    ))
                }
                // Decoded once here rather than copied out of the pool by every execution (an
                // execution still checks that it passes the pool and the range).
                Lifetime::ConstantReference { .. } => packed::pool_value(operand, pools),
                _ => None,
            };
        }
        let mut last_use = vec![usize::MAX; graph.operands.len()];
        for (pos, &opi) in order.iter().enumerate() {
            for &inp in &graph.operations[opi].inputs {
                last_use[inp as usize] = pos;
            }
        }
        let packed = packed::pack_graph(graph, &consts);
        let kept = graph
            .operations
            .iter()
            .map(|op| ops::quant_cacheable(graph, op).then(ops::QuantCache::default))
            .collect();
        let temps = Box::new(MemoryPlan::new(graph, &order, &last_use));
        Ok(Plan {
            order,
            consts,
            last_use,
            packed,
            kept,
            temps,
        })
    }
}

impl PreparedGraph {
    /// Validates `graph` and its referenced graphs, checks that every operation is supported,
    /// decodes constants and packs the constant GEMM weights among them (CONSTANT_COPY; see
    /// [`PreparedGraph::with_pools`] for those in constant pools).
    pub fn new(graph: Graph) -> Result<Self, GraphError> {
        Self::with_pools(graph, &[])
    }

    /// As [`PreparedGraph::new`], and packs the GEMM weights read from constant pools
    /// (CONSTANT_REFERENCE) too, from `pools`: they are packed once here instead of on every
    /// execution. `pools` must be the bytes every execution passes (NNAPI forbids changing a
    /// model's constants while it is prepared; the HAL passes its snapshot of them). A weight
    /// whose pool or range `pools` does not hold is left unpacked.
    pub fn with_pools(graph: Graph, pools: &[&[u8]]) -> Result<Self, GraphError> {
        // Packed weights and decoded constants on cache lines (cache_aligned.rs).
        let _aligned = crate::cache_aligned::aligning();
        let orders = validate::validate_model(&graph)?;
        let main = Plan::new(&graph, &graph, orders.root, pools)?;
        let referenced = graph
            .referenced
            .iter()
            .zip(orders.referenced)
            .enumerate()
            .map(|(k, (sub, order))| {
                Plan::new(&graph, sub, order, pools).map_err(|e| GraphError::InReferenced {
                    graph: k,
                    error: Box::new(e),
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(PreparedGraph {
            graph,
            main,
            referenced,
            arenas: Mutex::new(Vec::new()),
        })
    }

    /// Bytes held by packed constant weights, over the root graph and its referenced graphs.
    #[cfg(test)]
    pub(crate) fn packed_weight_bytes(&self) -> usize {
        std::iter::once(&self.main)
            .chain(&self.referenced)
            .flat_map(|p| p.packed.iter().flatten())
            .map(Packed::bytes)
            .sum()
    }

    /// The root graph's memory plan.
    #[cfg(test)]
    pub(crate) fn memory_plan(&self) -> &MemoryPlan {
        &self.main.temps
    }

    /// The graph this was prepared from.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Runs the graph with the default loop timeout ([`DEFAULT_LOOP_TIMEOUT`], 2 s). See the
    /// crate documentation for the contract.
    pub fn execute(
        &self,
        pools: &[&[u8]],
        inputs: &[InputArg<'_>],
        outputs: &mut [&mut [u8]],
    ) -> Result<Vec<OutputShape>, ExecError> {
        self.execute_with_loop_timeout(pools, inputs, outputs, DEFAULT_LOOP_TIMEOUT)
    }

    /// Runs the graph; a WHILE loop that runs longer than `loop_timeout` (cut to
    /// [`MAX_LOOP_TIMEOUT`], 15 s) fails the execution with [`ExecError::LoopTimeout`]
    /// (NNAPI's `loopTimeoutDuration`).
    pub fn execute_with_loop_timeout(
        &self,
        pools: &[&[u8]],
        inputs: &[InputArg<'_>],
        outputs: &mut [&mut [u8]],
        loop_timeout: Duration,
    ) -> Result<Vec<OutputShape>, ExecError> {
        // Activations on cache lines (cache_aligned.rs).
        let _aligned = crate::cache_aligned::aligning();
        // The activation buffers an earlier execution left (or none yet), on this thread
        // while the graph runs.
        let arenas = || self.arenas.lock().unwrap_or_else(PoisonError::into_inner);
        let mut arena = arenas().pop().unwrap_or_default();
        // The memory plan's block goes with the arena, but outside it while the graph runs:
        // only the planned places reach it then.
        let mut block = std::mem::take(&mut arena.block);
        let guard = tensor::install(arena);
        let r = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let timeout = loop_timeout.min(MAX_LOOP_TIMEOUT);
            self.execute_inner(pools, inputs, outputs, timeout, &mut block)
        })) {
            Ok(r) => r,
            Err(_) => Err(ExecError::Failed("internal error in a kernel".into())),
        };
        if let Some(mut arena) = guard.finish() {
            arena.block = block;
            arenas().push(arena);
        }
        r
    }

    fn execute_inner(
        &self,
        pools: &[&[u8]],
        inputs: &[InputArg<'_>],
        outputs: &mut [&mut [u8]],
        loop_timeout: Duration,
        block: &mut Vec<u8>,
    ) -> Result<Vec<OutputShape>, ExecError> {
        let g = &self.graph;
        if inputs.len() != g.input_indexes.len() {
            return Err(ExecError::InvalidArgument(format!(
                "{} inputs given, the graph has {}",
                inputs.len(),
                g.input_indexes.len()
            )));
        }
        if outputs.len() != g.output_indexes.len() {
            return Err(ExecError::InvalidArgument(format!(
                "{} outputs given, the graph has {}",
                outputs.len(),
                g.output_indexes.len()
            )));
        }
        let mut given: Vec<Option<Tensor>> = Vec::with_capacity(inputs.len());
        for (k, (arg, &idx)) in inputs.iter().zip(&g.input_indexes).enumerate() {
            let operand = &g.operands[idx as usize];
            given.push(match arg {
                InputArg::NoValue => None,
                InputArg::Value { data, dimensions } => {
                    let dims = resolve_input_dims(k, &operand.dimensions, dimensions, operand.ty)?;
                    let n = num_elements(&dims).ok_or_else(|| {
                        ExecError::InvalidArgument(format!("input {k}: tensor too large"))
                    })?;
                    let need = n * operand.ty.element_size();
                    if data.len() != need {
                        return Err(ExecError::InvalidArgument(format!(
                            "input {k}: {} bytes given, {need} needed for {} {:?}",
                            data.len(),
                            operand.ty.name(),
                            dims
                        )));
                    }
                    // SAFETY: `given` and every tensor made from it (the graph's values) are
                    // dropped before this function returns, inside the borrow of `inputs`.
                    Some(Tensor::new(dims, unsafe { Data::lend(operand.ty, data) }))
                }
            });
        }
        // Each output's bytes, offered to the operation that computes it (`Run::offer`).
        let out_lens: Vec<usize> = outputs.iter().map(|o| o.len()).collect();
        let places: Vec<Option<Place>> = outputs
            .iter_mut()
            .zip(&g.output_indexes)
            .enumerate()
            .map(|(k, (out, &oi))| {
                let unique = g.output_indexes.iter().filter(|&&o| o == oi).count() == 1;
                let ty = g.operands[oi as usize].ty;
                // SAFETY: once a tensor is made from this place (the operation computing
                // output k took it), `outputs[k]` is not used again: the encoding below skips
                // a tensor written in place, only such a tensor holds these bytes (its slot
                // is checked there), and every tensor is dropped before this function returns.
                // An output whose place no operation took is encoded as before.
                unique.then(|| unsafe { Place::new(out, ty, k) }).flatten()
            })
            .collect();
        // The block of the memory plan: an earlier execution's, else a new one.
        if block.len() != self.main.temps.bytes {
            *block = vec![0u8; self.main.temps.bytes];
        }
        let planned = Planned {
            plan: &self.main.temps,
            base: block.as_mut_ptr(),
        };
        let run = Run {
            prepared: self,
            pools,
            loop_timeout,
            depth: 0,
            places: &places,
            planned: Some(planned),
        };
        let given_refs: Vec<Option<&Tensor>> = given.iter().map(Option::as_ref).collect();
        let results = run.graph(g, &self.main, &given_refs)?;
        for t in given.into_iter().flatten() {
            tensor::recycle(t.data);
        }

        let mut shapes = Vec::with_capacity(outputs.len());
        let mut all_ok = true;
        for (k, (t, &oi)) in results.iter().zip(&g.output_indexes).enumerate() {
            let ty = g.operands[oi as usize].ty;
            let ok = out_lens
                .get(k)
                .is_some_and(|&len| len >= t.data.len() * ty.element_size());
            all_ok &= ok;
            shapes.push(OutputShape {
                dimensions: t.dims.clone(),
                is_sufficient: ok,
            });
        }
        if !all_ok {
            return Err(ExecError::OutputInsufficientSize(shapes));
        }
        for (k, (t, &oi)) in results.iter().zip(&g.output_indexes).enumerate() {
            match t.data.output_slot() {
                // Computed where the caller reads it: `outputs[k]` is not touched while its
                // tensor lives.
                Some(slot) if slot == k => {}
                Some(slot) => {
                    return Err(ExecError::Failed(format!(
                        "output {k} was computed in the bytes of output {slot}"
                    )));
                }
                None => {
                    let ty = g.operands[oi as usize].ty;
                    let out = outputs
                        .get_mut(k)
                        .ok_or_else(|| ExecError::Failed(format!("output {k} has no buffer")))?;
                    #[cfg(test)]
                    tensor::note_io_copy(t.data.len() * ty.element_size());
                    t.data.encode(ty, &mut out[..]);
                }
            }
        }
        for t in results {
            tensor::recycle(t.data);
        }
        Ok(shapes)
    }
}

/// One execution at one nesting level: how the graphs of the model run.
#[derive(Clone, Copy)]
struct Run<'p> {
    prepared: &'p PreparedGraph,
    pools: &'p [&'p [u8]],
    loop_timeout: Duration,
    /// How many IF/WHILE operations enclose this level.
    depth: usize,
    /// The bytes of the execution's outputs that operations may compute in place, by output
    /// (the root graph's; none inside IF and WHILE).
    places: &'p [Option<Place>],
    /// The root graph's memory plan and its block (none inside IF and WHILE).
    planned: Option<Planned<'p>>,
}

/// A memory plan ([`MemoryPlan`]) and the block of this execution it places temporaries in.
#[derive(Clone, Copy)]
struct Planned<'p> {
    plan: &'p MemoryPlan,
    /// The block's first byte; the block is `plan.bytes` long, and read or written only
    /// through the places made from this pointer while the graph runs.
    base: *mut u8,
}

impl Planned<'_> {
    /// Temporary `operand`'s place in the block, if planned.
    fn place(&self, operand: usize, ty: OperandType) -> Option<Place> {
        let (off, bytes) = (*self.plan.at.get(operand)?)?;
        // The plan keeps off + bytes within its `bytes`, the block's length.
        let ptr = std::ptr::NonNull::new(self.base.wrapping_add(off))?;
        // SAFETY: the bytes lie inside the block, which is neither read nor written but
        // through the places until the root graph's run returns, and every tensor made from a
        // place is dropped inside that run (a temporary is never a result of the graph); no
        // two temporaries alive at the same time share bytes (the plan), and a temporary's
        // place is made and offered only to the one operation computing it, once. Made from
        // the base pointer, not from a reference to the whole block, it leaves the places
        // made before it valid.
        unsafe { Place::from_raw(ptr, bytes, ty, PLANNED_SLOT) }
    }
}

impl Run<'_> {
    /// Runs `g` with `plan` on `inputs` (one per graph input, already checked against the
    /// request or the enclosing operation); returns its outputs in order.
    fn graph(
        &self,
        g: &Graph,
        plan: &Plan,
        inputs: &[Option<&Tensor>],
    ) -> Result<Vec<Tensor>, ExecError> {
        let pools = self.pools;
        let mut values: Vec<Option<Cow<'_, Tensor>>> = Vec::with_capacity(g.operands.len());
        for (i, operand) in g.operands.iter().enumerate() {
            let v = match &operand.lifetime {
                Lifetime::ConstantCopy { .. } => plan.consts[i].as_ref().map(Cow::Borrowed),
                Lifetime::ConstantReference {
                    pool,
                    offset,
                    length,
                } => {
                    let p = pools.get(*pool as usize).ok_or_else(|| {
                        ExecError::InvalidArgument(format!(
                            "operand {i}: pool {pool} not given ({} pools)",
                            pools.len()
                        ))
                    })?;
                    let bytes = offset
                        .checked_add(*length)
                        .and_then(|end| p.get(*offset..end))
                        .ok_or_else(|| {
                            ExecError::InvalidArgument(format!(
                                "operand {i}: constant reference outside pool {pool}"
                            ))
                        })?;
                    // Decoded at preparation from the same bytes (`with_pools`), else here.
                    Some(match plan.consts[i].as_ref() {
                        Some(t) => Cow::Borrowed(t),
                        None => Cow::Owned(Tensor::new(
                            operand.dimensions.clone(),
                            Data::decode(operand.ty, bytes),
                        )),
                    })
                }
                _ => None,
            };
            values.push(v);
        }
        for (k, (&idx, t)) in g.input_indexes.iter().zip(inputs).enumerate() {
            values[idx as usize] = t.map(Cow::Borrowed);
            if let Some(t) = t {
                check_value(&g.operands[idx as usize], t)
                    .map_err(|e| ExecError::InvalidArgument(format!("input {k}: {e}")))?;
            }
        }

        for (pos, &opi) in plan.order.iter().enumerate() {
            let op = &g.operations[opi];
            let produced = if control_flow::is_control_flow(op.op) {
                let ctx = CfCtx {
                    graph: g,
                    op,
                    index: opi,
                    values: &values,
                    loop_timeout: self.loop_timeout,
                };
                control_flow::run(&ctx, self)?
            } else {
                let packed = ops::gemm_weights_operand(g, op)
                    .and_then(|w| plan.packed.get(w))
                    .and_then(Option::as_ref);
                let ctx = OpCtx {
                    graph: g,
                    op,
                    index: opi,
                    values: &values,
                    weights_t: packed.and_then(Packed::f32),
                    weights_h: packed.and_then(Packed::f16),
                    qweights: packed.and_then(Packed::q8),
                    kept: plan.kept.get(opi).and_then(Option::as_ref),
                };
                let _offer = self.offer(g, op);
                ops::run(&ctx)?
            };
            #[cfg(test)]
            if let Some(first) = op.inputs.first().and_then(|&i| g.operands.get(i as usize)) {
                crate::coverage::record(op.op, first.ty);
            }
            if produced.len() != op.outputs.len() {
                return Err(ExecError::Failed(format!(
                    "operation {opi} ({}) produced {} outputs, expected {}",
                    op.op.name(),
                    produced.len(),
                    op.outputs.len()
                )));
            }
            for (t, &oi) in produced.into_iter().zip(&op.outputs) {
                let operand = &g.operands[oi as usize];
                if t.data.kind() != kind_of(operand.ty) {
                    return Err(ExecError::Failed(format!(
                        "operation {opi} ({}): output {oi} computed with the wrong element type for {}",
                        op.op.name(),
                        operand.ty.name()
                    )));
                }
                if !dims_compatible(&operand.dimensions, &t.dims) {
                    return Err(ExecError::InvalidArgument(format!(
                        "operation {opi} ({}): output {oi} has shape {:?}, declared {:?}",
                        op.op.name(),
                        t.dims,
                        operand.dimensions
                    )));
                }
                values[oi as usize] = Some(Cow::Owned(t));
            }
            for &inp in &op.inputs {
                let inp = inp as usize;
                if plan.last_use[inp] == pos
                    && g.operands[inp].lifetime == Lifetime::TemporaryVariable
                {
                    // Its storage serves a later operation's output.
                    if let Some(Cow::Owned(t)) = values[inp].take() {
                        tensor::recycle(t.data);
                    }
                }
            }
        }

        let outputs = g
            .output_indexes
            .iter()
            .enumerate()
            .map(|(k, &oi)| {
                values[oi as usize]
                    .take()
                    .map(Cow::into_owned)
                    .ok_or_else(|| {
                        ExecError::Failed(format!("output {k} (operand {oi}) was not computed"))
                    })
            })
            .collect();
        // Values never read (and constants read from pools) end here too.
        for v in values.into_iter().flatten() {
            if let Cow::Owned(t) = v {
                tensor::recycle(t.data);
            }
        }
        outputs
    }
}

impl Run<'_> {
    /// Offers the bytes of the execution output `op` computes, if it computes one whose
    /// bytes can take it (`tensor::offer`): an operation of one output, in the root graph.
    fn offer(&self, g: &Graph, op: &crate::model::Operation) -> Option<tensor::Offer> {
        let [out] = op.outputs[..] else {
            return None;
        };
        let ty = g.operands.get(out as usize)?.ty;
        if let Some(place) = self.planned.and_then(|p| p.place(out as usize, ty)) {
            return Some(tensor::offer(place));
        }
        let slot = g.output_indexes.iter().position(|&o| o == out)?;
        let place = (*self.places.get(slot)?)?;
        Some(tensor::offer(place))
    }
}

impl SubgraphRunner for Run<'_> {
    fn run_subgraph(
        &self,
        index: usize,
        inputs: &[Option<&Tensor>],
    ) -> Result<Vec<Tensor>, ExecError> {
        if self.depth >= MAX_NESTING_DEPTH {
            return Err(ExecError::Failed(format!(
                "IF/WHILE nested deeper than {MAX_NESTING_DEPTH}"
            )));
        }
        let (Some(g), Some(plan)) = (
            self.prepared.graph.referenced.get(index),
            self.prepared.referenced.get(index),
        ) else {
            return Err(ExecError::Failed(format!(
                "referenced graph {index} does not exist"
            )));
        };
        if inputs.len() != g.input_indexes.len() {
            return Err(ExecError::Failed(format!(
                "referenced graph {index}: {} inputs given, it has {}",
                inputs.len(),
                g.input_indexes.len()
            )));
        }
        let inner = Run {
            depth: self.depth + 1,
            places: &[],
            planned: None,
            ..*self
        };
        inner
            .graph(g, plan, inputs)
            .map_err(|e| in_referenced(index, e))
    }
}

/// Whether value `t` may be operand `o`'s: its element kind, and its shape against the
/// declared dimensions.
fn check_value(o: &crate::model::Operand, t: &Tensor) -> Result<(), String> {
    if t.data.kind() != kind_of(o.ty) {
        return Err(format!(
            "value of the wrong element type for {}",
            o.ty.name()
        ));
    }
    if !o.ty.is_scalar() && !dims_compatible(&o.dimensions, &t.dims) {
        return Err(format!("shape {:?}, declared {:?}", t.dims, o.dimensions));
    }
    Ok(())
}

/// `e`, raised inside referenced graph `index`, with the graph named.
fn in_referenced(index: usize, e: ExecError) -> ExecError {
    let name = |m: String| format!("referenced graph {index}: {m}");
    match e {
        ExecError::InvalidArgument(m) => ExecError::InvalidArgument(name(m)),
        ExecError::Failed(m) => ExecError::Failed(name(m)),
        ExecError::LoopTimeout(m) => ExecError::LoopTimeout(name(m)),
        other => other,
    }
}

/// Whether `actual` fits `declared` (empty = unknown rank; 0 = unknown extent).
fn dims_compatible(declared: &[u32], actual: &[u32]) -> bool {
    if declared.is_empty() {
        return true;
    }
    declared.len() == actual.len() && declared.iter().zip(actual).all(|(&d, &a)| d == 0 || d == a)
}

fn resolve_input_dims(
    k: usize,
    model: &[u32],
    given: &[u32],
    ty: OperandType,
) -> Result<Vec<u32>, ExecError> {
    if ty.is_scalar() {
        if !given.is_empty() {
            return Err(ExecError::InvalidArgument(format!(
                "input {k}: dimensions given for a scalar"
            )));
        }
        return Ok(Vec::new());
    }
    let dims = if given.is_empty() {
        model.to_vec()
    } else {
        if !model.is_empty() && model.len() != given.len() {
            return Err(ExecError::InvalidArgument(format!(
                "input {k}: rank {} given, the model has rank {}",
                given.len(),
                model.len()
            )));
        }
        for (i, (&m, &g)) in model.iter().zip(given).enumerate() {
            if m != 0 && m != g {
                return Err(ExecError::InvalidArgument(format!(
                    "input {k}: extent {i} is {g}, the model says {m}"
                )));
            }
        }
        given.to_vec()
    };
    if dims.is_empty() || dims.contains(&0) {
        return Err(ExecError::InvalidArgument(format!(
            "input {k}: dimensions not fully specified ({dims:?})"
        )));
    }
    Ok(dims)
}

#[cfg(test)]
mod tests {
    use crate::model::{OperandType as T, OperationType as O};
    use crate::test_support::{B, bf, fb};
    use crate::{InputArg, PreparedGraph};

    /// `data` as an input of the model's dimensions.
    fn arg(data: &[u8]) -> InputArg<'_> {
        InputArg::Value {
            data,
            dimensions: vec![],
        }
    }

    /// `out = ((x + y) + x) · y + (x + y)` on `[n]` floats, through three temporaries.
    fn chain(n: u32) -> PreparedGraph {
        let mut b = B::new();
        let x = b.input(T::TensorFloat32, &[n]);
        let y = b.input(T::TensorFloat32, &[n]);
        let act = b.int(0);
        let t1 = b.temp(T::TensorFloat32, &[n]);
        let t2 = b.temp(T::TensorFloat32, &[n]);
        let t3 = b.temp(T::TensorFloat32, &[n]);
        let o = b.output(T::TensorFloat32, &[n]);
        b.op(O::Add, &[x, y, act], &[t1]);
        b.op(O::Add, &[t1, x, act], &[t2]);
        b.op(O::Mul, &[t2, y, act], &[t3]);
        b.op(O::Add, &[t3, t1, act], &[o]);
        PreparedGraph::new(b.g).unwrap()
    }

    fn chain_want(x: &[f32], y: &[f32]) -> Vec<f32> {
        x.iter()
            .zip(y)
            .map(|(&x, &y)| ((x + y) + x) * y + (x + y))
            .collect()
    }

    fn run_chain(p: &PreparedGraph, x: &[f32], y: &[f32]) -> Vec<f32> {
        let (xb, yb) = (fb(x), fb(y));
        let mut out = vec![0u8; x.len() * 4];
        p.execute(&[], &[arg(&xb), arg(&yb)], &mut [&mut out[..]])
            .unwrap();
        bf(&out)
    }

    fn held(p: &PreparedGraph) -> Vec<usize> {
        p.arenas.lock().unwrap().iter().map(|a| a.held()).collect()
    }

    #[test]
    fn executions_reuse_activation_buffers_without_growing_or_leaking_values() {
        let n = 3000;
        let p = chain(n as u32);
        let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 700.0).collect();
        let y: Vec<f32> = (0..n).map(|i| (i % 17) as f32 - 8.0).collect();
        assert_eq!(run_chain(&p, &x, &y), chain_want(&x, &y));
        // One arena, holding buffers of the temporaries, inputs and output.
        let first = held(&p);
        assert_eq!(first.len(), 1);
        assert!(first[0] >= 2 * n, "{first:?}");
        // Other inputs: stale values in the reused buffers must not show.
        for k in 0..3 {
            let x2: Vec<f32> = x.iter().map(|v| v * -0.25 + k as f32).collect();
            let y2: Vec<f32> = y.iter().rev().copied().collect();
            assert_eq!(run_chain(&p, &x2, &y2), chain_want(&x2, &y2));
            assert_eq!(
                held(&p),
                first,
                "execution {k}: the arena stays the same size"
            );
        }
    }

    #[test]
    fn concurrent_executions_of_one_graph_each_get_their_own_buffers() {
        let n = 2000;
        let p = chain(n as u32);
        std::thread::scope(|s| {
            for t in 0..4 {
                let p = &p;
                s.spawn(move || {
                    for k in 0..25 {
                        let x: Vec<f32> =
                            (0..n).map(|i| (i * (t + 1) + k) as f32 * 0.125).collect();
                        let y: Vec<f32> = (0..n).map(|i| ((i + t) % 11) as f32 - 5.0).collect();
                        assert_eq!(
                            run_chain(p, &x, &y),
                            chain_want(&x, &y),
                            "thread {t}, run {k}"
                        );
                    }
                });
            }
        });
        // At most one arena per execution that ran at once.
        let arenas = held(&p).len();
        assert!((1..=4).contains(&arenas), "{arenas}");
    }
}
