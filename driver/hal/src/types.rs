//! The NN HAL 1.3 types, in Rust. Names follow the HAL (`types.hal`); numeric codes are the
//! HAL's. Operand and operation type codes come from the CPU executor, which shares them.

use std::os::fd::OwnedFd;
use std::sync::Arc;

pub use nnaccel_cpu::{OperandType, OperationType};

nnaccel_cpu::code_enum! {
    /// Result of a HAL call (1.0 + 1.3 `ErrorStatus`).
    pub enum ErrorStatus {
        /// Success.
        None = 0 => "NONE",
        /// The device is gone or not usable.
        DeviceUnavailable = 1 => "DEVICE_UNAVAILABLE",
        /// Any other failure.
        GeneralFailure = 2 => "GENERAL_FAILURE",
        /// An output buffer is too small; the output shapes say what is needed.
        OutputInsufficientSize = 3 => "OUTPUT_INSUFFICIENT_SIZE",
        /// The model or request breaks a rule.
        InvalidArgument = 4 => "INVALID_ARGUMENT",
        /// The deadline passed; retrying may work.
        MissedDeadlineTransient = 5 => "MISSED_DEADLINE_TRANSIENT",
        /// The deadline passed; retrying will not help.
        MissedDeadlinePersistent = 6 => "MISSED_DEADLINE_PERSISTENT",
        /// Out of resources for now.
        ResourceExhaustedTransient = 7 => "RESOURCE_EXHAUSTED_TRANSIENT",
        /// Out of resources for good.
        ResourceExhaustedPersistent = 8 => "RESOURCE_EXHAUSTED_PERSISTENT",
    }
}

nnaccel_cpu::code_enum! {
    /// How an operand gets its value (1.3 `OperandLifetime`).
    pub enum OperandLifetime {
        /// Produced and consumed inside the model.
        TemporaryVariable = 0 => "TEMPORARY_VARIABLE",
        /// An input of the (sub)graph; was MODEL_INPUT.
        SubgraphInput = 1 => "SUBGRAPH_INPUT",
        /// An output of the (sub)graph; was MODEL_OUTPUT.
        SubgraphOutput = 2 => "SUBGRAPH_OUTPUT",
        /// A constant in `Model::operand_values`.
        ConstantCopy = 3 => "CONSTANT_COPY",
        /// A constant in one of `Model::pools`.
        ConstantReference = 4 => "CONSTANT_REFERENCE",
        /// An omitted optional argument.
        NoValue = 5 => "NO_VALUE",
        /// A reference to one of `Model::referenced` (IF and WHILE operands); the location's
        /// offset is the subgraph's index, pool index and length are 0.
        Subgraph = 6 => "SUBGRAPH",
    }
}

impl OperandLifetime {
    /// Parses a HAL spelling, accepting the 1.0 names MODEL_INPUT and MODEL_OUTPUT.
    pub fn from_name_or_alias(s: &str) -> Option<Self> {
        match s {
            "MODEL_INPUT" => Some(Self::SubgraphInput),
            "MODEL_OUTPUT" => Some(Self::SubgraphOutput),
            _ => Self::from_name(s),
        }
    }
}

nnaccel_cpu::code_enum! {
    /// What the client wants preparation to optimise for.
    pub enum ExecutionPreference {
        /// Prefer low power (bursts poll less).
        LowPower = 0 => "LOW_POWER",
        /// Prefer the fastest single answer.
        FastSingleAnswer = 1 => "FAST_SINGLE_ANSWER",
        /// Prefer sustained throughput.
        SustainedSpeed = 2 => "SUSTAINED_SPEED",
    }
}

nnaccel_cpu::code_enum! {
    /// Priority of a prepared model (1.3).
    pub enum Priority {
        /// Low.
        Low = 90 => "LOW",
        /// Medium (default).
        Medium = 100 => "MEDIUM",
        /// High.
        High = 110 => "HIGH",
    }
}

nnaccel_cpu::code_enum! {
    /// Whether an execution measures its timing.
    pub enum MeasureTiming {
        /// Do not measure.
        No = 0 => "NO",
        /// Measure timeOnDevice and timeInDriver.
        Yes = 1 => "YES",
    }
}

/// Where a value lives: a pool index and a byte range (1.3 `DataLocation`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DataLocation {
    /// Index into the model's or request's pools.
    pub pool_index: u32,
    /// Byte offset in the pool (or in `operand_values`).
    pub offset: u32,
    /// Byte length.
    pub length: u32,
    /// Bytes of padding after the value (1.3); `length + padding` must stay in the pool.
    pub padding: u32,
}

/// Per-channel quantization of a TENSOR_QUANT8_SYMM_PER_CHANNEL operand.
#[derive(Clone, Debug, PartialEq)]
pub struct SymmPerChannelQuantParams {
    /// One scale per channel.
    pub scales: Vec<f32>,
    /// The channel dimension.
    pub channel_dim: u32,
}

/// One operand of a model (1.3 `Operand`).
#[derive(Clone, Debug, PartialEq)]
pub struct Operand {
    /// Element type.
    pub operand_type: OperandType,
    /// Extents; 0 = unknown; `[]` = scalar or unknown rank.
    pub dimensions: Vec<u32>,
    /// Quantization scale.
    pub scale: f32,
    /// Quantization zero point.
    pub zero_point: i32,
    /// How the operand gets its value.
    pub lifetime: OperandLifetime,
    /// Where constants live; all zero for other lifetimes.
    pub location: DataLocation,
    /// Per-channel quantization parameters.
    pub extra_params: Option<SymmPerChannelQuantParams>,
}

impl Operand {
    /// A SUBGRAPH operand naming referenced subgraph `index` (type and lifetime SUBGRAPH,
    /// location pool 0, offset `index`, length 0, as the HAL spells it).
    pub fn subgraph(index: u32) -> Self {
        Self {
            operand_type: OperandType::Subgraph,
            dimensions: Vec::new(),
            scale: 0.0,
            zero_point: 0,
            lifetime: OperandLifetime::Subgraph,
            location: DataLocation {
                pool_index: 0,
                offset: index,
                length: 0,
                padding: 0,
            },
            extra_params: None,
        }
    }
}

/// One operation (1.3 `Operation`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation {
    /// The operation.
    pub operation_type: OperationType,
    /// Input operand indexes, in the HAL's argument order.
    pub inputs: Vec<u32>,
    /// Output operand indexes.
    pub outputs: Vec<u32>,
}

/// The kind of a shared memory pool (`hidl_memory::name` in the HAL).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemoryKind {
    /// `ashmem`: a memfd here; mapped whole.
    Ashmem,
    /// `mmap_fd`: any mappable fd, mapped with `prot` at `offset`.
    MmapFd {
        /// `PROT_READ` / `PROT_WRITE` bits.
        prot: i32,
        /// Offset into the file (page aligned).
        offset: u64,
    },
    /// `hardware_buffer_blob`: a dma-buf (or a stand-in), CPU access bracketed with syncs.
    HardwareBufferBlob,
    /// `hardware_buffer`: a non-BLOB buffer the HAL cannot map; device I/O only.
    HardwareBuffer,
}

impl MemoryKind {
    /// The HAL's name for the kind.
    pub fn hal_name(&self) -> &'static str {
        match self {
            Self::Ashmem => "ashmem",
            Self::MmapFd { .. } => "mmap_fd",
            Self::HardwareBufferBlob => "hardware_buffer_blob",
            Self::HardwareBuffer => "hardware_buffer",
        }
    }
}

/// A shared memory pool handed to the driver: an fd with its kind and size.
#[derive(Clone, Debug)]
pub struct Memory {
    /// What kind of memory, and how to map it.
    pub kind: MemoryKind,
    /// The fd (shared: the same pool may appear in several models and requests).
    pub fd: Arc<OwnedFd>,
    /// Size in bytes (0 for `hardware_buffer`, whose size the HAL cannot know).
    pub size: u64,
}

/// A pool of a request: shared memory, or a driver-managed buffer named by token (1.3).
#[derive(Clone, Debug)]
pub enum MemoryPool {
    /// Shared memory.
    Memory(Memory),
    /// A memory-domain buffer token (> 0).
    Token(u32),
}

/// A referenced subgraph of a model (1.3 `Subgraph`): the body of an IF branch or of a WHILE
/// condition or body. Its constants live in the model's `operand_values` and `pools`, as the
/// main subgraph's do; its SUBGRAPH operands index the model's `referenced` list.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Subgraph {
    /// Operands.
    pub operands: Vec<Operand>,
    /// Operations.
    pub operations: Vec<Operation>,
    /// Operand indexes of the inputs (SUBGRAPH_INPUT), in the calling operation's order.
    pub input_indexes: Vec<u32>,
    /// Operand indexes of the outputs (SUBGRAPH_OUTPUT).
    pub output_indexes: Vec<u32>,
}

/// A model (1.3 `Model`: the main subgraph's fields, the referenced subgraphs, their data).
#[derive(Clone, Debug, Default)]
pub struct Model {
    /// Operands.
    pub operands: Vec<Operand>,
    /// Operations.
    pub operations: Vec<Operation>,
    /// Operand indexes of the inputs, in request order.
    pub input_indexes: Vec<u32>,
    /// Operand indexes of the outputs, in request order.
    pub output_indexes: Vec<u32>,
    /// The subgraphs that SUBGRAPH operands name (by index), for IF and WHILE.
    pub referenced: Vec<Subgraph>,
    /// CONSTANT_COPY bytes (of the main and the referenced subgraphs).
    pub operand_values: Vec<u8>,
    /// Pools holding CONSTANT_REFERENCE values.
    pub pools: Vec<Memory>,
    /// Float32 may be computed with float16 range and precision.
    pub relax_computation_float32_to_float16: bool,
}

impl Model {
    /// The model's structure without its constants: `operand_values` empty, `pools` as given.
    pub fn without_values(&self, pools: Vec<Memory>) -> Model {
        Model {
            operands: self.operands.clone(),
            operations: self.operations.clone(),
            input_indexes: self.input_indexes.clone(),
            output_indexes: self.output_indexes.clone(),
            referenced: self.referenced.clone(),
            operand_values: Vec::new(),
            pools,
            relax_computation_float32_to_float16: self.relax_computation_float32_to_float16,
        }
    }

    /// The operands of the main subgraph, then those of each referenced subgraph in order.
    pub fn all_operands(&self) -> impl Iterator<Item = &Operand> {
        self.operands
            .iter()
            .chain(self.referenced.iter().flat_map(|s| s.operands.iter()))
    }

    /// The operations of the main subgraph, then those of each referenced subgraph in order.
    pub fn all_operations(&self) -> impl Iterator<Item = &Operation> {
        self.operations
            .iter()
            .chain(self.referenced.iter().flat_map(|s| s.operations.iter()))
    }

    /// [`Model::all_operands`], mutable.
    pub fn all_operands_mut(&mut self) -> impl Iterator<Item = &mut Operand> {
        self.operands.iter_mut().chain(
            self.referenced
                .iter_mut()
                .flat_map(|s| s.operands.iter_mut()),
        )
    }
}

/// One input or output of a request (1.3 `RequestArgument`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestArgument {
    /// The optional input/output is omitted.
    pub has_no_value: bool,
    /// Where the data is, in the request's pools.
    pub location: DataLocation,
    /// Dimensions for this execution, or empty to take the model's.
    pub dimensions: Vec<u32>,
}

/// A request (1.3 `Request`).
#[derive(Clone, Debug, Default)]
pub struct Request {
    /// One per model input.
    pub inputs: Vec<RequestArgument>,
    /// One per model output.
    pub outputs: Vec<RequestArgument>,
    /// The pools the arguments point into.
    pub pools: Vec<MemoryPool>,
}

/// The shape of one output (1.2 `OutputShape`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutputShape {
    /// Actual (or needed) extents.
    pub dimensions: Vec<u32>,
    /// Whether the output buffer was large enough.
    pub is_sufficient: bool,
}

/// Execution timing in microseconds; [`Timing::NOT_MEASURED`] where not measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// Time spent on the device.
    pub time_on_device_us: u64,
    /// Time spent in the driver, device time included.
    pub time_in_driver_us: u64,
}

impl Timing {
    /// "Not measured": both fields `u64::MAX`.
    pub const NOT_MEASURED: Timing = Timing {
        time_on_device_us: u64::MAX,
        time_in_driver_us: u64::MAX,
    };
}

impl Default for Timing {
    fn default() -> Self {
        Self::NOT_MEASURED
    }
}

/// The outcome of an execution: status, output shapes, timing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecutionResult {
    /// Status.
    pub status: ErrorStatus,
    /// One per output: on success and on OUTPUT_INSUFFICIENT_SIZE; empty otherwise.
    pub output_shapes: Vec<OutputShape>,
    /// Timing, or not measured (always not measured on failure).
    pub timing: Timing,
}

impl ExecutionResult {
    /// A failed execution: no shapes, no timing (as the HAL requires).
    pub fn failure(status: ErrorStatus) -> Self {
        Self {
            status,
            output_shapes: Vec::new(),
            timing: Timing::NOT_MEASURED,
        }
    }
}

/// Performance relative to the CPU (lower is better), per the HAL.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PerformanceInfo {
    /// Ratio of execution time to a reference CPU's.
    pub exec_time: f32,
    /// Ratio of power use to a reference CPU's.
    pub power_usage: f32,
}

/// The device's capabilities (1.3 `Capabilities`).
#[derive(Clone, Debug, PartialEq)]
pub struct Capabilities {
    /// Float32 computed as float16, scalars.
    pub relaxed_float32_to_float16_performance_scalar: PerformanceInfo,
    /// Float32 computed as float16, tensors.
    pub relaxed_float32_to_float16_performance_tensor: PerformanceInfo,
    /// Per operand type.
    pub operand_performance: Vec<(OperandType, PerformanceInfo)>,
    /// IF operations.
    pub if_performance: PerformanceInfo,
    /// WHILE operations.
    pub while_performance: PerformanceInfo,
}

/// An absolute deadline on the monotonic clock.
pub type Deadline = std::time::Instant;
