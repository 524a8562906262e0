//! The graph model: operand and operation types with their NN HAL codes, operands, operations.

/// An enum of NN HAL codes: the variants with their numeric codes and HAL spellings, and
/// `ALL`, `code`, `from_code`, `name`, `from_name` and `Display`. The HAL's own enums
/// (`nnaccel_hal::types`) are made with it too.
#[macro_export]
macro_rules! code_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident { $( $(#[$vmeta:meta])* $variant:ident = $code:literal => $hal:literal, )* }
    ) => {
        $(#[$meta])*
        #[repr(i32)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name { $( $(#[$vmeta])* #[doc = $hal] $variant = $code, )* }

        impl $name {
            /// Every value, in code order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// The value with this HAL numeric code.
            pub fn from_code(code: i32) -> Option<Self> {
                match code {
                    $( $code => Some($name::$variant), )*
                    _ => None,
                }
            }

            /// The HAL numeric code.
            pub fn code(self) -> i32 {
                self as i32
            }

            /// The HAL spelling of the name.
            pub fn name(self) -> &'static str {
                match self {
                    $( $name::$variant => $hal, )*
                }
            }

            /// The value with this HAL name (exact spelling).
            pub fn from_name(s: &str) -> Option<Self> {
                match s {
                    $( $hal => Some($name::$variant), )*
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

code_enum! {
    /// NN HAL `OperandType` (1.0–1.3 numeric codes).
    pub enum OperandType {
        Float32 = 0 => "FLOAT32",
        Int32 = 1 => "INT32",
        Uint32 = 2 => "UINT32",
        TensorFloat32 = 3 => "TENSOR_FLOAT32",
        TensorInt32 = 4 => "TENSOR_INT32",
        TensorQuant8Asymm = 5 => "TENSOR_QUANT8_ASYMM",
        Bool = 6 => "BOOL",
        TensorQuant16Symm = 7 => "TENSOR_QUANT16_SYMM",
        TensorFloat16 = 8 => "TENSOR_FLOAT16",
        TensorBool8 = 9 => "TENSOR_BOOL8",
        Float16 = 10 => "FLOAT16",
        TensorQuant8SymmPerChannel = 11 => "TENSOR_QUANT8_SYMM_PER_CHANNEL",
        TensorQuant16Asymm = 12 => "TENSOR_QUANT16_ASYMM",
        TensorQuant8Symm = 13 => "TENSOR_QUANT8_SYMM",
        TensorQuant8AsymmSigned = 14 => "TENSOR_QUANT8_ASYMM_SIGNED",
        /// A reference to one of the model's referenced subgraphs (IF and WHILE bodies).
        Subgraph = 15 => "SUBGRAPH",
    }
}

impl OperandType {
    /// Bytes per element.
    pub fn element_size(self) -> usize {
        use OperandType::*;
        match self {
            Float32 | Int32 | Uint32 | TensorFloat32 | TensorInt32 => 4,
            TensorQuant8Asymm
            | Bool
            | TensorBool8
            | TensorQuant8SymmPerChannel
            | TensorQuant8Symm
            | TensorQuant8AsymmSigned => 1,
            TensorQuant16Symm | TensorFloat16 | Float16 | TensorQuant16Asymm => 2,
            // A SUBGRAPH operand carries no bytes: its location names a subgraph.
            Subgraph => 0,
        }
    }

    /// Whether this is a scalar type (FLOAT32, INT32, UINT32, BOOL, FLOAT16, and SUBGRAPH,
    /// which NNAPI counts as a scalar of size 0).
    pub fn is_scalar(self) -> bool {
        use OperandType::*;
        matches!(self, Float32 | Int32 | Uint32 | Bool | Float16 | Subgraph)
    }

    /// Whether this is a quantized tensor type carrying scale and zero point.
    pub fn is_quantized(self) -> bool {
        use OperandType::*;
        matches!(
            self,
            TensorQuant8Asymm
                | TensorQuant16Symm
                | TensorQuant8SymmPerChannel
                | TensorQuant16Asymm
                | TensorQuant8Symm
                | TensorQuant8AsymmSigned
        )
    }
}

code_enum! {
    /// NN HAL `OperationType` (1.0–1.3 numeric codes).
    pub enum OperationType {
        Add = 0 => "ADD",
        AveragePool2d = 1 => "AVERAGE_POOL_2D",
        Concatenation = 2 => "CONCATENATION",
        Conv2d = 3 => "CONV_2D",
        DepthwiseConv2d = 4 => "DEPTHWISE_CONV_2D",
        DepthToSpace = 5 => "DEPTH_TO_SPACE",
        Dequantize = 6 => "DEQUANTIZE",
        EmbeddingLookup = 7 => "EMBEDDING_LOOKUP",
        Floor = 8 => "FLOOR",
        FullyConnected = 9 => "FULLY_CONNECTED",
        HashtableLookup = 10 => "HASHTABLE_LOOKUP",
        L2Normalization = 11 => "L2_NORMALIZATION",
        L2Pool2d = 12 => "L2_POOL_2D",
        LocalResponseNormalization = 13 => "LOCAL_RESPONSE_NORMALIZATION",
        Logistic = 14 => "LOGISTIC",
        LshProjection = 15 => "LSH_PROJECTION",
        Lstm = 16 => "LSTM",
        MaxPool2d = 17 => "MAX_POOL_2D",
        Mul = 18 => "MUL",
        Relu = 19 => "RELU",
        Relu1 = 20 => "RELU1",
        Relu6 = 21 => "RELU6",
        Reshape = 22 => "RESHAPE",
        ResizeBilinear = 23 => "RESIZE_BILINEAR",
        Rnn = 24 => "RNN",
        Softmax = 25 => "SOFTMAX",
        SpaceToDepth = 26 => "SPACE_TO_DEPTH",
        Svdf = 27 => "SVDF",
        Tanh = 28 => "TANH",
        BatchToSpaceNd = 29 => "BATCH_TO_SPACE_ND",
        Div = 30 => "DIV",
        Mean = 31 => "MEAN",
        Pad = 32 => "PAD",
        SpaceToBatchNd = 33 => "SPACE_TO_BATCH_ND",
        Squeeze = 34 => "SQUEEZE",
        StridedSlice = 35 => "STRIDED_SLICE",
        Sub = 36 => "SUB",
        Transpose = 37 => "TRANSPOSE",
        Abs = 38 => "ABS",
        Argmax = 39 => "ARGMAX",
        Argmin = 40 => "ARGMIN",
        AxisAlignedBboxTransform = 41 => "AXIS_ALIGNED_BBOX_TRANSFORM",
        BidirectionalSequenceLstm = 42 => "BIDIRECTIONAL_SEQUENCE_LSTM",
        BidirectionalSequenceRnn = 43 => "BIDIRECTIONAL_SEQUENCE_RNN",
        BoxWithNmsLimit = 44 => "BOX_WITH_NMS_LIMIT",
        Cast = 45 => "CAST",
        ChannelShuffle = 46 => "CHANNEL_SHUFFLE",
        DetectionPostprocessing = 47 => "DETECTION_POSTPROCESSING",
        Equal = 48 => "EQUAL",
        Exp = 49 => "EXP",
        ExpandDims = 50 => "EXPAND_DIMS",
        Gather = 51 => "GATHER",
        GenerateProposals = 52 => "GENERATE_PROPOSALS",
        Greater = 53 => "GREATER",
        GreaterEqual = 54 => "GREATER_EQUAL",
        GroupedConv2d = 55 => "GROUPED_CONV_2D",
        HeatmapMaxKeypoint = 56 => "HEATMAP_MAX_KEYPOINT",
        InstanceNormalization = 57 => "INSTANCE_NORMALIZATION",
        Less = 58 => "LESS",
        LessEqual = 59 => "LESS_EQUAL",
        Log = 60 => "LOG",
        LogicalAnd = 61 => "LOGICAL_AND",
        LogicalNot = 62 => "LOGICAL_NOT",
        LogicalOr = 63 => "LOGICAL_OR",
        LogSoftmax = 64 => "LOG_SOFTMAX",
        Maximum = 65 => "MAXIMUM",
        Minimum = 66 => "MINIMUM",
        Neg = 67 => "NEG",
        NotEqual = 68 => "NOT_EQUAL",
        PadV2 = 69 => "PAD_V2",
        Pow = 70 => "POW",
        Prelu = 71 => "PRELU",
        Quantize = 72 => "QUANTIZE",
        Quantized16bitLstm = 73 => "QUANTIZED_16BIT_LSTM",
        RandomMultinomial = 74 => "RANDOM_MULTINOMIAL",
        ReduceAll = 75 => "REDUCE_ALL",
        ReduceAny = 76 => "REDUCE_ANY",
        ReduceMax = 77 => "REDUCE_MAX",
        ReduceMin = 78 => "REDUCE_MIN",
        ReduceProd = 79 => "REDUCE_PROD",
        ReduceSum = 80 => "REDUCE_SUM",
        RoiAlign = 81 => "ROI_ALIGN",
        RoiPooling = 82 => "ROI_POOLING",
        Rsqrt = 83 => "RSQRT",
        Select = 84 => "SELECT",
        Sin = 85 => "SIN",
        Slice = 86 => "SLICE",
        Split = 87 => "SPLIT",
        Sqrt = 88 => "SQRT",
        Tile = 89 => "TILE",
        TopkV2 = 90 => "TOPK_V2",
        TransposeConv2d = 91 => "TRANSPOSE_CONV_2D",
        UnidirectionalSequenceLstm = 92 => "UNIDIRECTIONAL_SEQUENCE_LSTM",
        UnidirectionalSequenceRnn = 93 => "UNIDIRECTIONAL_SEQUENCE_RNN",
        ResizeNearestNeighbor = 94 => "RESIZE_NEAREST_NEIGHBOR",
        QuantizedLstm = 95 => "QUANTIZED_LSTM",
        If = 96 => "IF",
        While = 97 => "WHILE",
        Elu = 98 => "ELU",
        HardSwish = 99 => "HARD_SWISH",
        Fill = 100 => "FILL",
        Rank = 101 => "RANK",
    }
}

/// Per-channel quantization parameters (TENSOR_QUANT8_SYMM_PER_CHANNEL).
#[derive(Clone, Debug, PartialEq)]
pub struct ChannelQuant {
    /// The dimension along which the scales apply.
    pub channel_dim: u32,
    /// One scale per index of `channel_dim`.
    pub scales: Vec<f32>,
}

/// Where an operand's value comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lifetime {
    /// Written by one operation, read by others.
    TemporaryVariable,
    /// Supplied by the request.
    SubgraphInput,
    /// Returned to the request.
    SubgraphOutput,
    /// bytes at `graph.operand_values[offset..offset+length]`
    ConstantCopy {
        /// Byte offset into `operand_values`.
        offset: usize,
        /// Byte length.
        length: usize,
    },
    /// bytes at `pools[pool][offset..offset+length]`, pools given at execution time
    ConstantReference {
        /// Pool index.
        pool: u32,
        /// Byte offset into the pool.
        offset: usize,
        /// Byte length.
        length: usize,
    },
    /// An omitted optional argument.
    NoValue,
    /// A reference to subgraph `index` of the root graph's `referenced` list (IF and WHILE
    /// operands of type SUBGRAPH).
    Subgraph {
        /// Index into the root graph's `referenced`.
        index: u32,
    },
}

/// One operand of a graph.
#[derive(Clone, Debug, PartialEq)]
pub struct Operand {
    /// Element type.
    pub ty: OperandType,
    /// Extents; 0 = unknown extent; `[]` = scalar or unknown rank.
    pub dimensions: Vec<u32>,
    /// Quantization scale (0 for non-quantized types).
    pub scale: f32,
    /// Quantization zero point (0 for non-quantized types).
    pub zero_point: i32,
    /// Per-channel quantization, only for TENSOR_QUANT8_SYMM_PER_CHANNEL.
    pub channel_quant: Option<ChannelQuant>,
    /// Where the value comes from.
    pub lifetime: Lifetime,
}

impl Operand {
    /// A non-quantized operand with the given type, dimensions and lifetime.
    pub fn new(ty: OperandType, dimensions: Vec<u32>, lifetime: Lifetime) -> Self {
        Operand {
            ty,
            dimensions,
            scale: 0.0,
            zero_point: 0,
            channel_quant: None,
            lifetime,
        }
    }

    /// Whether the value is a constant (copy or reference).
    pub fn is_constant(&self) -> bool {
        matches!(
            self.lifetime,
            Lifetime::ConstantCopy { .. } | Lifetime::ConstantReference { .. }
        )
    }

    /// Number of elements if every extent is known (1 for scalars), None on overflow or unknown.
    pub fn element_count(&self) -> Option<usize> {
        if self.ty.is_scalar() {
            return Some(1);
        }
        if self.dimensions.is_empty() {
            return None;
        }
        let mut n: usize = 1;
        for &d in &self.dimensions {
            if d == 0 {
                return None;
            }
            n = n.checked_mul(d as usize)?;
        }
        Some(n)
    }

    /// Byte size if every extent is known.
    pub fn byte_size(&self) -> Option<usize> {
        self.element_count()?.checked_mul(self.ty.element_size())
    }
}

/// One operation of a graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation {
    /// Operation type.
    pub op: OperationType,
    /// Operand indexes of the inputs, in HAL argument order.
    pub inputs: Vec<u32>,
    /// Operand indexes of the outputs.
    pub outputs: Vec<u32>,
}

/// A neural-network graph (one NN HAL subgraph).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Graph {
    /// All operands.
    pub operands: Vec<Operand>,
    /// All operations (any order; they are sorted topologically when prepared).
    pub operations: Vec<Operation>,
    /// Operand indexes of the graph inputs, in request order.
    pub input_indexes: Vec<u32>,
    /// Operand indexes of the graph outputs, in request order.
    pub output_indexes: Vec<u32>,
    /// Backing bytes of CONSTANT_COPY operands.
    pub operand_values: Vec<u8>,
    /// Whether FLOAT32 may be computed with FLOAT16 range and precision.
    pub relax_float32_to_float16: bool,
    /// The subgraphs that SUBGRAPH operands name (NN HAL 1.3 `Model.referenced`), each
    /// self-contained (its own `operand_values`, CONSTANT_REFERENCE into the same pools). Only the
    /// root graph has any: a referenced graph's SUBGRAPH operands index the root's list too.
    pub referenced: Vec<Graph>,
}
