//! `#[repr(C)]` mirrors of the TFLite C structures the delegate touches, for ONE named TFLite
//! version: **TensorFlow Lite 2.22** (`tensorflow/lite/core/c/common.h`,
//! `c_api_types.h` and `builtin_op_data.h`), the version `ai-edge-litert` 2.3.0 is built from
//! (its runtime library carries the version string `2.22.0-dev0+selfbuilt`).
//!
//! Layouts are for LP64 Linux (x86-64 and aarch64, the same there). The tests at the end pin
//! every size and every offset the delegate reads or writes, with numbers derived by hand from
//! the header (docs/tflite.md, "The ABI, and how it is checked"). The delegate never trusts that the
//! interpreter in its process has these layouts: [`crate::context`] checks what it reads
//! against them before it uses anything (the ABI check).
//!
//! Structures the delegate only reads through a pointer are mirrored up to the last field it
//! reads (the builtin parameter structs: later TFLite versions append fields, never reorder).
//! [`TfLiteRegistration`] is passed *by value* to `ReplaceNodeSubsetsWithDelegateKernels`, so it
//! is mirrored whole, tail fields zeroed by [`TfLiteRegistration::delegate_kernel`].

#![allow(non_snake_case, non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};

/// The TFLite version these mirrors follow, for messages.
pub const ABI_VERSION: &str = "2.22";

/// The runtimes the delegate is tested under, for messages. TFLite 2.14 lays out every
/// structure mirrored here as 2.22 does (docs/tflite.md, "Runtimes": measured in the 2.14
/// wheel's library); the ABI check ([`crate::context::Layout`]) accepts a runtime whose node
/// storage shows the mirrors' `TfLiteNode` and `TfLiteRegistration` sizes and refuses others.
pub const TESTED_RUNTIMES: &str =
    "TFLite 2.22 (ai-edge-litert 2.3.0) and TFLite 2.14 (tflite-runtime 2.14.0)";

/// `TfLiteStatus` (an `int` enum).
pub type TfLiteStatus = c_int;
/// `kTfLiteOk`.
pub const K_TF_LITE_OK: TfLiteStatus = 0;
/// `kTfLiteError`.
pub const K_TF_LITE_ERROR: TfLiteStatus = 1;

/// `TfLiteType` values (`c_api_types.h`).
pub mod tftype {
    use std::ffi::c_int;
    /// `kTfLiteNoType`.
    pub const NO_TYPE: c_int = 0;
    /// `kTfLiteFloat32`.
    pub const FLOAT32: c_int = 1;
    /// `kTfLiteInt32`.
    pub const INT32: c_int = 2;
    /// `kTfLiteUInt8`.
    pub const UINT8: c_int = 3;
    /// `kTfLiteInt64`.
    pub const INT64: c_int = 4;
    /// `kTfLiteString`.
    pub const STRING: c_int = 5;
    /// `kTfLiteBool`.
    pub const BOOL: c_int = 6;
    /// `kTfLiteInt16`.
    pub const INT16: c_int = 7;
    /// `kTfLiteComplex64`.
    pub const COMPLEX64: c_int = 8;
    /// `kTfLiteInt8`.
    pub const INT8: c_int = 9;
    /// `kTfLiteFloat16`.
    pub const FLOAT16: c_int = 10;
    /// `kTfLiteFloat64`.
    pub const FLOAT64: c_int = 11;
    /// `kTfLiteComplex128`.
    pub const COMPLEX128: c_int = 12;
    /// `kTfLiteUInt64`.
    pub const UINT64: c_int = 13;
    /// `kTfLiteResource`.
    pub const RESOURCE: c_int = 14;
    /// `kTfLiteVariant`.
    pub const VARIANT: c_int = 15;
    /// `kTfLiteUInt32`.
    pub const UINT32: c_int = 16;
    /// `kTfLiteUInt16`.
    pub const UINT16: c_int = 17;
    /// `kTfLiteInt4`.
    pub const INT4: c_int = 18;
    /// `kTfLiteBFloat16`.
    pub const BFLOAT16: c_int = 19;
    /// The largest value a runtime of the named version (or a slightly newer one, which adds
    /// INT2, UINT4 and two float8 types) may store; anything above fails the ABI check.
    pub const MAX_KNOWN: c_int = 23;
}

/// `TfLiteAllocationType` values the delegate distinguishes.
pub mod alloc {
    use std::ffi::c_int;
    /// `kTfLiteMmapRo`: read-only data from the model (weights, constants).
    pub const MMAP_RO: c_int = 1;
    /// `kTfLitePersistentRo`: computed at Prepare and constant afterwards.
    pub const PERSISTENT_RO: c_int = 5;
    /// The largest value of the enum (`kTfLiteNonCpu`).
    pub const MAX_KNOWN: c_int = 8;
}

/// `kTfLiteAffineQuantization`.
pub const K_TF_LITE_AFFINE_QUANTIZATION: c_int = 1;

/// `TfLiteIntArray`: a size and that many ints following it (a flexible array member).
#[repr(C)]
#[derive(Debug)]
pub struct TfLiteIntArray {
    /// Number of elements.
    pub size: c_int,
    /// The elements start here.
    pub data: [c_int; 0],
}

/// `TfLiteFloatArray`: a size and that many floats following it.
#[repr(C)]
#[derive(Debug)]
pub struct TfLiteFloatArray {
    /// Number of elements.
    pub size: c_int,
    /// The elements start here.
    pub data: [f32; 0],
}

/// `TfLiteQuantizationParams` (the legacy per-tensor form).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TfLiteQuantizationParams {
    /// Scale.
    pub scale: f32,
    /// Zero point.
    pub zero_point: i32,
}

/// `TfLiteQuantization`.
#[repr(C)]
#[derive(Debug)]
pub struct TfLiteQuantization {
    /// `TfLiteQuantizationType`.
    pub type_: c_int,
    /// A `TfLiteAffineQuantization*` when `type_` is affine.
    pub params: *mut c_void,
}

/// `TfLiteAffineQuantization`.
#[repr(C)]
#[derive(Debug)]
pub struct TfLiteAffineQuantization {
    /// Scales, one per tensor or per channel.
    pub scale: *mut TfLiteFloatArray,
    /// Zero points, as many.
    pub zero_point: *mut TfLiteIntArray,
    /// The channel dimension.
    pub quantized_dimension: i32,
}

/// `TfLiteDimensionMetadata`: one traversed dimension of a sparse tensor.
#[repr(C)]
#[derive(Debug)]
pub struct TfLiteDimensionMetadata {
    /// `TfLiteDimensionType`: 0 dense, 1 sparse CSR.
    pub format: c_int,
    /// A dense dimension's size.
    pub dense_size: c_int,
    /// A CSR dimension's segments.
    pub array_segments: *mut TfLiteIntArray,
    /// A CSR dimension's indices.
    pub array_indices: *mut TfLiteIntArray,
}

/// `TfLiteSparsity`: how a sparse constant is stored.
#[repr(C)]
#[derive(Debug)]
pub struct TfLiteSparsity {
    /// Traversal order of the dimensions.
    pub traversal_order: *mut TfLiteIntArray,
    /// Block dimensions' original dimensions.
    pub block_map: *mut TfLiteIntArray,
    /// `dim_metadata_size` entries.
    pub dim_metadata: *mut TfLiteDimensionMetadata,
    /// How many.
    pub dim_metadata_size: c_int,
}

/// `TfLiteTensor` (112 bytes on LP64).
#[repr(C)]
#[derive(Debug)]
pub struct TfLiteTensor {
    /// `TfLiteType`.
    pub type_: c_int,
    /// `TfLitePtrUnion data`: valid only during Invoke (and for constants, at Prepare).
    pub data: *mut c_void,
    /// Shape.
    pub dims: *mut TfLiteIntArray,
    /// Legacy quantization.
    pub params: TfLiteQuantizationParams,
    /// `TfLiteAllocationType`.
    pub allocation_type: c_int,
    /// Bytes of data.
    pub bytes: usize,
    /// Opaque `tflite::MMapAllocation*`.
    pub allocation: *const c_void,
    /// NUL-terminated name.
    pub name: *const c_char,
    /// The delegate owning `buffer_handle`.
    pub delegate: *mut TfLiteDelegate,
    /// `TfLiteBufferHandle`.
    pub buffer_handle: c_int,
    /// The delegate's buffer is newer than `data`.
    pub data_is_stale: bool,
    /// A variable tensor.
    pub is_variable: bool,
    /// Quantization.
    pub quantization: TfLiteQuantization,
    /// Null when dense.
    pub sparsity: *mut TfLiteSparsity,
    /// Shape with -1 for unknown dimensions, or null/empty.
    pub dims_signature: *const TfLiteIntArray,
}

/// `TfLiteNode`.
#[repr(C)]
#[derive(Debug)]
pub struct TfLiteNode {
    /// Input tensor indexes (-1: omitted optional input).
    pub inputs: *mut TfLiteIntArray,
    /// Output tensor indexes.
    pub outputs: *mut TfLiteIntArray,
    /// Intermediate tensors.
    pub intermediates: *mut TfLiteIntArray,
    /// Temporaries.
    pub temporaries: *mut TfLiteIntArray,
    /// What the registration's `init` returned.
    pub user_data: *mut c_void,
    /// The builtin's parameter struct (`builtin_op_data.h`); for a delegate kernel node, a
    /// [`TfLiteDelegateParams`].
    pub builtin_data: *mut c_void,
    /// A custom op's options.
    pub custom_initial_data: *const c_void,
    /// Their size.
    pub custom_initial_data_size: c_int,
    /// Set on delegate kernel nodes.
    pub delegate: *mut TfLiteDelegate,
    /// The op may have side effects.
    pub might_have_side_effect: bool,
}

/// `TfLiteRegistration`: passed by value, so mirrored whole.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TfLiteRegistration {
    /// `init(context, buffer, length)`; for a delegate kernel `buffer` is a
    /// `TfLiteDelegateParams*`.
    pub init: Option<InitFn>,
    /// `free(context, user_data)`.
    pub free: Option<FreeFn>,
    /// `prepare(context, node)`.
    pub prepare: Option<NodeFn>,
    /// `invoke(context, node)`.
    pub invoke: Option<NodeFn>,
    /// `profiling_string(context, node)`.
    pub profiling_string:
        Option<unsafe extern "C" fn(*const TfLiteContext, *const TfLiteNode) -> *const c_char>,
    /// Builtin code (`kTfLiteBuiltinDelegate` = 51 for delegate kernels).
    pub builtin_code: i32,
    /// Custom op name (the delegate kernel's name).
    pub custom_name: *const c_char,
    /// Op version.
    pub version: c_int,
    /// `TfLiteOperator*`: zero.
    pub registration_external: *mut c_void,
    /// `async_kernel(context, node)`: null (no asynchronous execution).
    pub async_kernel: *mut c_void,
    /// `TfLiteInPlaceOp` bits: zero.
    pub inplace_operator: u64,
}

/// `kTfLiteBuiltinDelegate`.
pub const K_TF_LITE_BUILTIN_DELEGATE: i32 = 51;

/// A delegate kernel's `init`.
pub type InitFn = unsafe extern "C" fn(*mut TfLiteContext, *const c_char, usize) -> *mut c_void;
/// A delegate kernel's `free`.
pub type FreeFn = unsafe extern "C" fn(*mut TfLiteContext, *mut c_void);
/// A delegate kernel's `prepare` and `invoke`.
pub type NodeFn = unsafe extern "C" fn(*mut TfLiteContext, *mut TfLiteNode) -> TfLiteStatus;

impl TfLiteRegistration {
    /// The registration of a delegate kernel: the four callbacks, builtin code
    /// `kTfLiteBuiltinDelegate`, `name` as its custom name, version 1, and every later field
    /// (`registration_external`, `async_kernel`, `inplace_operator`) zero.
    pub fn delegate_kernel(
        init: InitFn,
        free: FreeFn,
        prepare: NodeFn,
        invoke: NodeFn,
        name: *const c_char,
    ) -> Self {
        Self {
            init: Some(init),
            free: Some(free),
            prepare: Some(prepare),
            invoke: Some(invoke),
            profiling_string: None,
            builtin_code: K_TF_LITE_BUILTIN_DELEGATE,
            custom_name: name,
            version: 1,
            registration_external: std::ptr::null_mut(),
            async_kernel: std::ptr::null_mut(),
            inplace_operator: 0,
        }
    }
}

/// The function pointers of `TfLiteContext` the delegate calls.
pub type GetExecutionPlanFn =
    unsafe extern "C" fn(*mut TfLiteContext, *mut *mut TfLiteIntArray) -> TfLiteStatus;
/// `ReportError(context, format, ...)`.
pub type ReportErrorFn = unsafe extern "C" fn(*mut TfLiteContext, *const c_char, ...);
/// `GetNodeAndRegistration(context, index, &node, &registration)`.
pub type GetNodeAndRegistrationFn = unsafe extern "C" fn(
    *mut TfLiteContext,
    c_int,
    *mut *mut TfLiteNode,
    *mut *mut TfLiteRegistration,
) -> TfLiteStatus;
/// `ReplaceNodeSubsetsWithDelegateKernels(context, registration, nodes, delegate)`.
pub type ReplaceNodeSubsetsFn = unsafe extern "C" fn(
    *mut TfLiteContext,
    TfLiteRegistration,
    *const TfLiteIntArray,
    *mut TfLiteDelegate,
) -> TfLiteStatus;

/// `TfLiteContext` (200 bytes on LP64, not on Windows). Fields the delegate never touches are
/// opaque pointers of the same size.
#[repr(C)]
#[derive(Debug)]
pub struct TfLiteContext {
    /// Number of tensors.
    pub tensors_size: usize,
    /// `GetExecutionPlan`.
    pub GetExecutionPlan: Option<GetExecutionPlanFn>,
    /// The tensors, `tensors_size` of them.
    pub tensors: *mut TfLiteTensor,
    /// Opaque.
    pub impl_: *mut c_void,
    /// `ResizeTensor`.
    pub ResizeTensor: *mut c_void,
    /// `ReportError`.
    pub ReportError: Option<ReportErrorFn>,
    /// `AddTensors`.
    pub AddTensors: *mut c_void,
    /// `GetNodeAndRegistration`.
    pub GetNodeAndRegistration: Option<GetNodeAndRegistrationFn>,
    /// `ReplaceNodeSubsetsWithDelegateKernels`.
    pub ReplaceNodeSubsetsWithDelegateKernels: Option<ReplaceNodeSubsetsFn>,
    /// Threads recommended to kernels.
    pub recommended_num_threads: c_int,
    /// `GetExternalContext`.
    pub GetExternalContext: *mut c_void,
    /// `SetExternalContext`.
    pub SetExternalContext: *mut c_void,
    /// Float16 relaxation allowed.
    pub allow_fp32_relax_to_fp16: bool,
    /// Profiler.
    pub profiler: *mut c_void,
    /// `AllocatePersistentBuffer`.
    pub AllocatePersistentBuffer: *mut c_void,
    /// `AllocateBufferForEval`.
    pub AllocateBufferForEval: *mut c_void,
    /// `RequestScratchBufferInArena`.
    pub RequestScratchBufferInArena: *mut c_void,
    /// `GetScratchBuffer`.
    pub GetScratchBuffer: *mut c_void,
    /// `ResizeTensorExplicit`.
    pub ResizeTensorExplicit: *mut c_void,
    /// `PreviewDelegatePartitioning`.
    pub PreviewDelegatePartitioning: *mut c_void,
    /// `GetTensor` (NULL in the LiteRT wheels: read `tensors` instead).
    pub GetTensor: *mut c_void,
    /// `GetEvalTensor`.
    pub GetEvalTensor: *mut c_void,
    /// `GetModelMetadata`.
    pub GetModelMetadata: *mut c_void,
    /// `AcquireSubgraphContext`.
    pub AcquireSubgraphContext: *mut c_void,
    /// `ReleaseSubgraphContext`.
    pub ReleaseSubgraphContext: *mut c_void,
}

/// `TfLiteDelegate`.
#[repr(C)]
#[derive(Debug)]
pub struct TfLiteDelegate {
    /// The delegate's own data.
    pub data_: *mut c_void,
    /// `Prepare(context, delegate)`.
    pub Prepare:
        Option<unsafe extern "C" fn(*mut TfLiteContext, *mut TfLiteDelegate) -> TfLiteStatus>,
    /// `CopyFromBufferHandle`: null (no delegate buffers).
    pub CopyFromBufferHandle: *mut c_void,
    /// `CopyToBufferHandle`: null.
    pub CopyToBufferHandle: *mut c_void,
    /// `FreeBufferHandle`: null.
    pub FreeBufferHandle: *mut c_void,
    /// `TfLiteDelegateFlags`.
    pub flags: i64,
    /// `TfLiteOpaqueDelegateBuilder*`: null (the classic path).
    pub opaque_delegate_builder: *mut c_void,
}

/// `TfLiteDelegateParams`: what `init` gets for each partition.
#[repr(C)]
#[derive(Debug)]
pub struct TfLiteDelegateParams {
    /// The delegate.
    pub delegate: *mut TfLiteDelegate,
    /// The partition's nodes.
    pub nodes_to_replace: *mut TfLiteIntArray,
    /// The tensors it reads.
    pub input_tensors: *mut TfLiteIntArray,
    /// The tensors it writes that others read.
    pub output_tensors: *mut TfLiteIntArray,
}

/// `TfLitePadding` values.
pub mod padding {
    use std::ffi::c_int;
    /// `kTfLitePaddingSame`.
    pub const SAME: c_int = 1;
    /// `kTfLitePaddingValid`.
    pub const VALID: c_int = 2;
}

/// `TfLiteConvParams` (prefix).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TfLiteConvParams {
    /// `TfLitePadding`.
    pub padding: c_int,
    /// Stride along width.
    pub stride_width: c_int,
    /// Stride along height.
    pub stride_height: c_int,
    /// `TfLiteFusedActivation`.
    pub activation: c_int,
    /// Dilation along width.
    pub dilation_width_factor: c_int,
    /// Dilation along height.
    pub dilation_height_factor: c_int,
}

/// `TfLiteDepthwiseConvParams` (prefix).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TfLiteDepthwiseConvParams {
    /// `TfLitePadding`.
    pub padding: c_int,
    /// Stride along width.
    pub stride_width: c_int,
    /// Stride along height.
    pub stride_height: c_int,
    /// As stored.
    pub depth_multiplier: c_int,
    /// `TfLiteFusedActivation`.
    pub activation: c_int,
    /// Dilation along width.
    pub dilation_width_factor: c_int,
    /// Dilation along height.
    pub dilation_height_factor: c_int,
}

/// `TfLiteTransposeConvParams` (prefix).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TfLiteTransposeConvParams {
    /// `TfLitePadding`.
    pub padding: c_int,
    /// Stride along width.
    pub stride_width: c_int,
    /// Stride along height.
    pub stride_height: c_int,
    /// `TfLiteFusedActivation`.
    pub activation: c_int,
}

/// `TfLitePoolParams` (prefix: the computed padding is not read).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TfLitePoolParams {
    /// `TfLitePadding`.
    pub padding: c_int,
    /// Stride along width.
    pub stride_width: c_int,
    /// Stride along height.
    pub stride_height: c_int,
    /// Window width.
    pub filter_width: c_int,
    /// Window height.
    pub filter_height: c_int,
    /// `TfLiteFusedActivation`.
    pub activation: c_int,
}

/// `TfLiteFullyConnectedParams` (prefix).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TfLiteFullyConnectedParams {
    /// `TfLiteFusedActivation`.
    pub activation: c_int,
    /// `TfLiteFullyConnectedWeightsFormat` (1: shuffled 4x16 int8).
    pub weights_format: c_int,
    /// Keep the input's leading dimensions.
    pub keep_num_dims: bool,
    /// Hybrid asymmetric inputs.
    pub asymmetric_quantize_inputs: bool,
}

/// `TfLiteConcatenationParams`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TfLiteConcatenationParams {
    /// Axis.
    pub axis: c_int,
    /// `TfLiteFusedActivation`.
    pub activation: c_int,
}

/// `TfLiteReshapeParams`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TfLiteReshapeParams {
    /// The new shape (old models; the shape input takes precedence).
    pub shape: [i32; 8],
    /// How many of `shape` are used.
    pub num_dimensions: c_int,
}

/// `TfLiteSqueezeParams`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TfLiteSqueezeParams {
    /// Dimensions to squeeze.
    pub squeeze_dims: [i32; 8],
    /// How many of them are used.
    pub num_squeeze_dims: c_int,
}

/// `TfLiteStridedSliceParams`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TfLiteStridedSliceParams {
    /// Begin mask.
    pub begin_mask: c_int,
    /// End mask.
    pub end_mask: c_int,
    /// Ellipsis mask.
    pub ellipsis_mask: c_int,
    /// New-axis mask.
    pub new_axis_mask: c_int,
    /// Shrink-axis mask.
    pub shrink_axis_mask: c_int,
    /// `end` is an offset from `begin`.
    pub offset: bool,
}

/// `TfLiteLocalResponseNormParams`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TfLiteLocalResponseNormParams {
    /// Radius.
    pub radius: c_int,
    /// Bias.
    pub bias: f32,
    /// Alpha.
    pub alpha: f32,
    /// Beta.
    pub beta: f32,
}

/// Two ints: `TfLiteGatherParams` (axis, batch_dims), `TfLitePackParams` (values_count,
/// axis), `TfLiteUnpackParams` (num, axis).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TfLiteTwoInts {
    /// First field.
    pub a: c_int,
    /// Second field.
    pub b: c_int,
}

/// Two bools: `TfLiteResizeBilinearParams` / `TfLiteResizeNearestNeighborParams`
/// (align_corners, half_pixel_centers), `TfLiteBatchMatMulParams` (adj_x, adj_y).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TfLiteTwoBools {
    /// First field.
    pub a: bool,
    /// Second field.
    pub b: bool,
}

#[cfg(test)]
mod tests {
    //! Every size and offset below was worked out by hand from TFLite 2.22's common.h with the
    //! LP64 C rules (int 4, pointers and size_t 8, bool 1, each field at the next multiple of
    //! its alignment, the size rounded up to the largest alignment).
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn tensor_is_112_bytes_with_the_header_offsets() {
        assert_eq!(size_of::<TfLiteTensor>(), 112);
        assert_eq!(offset_of!(TfLiteTensor, type_), 0);
        assert_eq!(offset_of!(TfLiteTensor, data), 8);
        assert_eq!(offset_of!(TfLiteTensor, dims), 16);
        assert_eq!(offset_of!(TfLiteTensor, params), 24);
        assert_eq!(offset_of!(TfLiteTensor, allocation_type), 32);
        assert_eq!(offset_of!(TfLiteTensor, bytes), 40);
        assert_eq!(offset_of!(TfLiteTensor, allocation), 48);
        assert_eq!(offset_of!(TfLiteTensor, name), 56);
        assert_eq!(offset_of!(TfLiteTensor, delegate), 64);
        assert_eq!(offset_of!(TfLiteTensor, buffer_handle), 72);
        assert_eq!(offset_of!(TfLiteTensor, data_is_stale), 76);
        assert_eq!(offset_of!(TfLiteTensor, is_variable), 77);
        assert_eq!(offset_of!(TfLiteTensor, quantization), 80);
        assert_eq!(offset_of!(TfLiteTensor, sparsity), 96);
        assert_eq!(offset_of!(TfLiteTensor, dims_signature), 104);
    }

    #[test]
    fn node_is_80_bytes_with_the_header_offsets() {
        assert_eq!(size_of::<TfLiteNode>(), 80);
        assert_eq!(offset_of!(TfLiteNode, inputs), 0);
        assert_eq!(offset_of!(TfLiteNode, outputs), 8);
        assert_eq!(offset_of!(TfLiteNode, intermediates), 16);
        assert_eq!(offset_of!(TfLiteNode, temporaries), 24);
        assert_eq!(offset_of!(TfLiteNode, user_data), 32);
        assert_eq!(offset_of!(TfLiteNode, builtin_data), 40);
        assert_eq!(offset_of!(TfLiteNode, custom_initial_data), 48);
        assert_eq!(offset_of!(TfLiteNode, custom_initial_data_size), 56);
        assert_eq!(offset_of!(TfLiteNode, delegate), 64);
        assert_eq!(offset_of!(TfLiteNode, might_have_side_effect), 72);
    }

    #[test]
    fn context_is_200_bytes_with_the_header_offsets() {
        assert_eq!(size_of::<TfLiteContext>(), 200);
        assert_eq!(offset_of!(TfLiteContext, tensors_size), 0);
        assert_eq!(offset_of!(TfLiteContext, GetExecutionPlan), 8);
        assert_eq!(offset_of!(TfLiteContext, tensors), 16);
        assert_eq!(offset_of!(TfLiteContext, impl_), 24);
        assert_eq!(offset_of!(TfLiteContext, ResizeTensor), 32);
        assert_eq!(offset_of!(TfLiteContext, ReportError), 40);
        assert_eq!(offset_of!(TfLiteContext, AddTensors), 48);
        assert_eq!(offset_of!(TfLiteContext, GetNodeAndRegistration), 56);
        assert_eq!(
            offset_of!(TfLiteContext, ReplaceNodeSubsetsWithDelegateKernels),
            64
        );
        assert_eq!(offset_of!(TfLiteContext, recommended_num_threads), 72);
        assert_eq!(offset_of!(TfLiteContext, GetExternalContext), 80);
        assert_eq!(offset_of!(TfLiteContext, SetExternalContext), 88);
        assert_eq!(offset_of!(TfLiteContext, allow_fp32_relax_to_fp16), 96);
        assert_eq!(offset_of!(TfLiteContext, profiler), 104);
        assert_eq!(offset_of!(TfLiteContext, AllocatePersistentBuffer), 112);
        assert_eq!(offset_of!(TfLiteContext, PreviewDelegatePartitioning), 152);
        assert_eq!(offset_of!(TfLiteContext, GetTensor), 160);
        assert_eq!(offset_of!(TfLiteContext, ReleaseSubgraphContext), 192);
    }

    #[test]
    fn registration_is_88_bytes_whole_with_the_header_offsets() {
        assert_eq!(size_of::<TfLiteRegistration>(), 88);
        assert_eq!(offset_of!(TfLiteRegistration, init), 0);
        assert_eq!(offset_of!(TfLiteRegistration, free), 8);
        assert_eq!(offset_of!(TfLiteRegistration, prepare), 16);
        assert_eq!(offset_of!(TfLiteRegistration, invoke), 24);
        assert_eq!(offset_of!(TfLiteRegistration, profiling_string), 32);
        assert_eq!(offset_of!(TfLiteRegistration, builtin_code), 40);
        assert_eq!(offset_of!(TfLiteRegistration, custom_name), 48);
        assert_eq!(offset_of!(TfLiteRegistration, version), 56);
        assert_eq!(offset_of!(TfLiteRegistration, registration_external), 64);
        assert_eq!(offset_of!(TfLiteRegistration, async_kernel), 72);
        assert_eq!(offset_of!(TfLiteRegistration, inplace_operator), 80);
    }

    #[test]
    fn delegate_and_its_params_match_the_header() {
        assert_eq!(size_of::<TfLiteDelegate>(), 56);
        assert_eq!(offset_of!(TfLiteDelegate, data_), 0);
        assert_eq!(offset_of!(TfLiteDelegate, Prepare), 8);
        assert_eq!(offset_of!(TfLiteDelegate, CopyFromBufferHandle), 16);
        assert_eq!(offset_of!(TfLiteDelegate, CopyToBufferHandle), 24);
        assert_eq!(offset_of!(TfLiteDelegate, FreeBufferHandle), 32);
        assert_eq!(offset_of!(TfLiteDelegate, flags), 40);
        assert_eq!(offset_of!(TfLiteDelegate, opaque_delegate_builder), 48);
        assert_eq!(size_of::<TfLiteDelegateParams>(), 32);
        assert_eq!(offset_of!(TfLiteDelegateParams, nodes_to_replace), 8);
        assert_eq!(offset_of!(TfLiteDelegateParams, input_tensors), 16);
        assert_eq!(offset_of!(TfLiteDelegateParams, output_tensors), 24);
    }

    #[test]
    fn arrays_and_quantization_match_the_header() {
        assert_eq!(size_of::<TfLiteIntArray>(), 4);
        assert_eq!(offset_of!(TfLiteIntArray, data), 4);
        assert_eq!(size_of::<TfLiteFloatArray>(), 4);
        assert_eq!(offset_of!(TfLiteFloatArray, data), 4);
        assert_eq!(size_of::<TfLiteQuantizationParams>(), 8);
        assert_eq!(size_of::<TfLiteQuantization>(), 16);
        assert_eq!(offset_of!(TfLiteQuantization, params), 8);
        assert_eq!(size_of::<TfLiteAffineQuantization>(), 24);
        assert_eq!(offset_of!(TfLiteAffineQuantization, zero_point), 8);
        assert_eq!(
            offset_of!(TfLiteAffineQuantization, quantized_dimension),
            16
        );
        assert_eq!(size_of::<TfLiteDimensionMetadata>(), 24);
        assert_eq!(offset_of!(TfLiteDimensionMetadata, dense_size), 4);
        assert_eq!(offset_of!(TfLiteDimensionMetadata, array_segments), 8);
        assert_eq!(offset_of!(TfLiteDimensionMetadata, array_indices), 16);
        assert_eq!(size_of::<TfLiteSparsity>(), 32);
        assert_eq!(offset_of!(TfLiteSparsity, block_map), 8);
        assert_eq!(offset_of!(TfLiteSparsity, dim_metadata), 16);
        assert_eq!(offset_of!(TfLiteSparsity, dim_metadata_size), 24);
    }

    #[test]
    fn builtin_params_match_builtin_op_data() {
        assert_eq!(size_of::<TfLiteConvParams>(), 24);
        assert_eq!(offset_of!(TfLiteConvParams, activation), 12);
        assert_eq!(offset_of!(TfLiteConvParams, dilation_height_factor), 20);
        assert_eq!(size_of::<TfLiteDepthwiseConvParams>(), 28);
        assert_eq!(offset_of!(TfLiteDepthwiseConvParams, depth_multiplier), 12);
        assert_eq!(offset_of!(TfLiteDepthwiseConvParams, activation), 16);
        assert_eq!(size_of::<TfLitePoolParams>(), 24);
        assert_eq!(offset_of!(TfLitePoolParams, filter_height), 16);
        assert_eq!(offset_of!(TfLiteFullyConnectedParams, keep_num_dims), 8);
        assert_eq!(
            offset_of!(TfLiteFullyConnectedParams, asymmetric_quantize_inputs),
            9
        );
        assert_eq!(size_of::<TfLiteReshapeParams>(), 36);
        assert_eq!(offset_of!(TfLiteReshapeParams, num_dimensions), 32);
        assert_eq!(offset_of!(TfLiteSqueezeParams, num_squeeze_dims), 32);
        assert_eq!(offset_of!(TfLiteStridedSliceParams, offset), 20);
        assert_eq!(offset_of!(TfLiteLocalResponseNormParams, beta), 12);
        // The window prefix (padding, stride_width, stride_height) context.rs reads once.
        for (pad, sw, sh) in [
            (
                offset_of!(TfLiteConvParams, padding),
                offset_of!(TfLiteConvParams, stride_width),
                offset_of!(TfLiteConvParams, stride_height),
            ),
            (
                offset_of!(TfLiteDepthwiseConvParams, padding),
                offset_of!(TfLiteDepthwiseConvParams, stride_width),
                offset_of!(TfLiteDepthwiseConvParams, stride_height),
            ),
            (
                offset_of!(TfLiteTransposeConvParams, padding),
                offset_of!(TfLiteTransposeConvParams, stride_width),
                offset_of!(TfLiteTransposeConvParams, stride_height),
            ),
            (
                offset_of!(TfLitePoolParams, padding),
                offset_of!(TfLitePoolParams, stride_width),
                offset_of!(TfLitePoolParams, stride_height),
            ),
        ] {
            assert_eq!((pad, sw, sh), (0, 4, 8));
        }
    }
}
