//! One form for a TFLite graph, whichever way it arrives: read from a `.tflite` flatbuffer
//! ([`crate::read`]) or taken from the `TfLiteContext` of a running interpreter (the external
//! delegate). [`crate::lower`] maps this form to an NN HAL model, so the import and the
//! delegate share one mapping.
//!
//! The form keeps TFLite's own vocabulary: tensors with TFLite element types and quantization,
//! nodes with a builtin operator code (the numbers of `BuiltinOperator` in `schema.fbs`, which
//! are also `TfLiteBuiltinOperator` in `builtin_ops.h`) and their parameters as typed
//! [`Options`] (the fields that `schema.fbs`'s `*Options` tables and `builtin_op_data.h`'s
//! `TfLite*Params` structs have in common). Nothing here is checked against anything: that is
//! the lowering's job, and every check there is an error, never a panic.

/// A TFLite element type (`TensorType` in `schema.fbs`, `TfLiteType` in `c_api_types.h`; the
/// two number them differently, so each reader translates).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElementType {
    /// 32-bit float.
    Float32,
    /// IEEE half precision.
    Float16,
    /// 64-bit float.
    Float64,
    /// Signed 8-bit (TFLite's int8 quantization, and plain int8).
    Int8,
    /// Unsigned 8-bit (TFLite's uint8 quantization, and plain uint8).
    UInt8,
    /// Signed 16-bit (16x8 quantization).
    Int16,
    /// Unsigned 16-bit.
    UInt16,
    /// Signed 32-bit (biases, shapes, indices).
    Int32,
    /// Unsigned 32-bit.
    UInt32,
    /// Signed 64-bit.
    Int64,
    /// Unsigned 64-bit.
    UInt64,
    /// One byte per boolean.
    Bool,
    /// Signed 4-bit, two per byte.
    Int4,
    /// A string tensor.
    String,
    /// Complex numbers of two float32.
    Complex64,
    /// Complex numbers of two float64.
    Complex128,
    /// A resource handle (VAR_HANDLE's output).
    Resource,
    /// A variant (TensorList) handle.
    Variant,
    /// Brain float 16.
    BFloat16,
}

impl ElementType {
    /// TFLite's name for the type (`FLOAT32`, `INT8`, …), for messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Float32 => "FLOAT32",
            Self::Float16 => "FLOAT16",
            Self::Float64 => "FLOAT64",
            Self::Int8 => "INT8",
            Self::UInt8 => "UINT8",
            Self::Int16 => "INT16",
            Self::UInt16 => "UINT16",
            Self::Int32 => "INT32",
            Self::UInt32 => "UINT32",
            Self::Int64 => "INT64",
            Self::UInt64 => "UINT64",
            Self::Bool => "BOOL",
            Self::Int4 => "INT4",
            Self::String => "STRING",
            Self::Complex64 => "COMPLEX64",
            Self::Complex128 => "COMPLEX128",
            Self::Resource => "RESOURCE",
            Self::Variant => "VARIANT",
            Self::BFloat16 => "BFLOAT16",
        }
    }

    /// Bytes per element, for the fixed-size types (None for INT4, STRING, RESOURCE, VARIANT).
    pub fn size(self) -> Option<usize> {
        Some(match self {
            Self::Int8 | Self::UInt8 | Self::Bool => 1,
            Self::Float16 | Self::BFloat16 | Self::Int16 | Self::UInt16 => 2,
            Self::Float32 | Self::Int32 | Self::UInt32 => 4,
            Self::Float64 | Self::Int64 | Self::UInt64 | Self::Complex64 => 8,
            Self::Complex128 => 16,
            Self::Int4 | Self::String | Self::Resource | Self::Variant => return None,
        })
    }
}

/// A tensor's quantization (`QuantizationParameters`; `TfLiteAffineQuantization`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Quantization {
    /// One scale per tensor, or one per channel along `axis`.
    pub scales: Vec<f32>,
    /// As many zero points as scales (TFLite allows a single one for all channels in files
    /// that predate per-channel zero points; readers expand it).
    pub zero_points: Vec<i64>,
    /// The channel dimension when there is more than one scale.
    pub axis: i32,
}

impl Quantization {
    /// Whether the tensor is quantized at all (TFLite marks "not quantized" by no scales).
    pub fn is_quantized(&self) -> bool {
        !self.scales.is_empty()
    }

    /// Whether it has one scale per channel.
    pub fn is_per_channel(&self) -> bool {
        self.scales.len() > 1
    }
}

/// A sparse constant (`SparsityParameters`), densified at import.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sparsity {
    /// The order in which dimensions are traversed (`traversal_order`).
    pub traversal_order: Vec<i32>,
    /// For block sparsity, the original dimension each block dimension maps to.
    pub block_map: Vec<i32>,
    /// Per traversed dimension: dense (its size) or sparse CSR (segments and indices).
    pub dim_metadata: Vec<DimensionMetadata>,
}

/// How one traversed dimension of a sparse tensor is stored.
#[derive(Clone, Debug, PartialEq)]
pub enum DimensionMetadata {
    /// Every index is present.
    Dense {
        /// The dimension's size.
        size: i32,
    },
    /// Compressed: `array_segments[i]..array_segments[i+1]` index `array_indices`.
    SparseCsr {
        /// Segment boundaries.
        array_segments: Vec<i32>,
        /// The present indices.
        array_indices: Vec<i32>,
    },
}

/// One tensor of a subgraph.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    /// Its name in the model (input and output names are what `--inputs`/`--outputs` use).
    pub name: String,
    /// Element type.
    pub element_type: ElementType,
    /// Shape as stored (`shape`); may be empty for a scalar.
    pub shape: Vec<i32>,
    /// Shape with -1 for dimensions unknown until execution (`shape_signature`), or empty
    /// when the file gives none.
    pub shape_signature: Vec<i32>,
    /// Quantization, empty when not quantized.
    pub quantization: Quantization,
    /// Sparse storage of a constant, when it has one.
    pub sparsity: Option<Sparsity>,
    /// The constant's bytes (little-endian), when the tensor is a constant.
    pub data: Option<Vec<u8>>,
    /// A variable tensor (`is_variable`: state kept by the interpreter between invocations).
    pub is_variable: bool,
}

/// TFLite's padding (`Padding`; `TfLitePadding`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Padding {
    /// Output size ceil(in / stride); the implicit padding NNAPI calls SAME.
    Same,
    /// No padding.
    Valid,
}

/// A fused activation (`ActivationFunctionType`; `TfLiteFusedActivation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// None.
    None,
    /// max(x, 0).
    Relu,
    /// clamp(x, -1, 1).
    ReluN1To1,
    /// clamp(x, 0, 6).
    Relu6,
    /// tanh(x): no NNAPI fused code, lowered as its own operation.
    Tanh,
    /// Sign bit: no NNAPI equivalent.
    SignBit,
    /// sigmoid(x): no NNAPI fused code, lowered as its own operation.
    Sigmoid,
}

/// The parameters of one node, by operator family. Operators without parameters, and those
/// whose parameters all arrive as input tensors, carry [`Options::None`].
#[derive(Clone, Debug, PartialEq)]
pub enum Options {
    /// No parameters.
    None,
    /// CONV_2D.
    Conv2d {
        /// Padding.
        padding: Padding,
        /// Stride along width.
        stride_w: i32,
        /// Stride along height.
        stride_h: i32,
        /// Dilation along width.
        dilation_w: i32,
        /// Dilation along height.
        dilation_h: i32,
        /// Fused activation.
        activation: Activation,
    },
    /// DEPTHWISE_CONV_2D. `depth_multiplier` is as stored; the lowering derives the multiplier
    /// from the shapes, as NNAPI's delegate does (older converters wrote it wrong).
    DepthwiseConv2d {
        /// Padding.
        padding: Padding,
        /// Stride along width.
        stride_w: i32,
        /// Stride along height.
        stride_h: i32,
        /// As stored.
        depth_multiplier: i32,
        /// Dilation along width.
        dilation_w: i32,
        /// Dilation along height.
        dilation_h: i32,
        /// Fused activation.
        activation: Activation,
    },
    /// TRANSPOSE_CONV.
    TransposeConv {
        /// Padding.
        padding: Padding,
        /// Stride along width.
        stride_w: i32,
        /// Stride along height.
        stride_h: i32,
        /// Fused activation.
        activation: Activation,
    },
    /// AVERAGE_POOL_2D, MAX_POOL_2D, L2_POOL_2D.
    Pool2d {
        /// Padding.
        padding: Padding,
        /// Stride along width.
        stride_w: i32,
        /// Stride along height.
        stride_h: i32,
        /// Window width.
        filter_w: i32,
        /// Window height.
        filter_h: i32,
        /// Fused activation.
        activation: Activation,
    },
    /// FULLY_CONNECTED.
    FullyConnected {
        /// Fused activation.
        activation: Activation,
        /// Keep the input's leading dimensions in the output.
        keep_num_dims: bool,
        /// The weights are shuffled (`SHUFFLED4x16INT8`): not mappable.
        shuffled_weights: bool,
        /// Hybrid quantization's asymmetric inputs flag.
        asymmetric_quantize_inputs: bool,
    },
    /// Operators whose only parameter is a fused activation: ADD, SUB, MUL, DIV,
    /// L2_NORMALIZATION, …
    Activation(Activation),
    /// CONCATENATION.
    Concatenation {
        /// Axis, may be negative.
        axis: i32,
        /// Fused activation.
        activation: Activation,
    },
    /// SOFTMAX.
    Softmax {
        /// The exponent's factor.
        beta: f32,
    },
    /// RESHAPE given its new shape as an option (when there is no shape tensor).
    Reshape {
        /// The new shape, may hold one -1.
        new_shape: Vec<i32>,
    },
    /// SQUEEZE.
    Squeeze {
        /// The dimensions to remove, empty for every size-1 dimension.
        squeeze_dims: Vec<i32>,
    },
    /// SPLIT and SPLIT_V.
    Split {
        /// How many outputs.
        num_splits: i32,
    },
    /// STRIDED_SLICE.
    StridedSlice {
        /// Bit i: ignore begin\[i\].
        begin_mask: i32,
        /// Bit i: ignore end\[i\].
        end_mask: i32,
        /// Bit i: an ellipsis.
        ellipsis_mask: i32,
        /// Bit i: a new axis.
        new_axis_mask: i32,
        /// Bit i: drop dimension i.
        shrink_axis_mask: i32,
        /// `end` is an offset from `begin`.
        offset: bool,
    },
    /// LEAKY_RELU.
    LeakyRelu {
        /// Slope for x < 0.
        alpha: f32,
    },
    /// GATHER.
    Gather {
        /// Axis, may be negative.
        axis: i32,
        /// Batch dimensions.
        batch_dims: i32,
    },
    /// MEAN, SUM, REDUCE_MAX, REDUCE_MIN, REDUCE_PROD, REDUCE_ANY, REDUCE_ALL.
    Reducer {
        /// Keep reduced dimensions with size 1.
        keep_dims: bool,
    },
    /// RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR.
    Resize {
        /// Align the corners.
        align_corners: bool,
        /// Sample at pixel centres.
        half_pixel_centers: bool,
    },
    /// PACK.
    Pack {
        /// How many inputs.
        values_count: i32,
        /// Axis.
        axis: i32,
    },
    /// UNPACK.
    Unpack {
        /// How many outputs.
        num: i32,
        /// Axis.
        axis: i32,
    },
    /// SPACE_TO_DEPTH and DEPTH_TO_SPACE.
    BlockSize(i32),
    /// LOCAL_RESPONSE_NORMALIZATION.
    LocalResponseNormalization {
        /// Half-width of the window.
        radius: i32,
        /// Added to the sum.
        bias: f32,
        /// Factor of the sum.
        alpha: f32,
        /// Exponent.
        beta: f32,
    },
    /// ARG_MAX and ARG_MIN.
    ArgMinMax {
        /// The index type of the output.
        output_type: ElementType,
    },
    /// BATCH_MATMUL.
    BatchMatMul {
        /// Transpose the first operand's last two dimensions.
        adj_x: bool,
        /// Transpose the second's.
        adj_y: bool,
    },
    /// MIRROR_PAD.
    MirrorPad {
        /// REFLECT (false) or SYMMETRIC (true).
        symmetric: bool,
    },
    /// CAST.
    Cast {
        /// Input type, when stored.
        in_type: Option<ElementType>,
        /// Output type, when stored.
        out_type: Option<ElementType>,
    },
    /// SHAPE.
    Shape {
        /// The output's type.
        out_type: ElementType,
    },
    /// GELU.
    Gelu {
        /// tanh approximation.
        approximate: bool,
    },
    /// IF.
    If {
        /// Subgraph run when the condition is true.
        then_subgraph: i32,
        /// Subgraph run when it is false.
        else_subgraph: i32,
    },
    /// WHILE.
    While {
        /// The condition subgraph.
        cond_subgraph: i32,
        /// The body subgraph.
        body_subgraph: i32,
    },
    /// CALL_ONCE.
    CallOnce {
        /// The subgraph that initializes the variables.
        init_subgraph: i32,
    },
    /// VAR_HANDLE.
    VarHandle {
        /// Container.
        container: String,
        /// The variable's name: handles with the same name are the same variable.
        shared_name: String,
    },
    /// RNN.
    Rnn {
        /// The activation applied inside the recurrence.
        activation: Activation,
        /// Hybrid quantization's asymmetric inputs flag.
        asymmetric_quantize_inputs: bool,
    },
    /// SVDF.
    Svdf {
        /// Filters per unit.
        rank: i32,
        /// The activation applied to the output.
        activation: Activation,
        /// Hybrid quantization's asymmetric inputs flag.
        asymmetric_quantize_inputs: bool,
    },
    /// UNIDIRECTIONAL_SEQUENCE_RNN.
    SequenceRnn {
        /// The input and output are `[time, batch, n]` (else `[batch, time, n]`).
        time_major: bool,
        /// The activation applied inside the recurrence.
        activation: Activation,
        /// Hybrid quantization's asymmetric inputs flag.
        asymmetric_quantize_inputs: bool,
    },
    /// BIDIRECTIONAL_SEQUENCE_RNN.
    BidirectionalSequenceRnn {
        /// The input and outputs are `[time, batch, n]` (else `[batch, time, n]`).
        time_major: bool,
        /// The activation applied inside both recurrences.
        activation: Activation,
        /// One output holding the forward then the backward units (else two outputs).
        merge_outputs: bool,
        /// Hybrid quantization's asymmetric inputs flag.
        asymmetric_quantize_inputs: bool,
    },
    /// LSTM.
    Lstm {
        /// The cell's parameters.
        cell: LstmCell,
        /// Which kernel: only FULL has an NNAPI form.
        kernel: LstmKernel,
    },
    /// UNIDIRECTIONAL_SEQUENCE_LSTM.
    UnidirectionalSequenceLstm {
        /// The cell's parameters.
        cell: LstmCell,
        /// The input is `[time, batch, input]` (else `[batch, time, input]`).
        time_major: bool,
        /// The recurrent weights are diagonals (vectors): no NNAPI form.
        diagonal_recurrent_tensors: bool,
    },
    /// BIDIRECTIONAL_SEQUENCE_LSTM.
    BidirectionalSequenceLstm {
        /// The parameters of both cells.
        cell: LstmCell,
        /// One output with both directions' outputs concatenated (else two outputs).
        merge_outputs: bool,
        /// The input is `[time, batch, input]` (else `[batch, time, input]`).
        time_major: bool,
    },
    /// Options this form does not carry (a builtin whose parameters the lowering never needs
    /// or cannot map), named for messages.
    Other(&'static str),
}

/// The parameters the LSTM family shares (`LSTMOptions` and the sequence forms').
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LstmCell {
    /// The activation of the cell input and of the cell state before the output gate.
    pub activation: Activation,
    /// Clip of the cell state, 0 for none.
    pub cell_clip: f32,
    /// Clip of the projection, 0 for none.
    pub proj_clip: f32,
    /// Hybrid quantization's asymmetric inputs flag.
    pub asymmetric_quantize_inputs: bool,
}

/// LSTM's `kernel_type` (`LSTMKernelType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LstmKernel {
    /// The full kernel: optional CIFG, peephole, projection, layer normalization.
    Full,
    /// The basic kernel (4 inputs, concatenated weights, 4 outputs).
    Basic,
}

/// One node (operator) of a subgraph.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// The builtin operator code (`BuiltinOperator`), e.g. 3 for CONV_2D. Custom operators
    /// carry [`CUSTOM`].
    pub builtin_code: i32,
    /// A custom operator's name.
    pub custom_code: Option<String>,
    /// The operator version from the operator code table (1 when not stored).
    pub version: i32,
    /// Input tensor indexes; -1 marks an omitted optional input.
    pub inputs: Vec<i32>,
    /// Output tensor indexes.
    pub outputs: Vec<i32>,
    /// Intermediate tensors (LSTM), not used by the lowering.
    pub intermediates: Vec<i32>,
    /// Parameters.
    pub options: Options,
}

/// `BuiltinOperator_CUSTOM`.
pub const CUSTOM: i32 = 32;

/// One subgraph: the main one is index 0; IF, WHILE and CALL_ONCE name others.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Subgraph {
    /// Its name, when stored.
    pub name: String,
    /// Tensors.
    pub tensors: Vec<Tensor>,
    /// Nodes, in execution order.
    pub nodes: Vec<Node>,
    /// Input tensor indexes.
    pub inputs: Vec<i32>,
    /// Output tensor indexes.
    pub outputs: Vec<i32>,
}

/// A whole model: its subgraphs, main first.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Graph {
    /// Subgraphs; index 0 is the main one.
    pub subgraphs: Vec<Subgraph>,
    /// The schema version the file names.
    pub version: u32,
    /// The model's description string.
    pub description: String,
}

/// The name TFLite gives a builtin operator code (`CONV_2D`), or `BUILTIN_<n>` for a code this
/// table does not know. The table is `BuiltinOperator` of the vendored `schema.fbs`.
pub fn builtin_name(code: i32) -> std::borrow::Cow<'static, str> {
    match BUILTIN_NAMES.get(usize::try_from(code).unwrap_or(usize::MAX)) {
        Some(name) if !name.is_empty() => std::borrow::Cow::Borrowed(name),
        _ => std::borrow::Cow::Owned(format!("BUILTIN_{code}")),
    }
}

/// Defines [`op`] (one constant per `BuiltinOperator` code) and the name table behind
/// [`builtin_name`] from one list, so a code and its name cannot drift apart.
macro_rules! builtin_operators {
    ($($name:ident = $code:literal,)*) => {
        /// TFLite's `BuiltinOperator` codes (the vendored `schema.fbs`, also
        /// `TfLiteBuiltinOperator` in `builtin_ops.h`): one table for the reader, the lowering
        /// and the delegate.
        #[allow(missing_docs)]
        pub mod op {
            $(pub const $name: i32 = $code;)*
        }

        /// `BuiltinOperator` names, indexed by code.
        const BUILTIN_NAMES: &[&str] = &[$(stringify!($name)),*];

        // The list must be in code order with no gap: the name of code c is BUILTIN_NAMES[c].
        const _: () = {
            let codes = [$($code),*];
            let mut i = 0;
            while i < codes.len() {
                assert!(codes[i] == i as i32, "builtin_operators! out of order");
                i += 1;
            }
        };
    };
}

builtin_operators! {
    ADD = 0,
    AVERAGE_POOL_2D = 1,
    CONCATENATION = 2,
    CONV_2D = 3,
    DEPTHWISE_CONV_2D = 4,
    DEPTH_TO_SPACE = 5,
    DEQUANTIZE = 6,
    EMBEDDING_LOOKUP = 7,
    FLOOR = 8,
    FULLY_CONNECTED = 9,
    HASHTABLE_LOOKUP = 10,
    L2_NORMALIZATION = 11,
    L2_POOL_2D = 12,
    LOCAL_RESPONSE_NORMALIZATION = 13,
    LOGISTIC = 14,
    LSH_PROJECTION = 15,
    LSTM = 16,
    MAX_POOL_2D = 17,
    MUL = 18,
    RELU = 19,
    RELU_N1_TO_1 = 20,
    RELU6 = 21,
    RESHAPE = 22,
    RESIZE_BILINEAR = 23,
    RNN = 24,
    SOFTMAX = 25,
    SPACE_TO_DEPTH = 26,
    SVDF = 27,
    TANH = 28,
    CONCAT_EMBEDDINGS = 29,
    SKIP_GRAM = 30,
    CALL = 31,
    CUSTOM = 32,
    EMBEDDING_LOOKUP_SPARSE = 33,
    PAD = 34,
    UNIDIRECTIONAL_SEQUENCE_RNN = 35,
    GATHER = 36,
    BATCH_TO_SPACE_ND = 37,
    SPACE_TO_BATCH_ND = 38,
    TRANSPOSE = 39,
    MEAN = 40,
    SUB = 41,
    DIV = 42,
    SQUEEZE = 43,
    UNIDIRECTIONAL_SEQUENCE_LSTM = 44,
    STRIDED_SLICE = 45,
    BIDIRECTIONAL_SEQUENCE_RNN = 46,
    EXP = 47,
    TOPK_V2 = 48,
    SPLIT = 49,
    LOG_SOFTMAX = 50,
    DELEGATE = 51,
    BIDIRECTIONAL_SEQUENCE_LSTM = 52,
    CAST = 53,
    PRELU = 54,
    MAXIMUM = 55,
    ARG_MAX = 56,
    MINIMUM = 57,
    LESS = 58,
    NEG = 59,
    PADV2 = 60,
    GREATER = 61,
    GREATER_EQUAL = 62,
    LESS_EQUAL = 63,
    SELECT = 64,
    SLICE = 65,
    SIN = 66,
    TRANSPOSE_CONV = 67,
    SPARSE_TO_DENSE = 68,
    TILE = 69,
    EXPAND_DIMS = 70,
    EQUAL = 71,
    NOT_EQUAL = 72,
    LOG = 73,
    SUM = 74,
    SQRT = 75,
    RSQRT = 76,
    SHAPE = 77,
    POW = 78,
    ARG_MIN = 79,
    FAKE_QUANT = 80,
    REDUCE_PROD = 81,
    REDUCE_MAX = 82,
    PACK = 83,
    LOGICAL_OR = 84,
    ONE_HOT = 85,
    LOGICAL_AND = 86,
    LOGICAL_NOT = 87,
    UNPACK = 88,
    REDUCE_MIN = 89,
    FLOOR_DIV = 90,
    REDUCE_ANY = 91,
    SQUARE = 92,
    ZEROS_LIKE = 93,
    FILL = 94,
    FLOOR_MOD = 95,
    RANGE = 96,
    RESIZE_NEAREST_NEIGHBOR = 97,
    LEAKY_RELU = 98,
    SQUARED_DIFFERENCE = 99,
    MIRROR_PAD = 100,
    ABS = 101,
    SPLIT_V = 102,
    UNIQUE = 103,
    CEIL = 104,
    REVERSE_V2 = 105,
    ADD_N = 106,
    GATHER_ND = 107,
    COS = 108,
    WHERE = 109,
    RANK = 110,
    ELU = 111,
    REVERSE_SEQUENCE = 112,
    MATRIX_DIAG = 113,
    QUANTIZE = 114,
    MATRIX_SET_DIAG = 115,
    ROUND = 116,
    HARD_SWISH = 117,
    IF = 118,
    WHILE = 119,
    NON_MAX_SUPPRESSION_V4 = 120,
    NON_MAX_SUPPRESSION_V5 = 121,
    SCATTER_ND = 122,
    SELECT_V2 = 123,
    DENSIFY = 124,
    SEGMENT_SUM = 125,
    BATCH_MATMUL = 126,
    PLACEHOLDER_FOR_GREATER_OP_CODES = 127,
    CUMSUM = 128,
    CALL_ONCE = 129,
    BROADCAST_TO = 130,
    RFFT2D = 131,
    CONV_3D = 132,
    IMAG = 133,
    REAL = 134,
    COMPLEX_ABS = 135,
    HASHTABLE = 136,
    HASHTABLE_FIND = 137,
    HASHTABLE_IMPORT = 138,
    HASHTABLE_SIZE = 139,
    REDUCE_ALL = 140,
    CONV_3D_TRANSPOSE = 141,
    VAR_HANDLE = 142,
    READ_VARIABLE = 143,
    ASSIGN_VARIABLE = 144,
    BROADCAST_ARGS = 145,
    RANDOM_STANDARD_NORMAL = 146,
    BUCKETIZE = 147,
    RANDOM_UNIFORM = 148,
    MULTINOMIAL = 149,
    GELU = 150,
    DYNAMIC_UPDATE_SLICE = 151,
    RELU_0_TO_1 = 152,
    UNSORTED_SEGMENT_PROD = 153,
    UNSORTED_SEGMENT_MAX = 154,
    UNSORTED_SEGMENT_SUM = 155,
    ATAN2 = 156,
    UNSORTED_SEGMENT_MIN = 157,
    SIGN = 158,
    BITCAST = 159,
    BITWISE_XOR = 160,
    RIGHT_SHIFT = 161,
    STABLEHLO_LOGISTIC = 162,
    STABLEHLO_ADD = 163,
    STABLEHLO_DIVIDE = 164,
    STABLEHLO_MULTIPLY = 165,
    STABLEHLO_MAXIMUM = 166,
    STABLEHLO_RESHAPE = 167,
    STABLEHLO_CLAMP = 168,
    STABLEHLO_CONCATENATE = 169,
    STABLEHLO_BROADCAST_IN_DIM = 170,
    STABLEHLO_CONVOLUTION = 171,
    STABLEHLO_SLICE = 172,
    STABLEHLO_CUSTOM_CALL = 173,
    STABLEHLO_REDUCE = 174,
    STABLEHLO_ABS = 175,
    STABLEHLO_AND = 176,
    STABLEHLO_COSINE = 177,
    STABLEHLO_EXPONENTIAL = 178,
    STABLEHLO_FLOOR = 179,
    STABLEHLO_LOG = 180,
    STABLEHLO_MINIMUM = 181,
    STABLEHLO_NEGATE = 182,
    STABLEHLO_OR = 183,
    STABLEHLO_POWER = 184,
    STABLEHLO_REMAINDER = 185,
    STABLEHLO_RSQRT = 186,
    STABLEHLO_SELECT = 187,
    STABLEHLO_SUBTRACT = 188,
    STABLEHLO_TANH = 189,
    STABLEHLO_SCATTER = 190,
    STABLEHLO_COMPARE = 191,
    STABLEHLO_CONVERT = 192,
    STABLEHLO_DYNAMIC_SLICE = 193,
    STABLEHLO_DYNAMIC_UPDATE_SLICE = 194,
    STABLEHLO_PAD = 195,
    STABLEHLO_IOTA = 196,
    STABLEHLO_DOT_GENERAL = 197,
    STABLEHLO_REDUCE_WINDOW = 198,
    STABLEHLO_SORT = 199,
    STABLEHLO_WHILE = 200,
    STABLEHLO_GATHER = 201,
    STABLEHLO_TRANSPOSE = 202,
    DILATE = 203,
    STABLEHLO_RNG_BIT_GENERATOR = 204,
    REDUCE_WINDOW = 205,
    STABLEHLO_COMPOSITE = 206,
    STABLEHLO_SHIFT_LEFT = 207,
    STABLEHLO_CBRT = 208,
    STABLEHLO_CASE = 209,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_names_follow_the_schema_numbering() {
        assert_eq!(builtin_name(0), "ADD");
        assert_eq!(builtin_name(3), "CONV_2D");
        assert_eq!(builtin_name(4), "DEPTHWISE_CONV_2D");
        assert_eq!(builtin_name(9), "FULLY_CONNECTED");
        assert_eq!(builtin_name(CUSTOM), "CUSTOM");
        assert_eq!(builtin_name(87), "LOGICAL_NOT");
        assert_eq!(builtin_name(114), "QUANTIZE");
        assert_eq!(builtin_name(126), "BATCH_MATMUL");
        assert_eq!(builtin_name(129), "CALL_ONCE");
        assert_eq!(builtin_name(142), "VAR_HANDLE");
        assert_eq!(builtin_name(161), "RIGHT_SHIFT");
        assert_eq!(builtin_name(209), "STABLEHLO_CASE");
        assert_eq!(builtin_name(210), "BUILTIN_210");
        // The constants carry the schema's numbers (golden values from schema.fbs).
        assert_eq!(
            (
                op::ADD,
                op::CONV_2D,
                op::FULLY_CONNECTED,
                op::QUANTIZE,
                op::CALL_ONCE
            ),
            (0, 3, 9, 114, 129)
        );
        assert_eq!(
            (op::VAR_HANDLE, op::GELU, op::STABLEHLO_CASE),
            (142, 150, 209)
        );
        assert_eq!(op::CUSTOM, CUSTOM);
        assert_eq!(builtin_name(-1), "BUILTIN_-1");
    }
}
