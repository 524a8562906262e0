//! The client protocol of `nnaccel-hald`: versioned messages, serde-encoded (postcard), in the
//! frames of [`nnaccel_hal::frame`] with file descriptors attached. Specified in
//! `docs/protocol.md`. Also the client library: [`client`] (the service behind the HAL traits),
//! [`modelfile`] (the JSON model format), [`pools`] (memory pools a client makes),
//! [`cache_dir`] (compilation caching in a directory the client owns) and [`bench`].

use serde::{Deserialize, Serialize};

pub use nnaccel_hal::frame::*;
use nnaccel_hal::pool_fd::PoolRole;
use nnaccel_hal::types::*;

pub mod bench;
pub mod cache_dir;
pub mod client;
pub mod modelfile;
pub mod pools;

/// Protocol version; the handshake fails on any other. Version 2 added
/// [`WireModel::referenced`] (IF and WHILE subgraphs), which changed the encoding of every
/// message that carries a model.
pub const PROTOCOL_VERSION: u32 = 2;

// ---------------------------------------------------------------------------------------------
// Messages

/// An operand on the wire (HAL codes as integers; checked on arrival).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireOperand {
    /// OperandType code.
    pub operand_type: i32,
    /// Extents.
    pub dimensions: Vec<u32>,
    /// Scale.
    pub scale: f32,
    /// Zero point.
    pub zero_point: i32,
    /// OperandLifetime code.
    pub lifetime: i32,
    /// pool_index, offset, length, padding.
    pub location: [u32; 4],
    /// Per-channel (scales, channel_dim).
    pub channel_quant: Option<(Vec<f32>, u32)>,
}

/// An operation on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireOperation {
    /// OperationType code.
    pub operation_type: i32,
    /// Inputs.
    pub inputs: Vec<u32>,
    /// Outputs.
    pub outputs: Vec<u32>,
}

/// A model on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireModel {
    /// Operands.
    pub operands: Vec<WireOperand>,
    /// Operations.
    pub operations: Vec<WireOperation>,
    /// Inputs.
    pub input_indexes: Vec<u32>,
    /// Outputs.
    pub output_indexes: Vec<u32>,
    /// CONSTANT_COPY bytes (one length-prefixed block, not a sequence of bytes).
    #[serde(with = "serde_bytes")]
    pub operand_values: Vec<u8>,
    /// Constant pools.
    pub pools: Vec<WireMemory>,
    /// Relaxed float32.
    pub relax: bool,
    /// The referenced subgraphs (NN HAL 1.3 `Model.referenced`), at most
    /// [`nnaccel_hal::validate::MAX_REFERENCED_SUBGRAPHS`].
    pub referenced: Vec<WireSubgraph>,
}

/// A referenced subgraph on the wire; its constants are in the model's values and pools.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireSubgraph {
    /// Operands.
    pub operands: Vec<WireOperand>,
    /// Operations.
    pub operations: Vec<WireOperation>,
    /// Inputs.
    pub input_indexes: Vec<u32>,
    /// Outputs.
    pub output_indexes: Vec<u32>,
}

/// A request argument on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireArgument {
    /// Omitted.
    pub has_no_value: bool,
    /// pool_index, offset, length, padding.
    pub location: [u32; 4],
    /// Dimensions.
    pub dimensions: Vec<u32>,
}

/// A request pool on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum WirePool {
    /// Shared memory.
    Memory(WireMemory),
    /// A memory-domain token.
    Token(u32),
}

/// A request on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireRequest {
    /// Inputs.
    pub inputs: Vec<WireArgument>,
    /// Outputs.
    pub outputs: Vec<WireArgument>,
    /// Pools.
    pub pools: Vec<WirePool>,
}

/// The cache arguments of `PrepareModelWithCache` and `PrepareModelFromCache`. Postcard
/// encodes a struct as its fields in order, so these bytes are the same as three fields of
/// the message itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireCacheFiles {
    /// Model-cache handles, each a list of fd indexes (a valid handle has one).
    pub model: Vec<Vec<u32>>,
    /// Data-cache handles, likewise.
    pub data: Vec<Vec<u32>>,
    /// The cache token.
    pub token: [u8; 32],
}

/// Client to service.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ClientMessage {
    /// First message of a connection.
    Hello {
        /// [`PROTOCOL_VERSION`].
        version: u32,
        /// Free text for logs.
        client: String,
    },
    /// getCapabilities.
    GetCapabilities,
    /// getSupportedOperations (with placement).
    GetSupportedOperations {
        /// The model.
        model: WireModel,
    },
    /// prepareModel.
    PrepareModel {
        /// The model.
        model: WireModel,
        /// ExecutionPreference code.
        preference: i32,
        /// Priority code.
        priority: i32,
        /// Time left until the deadline, in ns.
        timeout_ns: Option<u64>,
    },
    /// Drop a prepared model.
    ReleaseModel {
        /// Its id.
        model_id: u64,
    },
    /// executeSynchronously.
    Execute {
        /// Prepared model id.
        model_id: u64,
        /// The request.
        request: WireRequest,
        /// MeasureTiming::Yes.
        measure: bool,
        /// Time left until the deadline, in ns.
        timeout_ns: Option<u64>,
    },
    /// Service and device state.
    Info,
    /// allocate (1.3): a memory-domain buffer for roles of this connection's prepared models.
    Allocate {
        /// BufferDesc dimensions.
        dimensions: Vec<u32>,
        /// The prepared models the roles index (ids on this connection).
        model_ids: Vec<u64>,
        /// Input roles.
        input_roles: Vec<WireRole>,
        /// Output roles.
        output_roles: Vec<WireRole>,
    },
    /// IBuffer::copyTo: the buffer into the attached memory.
    CopyTo {
        /// The buffer.
        token: u32,
        /// Destination (its fd in the frame).
        memory: WireMemory,
    },
    /// IBuffer::copyFrom: the attached memory into the buffer.
    CopyFrom {
        /// The buffer.
        token: u32,
        /// Source (its fd in the frame).
        memory: WireMemory,
        /// The data's dimensions (empty: the buffer's).
        dimensions: Vec<u32>,
    },
    /// Drop an IBuffer: its token and memory go.
    FreeBuffer {
        /// The buffer.
        token: u32,
    },
    /// configureExecutionBurst (`docs/burst.md`): fds 0 and 1 are the request and result
    /// queues' memfds, fd 2 the service's end of the burst's socketpair.
    ConfigureBurst {
        /// Prepared model id.
        model_id: u64,
        /// The request queue (datums of 24 bytes).
        request_fmq: nnaccel_hal::fmq::FmqDescriptor,
        /// The result queue (datums of 24 bytes).
        result_fmq: nnaccel_hal::fmq::FmqDescriptor,
        /// Polling window in µs; None: the service's choice from the execution preference.
        polling_window_us: Option<u32>,
    },
    /// getNumberOfCacheFilesNeeded.
    GetNumberOfCacheFilesNeeded,
    /// prepareModel with cache handles: prepares, then saves the caches (`docs/caching.md`).
    PrepareModelWithCache {
        /// The model.
        model: WireModel,
        /// ExecutionPreference code.
        preference: i32,
        /// Priority code.
        priority: i32,
        /// Time left until the deadline, in ns.
        timeout_ns: Option<u64>,
        /// The cache files and token.
        cache: WireCacheFiles,
    },
    /// prepareModelFromCache.
    PrepareModelFromCache {
        /// ExecutionPreference code.
        preference: i32,
        /// Priority code.
        priority: i32,
        /// Time left until the deadline, in ns.
        timeout_ns: Option<u64>,
        /// The cache files and token.
        cache: WireCacheFiles,
    },
    /// List the driver-managed cache.
    CacheList,
    /// Empty the driver-managed cache.
    CacheClear,
}

/// A BufferRole on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WireRole {
    /// Index into `model_ids`.
    pub model_index: u32,
    /// Input or output index of that model.
    pub io_index: u32,
    /// Frequency in (0, 1].
    pub frequency: f32,
}

/// The service's state, for `nnaccelctl info`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceInfo {
    /// The service's description of its driver.
    pub driver: String,
    /// Open client connections.
    pub connections: u64,
    /// Prepared models held for clients.
    pub prepared_models: u64,
    /// Device live objects: files, BOs, programs, queues (None when CPU-only).
    pub device_live: Option<[u64; 4]>,
    /// Jobs the device completed.
    pub device_jobs_completed: Option<u64>,
    /// Live memory-domain buffers (all connections).
    pub domain_buffers: u64,
    /// Bytes those buffers hold (device memory, or memfds when CPU-only).
    pub domain_bytes: u64,
    /// Device memory in use (all files), None when CPU-only.
    pub device_memory_used: Option<u64>,
}

/// Service to client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ServiceMessage {
    /// Handshake answer.
    Hello {
        /// [`PROTOCOL_VERSION`].
        version: u32,
        /// Free text: the service and its driver.
        server: String,
    },
    /// Capabilities: (relaxed scalar, relaxed tensor, per operand type, if, while), each
    /// (exec_time, power_usage).
    Capabilities {
        /// Relaxed scalar.
        relaxed_scalar: (f32, f32),
        /// Relaxed tensor.
        relaxed_tensor: (f32, f32),
        /// Per operand type code.
        operand_performance: Vec<(i32, f32, f32)>,
        /// IF.
        if_performance: (f32, f32),
        /// WHILE.
        while_performance: (f32, f32),
    },
    /// Supported operations and where each runs (0 device, 1 cpu, 2 unsupported).
    SupportedOperations {
        /// Per operation.
        supported: Vec<bool>,
        /// Per operation.
        placement: Vec<u8>,
    },
    /// A prepared model.
    Prepared {
        /// Its id on this connection.
        model_id: u64,
        /// Whether it runs on the device.
        on_device: bool,
    },
    /// ReleaseModel done.
    Released,
    /// An execution's result.
    Executed {
        /// ErrorStatus code.
        status: i32,
        /// Output shapes (dimensions, is_sufficient).
        output_shapes: Vec<(Vec<u32>, bool)>,
        /// timeOnDevice, timeInDriver (µs; u64::MAX = not measured).
        timing: (u64, u64),
    },
    /// Info.
    Info(ServiceInfo),
    /// A call failed.
    Error {
        /// ErrorStatus code.
        status: i32,
        /// What went wrong.
        message: String,
    },
    /// A buffer was allocated.
    Allocated {
        /// Its token (> 0).
        token: u32,
    },
    /// CopyTo or CopyFrom done.
    Copied,
    /// FreeBuffer done.
    BufferFreed,
    /// ConfigureBurst done: the burst's worker runs.
    BurstConfigured {
        /// The polling window the worker uses, in µs.
        polling_window_us: u32,
        /// How the worker sleeps (io_uring FutexWait or the futex syscall).
        wait: String,
    },
    /// getNumberOfCacheFilesNeeded's answer.
    CacheFilesNeeded {
        /// Model-cache files.
        model: u32,
        /// Data-cache files.
        data: u32,
    },
    /// The driver-managed cache: whether it is on, and its entries (key, bytes, last used in
    /// seconds since the epoch), most recently used first.
    CacheEntries {
        /// Whether the service keeps a driver-managed cache.
        enabled: bool,
        /// The entries.
        entries: Vec<(String, u64, u64)>,
    },
    /// CacheClear done.
    CacheCleared {
        /// Entries removed.
        removed: u64,
    },
}

// ---------------------------------------------------------------------------------------------
// Conversions. Outgoing: HAL types to wire types plus the fds to attach. Incoming: wire types
// and received fds to HAL types, every code and index checked.

fn loc(l: &DataLocation) -> [u32; 4] {
    [l.pool_index, l.offset, l.length, l.padding]
}

fn unloc(l: [u32; 4]) -> DataLocation {
    DataLocation {
        pool_index: l[0],
        offset: l[1],
        length: l[2],
        padding: l[3],
    }
}

fn operands_to_wire(operands: &[Operand]) -> Vec<WireOperand> {
    operands
        .iter()
        .map(|o| WireOperand {
            operand_type: o.operand_type.code(),
            dimensions: o.dimensions.clone(),
            scale: o.scale,
            zero_point: o.zero_point,
            lifetime: o.lifetime.code(),
            location: loc(&o.location),
            channel_quant: o
                .extra_params
                .as_ref()
                .map(|p| (p.scales.clone(), p.channel_dim)),
        })
        .collect()
}

fn operations_to_wire(operations: &[Operation]) -> Vec<WireOperation> {
    operations
        .iter()
        .map(|o| WireOperation {
            operation_type: o.operation_type.code(),
            inputs: o.inputs.clone(),
            outputs: o.outputs.clone(),
        })
        .collect()
}

/// A model for the wire; its pools' fds are added to `fds`.
pub fn model_to_wire<'a>(model: &'a Model, fds: &mut FdList<'a>) -> WireModel {
    WireModel {
        operands: operands_to_wire(&model.operands),
        operations: operations_to_wire(&model.operations),
        input_indexes: model.input_indexes.clone(),
        output_indexes: model.output_indexes.clone(),
        operand_values: model.operand_values.clone(),
        pools: model.pools.iter().map(|m| fds.add(m)).collect(),
        relax: model.relax_computation_float32_to_float16,
        referenced: model
            .referenced
            .iter()
            .map(|s| WireSubgraph {
                operands: operands_to_wire(&s.operands),
                operations: operations_to_wire(&s.operations),
                input_indexes: s.input_indexes.clone(),
                output_indexes: s.output_indexes.clone(),
            })
            .collect(),
    }
}

/// A request for the wire; its pools' fds are added to `fds`.
pub fn request_to_wire<'a>(request: &'a Request, fds: &mut FdList<'a>) -> WireRequest {
    let arg = |a: &RequestArgument| WireArgument {
        has_no_value: a.has_no_value,
        location: loc(&a.location),
        dimensions: a.dimensions.clone(),
    };
    WireRequest {
        inputs: request.inputs.iter().map(arg).collect(),
        outputs: request.outputs.iter().map(arg).collect(),
        pools: request
            .pools
            .iter()
            .map(|p| match p {
                MemoryPool::Memory(m) => WirePool::Memory(fds.add(m)),
                MemoryPool::Token(t) => WirePool::Token(*t),
            })
            .collect(),
    }
}

fn bad(msg: impl Into<String>) -> ProtocolError {
    ProtocolError::BadMessage(msg.into())
}

fn operands_from_wire(operands: Vec<WireOperand>) -> Result<Vec<Operand>, ProtocolError> {
    let mut out = Vec::with_capacity(operands.len());
    for (i, o) in operands.into_iter().enumerate() {
        out.push(Operand {
            operand_type: OperandType::from_code(o.operand_type)
                .ok_or_else(|| bad(format!("operand {i}: unknown type {}", o.operand_type)))?,
            dimensions: o.dimensions,
            scale: o.scale,
            zero_point: o.zero_point,
            lifetime: OperandLifetime::from_code(o.lifetime)
                .ok_or_else(|| bad(format!("operand {i}: unknown lifetime {}", o.lifetime)))?,
            location: unloc(o.location),
            extra_params: o
                .channel_quant
                .map(|(scales, channel_dim)| SymmPerChannelQuantParams {
                    scales,
                    channel_dim,
                }),
        });
    }
    Ok(out)
}

fn operations_from_wire(operations: Vec<WireOperation>) -> Result<Vec<Operation>, ProtocolError> {
    let mut out = Vec::with_capacity(operations.len());
    for (i, o) in operations.into_iter().enumerate() {
        out.push(Operation {
            operation_type: OperationType::from_code(o.operation_type)
                .ok_or_else(|| bad(format!("operation {i}: unknown type {}", o.operation_type)))?,
            inputs: o.inputs,
            outputs: o.outputs,
        });
    }
    Ok(out)
}

fn subgraph_from_wire(s: WireSubgraph) -> Result<Subgraph, ProtocolError> {
    Ok(Subgraph {
        operands: operands_from_wire(s.operands)?,
        operations: operations_from_wire(s.operations)?,
        input_indexes: s.input_indexes,
        output_indexes: s.output_indexes,
    })
}

/// A model from the wire. More than
/// [`nnaccel_hal::validate::MAX_REFERENCED_SUBGRAPHS`] referenced subgraphs is a bad message.
pub fn model_from_wire(w: WireModel, fds: &mut ReceivedFds) -> Result<Model, ProtocolError> {
    let max = nnaccel_hal::validate::MAX_REFERENCED_SUBGRAPHS;
    if w.referenced.len() > max {
        return Err(bad(format!(
            "{} referenced subgraphs, more than {max}",
            w.referenced.len()
        )));
    }
    let operands = operands_from_wire(w.operands)?;
    let operations = operations_from_wire(w.operations)?;
    let referenced = w
        .referenced
        .into_iter()
        .enumerate()
        .map(|(k, s)| {
            subgraph_from_wire(s).map_err(|e| match e {
                ProtocolError::BadMessage(m) => bad(format!("referenced subgraph {k}: {m}")),
                e => e,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let pools = w
        .pools
        .iter()
        .enumerate()
        .map(|(i, p)| fds.pool(p, &format!("model pool {i}"), PoolRole::Read))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Model {
        operands,
        operations,
        input_indexes: w.input_indexes,
        output_indexes: w.output_indexes,
        referenced,
        operand_values: w.operand_values,
        pools,
        relax_computation_float32_to_float16: w.relax,
    })
}

/// A request from the wire.
pub fn request_from_wire(w: WireRequest, fds: &mut ReceivedFds) -> Result<Request, ProtocolError> {
    let arg = |a: WireArgument| RequestArgument {
        has_no_value: a.has_no_value,
        location: unloc(a.location),
        dimensions: a.dimensions,
    };
    // A pool any output names is written by the service; the others are only read.
    let role = |i: usize| {
        if w.outputs.iter().any(|o| o.location[0] as usize == i) {
            PoolRole::Write
        } else {
            PoolRole::Read
        }
    };
    let pools = w
        .pools
        .iter()
        .enumerate()
        .map(|(i, p)| match p {
            WirePool::Memory(m) => fds
                .pool(m, &format!("request pool {i}"), role(i))
                .map(MemoryPool::Memory),
            WirePool::Token(t) => Ok(MemoryPool::Token(*t)),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Request {
        inputs: w.inputs.into_iter().map(arg).collect(),
        outputs: w.outputs.into_iter().map(arg).collect(),
        pools,
    })
}

/// Capabilities for the wire.
pub fn capabilities_to_wire(c: &Capabilities) -> ServiceMessage {
    let p = |p: &PerformanceInfo| (p.exec_time, p.power_usage);
    ServiceMessage::Capabilities {
        relaxed_scalar: p(&c.relaxed_float32_to_float16_performance_scalar),
        relaxed_tensor: p(&c.relaxed_float32_to_float16_performance_tensor),
        operand_performance: c
            .operand_performance
            .iter()
            .map(|(t, q)| (t.code(), q.exec_time, q.power_usage))
            .collect(),
        if_performance: p(&c.if_performance),
        while_performance: p(&c.while_performance),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_trailing_bytes_are_refused() {
        let m = ClientMessage::Execute {
            model_id: 7,
            request: WireRequest {
                inputs: vec![],
                outputs: vec![],
                pools: vec![WirePool::Token(3)],
            },
            measure: true,
            timeout_ns: Some(5),
        };
        let mut bytes = encode(&m).unwrap();
        assert_eq!(decode::<ClientMessage>(&bytes).unwrap(), m);
        bytes.push(0);
        assert!(decode::<ClientMessage>(&bytes).is_err());
        assert!(decode::<ClientMessage>(&[0xff, 0xff, 0xff]).is_err());
    }

    /// Main: one SUBGRAPH operand naming subgraph 1; subgraph 1 names subgraph 0; subgraph
    /// 0 is a RELU with a per-channel operand, to carry every operand field.
    fn model_with_subgraphs() -> Model {
        let operand = |ty, dims: &[u32], lifetime, offset| Operand {
            operand_type: ty,
            dimensions: dims.to_vec(),
            scale: 0.0,
            zero_point: 0,
            lifetime,
            location: DataLocation {
                pool_index: 0,
                offset,
                length: 0,
                padding: 0,
            },
            extra_params: None,
        };
        let mut per_channel = operand(
            OperandType::TensorQuant8SymmPerChannel,
            &[2, 1],
            OperandLifetime::TemporaryVariable,
            0,
        );
        per_channel.extra_params = Some(SymmPerChannelQuantParams {
            scales: vec![0.5, 0.25],
            channel_dim: 0,
        });
        Model {
            operands: vec![Operand::subgraph(1)],
            referenced: vec![
                Subgraph {
                    operands: vec![
                        operand(
                            OperandType::TensorFloat32,
                            &[4],
                            OperandLifetime::SubgraphInput,
                            0,
                        ),
                        operand(
                            OperandType::TensorFloat32,
                            &[4],
                            OperandLifetime::SubgraphOutput,
                            0,
                        ),
                        per_channel,
                    ],
                    operations: vec![Operation {
                        operation_type: OperationType::Relu,
                        inputs: vec![0],
                        outputs: vec![1],
                    }],
                    input_indexes: vec![0],
                    output_indexes: vec![1],
                },
                Subgraph {
                    operands: vec![Operand::subgraph(0)],
                    ..Subgraph::default()
                },
            ],
            operand_values: vec![1, 2, 3, 4],
            relax_computation_float32_to_float16: true,
            ..Model::default()
        }
    }

    fn through_the_wire(m: &Model) -> Result<Model, ProtocolError> {
        let mut fds = FdList::default();
        let bytes = encode(&model_to_wire(m, &mut fds))?;
        assert!(fds.fds().is_empty());
        model_from_wire(decode::<WireModel>(&bytes)?, &mut ReceivedFds::new(vec![]))
    }

    #[test]
    fn referenced_subgraphs_round_trip_through_the_wire() {
        let m = model_with_subgraphs();
        let back = through_the_wire(&m).unwrap();
        assert_eq!(back.operands, m.operands);
        assert_eq!(back.referenced, m.referenced);
        assert_eq!(back.operand_values, m.operand_values);
        assert!(back.relax_computation_float32_to_float16);
        // And inside a message, whose encoding now includes the list.
        let mut fds = FdList::default();
        let msg = ClientMessage::PrepareModel {
            model: model_to_wire(&m, &mut fds),
            preference: 1,
            priority: 100,
            timeout_ns: None,
        };
        assert_eq!(
            decode::<ClientMessage>(&encode(&msg).unwrap()).unwrap(),
            msg
        );
    }

    #[test]
    fn a_model_without_subgraphs_round_trips_with_an_empty_list() {
        let mut m = model_with_subgraphs();
        m.operands.clear();
        m.referenced.clear();
        let back = through_the_wire(&m).unwrap();
        assert!(back.referenced.is_empty());
    }

    #[test]
    fn too_many_referenced_subgraphs_are_a_bad_message() {
        let mut fds = FdList::default();
        let mut w = model_to_wire(&model_with_subgraphs(), &mut fds);
        let max = nnaccel_hal::validate::MAX_REFERENCED_SUBGRAPHS;
        w.referenced = vec![w.referenced[1].clone(); max + 1];
        let bytes = encode(&w).unwrap();
        let err =
            model_from_wire(decode(&bytes).unwrap(), &mut ReceivedFds::new(vec![])).unwrap_err();
        assert!(
            matches!(&err, ProtocolError::BadMessage(m) if m.contains(&format!("{}", max + 1))),
            "{err}"
        );
        w.referenced.truncate(max);
        model_from_wire(w, &mut ReceivedFds::new(vec![])).unwrap();
    }

    #[test]
    fn unknown_codes_in_a_referenced_subgraph_are_a_bad_message_naming_it() {
        let m = model_with_subgraphs();
        let mut fds = FdList::default();
        let mut w = model_to_wire(&m, &mut fds);
        w.referenced[0].operands[2].lifetime = 99;
        let err = model_from_wire(w.clone(), &mut ReceivedFds::new(vec![])).unwrap_err();
        assert!(
            err.to_string()
                .contains("referenced subgraph 0: operand 2: unknown lifetime 99"),
            "{err}"
        );
        let mut w = model_to_wire(&m, &mut fds);
        w.referenced[0].operations[0].operation_type = -1;
        let err = model_from_wire(w, &mut ReceivedFds::new(vec![])).unwrap_err();
        assert!(
            err.to_string()
                .contains("referenced subgraph 0: operation 0: unknown type -1"),
            "{err}"
        );
    }

    #[test]
    fn a_truncated_model_with_subgraphs_never_decodes() {
        let mut fds = FdList::default();
        let bytes = encode(&model_to_wire(&model_with_subgraphs(), &mut fds)).unwrap();
        for len in 0..bytes.len() {
            assert!(decode::<WireModel>(&bytes[..len]).is_err(), "cut at {len}");
        }
    }
}
