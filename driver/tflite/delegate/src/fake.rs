//! A fake interpreter for the unit tests: a `TfLiteContext` whose functions read a [`Fake`]
//! behind `impl_`, over one graph: t0 \[1,4\] input + t1 \[1,4\] constant → ADD (fused RELU)
//! → t2 \[1,4\] output (the ADD node repeated [`World::nodes`] times). Nodes and their
//! registrations are stored as TFLite's `Subgraph` stores them, one
//! `std::pair<TfLiteNode, TfLiteRegistration>` after the other, at the offsets of
//! [`World::layout`], so a test can stand for a runtime with other struct sizes.

use std::ffi::{c_char, c_int, c_void};

use crate::abi::{
    self, TfLiteContext, TfLiteDelegate, TfLiteIntArray, TfLiteNode, TfLiteRegistration,
    TfLiteStatus,
};
use crate::context::{code, int_array};

/// The interpreter's side.
#[derive(Debug)]
pub struct Fake {
    /// Tensors (`context->tensors`).
    pub tensors: Vec<abi::TfLiteTensor>,
    /// The execution plan as a TfLiteIntArray.
    pub plan: Vec<c_int>,
    /// The nodes and their registrations, laid out as `layout` says (u64s: 8-byte aligned).
    entries: Vec<u64>,
    /// How many nodes `entries` holds.
    count: usize,
    /// See [`World::layout`].
    layout: (usize, usize),
    /// Every node index `GetNodeAndRegistration` was asked for, in order.
    pub asked: Vec<c_int>,
    /// What the delegate reported through `ReportError`.
    pub reported: Vec<String>,
    /// The context handed to the delegate.
    pub ctx: TfLiteContext,
    /// What `ReplaceNodeSubsetsWithDelegateKernels` was given: the registration and nodes.
    pub replaced: Vec<(TfLiteRegistration, Vec<c_int>)>,
}

/// # Safety
/// `ctx` is a `Fake`'s context.
unsafe fn fake<'a>(ctx: *mut TfLiteContext) -> &'a mut Fake {
    // SAFETY: `ctx` is a Fake's live context.
    let fake = unsafe { (*ctx).impl_ }.cast::<Fake>();
    // SAFETY: the test set `impl_` to its Fake, alive for the test.
    unsafe { &mut *fake }
}

unsafe extern "C" fn get_plan(
    ctx: *mut TfLiteContext,
    out: *mut *mut TfLiteIntArray,
) -> TfLiteStatus {
    // SAFETY: called with the Fake's context.
    let f = unsafe { fake(ctx) };
    // SAFETY: the caller's out pointer.
    unsafe { *out = f.plan.as_mut_ptr().cast() };
    abi::K_TF_LITE_OK
}

unsafe extern "C" fn get_node(
    ctx: *mut TfLiteContext,
    i: c_int,
    node: *mut *mut TfLiteNode,
    reg: *mut *mut TfLiteRegistration,
) -> TfLiteStatus {
    // SAFETY: called with the Fake's context.
    let f = unsafe { fake(ctx) };
    f.asked.push(i);
    let i = usize::try_from(i).unwrap_or(usize::MAX);
    if i >= f.count {
        return abi::K_TF_LITE_ERROR;
    }
    let (reg_offset, stride) = f.layout;
    let entry = f.entries.as_mut_ptr().cast::<u8>().wrapping_add(i * stride);
    // SAFETY: the caller's out pointers; node `i` and its registration lie inside `entries`
    // (World::fake sized it for `count` entries).
    unsafe { *node = entry.cast() };
    // SAFETY: as above.
    unsafe { *reg = entry.wrapping_add(reg_offset).cast() };
    abi::K_TF_LITE_OK
}

unsafe extern "C" fn replace(
    ctx: *mut TfLiteContext,
    reg: TfLiteRegistration,
    nodes: *const TfLiteIntArray,
    _: *mut TfLiteDelegate,
) -> TfLiteStatus {
    // SAFETY: called with the Fake's context.
    let f = unsafe { fake(ctx) };
    // SAFETY: the delegate's array, alive for the call.
    match unsafe { int_array(nodes, 1 << 10) } {
        Ok(n) => {
            f.replaced.push((reg, n.to_vec()));
            abi::K_TF_LITE_OK
        }
        Err(_) => abi::K_TF_LITE_ERROR,
    }
}

/// Stands in for the variadic `ReportError`, which the delegate calls only as
/// `ReportError(context, "%s", message)`: it records the message. (x86-64 and aarch64 Linux
/// pass the variadic argument where this function reads its third parameter.)
unsafe extern "C" fn record_report(
    ctx: *mut TfLiteContext,
    _format: *const c_char,
    msg: *const c_char,
) {
    // SAFETY: called with the Fake's context.
    let f = unsafe { fake(ctx) };
    if !msg.is_null() {
        // SAFETY: the delegate passes a NUL-terminated string.
        let text = unsafe { std::ffi::CStr::from_ptr(msg) };
        f.reported.push(text.to_string_lossy().into_owned());
    }
}

/// A TfLiteIntArray's ints: the count, then `v`.
pub fn int_array_of(v: &[c_int]) -> Vec<c_int> {
    std::iter::once(v.len() as c_int)
        .chain(v.iter().copied())
        .collect()
}

fn tensor(type_: c_int, dims: &mut [c_int], data: *mut f32, alloc: c_int) -> abi::TfLiteTensor {
    let elems: c_int = dims.iter().skip(1).product();
    abi::TfLiteTensor {
        type_,
        data: data.cast::<c_void>(),
        dims: dims.as_mut_ptr().cast(),
        params: abi::TfLiteQuantizationParams {
            scale: 0.0,
            zero_point: 0,
        },
        allocation_type: alloc,
        bytes: 4 * elems as usize,
        allocation: std::ptr::null(),
        name: c"t".as_ptr(),
        delegate: std::ptr::null_mut(),
        buffer_handle: -1,
        data_is_stale: false,
        is_variable: false,
        quantization: abi::TfLiteQuantization {
            type_: 0,
            params: std::ptr::null_mut(),
        },
        sparsity: std::ptr::null_mut(),
        dims_signature: std::ptr::null(),
    }
}

unsafe extern "C" fn dummy_init(_: *mut TfLiteContext, _: *const c_char, _: usize) -> *mut c_void {
    std::ptr::null_mut()
}
unsafe extern "C" fn dummy_free(_: *mut TfLiteContext, _: *mut c_void) {}
unsafe extern "C" fn dummy_node(_: *mut TfLiteContext, _: *mut TfLiteNode) -> TfLiteStatus {
    abi::K_TF_LITE_OK
}

/// The memory the fake's pointers point into; it must outlive the [`Fake`].
#[derive(Debug)]
pub struct World {
    /// Shapes of t0, t1, t2 as TfLiteIntArrays.
    pub dims: Vec<Vec<c_int>>,
    /// t0's data.
    pub input: Vec<f32>,
    /// t1's data (the constant).
    pub weights: Vec<f32>,
    /// t2's data.
    pub output: Vec<f32>,
    /// The ADD node's inputs.
    pub inputs: Vec<c_int>,
    /// Its outputs.
    pub outputs: Vec<c_int>,
    /// Its TfLiteAddParams (the activation is the first field).
    pub add: c_int,
    /// How many copies of the ADD node the graph holds (the plan names the first only,
    /// unless a test sets `plan`).
    pub nodes: usize,
    /// The execution plan (node indexes).
    pub plan: Vec<c_int>,
    /// Bytes from a node to its registration, and from one node to the next: TFLite 2.14 to
    /// 2.22 store `std::pair<TfLiteNode, TfLiteRegistration>`, (80, 168) on LP64.
    pub layout: (usize, usize),
}

impl World {
    /// The ADD graph with a RELU, weights 1, 2, 3, 4.
    pub fn new() -> Self {
        Self {
            dims: vec![int_array_of(&[1, 4]); 3],
            input: vec![0.0; 4],
            weights: vec![1.0, 2.0, 3.0, 4.0],
            output: vec![0.0; 4],
            inputs: int_array_of(&[0, 1]),
            outputs: int_array_of(&[2]),
            add: 1, // kTfLiteActRelu
            nodes: 1,
            plan: vec![0],
            layout: (
                std::mem::size_of::<TfLiteNode>(),
                std::mem::size_of::<TfLiteNode>() + std::mem::size_of::<TfLiteRegistration>(),
            ),
        }
    }

    /// The interpreter over this world.
    pub fn fake(&mut self) -> Box<Fake> {
        const ARENA: c_int = 2; // kTfLiteArenaRw
        let mut dims = self.dims.iter_mut();
        let mut next = || dims.next().map_or(&mut [][..], |d| &mut d[..]);
        let tensors = vec![
            tensor(abi::tftype::FLOAT32, next(), self.input.as_mut_ptr(), ARENA),
            tensor(
                abi::tftype::FLOAT32,
                next(),
                self.weights.as_mut_ptr(),
                abi::alloc::MMAP_RO,
            ),
            tensor(
                abi::tftype::FLOAT32,
                next(),
                self.output.as_mut_ptr(),
                ARENA,
            ),
        ];
        let (inputs, outputs) = (self.inputs.as_mut_ptr(), self.outputs.as_mut_ptr());
        let add = &raw mut self.add;
        let node = || TfLiteNode {
            inputs: inputs.cast(),
            outputs: outputs.cast(),
            intermediates: std::ptr::null_mut(),
            temporaries: std::ptr::null_mut(),
            user_data: std::ptr::null_mut(),
            builtin_data: add.cast(),
            custom_initial_data: std::ptr::null(),
            custom_initial_data_size: 0,
            delegate: std::ptr::null_mut(),
            might_have_side_effect: false,
        };
        let mut reg = TfLiteRegistration::delegate_kernel(
            dummy_init,
            dummy_free,
            dummy_node,
            dummy_node,
            std::ptr::null(),
        );
        reg.builtin_code = code::ADD;
        // SAFETY: a function pointer cast to the variadic ReportError type, called only with
        // a "%s" format and one string (Context::report), which it reads as its third
        // parameter: where both calling conventions put it.
        let report = unsafe {
            std::mem::transmute::<
                unsafe extern "C" fn(*mut TfLiteContext, *const c_char, *const c_char),
                abi::ReportErrorFn,
            >(record_report)
        };
        let (reg_offset, stride) = self.layout;
        // Room for every entry, each at least a whole node and registration.
        let bytes = stride * self.nodes
            + reg_offset.max(std::mem::size_of::<TfLiteNode>())
            + std::mem::size_of::<TfLiteRegistration>();
        let mut entries = vec![0u64; bytes.div_ceil(8)];
        let base = entries.as_mut_ptr().cast::<u8>();
        for i in 0..self.nodes {
            let entry = base.wrapping_add(i * stride);
            // SAFETY: inside `entries` (sized above), 8-byte aligned when the layout's offsets
            // are multiples of 8 (every test's are); written unaligned all the same.
            unsafe { entry.cast::<TfLiteNode>().write_unaligned(node()) };
            // SAFETY: as above.
            unsafe {
                entry
                    .wrapping_add(reg_offset)
                    .cast::<TfLiteRegistration>()
                    .write_unaligned(reg)
            };
        }
        let mut f = Box::new(Fake {
            tensors,
            plan: int_array_of(&self.plan),
            entries,
            count: self.nodes,
            layout: self.layout,
            asked: Vec::new(),
            reported: Vec::new(),
            replaced: Vec::new(),
            ctx: TfLiteContext {
                tensors_size: 3,
                GetExecutionPlan: Some(get_plan),
                tensors: std::ptr::null_mut(),
                impl_: std::ptr::null_mut(),
                ResizeTensor: std::ptr::null_mut(),
                ReportError: Some(report),
                AddTensors: std::ptr::null_mut(),
                GetNodeAndRegistration: Some(get_node),
                ReplaceNodeSubsetsWithDelegateKernels: Some(replace),
                recommended_num_threads: 1,
                GetExternalContext: std::ptr::null_mut(),
                SetExternalContext: std::ptr::null_mut(),
                allow_fp32_relax_to_fp16: false,
                profiler: std::ptr::null_mut(),
                AllocatePersistentBuffer: std::ptr::null_mut(),
                AllocateBufferForEval: std::ptr::null_mut(),
                RequestScratchBufferInArena: std::ptr::null_mut(),
                GetScratchBuffer: std::ptr::null_mut(),
                ResizeTensorExplicit: std::ptr::null_mut(),
                PreviewDelegatePartitioning: std::ptr::null_mut(),
                GetTensor: std::ptr::null_mut(),
                GetEvalTensor: std::ptr::null_mut(),
                GetModelMetadata: std::ptr::null_mut(),
                AcquireSubgraphContext: std::ptr::null_mut(),
                ReleaseSubgraphContext: std::ptr::null_mut(),
            },
        });
        f.ctx.tensors = f.tensors.as_mut_ptr();
        f.ctx.impl_ = (&raw mut *f).cast();
        f
    }
}
