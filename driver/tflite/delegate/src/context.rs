//! The interpreter's `TfLiteContext` read into the graph form ([`nnaccel_tflite::graph`]), and
//! the ABI check: everything read is checked against the layouts of [`crate::abi`] first
//! (pointers non-null where the named version sets them, enum values in range, array sizes
//! and tensor indexes in bounds, constants' byte counts equal to their shapes), so a runtime
//! whose structures differ is refused with a message instead of being misread.
//!
//! Tensors are read through `context->tensors[i]` (`GetTensor` is NULL in the LiteRT wheels).
//! Data pointers are read only for constants (`kTfLiteMmapRo`, the model's own buffers, valid
//! for the interpreter's life); everything else is read during Invoke only.

use std::ffi::{CStr, c_int, c_void};

use nnaccel_tflite::graph::{
    Activation, DimensionMetadata, ElementType, Node, Options, Padding, Quantization, Sparsity,
    Subgraph, Tensor,
};

use crate::abi::{self, TfLiteContext, TfLiteIntArray, TfLiteNode, TfLiteRegistration};

/// More tensors than this in one context fails the ABI check (a misread size).
const MAX_TENSORS: usize = 1 << 24;
/// More nodes than this in an execution plan fails the ABI check.
const MAX_NODES: c_int = 1 << 20;
/// The largest rank the check accepts.
const MAX_RANK: c_int = 16;
/// The largest node input/output count the check accepts.
const MAX_NODE_TENSORS: c_int = 1 << 16;
/// The largest CSR segment or index array the check accepts.
const MAX_SPARSE: c_int = 1 << 28;
/// The largest per-channel scale count the check accepts.
const MAX_CHANNELS: c_int = 1 << 20;

/// Builtin codes (`BuiltinOperator`): the graph form's one table.
pub use nnaccel_tflite::graph::op as code;

/// The element type of a `TfLiteType` value, or None for one the graph form has no name for
/// (INT2, UINT4, float8: newer than the named version) and for NO_TYPE.
pub fn element_type(t: c_int) -> Option<ElementType> {
    use abi::tftype as t_;
    Some(match t {
        t_::FLOAT32 => ElementType::Float32,
        t_::INT32 => ElementType::Int32,
        t_::UINT8 => ElementType::UInt8,
        t_::INT64 => ElementType::Int64,
        t_::STRING => ElementType::String,
        t_::BOOL => ElementType::Bool,
        t_::INT16 => ElementType::Int16,
        t_::COMPLEX64 => ElementType::Complex64,
        t_::INT8 => ElementType::Int8,
        t_::FLOAT16 => ElementType::Float16,
        t_::FLOAT64 => ElementType::Float64,
        t_::COMPLEX128 => ElementType::Complex128,
        t_::UINT64 => ElementType::UInt64,
        t_::RESOURCE => ElementType::Resource,
        t_::VARIANT => ElementType::Variant,
        t_::UINT32 => ElementType::UInt32,
        t_::UINT16 => ElementType::UInt16,
        t_::INT4 => ElementType::Int4,
        t_::BFLOAT16 => ElementType::BFloat16,
        _ => return None,
    })
}

/// The elements of a `TfLiteIntArray`, at most `max` of them (more fails the ABI check).
///
/// # Safety
/// `p` is null or points to a `TfLiteIntArray` whose `size` ints follow it, alive for `'a`.
pub unsafe fn int_array<'a>(p: *const TfLiteIntArray, max: c_int) -> Result<&'a [c_int], String> {
    if p.is_null() {
        return Ok(&[]);
    }
    // SAFETY: non-null, and the caller promises a TfLiteIntArray.
    let size = unsafe { (*p).size };
    if !(0..=max).contains(&size) {
        return Err(format!(
            "an int array of size {size} (at most {max} expected)"
        ));
    }
    let data = p
        .wrapping_byte_add(std::mem::offset_of!(TfLiteIntArray, data))
        .cast::<c_int>();
    // SAFETY: `size` ints follow the header (the flexible array member), per the caller.
    Ok(unsafe { std::slice::from_raw_parts(data, size as usize) })
}

/// A NUL-terminated string, or "" for null; lossy UTF-8.
///
/// # Safety
/// `p` is null or a NUL-terminated string alive for the call.
unsafe fn c_string(p: *const std::ffi::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: non-null and NUL-terminated per the caller.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn activation(a: c_int) -> Result<Activation, String> {
    Ok(match a {
        0 => Activation::None,
        1 => Activation::Relu,
        2 => Activation::ReluN1To1,
        3 => Activation::Relu6,
        4 => Activation::Tanh,
        5 => Activation::SignBit,
        6 => Activation::Sigmoid,
        _ => {
            return Err(format!(
                "fused activation {a} is not a TfLiteFusedActivation"
            ));
        }
    })
}

fn padding(p: c_int) -> Result<Padding, String> {
    match p {
        abi::padding::SAME => Ok(Padding::Same),
        abi::padding::VALID => Ok(Padding::Valid),
        _ => Err(format!("padding {p} is neither SAME nor VALID")),
    }
}

fn out_type(t: c_int) -> Result<ElementType, String> {
    element_type(t).ok_or_else(|| format!("type {t} is not a known TfLiteType"))
}

/// The bytes of a builtin parameter struct, copied out of the interpreter once; fields are
/// read at the offsets of the mirrors in [`crate::abi`].
struct Raw {
    buf: [u8; 40],
}

impl Raw {
    /// Copies `size` (at most 40) bytes at `data`.
    ///
    /// # Safety
    /// `data` points to at least `size` readable bytes.
    unsafe fn copy(data: *const c_void, size: usize) -> Self {
        let mut buf = [0u8; 40];
        let size = size.min(buf.len());
        // SAFETY: `size` readable bytes at `data` (the caller), into a local buffer.
        unsafe { std::ptr::copy_nonoverlapping(data.cast::<u8>(), buf.as_mut_ptr(), size) };
        Self { buf }
    }

    fn word(&self, off: usize) -> [u8; 4] {
        let mut w = [0u8; 4];
        if let Some(b) = self.buf.get(off..off + 4) {
            w.copy_from_slice(b);
        }
        w
    }

    fn int(&self, off: usize) -> c_int {
        c_int::from_ne_bytes(self.word(off))
    }

    fn float(&self, off: usize) -> f32 {
        f32::from_ne_bytes(self.word(off))
    }

    fn flag(&self, off: usize) -> bool {
        self.buf.get(off).is_some_and(|&b| b != 0)
    }

    fn ints(&self, off: usize, n: usize) -> Vec<i32> {
        (0..n).map(|i| self.int(off + 4 * i)).collect()
    }
}

/// Padding, stride along width and along height: the common prefix of `TfLiteConvParams`,
/// `TfLiteDepthwiseConvParams`, `TfLiteTransposeConvParams` and `TfLitePoolParams` (the abi
/// tests pin the three offsets equal in all four).
fn window(p: &Raw) -> Result<(Padding, i32, i32), String> {
    use abi::TfLiteConvParams as C;
    use std::mem::offset_of;
    Ok((
        padding(p.int(offset_of!(C, padding)))?,
        p.int(offset_of!(C, stride_width)),
        p.int(offset_of!(C, stride_height)),
    ))
}

/// The size of the parameter struct the delegate reads for builtin `builtin`, or None when
/// it reads none.
fn param_size(builtin: i32) -> Option<usize> {
    use self::code as c;
    use abi::*;
    use std::mem::size_of;
    Some(match builtin {
        c::CONV_2D => size_of::<TfLiteConvParams>(),
        c::DEPTHWISE_CONV_2D => size_of::<TfLiteDepthwiseConvParams>(),
        c::TRANSPOSE_CONV => size_of::<TfLiteTransposeConvParams>(),
        c::AVERAGE_POOL_2D | c::MAX_POOL_2D | c::L2_POOL_2D => size_of::<TfLitePoolParams>(),
        c::FULLY_CONNECTED => size_of::<TfLiteFullyConnectedParams>(),
        c::CONCATENATION => size_of::<TfLiteConcatenationParams>(),
        c::RESHAPE => size_of::<TfLiteReshapeParams>(),
        c::SQUEEZE => size_of::<TfLiteSqueezeParams>(),
        c::STRIDED_SLICE => size_of::<TfLiteStridedSliceParams>(),
        c::LOCAL_RESPONSE_NORMALIZATION => size_of::<TfLiteLocalResponseNormParams>(),
        c::GATHER | c::PACK | c::UNPACK | c::CAST => size_of::<TfLiteTwoInts>(),
        c::RESIZE_BILINEAR | c::RESIZE_NEAREST_NEIGHBOR | c::BATCH_MATMUL => {
            size_of::<TfLiteTwoBools>()
        }
        c::MEAN
        | c::SUM
        | c::REDUCE_PROD
        | c::REDUCE_MAX
        | c::REDUCE_MIN
        | c::REDUCE_ANY
        | c::REDUCE_ALL
        | c::GELU => size_of::<bool>(),
        // One int or float: an activation (ADD, SUB, MUL, DIV, L2_NORMALIZATION), beta,
        // num_splits, alpha, block_size, output_type, the mirror padding mode, out_type.
        c::ADD
        | c::SUB
        | c::MUL
        | c::DIV
        | c::L2_NORMALIZATION
        | c::SOFTMAX
        | c::SPLIT
        | c::SPLIT_V
        | c::LEAKY_RELU
        | c::SPACE_TO_DEPTH
        | c::DEPTH_TO_SPACE
        | c::ARG_MAX
        | c::ARG_MIN
        | c::MIRROR_PAD
        | c::SHAPE => size_of::<c_int>(),
        _ => return None,
    })
}

/// A node's parameters in the graph form, from its `builtin_data` for builtin code `builtin`.
///
/// # Safety
/// `data` is null or points to the parameter struct the interpreter allocates for `builtin`
/// (`builtin_op_data.h`), alive for the call.
pub unsafe fn options(builtin: i32, data: *const c_void) -> Result<Options, String> {
    use self::code as c;
    use abi::*;
    use std::mem::offset_of;
    let raw = match param_size(builtin) {
        // SAFETY: the struct for `builtin` is at least `n` bytes (the mirrors are prefixes of
        // the named version's structs), per the caller.
        Some(n) if !data.is_null() => Some(unsafe { Raw::copy(data, n) }),
        _ => None,
    };
    let p = || {
        raw.as_ref().ok_or_else(|| {
            format!(
                "no parameters for {}",
                nnaccel_tflite::graph::builtin_name(builtin)
            )
        })
    };
    Ok(match builtin {
        c::CONV_2D => {
            let p = p()?;
            let (padding, stride_w, stride_h) = window(p)?;
            Options::Conv2d {
                padding,
                stride_w,
                stride_h,
                dilation_w: p.int(offset_of!(TfLiteConvParams, dilation_width_factor)),
                dilation_h: p.int(offset_of!(TfLiteConvParams, dilation_height_factor)),
                activation: activation(p.int(offset_of!(TfLiteConvParams, activation)))?,
            }
        }
        c::DEPTHWISE_CONV_2D => {
            let p = p()?;
            type D = TfLiteDepthwiseConvParams;
            let (padding, stride_w, stride_h) = window(p)?;
            Options::DepthwiseConv2d {
                padding,
                stride_w,
                stride_h,
                depth_multiplier: p.int(offset_of!(D, depth_multiplier)),
                dilation_w: p.int(offset_of!(D, dilation_width_factor)),
                dilation_h: p.int(offset_of!(D, dilation_height_factor)),
                activation: activation(p.int(offset_of!(D, activation)))?,
            }
        }
        c::TRANSPOSE_CONV => {
            let p = p()?;
            type T = TfLiteTransposeConvParams;
            let (padding, stride_w, stride_h) = window(p)?;
            Options::TransposeConv {
                padding,
                stride_w,
                stride_h,
                activation: activation(p.int(offset_of!(T, activation)))?,
            }
        }
        c::AVERAGE_POOL_2D | c::MAX_POOL_2D | c::L2_POOL_2D => {
            let p = p()?;
            type P = TfLitePoolParams;
            let (padding, stride_w, stride_h) = window(p)?;
            Options::Pool2d {
                padding,
                stride_w,
                stride_h,
                filter_w: p.int(offset_of!(P, filter_width)),
                filter_h: p.int(offset_of!(P, filter_height)),
                activation: activation(p.int(offset_of!(P, activation)))?,
            }
        }
        c::FULLY_CONNECTED => {
            let p = p()?;
            type F = TfLiteFullyConnectedParams;
            Options::FullyConnected {
                activation: activation(p.int(offset_of!(F, activation)))?,
                keep_num_dims: p.flag(offset_of!(F, keep_num_dims)),
                shuffled_weights: p.int(offset_of!(F, weights_format)) != 0,
                asymmetric_quantize_inputs: p.flag(offset_of!(F, asymmetric_quantize_inputs)),
            }
        }
        // TfLiteAddParams, TfLiteSubParams, TfLiteMulParams, TfLiteDivParams and
        // TfLiteL2NormParams all start with the activation.
        c::ADD | c::SUB | c::MUL | c::DIV | c::L2_NORMALIZATION => {
            Options::Activation(activation(p()?.int(0))?)
        }
        c::CONCATENATION => {
            let p = p()?;
            Options::Concatenation {
                axis: p.int(offset_of!(TfLiteConcatenationParams, axis)),
                activation: activation(p.int(offset_of!(TfLiteConcatenationParams, activation)))?,
            }
        }
        c::SOFTMAX => Options::Softmax {
            beta: p()?.float(0),
        },
        c::RESHAPE => match raw.as_ref().map(|p| {
            (
                p,
                usize::try_from(p.int(offset_of!(TfLiteReshapeParams, num_dimensions))),
            )
        }) {
            Some((p, Ok(n @ 1..=8))) => Options::Reshape {
                new_shape: p.ints(offset_of!(TfLiteReshapeParams, shape), n),
            },
            _ => Options::None,
        },
        c::SQUEEZE => {
            let p = p()?;
            let n = p.int(offset_of!(TfLiteSqueezeParams, num_squeeze_dims));
            let n = usize::try_from(n)
                .ok()
                .filter(|&n| n <= 8)
                .ok_or_else(|| format!("{n} squeeze dimensions"))?;
            Options::Squeeze {
                squeeze_dims: p.ints(offset_of!(TfLiteSqueezeParams, squeeze_dims), n),
            }
        }
        c::SPLIT | c::SPLIT_V => Options::Split {
            num_splits: p()?.int(0),
        },
        c::STRIDED_SLICE => {
            let p = p()?;
            type S = TfLiteStridedSliceParams;
            Options::StridedSlice {
                begin_mask: p.int(offset_of!(S, begin_mask)),
                end_mask: p.int(offset_of!(S, end_mask)),
                ellipsis_mask: p.int(offset_of!(S, ellipsis_mask)),
                new_axis_mask: p.int(offset_of!(S, new_axis_mask)),
                shrink_axis_mask: p.int(offset_of!(S, shrink_axis_mask)),
                offset: p.flag(offset_of!(S, offset)),
            }
        }
        c::LEAKY_RELU => Options::LeakyRelu {
            alpha: p()?.float(0),
        },
        c::GATHER => {
            let p = p()?;
            Options::Gather {
                axis: p.int(0),
                batch_dims: p.int(4),
            }
        }
        c::MEAN
        | c::SUM
        | c::REDUCE_PROD
        | c::REDUCE_MAX
        | c::REDUCE_MIN
        | c::REDUCE_ANY
        | c::REDUCE_ALL => Options::Reducer {
            keep_dims: p()?.flag(0),
        },
        c::RESIZE_BILINEAR | c::RESIZE_NEAREST_NEIGHBOR => {
            let p = p()?;
            Options::Resize {
                align_corners: p.flag(0),
                half_pixel_centers: p.flag(1),
            }
        }
        c::PACK => {
            let p = p()?;
            Options::Pack {
                values_count: p.int(0),
                axis: p.int(4),
            }
        }
        c::UNPACK => {
            let p = p()?;
            Options::Unpack {
                num: p.int(0),
                axis: p.int(4),
            }
        }
        c::SPACE_TO_DEPTH | c::DEPTH_TO_SPACE => Options::BlockSize(p()?.int(0)),
        c::LOCAL_RESPONSE_NORMALIZATION => {
            let p = p()?;
            type L = TfLiteLocalResponseNormParams;
            Options::LocalResponseNormalization {
                radius: p.int(offset_of!(L, radius)),
                bias: p.float(offset_of!(L, bias)),
                alpha: p.float(offset_of!(L, alpha)),
                beta: p.float(offset_of!(L, beta)),
            }
        }
        c::ARG_MAX | c::ARG_MIN => Options::ArgMinMax {
            output_type: out_type(p()?.int(0))?,
        },
        c::BATCH_MATMUL => {
            let p = p()?;
            Options::BatchMatMul {
                adj_x: p.flag(0),
                adj_y: p.flag(1),
            }
        }
        // kTfLiteMirrorPaddingReflect = 1, kTfLiteMirrorPaddingSymmetric = 2.
        c::MIRROR_PAD => match p()?.int(0) {
            1 => Options::MirrorPad { symmetric: false },
            2 => Options::MirrorPad { symmetric: true },
            m => return Err(format!("mirror padding mode {m}")),
        },
        c::CAST => Options::Cast {
            in_type: raw.as_ref().and_then(|p| element_type(p.int(0))),
            out_type: raw.as_ref().and_then(|p| element_type(p.int(4))),
        },
        c::SHAPE => Options::Shape {
            out_type: out_type(p()?.int(0))?,
        },
        c::GELU => Options::Gelu {
            approximate: p()?.flag(0),
        },
        // Parameters the graph form does not carry from a running interpreter: these are never
        // claimed (control flow and resource variables need the whole model, which the
        // delegate does not see; the rest have no NNAPI mapping).
        c::IF => Options::Other("IF (control flow is not delegated)"),
        c::WHILE => Options::Other("WHILE (control flow is not delegated)"),
        c::CALL_ONCE => Options::Other("CALL_ONCE (resource variables are not delegated)"),
        c::VAR_HANDLE => Options::Other("VAR_HANDLE (resource variables are not delegated)"),
        c::LSTM
        | c::RNN
        | c::SVDF
        | c::UNIDIRECTIONAL_SEQUENCE_RNN
        | c::UNIDIRECTIONAL_SEQUENCE_LSTM
        | c::BIDIRECTIONAL_SEQUENCE_RNN
        | c::BIDIRECTIONAL_SEQUENCE_LSTM => Options::Other("recurrent parameters"),
        c::ONE_HOT | c::CUMSUM | c::CONV_3D | c::CONV_3D_TRANSPOSE => {
            Options::Other("parameters the delegate does not read")
        }
        c::DELEGATE => Options::Other("another delegate's kernel"),
        c if c >= c::STABLEHLO_LOGISTIC => Options::Other("StableHLO parameters"),
        _ => Options::None,
    })
}

/// A tensor's sparse storage in the graph form, or None when it is dense.
///
/// # Safety
/// `p` is null or the tensor's `TfLiteSparsity`, with its arrays, alive for the call.
unsafe fn sparsity(p: *const abi::TfLiteSparsity) -> Result<Option<Sparsity>, String> {
    // SAFETY: null or a TfLiteSparsity, per the caller.
    let Some(s) = (unsafe { p.as_ref() }) else {
        return Ok(None);
    };
    // SAFETY: the sparsity's own arrays (or null).
    let traversal_order = unsafe { int_array(s.traversal_order, MAX_RANK) }?.to_vec();
    // SAFETY: as above.
    let block_map = unsafe { int_array(s.block_map, MAX_RANK) }?.to_vec();
    let n = usize::try_from(s.dim_metadata_size)
        .ok()
        .filter(|&n| n <= MAX_RANK as usize && (n == 0 || !s.dim_metadata.is_null()))
        .ok_or_else(|| format!("{} dimension metadata", s.dim_metadata_size))?;
    let metadata: &[abi::TfLiteDimensionMetadata] = if n == 0 {
        &[]
    } else {
        // SAFETY: `dim_metadata_size` entries at a non-null `dim_metadata` (checked).
        unsafe { std::slice::from_raw_parts(s.dim_metadata, n) }
    };
    let csr = |m: &abi::TfLiteDimensionMetadata| -> Result<DimensionMetadata, String> {
        // SAFETY: a CSR dimension's arrays (or null), alive for the call.
        let array_segments = unsafe { int_array(m.array_segments, MAX_SPARSE) }?.to_vec();
        // SAFETY: as above.
        let array_indices = unsafe { int_array(m.array_indices, MAX_SPARSE) }?.to_vec();
        Ok(DimensionMetadata::SparseCsr {
            array_segments,
            array_indices,
        })
    };
    let dim_metadata = metadata
        .iter()
        .map(|m| match m.format {
            0 => Ok(DimensionMetadata::Dense { size: m.dense_size }),
            1 => csr(m),
            f => Err(format!("dimension format {f}")),
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Some(Sparsity {
        traversal_order,
        block_map,
        dim_metadata,
    }))
}

/// The bytes of a dense tensor of `shape` with `size`-byte elements, or None when a dimension
/// is negative or the product overflows.
pub fn byte_count(shape: &[i32], size: usize) -> Option<usize> {
    shape
        .iter()
        .try_fold(size, |n, &d| n.checked_mul(usize::try_from(d).ok()?))
}

/// How a runtime lays out its nodes, as the delegate can observe it: TFLite's `Subgraph`
/// keeps them in a `std::vector<std::pair<TfLiteNode, TfLiteRegistration>>`, and
/// `GetNodeAndRegistration` hands out pointers into it, so the distance from a node to its
/// registration is `sizeof(TfLiteNode)` and from one node to the next the pair's size. The
/// runtimes the delegate is tested under ([`abi::TESTED_RUNTIMES`]) have the mirrors' sizes;
/// a runtime with others (a grown `TfLiteRegistration` would read past the one the delegate
/// passes by value) or that stores nodes otherwise is refused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Layout {
    /// Bytes from node 0 to its registration, or None when the plan is empty (nothing measured).
    pub node: Option<isize>,
    /// Bytes from node 0 to node 1, or None when the plan names node 0 only.
    pub entry: Option<isize>,
}

impl Layout {
    /// The layout of the mirrors: `TfLiteNode`, then `TfLiteRegistration` (both 8-byte
    /// aligned, so the pair has no padding).
    pub const MIRRORS: Layout = Layout {
        node: Some(std::mem::size_of::<TfLiteNode>() as isize),
        entry: Some(
            (std::mem::size_of::<TfLiteNode>() + std::mem::size_of::<TfLiteRegistration>())
                as isize,
        ),
    };

    /// Ok when every measured distance is the mirrors'; else why the runtime is refused.
    pub fn check(self) -> Result<(), String> {
        let want = Self::MIRRORS;
        if let Some(node) = self.node.filter(|&n| Some(n) != want.node) {
            return Err(format!(
                "its TfLiteNode is {node} bytes (a node's registration follows it there), \
                 not {} as in {}",
                std::mem::size_of::<TfLiteNode>(),
                abi::TESTED_RUNTIMES
            ));
        }
        if let (Some(node), Some(entry)) =
            (self.node, self.entry.filter(|&e| Some(e) != want.entry))
        {
            return Err(format!(
                "its nodes are {entry} bytes apart, so its TfLiteRegistration is {} bytes, \
                 not {} as in {}",
                entry - node,
                std::mem::size_of::<TfLiteRegistration>(),
                abi::TESTED_RUNTIMES
            ));
        }
        Ok(())
    }
}

/// What one node of the execution plan is, read from the context.
#[derive(Debug)]
pub struct PlanNode {
    /// The node index (the graph form's node index too).
    pub index: usize,
    /// Why the node cannot be given to the lowering at all (its parameters or a tensor the
    /// graph form cannot carry), or None.
    pub unreadable: Option<String>,
}

/// The context read into the graph form.
#[derive(Debug)]
pub struct ContextGraph {
    /// One subgraph: tensors by TFLite index, nodes by TFLite node index (nodes outside the
    /// execution plan are placeholders with no inputs or outputs).
    pub subgraph: Subgraph,
    /// The execution plan, in order.
    pub plan: Vec<PlanNode>,
}

/// A read-only view of a context, for one callback.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    ctx: *mut TfLiteContext,
    _callback: std::marker::PhantomData<&'a TfLiteContext>,
}

impl<'a> Context<'a> {
    /// Wraps the interpreter's context.
    ///
    /// # Safety
    /// `ctx` is the context the interpreter passed to the current callback, alive for the
    /// call, with the named version's layout up to its function pointers (the ABI check then
    /// verifies the rest before anything else is read).
    pub unsafe fn new(ctx: *mut TfLiteContext) -> Result<Self, String> {
        if ctx.is_null() {
            return Err("the interpreter passed no TfLiteContext".to_string());
        }
        Ok(Self {
            ctx,
            _callback: std::marker::PhantomData,
        })
    }

    /// The raw pointer, for calls back into the interpreter.
    pub fn raw(self) -> *mut TfLiteContext {
        self.ctx
    }

    fn get(self) -> &'a TfLiteContext {
        // SAFETY: non-null (checked in `new`) and alive for `'a`, the callback (the caller of
        // `new` promised it).
        unsafe { &*self.ctx }
    }

    /// Reports `msg` through `context->ReportError` (with a "%s" format, so the message is
    /// never taken as a format), or on stderr when the context has no ReportError.
    pub fn report(self, msg: &str) {
        let text = std::ffi::CString::new(msg.replace('\0', " ")).unwrap_or_default();
        match self.get().ReportError {
            // SAFETY: the interpreter's variadic ReportError with a "%s" format and one
            // NUL-terminated string argument.
            Some(f) => unsafe { f(self.ctx, c"%s".as_ptr(), text.as_ptr()) },
            None => eprintln!("{msg}"),
        }
    }

    /// `ReplaceNodeSubsetsWithDelegateKernels(context, registration, nodes, delegate)`: TFLite
    /// groups `nodes` into partitions by its own rules and calls the registration's `init`
    /// for each.
    ///
    /// # Safety
    /// `delegate` is the delegate whose Prepare is running.
    pub unsafe fn replace_node_subsets(
        self,
        registration: TfLiteRegistration,
        nodes: &[usize],
        delegate: *mut abi::TfLiteDelegate,
    ) -> abi::TfLiteStatus {
        let Some(f) = self.get().ReplaceNodeSubsetsWithDelegateKernels else {
            self.report(
                "nnaccel delegate: TfLiteContext::ReplaceNodeSubsetsWithDelegateKernels is NULL",
            );
            return abi::K_TF_LITE_ERROR;
        };
        // A TfLiteIntArray: the count, then the node indexes (i32 throughout, so the Vec's
        // alignment is the struct's).
        let mut array: Vec<c_int> = Vec::with_capacity(nodes.len() + 1);
        array.push(c_int::try_from(nodes.len()).unwrap_or(c_int::MAX));
        array.extend(nodes.iter().map(|&n| c_int::try_from(n).unwrap_or(-1)));
        // SAFETY: the interpreter's function with its own context, a registration by value,
        // an int array alive for the call (TFLite copies it), and our delegate.
        unsafe { f(self.ctx, registration, array.as_ptr().cast(), delegate) }
    }

    /// The ABI check of the context's own fields: the function pointers the named version
    /// always sets, and a plausible tensor count.
    pub fn check_abi(self) -> Result<(), String> {
        let c = self.get();
        let missing = [
            ("GetExecutionPlan", c.GetExecutionPlan.is_none()),
            ("ReportError", c.ReportError.is_none()),
            ("GetNodeAndRegistration", c.GetNodeAndRegistration.is_none()),
            (
                "ReplaceNodeSubsetsWithDelegateKernels",
                c.ReplaceNodeSubsetsWithDelegateKernels.is_none(),
            ),
        ];
        if let Some((name, _)) = missing.iter().find(|(_, m)| *m) {
            return Err(format!("TfLiteContext::{name} is NULL"));
        }
        if c.tensors_size > MAX_TENSORS || (c.tensors_size > 0 && c.tensors.is_null()) {
            return Err(format!(
                "TfLiteContext says {} tensors at {:p}",
                c.tensors_size, c.tensors
            ));
        }
        Ok(())
    }

    /// The number of tensors.
    pub fn tensor_count(self) -> usize {
        self.get().tensors_size
    }

    /// Tensor `i`, checked against the named version's enum ranges.
    pub fn tensor(self, i: usize) -> Result<&'a abi::TfLiteTensor, String> {
        let c = self.get();
        if i >= c.tensors_size {
            return Err(format!("tensor {i} of {}", c.tensors_size));
        }
        // SAFETY: `tensors` holds `tensors_size` TfLiteTensors (check_abi checked it is
        // non-null), valid for the callback.
        let t = unsafe { &*c.tensors.wrapping_add(i) };
        if !(0..=abi::tftype::MAX_KNOWN).contains(&t.type_)
            || !(0..=abi::alloc::MAX_KNOWN).contains(&t.allocation_type)
            || !(0..=2).contains(&t.quantization.type_)
        {
            return Err(format!(
                "tensor {i}: type {}, allocation type {}, quantization type {} (out of the \
                 named version's ranges)",
                t.type_, t.allocation_type, t.quantization.type_
            ));
        }
        Ok(t)
    }

    /// Tensor `i`'s shape.
    pub fn dims(self, i: usize) -> Result<Vec<i32>, String> {
        let t = self.tensor(i)?;
        // SAFETY: `dims` is null or the tensor's TfLiteIntArray, alive for the callback.
        let dims =
            unsafe { int_array(t.dims, MAX_RANK) }.map_err(|e| format!("tensor {i}: dims: {e}"))?;
        Ok(dims.to_vec())
    }

    /// The execution plan's node indexes.
    pub fn plan(self) -> Result<Vec<usize>, String> {
        let c = self.get();
        let f = c
            .GetExecutionPlan
            .ok_or("TfLiteContext::GetExecutionPlan is NULL")?;
        let mut plan: *mut TfLiteIntArray = std::ptr::null_mut();
        // SAFETY: the interpreter's GetExecutionPlan with its own context and an out pointer.
        let status = unsafe { f(self.ctx, &mut plan) };
        if status != abi::K_TF_LITE_OK {
            return Err(format!("GetExecutionPlan failed ({status})"));
        }
        // SAFETY: the interpreter owns the array until the next GetExecutionPlan; it is
        // copied before anything else calls into the interpreter.
        let nodes =
            unsafe { int_array(plan, MAX_NODES) }.map_err(|e| format!("execution plan: {e}"))?;
        nodes
            .iter()
            .map(|&n| usize::try_from(n).map_err(|_| format!("execution plan names node {n}")))
            .collect()
    }

    /// Node `index` and its registration, with its tensor indexes checked.
    pub fn node(self, index: usize) -> Result<(&'a TfLiteNode, &'a TfLiteRegistration), String> {
        let c = self.get();
        let f = c
            .GetNodeAndRegistration
            .ok_or("TfLiteContext::GetNodeAndRegistration is NULL")?;
        let i = c_int::try_from(index).map_err(|_| format!("node index {index}"))?;
        let mut node: *mut TfLiteNode = std::ptr::null_mut();
        let mut reg: *mut TfLiteRegistration = std::ptr::null_mut();
        // SAFETY: the interpreter's own function with its context and two out pointers.
        let status = unsafe { f(self.ctx, i, &mut node, &mut reg) };
        if status != abi::K_TF_LITE_OK || node.is_null() || reg.is_null() {
            return Err(format!("GetNodeAndRegistration({index}) failed ({status})"));
        }
        // SAFETY: non-null, owned by the interpreter and alive for the callback.
        let node = unsafe { &*node };
        // SAFETY: as the node.
        let reg = unsafe { &*reg };
        for (what, arr) in [("inputs", node.inputs), ("outputs", node.outputs)] {
            // SAFETY: the node's own TfLiteIntArray (or null).
            let idx = unsafe { int_array(arr, MAX_NODE_TENSORS) }
                .map_err(|e| format!("node {index} {what}: {e}"))?;
            if let Some(bad) = idx
                .iter()
                .find(|&&t| t < -1 || usize::try_from(t).is_ok_and(|t| t >= c.tensors_size))
            {
                return Err(format!(
                    "node {index} {what} name tensor {bad} of {}",
                    c.tensors_size
                ));
            }
        }
        Ok((node, reg))
    }

    /// Tensor `i` in the graph form: type, shapes, quantization, and the bytes of a constant
    /// (`kTfLiteMmapRo`). Err when the graph form cannot carry it (the nodes using it are then
    /// not claimed) or when it fails the ABI check.
    pub fn graph_tensor(self, i: usize) -> Result<Tensor, TensorError> {
        let t = self.tensor(i).map_err(TensorError::Abi)?;
        let shape = self.dims(i).map_err(TensorError::Abi)?;
        // SAFETY: the tensor's name: null or NUL-terminated, alive for the callback.
        let name = unsafe { c_string(t.name) };
        let element_type = element_type(t.type_).ok_or_else(|| {
            TensorError::Unmappable(format!("tensor {i} ({name}): TfLiteType {}", t.type_))
        })?;
        // SAFETY: null or the tensor's TfLiteIntArray.
        let shape_signature = unsafe { int_array(t.dims_signature, MAX_RANK) }
            .map_err(|e| TensorError::Abi(format!("tensor {i}: dims_signature: {e}")))?
            .to_vec();
        // SAFETY: null or the tensor's TfLiteSparsity, alive for the callback.
        let sparsity = unsafe { sparsity(t.sparsity) }
            .map_err(|e| TensorError::Abi(format!("tensor {i} ({name}): sparsity: {e}")))?;
        let quantization = self.quantization(i, t).map_err(TensorError::Abi)?;
        let mut data = None;
        if sparsity.is_some() {
            // The stored values of a sparse constant: at most the dense size (the lowering's
            // densify checks them against the metadata).
            let dense = element_type
                .size()
                .and_then(|size| byte_count(&shape, size));
            if t.allocation_type != abi::alloc::MMAP_RO || t.data.is_null() {
                return Err(TensorError::Unmappable(format!(
                    "tensor {i} ({name}) is sparse but not a constant"
                )));
            }
            if dense.is_none_or(|d| t.bytes > d) {
                return Err(TensorError::Abi(format!(
                    "sparse tensor {i} ({name}): {} bytes of values for shape {shape:?}",
                    t.bytes
                )));
            }
            // SAFETY: a kTfLiteMmapRo tensor's data is `bytes` bytes of the model (no more
            // than its dense size, checked above), alive for the interpreter's life.
            data =
                Some(unsafe { std::slice::from_raw_parts(t.data.cast::<u8>(), t.bytes) }.to_vec());
        } else if t.allocation_type == abi::alloc::MMAP_RO && !t.data.is_null() {
            let Some(size) = element_type.size() else {
                // STRING, INT4, RESOURCE, VARIANT constants: their byte count cannot be checked
                // against the shape, so they are never read.
                return Err(TensorError::Unmappable(format!(
                    "constant tensor {i} ({name}) of type {}",
                    element_type.name()
                )));
            };
            if byte_count(&shape, size) != Some(t.bytes) {
                return Err(TensorError::Abi(format!(
                    "constant tensor {i} ({name}): {} bytes for shape {shape:?} of {}",
                    t.bytes,
                    element_type.name()
                )));
            }
            // SAFETY: a kTfLiteMmapRo tensor's data is `bytes` bytes of the model (checked
            // against its shape above), alive for the interpreter's life.
            data =
                Some(unsafe { std::slice::from_raw_parts(t.data.cast::<u8>(), t.bytes) }.to_vec());
        }
        Ok(Tensor {
            name,
            element_type,
            shape,
            shape_signature,
            quantization,
            sparsity,
            data,
            is_variable: t.is_variable,
        })
    }

    fn quantization(self, i: usize, t: &abi::TfLiteTensor) -> Result<Quantization, String> {
        if t.quantization.type_ == abi::K_TF_LITE_AFFINE_QUANTIZATION
            && !t.quantization.params.is_null()
        {
            // SAFETY: an affine quantization's params is a TfLiteAffineQuantization.
            let q = unsafe {
                &*t.quantization
                    .params
                    .cast::<abi::TfLiteAffineQuantization>()
            };
            let scales: Vec<f32> = if q.scale.is_null() {
                Vec::new()
            } else {
                // SAFETY: non-null TfLiteFloatArray of the tensor.
                let n = unsafe { (*q.scale).size };
                if !(0..=MAX_CHANNELS).contains(&n) {
                    return Err(format!("tensor {i}: {n} quantization scales"));
                }
                let data = q
                    .scale
                    .wrapping_byte_add(std::mem::offset_of!(abi::TfLiteFloatArray, data))
                    .cast::<f32>();
                // SAFETY: `n` floats follow the header.
                unsafe { std::slice::from_raw_parts(data, n as usize) }.to_vec()
            };
            // SAFETY: null or the tensor's TfLiteIntArray.
            let zps = unsafe { int_array(q.zero_point, MAX_CHANNELS) }
                .map_err(|e| format!("tensor {i}: zero points: {e}"))?;
            let mut zero_points: Vec<i64> = zps.iter().map(|&z| i64::from(z)).collect();
            if zero_points.len() == 1 && scales.len() > 1 {
                zero_points = vec![zero_points[0]; scales.len()];
            }
            return Ok(Quantization {
                scales,
                zero_points,
                axis: q.quantized_dimension,
            });
        }
        if t.params.scale != 0.0 {
            return Ok(Quantization {
                scales: vec![t.params.scale],
                zero_points: vec![i64::from(t.params.zero_point)],
                axis: 0,
            });
        }
        Ok(Quantization::default())
    }

    /// The whole context in the graph form, with the execution plan; the ABI check runs over
    /// the context, the runtime's node layout ([`Context::layout`]), every tensor and every
    /// planned node first.
    pub fn graph(self) -> Result<ContextGraph, String> {
        self.check_abi()?;
        let plan = self.plan()?;
        self.layout(&plan)?.check()?;
        self.graph_of(&plan)
    }

    /// The runtime's node layout, measured from the addresses `GetNodeAndRegistration` gives
    /// for node 0 and, when the plan names a later node (so node 1 exists: nodes are numbered
    /// from 0), node 1. Asking for a node that does not exist would make the interpreter log
    /// an error, so node 1 is asked for only then.
    pub fn layout(self, plan: &[usize]) -> Result<Layout, String> {
        if plan.is_empty() {
            return Ok(Layout::default());
        }
        let f = self
            .get()
            .GetNodeAndRegistration
            .ok_or("TfLiteContext::GetNodeAndRegistration is NULL")?;
        let at = |i: c_int| -> Result<(usize, usize), String> {
            let mut node: *mut TfLiteNode = std::ptr::null_mut();
            let mut reg: *mut TfLiteRegistration = std::ptr::null_mut();
            // SAFETY: the interpreter's own function with its context and two out pointers;
            // only the addresses it writes are used, nothing is read through them.
            let status = unsafe { f(self.ctx, i, &mut node, &mut reg) };
            if status != abi::K_TF_LITE_OK || node.is_null() || reg.is_null() {
                return Err(format!("GetNodeAndRegistration({i}) failed ({status})"));
            }
            Ok((node.addr(), reg.addr()))
        };
        let (node0, reg0) = at(0)?;
        let entry = if plan.iter().any(|&n| n >= 1) {
            let (node1, _) = at(1)?;
            Some(node1.wrapping_sub(node0) as isize)
        } else {
            None
        };
        Ok(Layout {
            node: Some(reg0.wrapping_sub(node0) as isize),
            entry,
        })
    }

    /// The context in the graph form with `plan_idx` as its nodes (a partition's nodes at
    /// kernel init, when the execution plan is being rewritten); the ABI check runs over
    /// every tensor and every node named.
    pub fn graph_of(self, plan_idx: &[usize]) -> Result<ContextGraph, String> {
        self.check_abi()?;
        let mut tensors = Vec::with_capacity(self.tensor_count());
        let mut unmappable: Vec<Option<String>> = Vec::with_capacity(self.tensor_count());
        for i in 0..self.tensor_count() {
            match self.graph_tensor(i) {
                Ok(t) => {
                    tensors.push(t);
                    unmappable.push(None);
                }
                Err(TensorError::Abi(e)) => return Err(e),
                Err(TensorError::Unmappable(why)) => {
                    // A stand-in the lowering never sees: nodes using it are not claimed.
                    tensors.push(Tensor {
                        name: String::new(),
                        element_type: ElementType::Variant,
                        shape: Vec::new(),
                        shape_signature: Vec::new(),
                        quantization: Quantization::default(),
                        sparsity: None,
                        data: None,
                        is_variable: false,
                    });
                    unmappable.push(Some(why));
                }
            }
        }
        let count = plan_idx.iter().map(|&n| n + 1).max().unwrap_or(0);
        let mut nodes: Vec<Node> = (0..count)
            .map(|_| Node {
                builtin_code: code::DELEGATE,
                custom_code: None,
                version: 1,
                inputs: Vec::new(),
                outputs: Vec::new(),
                intermediates: Vec::new(),
                options: Options::Other("not in the execution plan"),
            })
            .collect();
        let mut plan = Vec::with_capacity(plan_idx.len());
        for &index in plan_idx {
            let (node, reg) = self.node(index)?;
            // SAFETY: checked by `node` (sizes and bounds); alive for the callback.
            let inputs = unsafe { int_array(node.inputs, MAX_NODE_TENSORS) }?.to_vec();
            // SAFETY: as above.
            let outputs = unsafe { int_array(node.outputs, MAX_NODE_TENSORS) }?.to_vec();
            // SAFETY: as above.
            let intermediates = unsafe { int_array(node.intermediates, MAX_NODE_TENSORS) }
                .unwrap_or(&[])
                .to_vec();
            let mut unreadable = inputs
                .iter()
                .chain(&outputs)
                .filter_map(|&t| usize::try_from(t).ok())
                .find_map(|t| unmappable.get(t).cloned().flatten());
            // SAFETY: the node's builtin_data is the parameter struct the interpreter
            // allocated for its registration's builtin code (or null).
            let options = match unsafe { options(reg.builtin_code, node.builtin_data) } {
                Ok(o) => o,
                Err(e) => {
                    unreadable.get_or_insert(e);
                    Options::Other("unreadable parameters")
                }
            };
            // SAFETY: null or the registration's NUL-terminated custom name.
            let custom = unsafe { c_string(reg.custom_name) };
            if let Some(slot) = nodes.get_mut(index) {
                *slot = Node {
                    builtin_code: reg.builtin_code,
                    custom_code: (!custom.is_empty()).then_some(custom),
                    version: reg.version,
                    inputs,
                    outputs,
                    intermediates,
                    options,
                };
            }
            plan.push(PlanNode { index, unreadable });
        }
        let mut subgraph = Subgraph {
            name: String::new(),
            tensors,
            nodes,
            inputs: Vec::new(),
            outputs: Vec::new(),
        };
        set_boundary(&mut subgraph, plan_idx);
        Ok(ContextGraph { subgraph, plan })
    }
}

/// Why a tensor is not in the graph form.
#[derive(Debug)]
pub enum TensorError {
    /// It fails the ABI check: the whole context is refused.
    Abi(String),
    /// The graph form cannot carry it: the nodes using it are not claimed.
    Unmappable(String),
}

/// The context names no subgraph inputs and outputs: inputs are the non-constant tensors
/// that planned nodes read and none produces; outputs are the tensors planned nodes produce
/// and none reads (a partition's own outputs come from TFLite's `TfLiteDelegateParams`).
pub fn set_boundary(subgraph: &mut Subgraph, plan: &[usize]) {
    let mut produced = Vec::new();
    let mut read = Vec::new();
    for &n in plan {
        if let Some(node) = subgraph.nodes.get(n) {
            produced.extend(node.outputs.iter().copied());
            read.extend(node.inputs.iter().copied().filter(|&t| t >= 0));
        }
    }
    let is_const = |t: i32| {
        usize::try_from(t)
            .ok()
            .and_then(|t| subgraph.tensors.get(t))
            .is_some_and(|t| t.data.is_some())
    };
    let mut inputs: Vec<i32> = Vec::new();
    for &t in &read {
        if !produced.contains(&t) && !is_const(t) && !inputs.contains(&t) {
            inputs.push(t);
        }
    }
    let mut outputs: Vec<i32> = Vec::new();
    for &t in &produced {
        if !read.contains(&t) && !outputs.contains(&t) {
            outputs.push(t);
        }
    }
    subgraph.inputs = inputs;
    subgraph.outputs = outputs;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{World, int_array_of};
    use nnaccel_tflite::graph::builtin_name;

    fn graph_of(f: &mut crate::fake::Fake) -> Result<ContextGraph, String> {
        // SAFETY: the Fake's context, alive for the call.
        let c = unsafe { Context::new(&raw mut f.ctx) }?;
        c.graph()
    }

    #[test]
    fn a_context_reads_into_the_graph_form_with_constants_options_and_boundary() {
        let mut w = World::new();
        let mut f = w.fake();
        let g = graph_of(&mut f).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(g.plan.len(), 1);
        assert!(g.plan[0].unreadable.is_none());
        let sg = &g.subgraph;
        assert_eq!(sg.tensors.len(), 3);
        assert_eq!(sg.tensors[0].shape, vec![1, 4]);
        assert_eq!(sg.tensors[0].data, None);
        // 1.0, 2.0, 3.0, 4.0 as little-endian f32: by hand.
        let bytes: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(sg.tensors[1].data.as_deref(), Some(&bytes[..]));
        assert_eq!(sg.nodes[0].builtin_code, code::ADD);
        assert_eq!(sg.nodes[0].inputs, vec![0, 1]);
        assert_eq!(sg.nodes[0].options, Options::Activation(Activation::Relu));
        assert_eq!(sg.inputs, vec![0]);
        assert_eq!(sg.outputs, vec![2]);
    }

    #[test]
    fn a_tensor_type_beyond_the_named_version_fails_the_abi_check() {
        let mut w = World::new();
        let mut f = w.fake();
        f.tensors[2].type_ = 77;
        let e = graph_of(&mut f).err().unwrap_or_default();
        assert!(e.contains("tensor 2: type 77"), "{e}");
    }

    #[test]
    fn a_node_naming_a_tensor_out_of_range_fails_the_abi_check() {
        let mut w = World::new();
        w.outputs = int_array_of(&[9]);
        let mut f = w.fake();
        let e = graph_of(&mut f).err().unwrap_or_default();
        assert!(e.contains("node 0 outputs name tensor 9 of 3"), "{e}");
    }

    #[test]
    fn a_constant_whose_bytes_disagree_with_its_shape_fails_the_abi_check() {
        let mut w = World::new();
        let mut f = w.fake();
        f.tensors[1].bytes = 12;
        let e = graph_of(&mut f).err().unwrap_or_default();
        assert!(e.contains("12 bytes for shape [1, 4] of FLOAT32"), "{e}");
    }

    #[test]
    fn a_context_without_replace_node_subsets_fails_the_abi_check() {
        let mut w = World::new();
        let mut f = w.fake();
        f.ctx.ReplaceNodeSubsetsWithDelegateKernels = None;
        let e = graph_of(&mut f).err().unwrap_or_default();
        assert!(
            e.contains("ReplaceNodeSubsetsWithDelegateKernels is NULL"),
            "{e}"
        );
    }

    /// The interpreter over `w` made a graph of two ADD nodes, both planned, stored at
    /// `layout` (node to registration, node to node). `w` stays where it is: the fake points
    /// into it.
    fn two_nodes_at(w: &mut World, layout: (usize, usize)) -> Box<crate::fake::Fake> {
        w.nodes = 2;
        w.plan = vec![0, 1];
        w.layout = layout;
        w.fake()
    }

    /// Why the ABI check refuses two planned nodes stored at `layout` ("" when it accepts).
    fn refusal_at(layout: (usize, usize)) -> String {
        let mut w = World::new();
        let mut f = two_nodes_at(&mut w, layout);
        graph_of(&mut f).err().unwrap_or_default()
    }

    #[test]
    fn the_tested_runtimes_layout_of_80_byte_nodes_and_88_byte_registrations_is_accepted() {
        // TFLite 2.14 and 2.22: a TfLiteNode is 80 bytes and a TfLiteRegistration 88 (by
        // hand from common.h; the wheels' GetNodeAndRegistration steps 168 bytes a node and
        // puts the registration 80 bytes after it).
        assert_eq!(
            Layout::MIRRORS,
            Layout {
                node: Some(80),
                entry: Some(168)
            }
        );
        let mut w = World::new();
        let mut f = two_nodes_at(&mut w, (80, 168));
        let g = graph_of(&mut f).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(g.plan.len(), 2);
        assert!(f.asked.starts_with(&[0, 1]), "{:?}", f.asked);
    }

    #[test]
    fn a_one_node_plan_measures_the_node_only_and_never_asks_for_node_1() {
        let mut w = World::new();
        let mut f = w.fake();
        // SAFETY: the Fake's context, alive for the call.
        let c = unsafe { Context::new(&raw mut f.ctx) }.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            c.layout(&[0]),
            Ok(Layout {
                node: Some(80),
                entry: None
            })
        );
        assert!(graph_of(&mut f).is_ok());
        assert!(!f.asked.contains(&1), "{:?}", f.asked);
    }

    #[test]
    fn a_runtime_whose_registration_grew_or_is_older_is_refused() {
        // Nodes 176 bytes apart: a later TFLite with one more 8-byte field (passing our 88
        // bytes by value would let it read 8 past them); 152: a TFLite without async_kernel
        // and inplace_operator (untested). 176 - 80 and 152 - 80 by hand.
        for (stride, size) in [(176, 96), (152, 72)] {
            let e = refusal_at((80, stride));
            let want = format!("its TfLiteRegistration is {size} bytes, not 88");
            assert!(e.contains(&want), "{e}");
            assert!(e.contains("tflite-runtime 2.14.0"), "{e}");
        }
    }

    #[test]
    fn a_runtime_with_another_node_size_is_refused_even_with_one_node() {
        let mut w = World::new();
        w.layout = (72, 160);
        let mut f = w.fake();
        let e = graph_of(&mut f).err().unwrap_or_default();
        assert!(e.contains("its TfLiteNode is 72 bytes"), "{e}");
    }

    #[test]
    fn an_unknown_activation_leaves_the_node_unreadable_not_the_graph() {
        let mut w = World::new();
        w.add = 42;
        let mut f = w.fake();
        let g = graph_of(&mut f).unwrap_or_else(|e| panic!("{e}"));
        let why = g.plan[0].unreadable.clone().unwrap_or_default();
        assert!(why.contains("fused activation 42"), "{why}");
    }

    #[test]
    fn builtin_codes_name_the_schema_operators() {
        for (c, name) in [
            (code::ADD, "ADD"),
            (code::CONV_2D, "CONV_2D"),
            (code::DEPTHWISE_CONV_2D, "DEPTHWISE_CONV_2D"),
            (code::FULLY_CONNECTED, "FULLY_CONNECTED"),
            (code::SOFTMAX, "SOFTMAX"),
            (code::RESHAPE, "RESHAPE"),
            (code::STRIDED_SLICE, "STRIDED_SLICE"),
            (code::DELEGATE, "DELEGATE"),
            (code::ARG_MIN, "ARG_MIN"),
            (code::TRANSPOSE_CONV, "TRANSPOSE_CONV"),
            (code::SPLIT_V, "SPLIT_V"),
            (code::BATCH_MATMUL, "BATCH_MATMUL"),
            (code::CUMSUM, "CUMSUM"),
            (code::REDUCE_ALL, "REDUCE_ALL"),
            (code::VAR_HANDLE, "VAR_HANDLE"),
            (code::GELU, "GELU"),
            (code::STABLEHLO_LOGISTIC, "STABLEHLO_LOGISTIC"),
        ] {
            assert_eq!(builtin_name(c), name, "code {c}");
        }
    }

    #[test]
    fn conv_params_become_conv2d_options() {
        let p = abi::TfLiteConvParams {
            padding: abi::padding::VALID,
            stride_width: 2,
            stride_height: 3,
            activation: 3,
            dilation_width_factor: 1,
            dilation_height_factor: 4,
        };
        // SAFETY: a TfLiteConvParams for CONV_2D.
        let o = unsafe { options(code::CONV_2D, (&raw const p).cast()) };
        assert_eq!(
            o,
            Ok(Options::Conv2d {
                padding: Padding::Valid,
                stride_w: 2,
                stride_h: 3,
                dilation_w: 1,
                dilation_h: 4,
                activation: Activation::Relu6,
            })
        );
    }

    #[test]
    fn bad_padding_or_activation_or_missing_params_is_an_error_not_a_guess() {
        let p = abi::TfLitePoolParams {
            padding: 7,
            stride_width: 1,
            stride_height: 1,
            filter_width: 2,
            filter_height: 2,
            activation: 0,
        };
        // SAFETY: a TfLitePoolParams for MAX_POOL_2D.
        let e = unsafe { options(code::MAX_POOL_2D, (&raw const p).cast()) };
        assert!(e.is_err_and(|e| e.contains("padding 7")));
        let a: c_int = 9;
        // SAFETY: ADD's params start with the activation.
        let e = unsafe { options(code::ADD, (&raw const a).cast()) };
        assert!(e.is_err_and(|e| e.contains("activation 9")));
        // SAFETY: null parameters.
        let e = unsafe { options(code::SOFTMAX, std::ptr::null()) };
        assert!(e.is_err_and(|e| e.contains("no parameters for SOFTMAX")));
    }

    #[test]
    fn reshape_squeeze_and_softmax_params_are_read_in_full() {
        let r = abi::TfLiteReshapeParams {
            shape: [1, -1, 4, 0, 0, 0, 0, 0],
            num_dimensions: 3,
        };
        // SAFETY: a TfLiteReshapeParams for RESHAPE.
        let o = unsafe { options(code::RESHAPE, (&raw const r).cast()) };
        assert_eq!(
            o,
            Ok(Options::Reshape {
                new_shape: vec![1, -1, 4]
            })
        );
        let s = abi::TfLiteSqueezeParams {
            squeeze_dims: [0, 2, 0, 0, 0, 0, 0, 0],
            num_squeeze_dims: 2,
        };
        // SAFETY: a TfLiteSqueezeParams for SQUEEZE.
        let o = unsafe { options(code::SQUEEZE, (&raw const s).cast()) };
        assert_eq!(
            o,
            Ok(Options::Squeeze {
                squeeze_dims: vec![0, 2]
            })
        );
        let beta = 0.5f32;
        // SAFETY: a TfLiteSoftmaxParams (one float) for SOFTMAX.
        let o = unsafe { options(code::SOFTMAX, (&raw const beta).cast()) };
        assert_eq!(o, Ok(Options::Softmax { beta: 0.5 }));
    }

    #[test]
    fn parameterless_ops_carry_none_and_control_flow_is_other() {
        // SAFETY: null parameters.
        let o = unsafe { options(19, std::ptr::null()) }; // RELU
        assert_eq!(o, Ok(Options::None));
        let ifp = [1i32, 2];
        // SAFETY: a TfLiteIfParams.
        let o = unsafe { options(code::IF, ifp.as_ptr().cast()) };
        assert!(matches!(o, Ok(Options::Other(_))));
    }

    #[test]
    fn boundary_takes_unread_products_as_outputs_and_skips_constants() {
        let t = |data: Option<Vec<u8>>| Tensor {
            name: String::new(),
            element_type: ElementType::Float32,
            shape: vec![1],
            shape_signature: Vec::new(),
            quantization: Quantization::default(),
            sparsity: None,
            data,
            is_variable: false,
        };
        let node = |inputs: Vec<i32>, outputs: Vec<i32>| Node {
            builtin_code: code::ADD,
            custom_code: None,
            version: 1,
            inputs,
            outputs,
            intermediates: Vec::new(),
            options: Options::Activation(Activation::None),
        };
        // t0 (input) + t1 (const) -> t2; t2 + t0 -> t3.
        let mut sg = Subgraph {
            tensors: vec![t(None), t(Some(vec![0; 4])), t(None), t(None)],
            nodes: vec![node(vec![0, 1], vec![2]), node(vec![2, 0], vec![3])],
            ..Subgraph::default()
        };
        set_boundary(&mut sg, &[0, 1]);
        assert_eq!(sg.inputs, vec![0]);
        assert_eq!(sg.outputs, vec![3]);
    }
}
