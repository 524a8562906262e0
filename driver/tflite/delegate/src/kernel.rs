//! The delegate object, its Prepare (which nodes to claim) and the delegate kernel of one
//! partition (init: lower and prepare through the HAL; prepare: lay the tensors out in a memfd
//! pool and build the request over it; invoke: copy the inputs in, execute, copy the outputs
//! back).

use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use nnaccel_hal::burst::{BurstConfig, ExecutionBurstController};
use nnaccel_hal::{
    DataLocation, ErrorStatus, ExecutionPreference, HalPreparedModel, MeasureTiming, MemoryPool,
    Model, Placement, Priority, Request, RequestArgument,
};
use nnaccel_protocol::pools::{self, MappedClientPool};
use nnaccel_tflite::graph::{Subgraph, builtin_name};
use nnaccel_tflite::lower::{self, TensorInfo};

use crate::abi::{
    self, K_TF_LITE_ERROR, K_TF_LITE_OK, TfLiteContext, TfLiteDelegate, TfLiteDelegateParams,
    TfLiteNode, TfLiteRegistration, TfLiteStatus,
};
use crate::backend::{self, Backend};
use crate::context::{Context, byte_count, int_array};
use crate::options::Options;
use crate::{guard, stats};

/// Pool offsets are multiples of this.
const ALIGN: u64 = 64;
/// The most nodes or tensors one partition may name.
const MAX_PARTITION: c_int = 1 << 20;

/// The delegate LiteRT holds: the `TfLiteDelegate` first (`repr(C)`), so the pointer handed
/// to the interpreter is the `Plugin`'s.
#[repr(C)]
#[derive(Debug)]
pub struct Plugin {
    delegate: TfLiteDelegate,
    state: State,
}

#[derive(Debug)]
struct State {
    options: Options,
    backend: Backend,
    partitions: AtomicUsize,
}

impl Plugin {
    /// A new delegate for `options`, its backend opened now (so an unreachable service fails
    /// `load_delegate`, not the interpreter's Prepare).
    pub fn create(options: Options) -> Result<*mut TfLiteDelegate, String> {
        let backend = backend::select(&options)?;
        Ok(Self::with_backend(options, backend))
    }

    /// A new delegate for `options` on `backend`.
    pub fn with_backend(options: Options, backend: Backend) -> *mut TfLiteDelegate {
        if options.log {
            eprintln!("nnaccel delegate: claimed nodes run on {}", backend.label);
        }
        let plugin = Box::new(Plugin {
            delegate: TfLiteDelegate {
                data_: std::ptr::null_mut(),
                Prepare: Some(delegate_prepare),
                CopyFromBufferHandle: std::ptr::null_mut(),
                CopyToBufferHandle: std::ptr::null_mut(),
                FreeBufferHandle: std::ptr::null_mut(),
                flags: 0,
                opaque_delegate_builder: std::ptr::null_mut(),
            },
            state: State {
                options,
                backend,
                partitions: AtomicUsize::new(0),
            },
        });
        stats::delegate_created();
        Box::into_raw(plugin).cast::<TfLiteDelegate>()
    }

    /// Frees a delegate [`Plugin::create`] made.
    ///
    /// # Safety
    /// `d` is null or from [`Plugin::create`], not yet destroyed, and unused from now on.
    pub unsafe fn destroy(d: *mut TfLiteDelegate) {
        if !d.is_null() {
            // SAFETY: `d` is the Box<Plugin> `create` leaked (its first field), per the caller.
            drop(unsafe { Box::from_raw(d.cast::<Plugin>()) });
        }
    }

    /// The state behind a delegate pointer.
    ///
    /// # Safety
    /// `d` is null or from [`Plugin::create`] and alive for `'a`.
    unsafe fn state<'a>(d: *mut TfLiteDelegate) -> Option<&'a State> {
        // SAFETY: per the caller, a live Plugin whose first field `d` points to.
        unsafe { d.cast::<Plugin>().as_ref() }.map(|p| &p.state)
    }
}

/// What the per-node check found.
#[derive(Debug)]
enum Verdict {
    /// The HAL runs every operation the node (with the folding producers it reads) lowers to.
    Runs,
    /// The node lowers to no operation: it folds into constants at import (DEQUANTIZE or
    /// DENSIFY of a constant). It is claimed with the nodes that read it.
    Folds,
}

/// Lowers `nodes` (in execution order; the last is the one asked about) and asks the HAL about
/// the operations.
fn verdict(subgraph: &Subgraph, nodes: &[usize], state: &State) -> Result<Verdict, String> {
    let lowered = lower::lower_nodes(subgraph, nodes).map_err(|e| e.to_string())?;
    let model = &lowered.model;
    if model.operations.is_empty() {
        return Ok(Verdict::Folds);
    }
    let hal = &state.backend.hal;
    let supported = hal
        .get_supported_operations(model)
        .map_err(|s| format!("getSupportedOperations: {}", s.name()))?;
    if supported.len() != model.operations.len() || supported.contains(&false) {
        return Err("getSupportedOperations says no".to_string());
    }
    if !state.options.cpu_fallback {
        let placement = hal
            .operation_placement(model)
            .map_err(|s| format!("placement: {}", s.name()))?;
        if placement.iter().any(|&p| p != Placement::Device) {
            return Err("it would run on the HAL's CPU executor (cpu_fallback=0)".to_string());
        }
    }
    Ok(Verdict::Runs)
}

/// The folding nodes (`folds`) whose outputs `node` reads, directly or through other folding
/// nodes, in execution order.
fn folded_producers(
    subgraph: &Subgraph,
    plan: &[usize],
    folds: &[usize],
    node: usize,
) -> Vec<usize> {
    let produces = |p: usize, t: i32| {
        subgraph
            .nodes
            .get(p)
            .is_some_and(|n| n.outputs.contains(&t))
    };
    let mut wanted: Vec<usize> = Vec::new();
    let mut frontier = vec![node];
    while let Some(n) = frontier.pop() {
        let inputs = subgraph.nodes.get(n).map_or(&[][..], |n| &n.inputs[..]);
        for &t in inputs {
            for &p in folds {
                if produces(p, t) && !wanted.contains(&p) {
                    wanted.push(p);
                    frontier.push(p);
                }
            }
        }
    }
    plan.iter()
        .copied()
        .filter(|n| wanted.contains(n))
        .collect()
}

/// The nodes of the execution plan the delegate claims: each node the HAL runs (lowered with
/// the folding nodes it reads, so a CONV_2D sees the weights a DEQUANTIZE makes as
/// constants), and each folding node all of whose readers are claimed.
fn claim(context: Context<'_>, state: &State) -> Result<Vec<usize>, String> {
    let graph = context.graph().map_err(|e| {
        format!(
            "nnaccel delegate: refusing this interpreter: it does not match the TFLite {} ABI \
             this delegate was built for, tested with {} ({e})",
            abi::ABI_VERSION,
            abi::TESTED_RUNTIMES
        )
    })?;
    let sg = &graph.subgraph;
    let plan: Vec<usize> = graph.plan.iter().map(|n| n.index).collect();
    let mut why: Vec<(usize, String)> = Vec::new();
    let mut folds = Vec::new();
    for node in &graph.plan {
        let alone = match &node.unreadable {
            Some(w) => Err(w.clone()),
            None => lower::check_node(sg, node.index)
                .map_err(|e| e.to_string())
                .and_then(|()| verdict(sg, &[node.index], state)),
        };
        match alone {
            Ok(Verdict::Folds) => folds.push(node.index),
            Ok(Verdict::Runs) => {}
            Err(w) => why.push((node.index, w)),
        }
    }
    let mut claimed = Vec::new();
    for &n in &plan {
        if folds.contains(&n) || why.iter().any(|(m, _)| *m == n) {
            continue;
        }
        let mut group = folded_producers(sg, &plan, &folds, n);
        if group.is_empty() {
            // Asked alone above, and the HAL runs it.
            claimed.push(n);
            continue;
        }
        group.push(n);
        match verdict(sg, &group, state) {
            Ok(_) => claimed.push(n),
            Err(w) => why.push((n, w)),
        }
    }
    // A folding node goes with its readers: claimed when every node reading it is (latest
    // first, so a chain DENSIFY -> DEQUANTIZE -> CONV_2D is claimed whole).
    for &f in folds.iter().rev() {
        let outputs = sg.nodes.get(f).map_or(&[][..], |n| &n.outputs[..]);
        let readers: Vec<usize> = plan
            .iter()
            .copied()
            .filter(|&r| {
                r != f
                    && sg
                        .nodes
                        .get(r)
                        .is_some_and(|n| n.inputs.iter().any(|t| outputs.contains(t)))
            })
            .collect();
        if !readers.is_empty() && readers.iter().all(|r| claimed.contains(r)) {
            claimed.push(f);
        } else {
            why.push((
                f,
                "it folds into constants, and a node reading it is not claimed".into(),
            ));
        }
    }
    claimed.sort_unstable();
    if state.options.log {
        for (n, w) in &why {
            let code = sg.nodes.get(*n).map_or(-1, |n| n.builtin_code);
            eprintln!(
                "nnaccel delegate: node {n} ({}) left to LiteRT: {w}",
                builtin_name(code)
            );
        }
        eprintln!(
            "nnaccel delegate: claimed {} of {} nodes",
            claimed.len(),
            graph.plan.len()
        );
    }
    Ok(claimed)
}

unsafe extern "C" fn delegate_prepare(
    ctx: *mut TfLiteContext,
    d: *mut TfLiteDelegate,
) -> TfLiteStatus {
    guard("the delegate's Prepare", K_TF_LITE_ERROR, || {
        // SAFETY: the interpreter passes the delegate it was given (ours, alive while
        // interpreters use it).
        let state = unsafe { Plugin::state(d) };
        // SAFETY: and its live context.
        let context = unsafe { Context::new(ctx) };
        let (Some(state), Ok(context)) = (state, context) else {
            eprintln!("nnaccel delegate: Prepare without a delegate or a context");
            return K_TF_LITE_ERROR;
        };
        let nodes = match claim(context, state) {
            Ok(n) => n,
            Err(e) => {
                context.report(&e);
                return K_TF_LITE_ERROR;
            }
        };
        if nodes.is_empty() {
            return K_TF_LITE_OK;
        }
        // SAFETY: `d` is the delegate whose Prepare this is.
        let status = unsafe { context.replace_node_subsets(registration(), &nodes, d) };
        if status == K_TF_LITE_OK {
            stats::claimed(nodes.len());
        }
        status
    })
}

/// The delegate kernel's registration: ours, tail fields zero.
fn registration() -> TfLiteRegistration {
    TfLiteRegistration::delegate_kernel(
        kernel_init,
        kernel_free,
        kernel_prepare,
        kernel_invoke,
        c"nnaccel".as_ptr(),
    )
}

/// Where one input or output sits in the pool.
#[derive(Debug, Clone)]
struct Slot {
    tensor: usize,
    offset: u64,
    len: u64,
    dims: Vec<u32>,
}

/// One partition: its prepared model, its pool, its burst.
#[derive(Debug)]
struct Kernel {
    index: usize,
    prepared: Arc<dyn HalPreparedModel>,
    inputs: Vec<TensorInfo>,
    outputs: Vec<TensorInfo>,
    /// Per output: TFLite reads it (it is in the partition's output tensors); the others
    /// stay in the delegate's pool.
    copy_back: Vec<bool>,
    pool: Option<MappedClientPool>,
    /// The pool layout and the request over it, made at prepare (which the interpreter calls
    /// again whenever tensor shapes change), so Invoke only copies and executes.
    planned: Option<Planned>,
    burst: Option<ExecutionBurstController>,
    use_burst: bool,
    invokes: u64,
}

/// What kernel prepare works out once for every Invoke until the next prepare.
#[derive(Debug)]
struct Planned {
    ins: Vec<Slot>,
    outs: Vec<Slot>,
    request: Request,
}

/// Prepares `model` through the backend, through the cache directory when one is set.
fn prepare(state: &State, model: &Model) -> Result<(Arc<dyn HalPreparedModel>, String), String> {
    let hal = &*state.backend.hal;
    let (pref, prio) = (ExecutionPreference::FastSingleAnswer, Priority::Medium);
    match &state.options.cache_dir {
        Some(dir) => {
            nnaccel_protocol::cache_dir::prepare_with_cache_dir(hal, model, pref, prio, None, dir)
                .map(|(pm, outcome)| (pm, format!("; compilation cache: {outcome:?}")))
                .map_err(|s| format!("prepareModel (cache_dir {}): {}", dir.display(), s.name()))
        }
        None => hal
            .prepare_model(model, pref, prio, None)
            .map(|pm| (pm, String::new()))
            .map_err(|s| format!("prepareModel: {}", s.name())),
    }
}

/// The elements of a TFLite int array as tensor or node indexes (negative: an error).
///
/// # Safety
/// As [`int_array`].
unsafe fn indexes(p: *const abi::TfLiteIntArray, what: &str) -> Result<Vec<usize>, String> {
    // SAFETY: per the caller.
    let v = unsafe { int_array(p, MAX_PARTITION) }.map_err(|e| format!("{what}: {e}"))?;
    v.iter()
        .map(|&i| usize::try_from(i).map_err(|_| format!("{what} names {i}")))
        .collect()
}

impl Kernel {
    fn new(
        context: Context<'_>,
        params: &TfLiteDelegateParams,
        state: &State,
    ) -> Result<Self, String> {
        // SAFETY: the interpreter's arrays for this partition, alive during init.
        let nodes = unsafe { indexes(params.nodes_to_replace, "nodes_to_replace") }?;
        // SAFETY: as above.
        let ins = unsafe { indexes(params.input_tensors, "input_tensors") }?;
        // SAFETY: as above.
        let outs = unsafe { indexes(params.output_tensors, "output_tensors") }?;
        // The execution plan is being rewritten during init: the graph is the partition's
        // nodes, and its outputs are TFLite's partition outputs (the tensors the rest of the
        // graph or the caller reads; the context names no graph outputs).
        let mut graph = context.graph_of(&nodes)?;
        graph.subgraph.outputs = outs
            .iter()
            .map(|&t| i32::try_from(t).map_err(|_| format!("output tensor {t}")))
            .collect::<Result<_, _>>()?;
        let lowered = lower::lower_nodes(&graph.subgraph, &nodes).map_err(|e| e.to_string())?;
        if !lowered.state.is_empty() {
            return Err("the partition holds resource variables".to_string());
        }
        if let Some(i) = lowered.inputs.iter().find(|i| !ins.contains(&i.tensor)) {
            return Err(format!(
                "the lowering reads tensor {} ({}), which is not among the partition's inputs",
                i.tensor, i.name
            ));
        }
        if let Some(t) = outs
            .iter()
            .find(|&&t| !lowered.outputs.iter().any(|o| o.tensor == t))
        {
            return Err(format!(
                "the lowering does not produce tensor {t}, an output of the partition"
            ));
        }
        let copy_back = lowered
            .outputs
            .iter()
            .map(|o| outs.contains(&o.tensor))
            .collect();
        let (prepared, cache) = prepare(state, &lowered.model)?;
        let index = state.partitions.fetch_add(1, Ordering::Relaxed);
        if state.options.log {
            let placement = state
                .backend
                .hal
                .operation_placement(&lowered.model)
                .unwrap_or_default();
            let on = |p: Placement| placement.iter().filter(|&&q| q == p).count();
            eprintln!(
                "nnaccel delegate: partition {index}: nodes {nodes:?} as {} operations ({} on \
                 the device, {} on the CPU executor) through {}{cache}",
                lowered.model.operations.len(),
                on(Placement::Device),
                on(Placement::Cpu),
                state.backend.label
            );
        }
        stats::partition_prepared();
        Ok(Self {
            index,
            prepared,
            inputs: lowered.inputs,
            outputs: lowered.outputs,
            copy_back,
            pool: None,
            planned: None,
            burst: None,
            use_burst: state.options.burst,
            invokes: 0,
        })
    }

    /// Where every input and output goes in the pool, from the tensors' current shapes and
    /// byte counts; and the pool size needed.
    fn layout(&self, context: Context<'_>) -> Result<(Vec<Slot>, Vec<Slot>, u64), String> {
        let mut end = 0u64;
        let mut place = |info: &TensorInfo| -> Result<Slot, String> {
            let t = context.tensor(info.tensor)?;
            let shape = context.dims(info.tensor)?;
            let dims = shape
                .iter()
                .map(|&d| {
                    u32::try_from(d).map_err(|_| format!("tensor {}: dimension {d}", info.tensor))
                })
                .collect::<Result<Vec<u32>, String>>()?;
            // The bytes copied in or out are the tensor's byte count, which must be what its
            // shape and type say (never more than the interpreter allocated).
            let size = info.element_type.size().unwrap_or(0);
            if byte_count(&shape, size) != Some(t.bytes) {
                return Err(format!(
                    "tensor {} ({}): {} bytes for shape {shape:?} of {}",
                    info.tensor,
                    info.name,
                    t.bytes,
                    info.element_type.name()
                ));
            }
            let len = t.bytes as u64;
            let too_big = || format!("tensor {}: the pool would pass 2^64 bytes", info.tensor);
            let offset = end.checked_next_multiple_of(ALIGN).ok_or_else(too_big)?;
            end = offset.checked_add(len).ok_or_else(too_big)?;
            Ok(Slot {
                tensor: info.tensor,
                offset,
                len,
                dims,
            })
        };
        let ins = self
            .inputs
            .iter()
            .map(&mut place)
            .collect::<Result<Vec<_>, _>>()?;
        let outs = self
            .outputs
            .iter()
            .map(&mut place)
            .collect::<Result<Vec<_>, _>>()?;
        Ok((ins, outs, end.max(ALIGN)))
    }

    /// Lays the inputs and outputs out in the pool (growing it when needed) and builds the
    /// request over it, for every Invoke until the next prepare.
    fn plan(&mut self, context: Context<'_>) -> Result<(), String> {
        self.planned = None;
        let (ins, outs, size) = self.layout(context)?;
        if self.pool.as_ref().is_none_or(|p| (p.len() as u64) < size) {
            let memory = pools::ashmem(size).map_err(|e| format!("a pool of {size} bytes: {e}"))?;
            self.pool =
                Some(MappedClientPool::new(&memory).map_err(|e| format!("mapping the pool: {e}"))?);
        }
        let pool = self.pool.as_ref().ok_or("no pool")?;
        let arg = |s: &Slot| -> Result<RequestArgument, String> {
            Ok(RequestArgument {
                has_no_value: false,
                location: DataLocation {
                    pool_index: 0,
                    offset: u32::try_from(s.offset).map_err(|_| "the pool is over 4 GiB")?,
                    length: u32::try_from(s.len).map_err(|_| "a tensor is over 4 GiB")?,
                    padding: 0,
                },
                dimensions: s.dims.clone(),
            })
        };
        let request = Request {
            inputs: ins.iter().map(arg).collect::<Result<_, _>>()?,
            outputs: outs.iter().map(arg).collect::<Result<_, _>>()?,
            pools: vec![MemoryPool::Memory(pool.memory().clone())],
        };
        self.planned = Some(Planned { ins, outs, request });
        Ok(())
    }

    fn invoke(&mut self, context: Context<'_>) -> Result<(), String> {
        let (Some(planned), Some(pool)) = (&self.planned, &self.pool) else {
            return Err("invoked without a successful prepare".to_string());
        };
        let (ins, outs, request) = (&planned.ins, &planned.outs, &planned.request);
        // The layout holds while the byte counts do (a shape change goes through prepare).
        let unchanged = |s: &Slot, t: &abi::TfLiteTensor| {
            if t.bytes as u64 == s.len {
                Ok(())
            } else {
                Err(format!(
                    "tensor {}: {} bytes, {} at prepare",
                    s.tensor, t.bytes, s.len
                ))
            }
        };
        for s in ins {
            let t = context.tensor(s.tensor)?;
            unchanged(s, t)?;
            if s.len == 0 {
                continue;
            }
            if t.data.is_null() {
                return Err(format!("input tensor {} has no data", s.tensor));
            }
            // SAFETY: during Invoke an input tensor's data holds `bytes` bytes.
            let data = unsafe { std::slice::from_raw_parts(t.data.cast::<u8>(), s.len as usize) };
            pool.write(s.offset as usize, data)
                .map_err(|e| format!("writing input tensor {}: {e}", s.tensor))?;
        }
        let through_burst = self.use_burst && self.invokes > 0;
        self.invokes += 1;
        let result = if through_burst {
            if self.burst.is_none() {
                self.burst = Some(
                    self.prepared
                        .configure_execution_burst(BurstConfig::default())
                        .map_err(|s| format!("configureExecutionBurst: {}", s.name()))?,
                );
            }
            match &self.burst {
                Some(b) => b.execute(request, MeasureTiming::No),
                None => return Err("no burst".to_string()),
            }
        } else {
            self.prepared
                .execute_synchronously(request, MeasureTiming::No, None)
        };
        if result.status != ErrorStatus::None {
            stats::executed(false, through_burst);
            return Err(format!("execution failed: {}", result.status.name()));
        }
        for (s, &copy) in outs.iter().zip(&self.copy_back) {
            if !copy || s.len == 0 {
                continue;
            }
            let t = context.tensor(s.tensor)?;
            unchanged(s, t)?;
            if t.data.is_null() {
                return Err(format!("output tensor {} has no data", s.tensor));
            }
            let bytes = pool
                .read(s.offset as usize, s.len as usize)
                .map_err(|e| format!("reading output tensor {}: {e}", s.tensor))?;
            // SAFETY: during Invoke an output tensor's data holds `bytes` (= s.len) writable
            // bytes, and the pool's copy does not overlap it.
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), t.data.cast::<u8>(), bytes.len())
            };
        }
        stats::executed(true, through_burst);
        Ok(())
    }
}

unsafe extern "C" fn kernel_init(
    ctx: *mut TfLiteContext,
    buffer: *const c_char,
    _length: usize,
) -> *mut c_void {
    guard("the delegate kernel's init", std::ptr::null_mut(), || {
        // SAFETY: for a delegate kernel, `buffer` is the partition's TfLiteDelegateParams,
        // valid during init.
        let params = unsafe { buffer.cast::<TfLiteDelegateParams>().as_ref() };
        // SAFETY: the live context of this call.
        let context = unsafe { Context::new(ctx) };
        let (Some(params), Ok(context)) = (params, context) else {
            eprintln!("nnaccel delegate: kernel init without parameters or a context");
            return std::ptr::null_mut();
        };
        // SAFETY: `params.delegate` is the delegate that claimed the partition: ours.
        let Some(state) = (unsafe { Plugin::state(params.delegate) }) else {
            context.report("nnaccel delegate: a partition without its delegate");
            return std::ptr::null_mut();
        };
        match Kernel::new(context, params, state) {
            Ok(k) => Box::into_raw(Box::new(k)).cast::<c_void>(),
            Err(e) => {
                context.report(&format!("nnaccel delegate: preparing a partition: {e}"));
                std::ptr::null_mut()
            }
        }
    })
}

unsafe extern "C" fn kernel_free(_ctx: *mut TfLiteContext, buffer: *mut c_void) {
    guard("the delegate kernel's free", (), || {
        if !buffer.is_null() {
            // SAFETY: a non-null `buffer` is the Box<Kernel> kernel_init leaked.
            drop(unsafe { Box::from_raw(buffer.cast::<Kernel>()) });
        }
    });
}

/// The kernel of a node, or an error reported through the context.
///
/// # Safety
/// `node` is null or the interpreter's live node of one of our partitions.
unsafe fn kernel_of<'a>(context: Context<'_>, node: *mut TfLiteNode) -> Option<&'a mut Kernel> {
    // SAFETY: per the caller.
    let node = unsafe { node.as_ref() };
    let user_data = node.map_or(std::ptr::null_mut(), |n| n.user_data.cast::<Kernel>());
    // SAFETY: `user_data` is what kernel_init returned for this node (null on failure), used
    // by one callback at a time.
    let kernel = unsafe { user_data.as_mut() };
    if kernel.is_none() {
        context
            .report("nnaccel delegate: this partition failed to prepare (see the message above)");
    }
    kernel
}

unsafe extern "C" fn kernel_prepare(
    ctx: *mut TfLiteContext,
    node: *mut TfLiteNode,
) -> TfLiteStatus {
    // SAFETY: the interpreter's live context and this kernel's node, per TFLite's contract.
    unsafe { with_kernel(ctx, node, "the delegate kernel's prepare", Kernel::plan) }
}

unsafe extern "C" fn kernel_invoke(ctx: *mut TfLiteContext, node: *mut TfLiteNode) -> TfLiteStatus {
    // SAFETY: the interpreter's live context and this kernel's node, per TFLite's contract.
    unsafe { with_kernel(ctx, node, "the delegate kernel's invoke", Kernel::invoke) }
}

/// Runs `step` (prepare or invoke) on the kernel of `node`, under the panic guard, reporting
/// its error through the context.
///
/// # Safety
/// `ctx` is the interpreter's live context of this call and `node` the interpreter's node for
/// this kernel.
unsafe fn with_kernel(
    ctx: *mut TfLiteContext,
    node: *mut TfLiteNode,
    what: &str,
    step: fn(&mut Kernel, Context<'_>) -> Result<(), String>,
) -> TfLiteStatus {
    guard(what, K_TF_LITE_ERROR, || {
        // SAFETY: the live context of this call, per the caller.
        let Ok(context) = (unsafe { Context::new(ctx) }) else {
            return K_TF_LITE_ERROR;
        };
        // SAFETY: the interpreter's node for this kernel, per the caller.
        let Some(kernel) = (unsafe { kernel_of(context, node) }) else {
            return K_TF_LITE_ERROR;
        };
        match step(kernel, context) {
            Ok(()) => K_TF_LITE_OK,
            Err(e) => {
                context.report(&format!(
                    "nnaccel delegate: partition {}: {e}",
                    kernel.index
                ));
                K_TF_LITE_ERROR
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{World, int_array_of};

    #[test]
    fn prepare_claims_the_add_and_its_kernel_computes_relu_of_the_sum_twice() {
        let mut w = World::new();
        let mut f = w.fake();
        let backend = backend::embedded().unwrap_or_else(|e| panic!("{e}"));
        let d = Plugin::with_backend(Options::default(), backend);
        let ctx = &raw mut f.ctx;
        // SAFETY: the fake's live context and our delegate.
        assert_eq!(unsafe { delegate_prepare(ctx, d) }, K_TF_LITE_OK);
        assert_eq!(f.replaced.len(), 1);
        let (reg, nodes) = f.replaced[0].clone();
        assert_eq!(nodes, vec![0]);
        assert_eq!(reg.builtin_code, abi::K_TF_LITE_BUILTIN_DELEGATE);
        assert_eq!(
            (reg.registration_external, reg.inplace_operator),
            (std::ptr::null_mut(), 0)
        );

        // TFLite's part: init with the partition's parameters, prepare, invoke.
        let (mut part, mut ins, mut outs) = (
            int_array_of(&[0]),
            int_array_of(&[0, 1]),
            int_array_of(&[2]),
        );
        let params = TfLiteDelegateParams {
            delegate: d,
            nodes_to_replace: part.as_mut_ptr().cast(),
            input_tensors: ins.as_mut_ptr().cast(),
            output_tensors: outs.as_mut_ptr().cast(),
        };
        let (Some(init), Some(prepare), Some(invoke), Some(free)) =
            (reg.init, reg.prepare, reg.invoke, reg.free)
        else {
            panic!("the registration lacks a callback")
        };
        // SAFETY: the fake's context and a TfLiteDelegateParams, as TFLite passes them.
        let user_data = unsafe { init(ctx, (&raw const params).cast(), 0) };
        assert!(!user_data.is_null());
        let mut node = TfLiteNode {
            inputs: ins.as_mut_ptr().cast(),
            outputs: outs.as_mut_ptr().cast(),
            intermediates: std::ptr::null_mut(),
            temporaries: std::ptr::null_mut(),
            user_data,
            builtin_data: (&raw const params).cast_mut().cast(),
            custom_initial_data: std::ptr::null(),
            custom_initial_data_size: 0,
            delegate: d,
            might_have_side_effect: false,
        };
        // SAFETY: the fake's context and the kernel's node.
        assert_eq!(unsafe { prepare(ctx, &raw mut node) }, K_TF_LITE_OK);
        // relu(x + [1, 2, 3, 4]), worked by hand for each input.
        for (x, want) in [
            ([-5.0f32, 0.5, 1.0, -1.0], [0.0f32, 2.5, 4.0, 3.0]),
            ([1.0, -3.0, -4.0, 0.25], [2.0, 0.0, 0.0, 4.25]),
        ] {
            // SAFETY: t0's data is w.input (4 floats), read by the kernel during invoke only.
            unsafe {
                std::ptr::copy_nonoverlapping(x.as_ptr(), f.tensors[0].data.cast::<f32>(), 4)
            };
            let before = stats::snapshot();
            // SAFETY: as prepare.
            assert_eq!(unsafe { invoke(ctx, &raw mut node) }, K_TF_LITE_OK);
            assert!(stats::snapshot().executions > before.executions);
            // SAFETY: t2's data is w.output (4 floats), written by the kernel.
            let got = unsafe { std::slice::from_raw_parts(f.tensors[2].data.cast::<f32>(), 4) };
            assert_eq!(got, &want[..]);
        }
        // SAFETY: the kernel's user data, freed once; then the delegate, unused from now on.
        unsafe { free(ctx, user_data) };
        // SAFETY: as above.
        unsafe { Plugin::destroy(d) };
    }

    #[test]
    fn prepare_refuses_a_runtime_of_unknown_layout_through_report_error_claiming_nothing() {
        let mut w = World::new();
        w.nodes = 2;
        w.plan = vec![0, 1];
        // Nodes 176 bytes apart: a 96-byte TfLiteRegistration.
        w.layout = (80, 176);
        let mut f = w.fake();
        let backend = backend::embedded().unwrap_or_else(|e| panic!("{e}"));
        let d = Plugin::with_backend(Options::default(), backend);
        // SAFETY: the fake's live context and our delegate.
        let status = unsafe { delegate_prepare(&raw mut f.ctx, d) };
        assert_eq!(status, K_TF_LITE_ERROR);
        assert!(f.replaced.is_empty());
        let msg = f.reported.join("\n");
        assert!(msg.contains("refusing this interpreter"), "{msg}");
        assert!(msg.contains("TfLiteRegistration is 96 bytes"), "{msg}");
        // SAFETY: the delegate, unused from now on.
        unsafe { Plugin::destroy(d) };
    }
}
