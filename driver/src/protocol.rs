//! The client protocol of `nnaccel-hald`: versioned, framed, serde-encoded (postcard), with file
//! descriptors attached (`SCM_RIGHTS`). Specified in `docs/protocol.md`.
//!
//! A frame on the stream socket is a 16-byte header — magic `NNAH`, body length, fd count,
//! zero — sent in one `sendmsg` with the frame's fds attached, then the body. The receiver
//! bounds both the body length and the fd count before reading anything else.

use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use serde::{Deserialize, Serialize};

use crate::hal::types::*;

/// Protocol version; the handshake fails on any other.
pub const PROTOCOL_VERSION: u32 = 1;
/// Frame magic.
pub const FRAME_MAGIC: [u8; 4] = *b"NNAH";
/// Default largest body a peer accepts.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 64 << 20;
/// Most fds one frame may carry.
pub const MAX_FDS_PER_FRAME: usize = 64;
const HEADER_LEN: usize = 16;

/// Protocol errors.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    /// The peer closed the connection.
    #[error("connection closed")]
    Closed,
    /// The frame breaks the framing rules.
    #[error("malformed frame: {0}")]
    BadFrame(String),
    /// The body does not decode.
    #[error("malformed message: {0}")]
    BadMessage(String),
    /// A system call failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

impl From<rustix::io::Errno> for ProtocolError {
    fn from(e: rustix::io::Errno) -> Self {
        Self::Io(e.into())
    }
}

/// Sends one frame with `fds` attached.
pub fn send_frame(
    sock: &UnixStream,
    body: &[u8],
    fds: &[BorrowedFd<'_>],
) -> Result<(), ProtocolError> {
    if fds.len() > MAX_FDS_PER_FRAME {
        return Err(ProtocolError::BadFrame(format!(
            "{} fds exceed {MAX_FDS_PER_FRAME}",
            fds.len()
        )));
    }
    let len =
        u32::try_from(body.len()).map_err(|_| ProtocolError::BadFrame("body too large".into()))?;
    let mut header = [0u8; HEADER_LEN];
    header[..4].copy_from_slice(&FRAME_MAGIC);
    header[4..8].copy_from_slice(&len.to_le_bytes());
    header[8..12].copy_from_slice(&(fds.len() as u32).to_le_bytes());
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS_PER_FRAME))];
    let mut cmsg = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !cmsg.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(ProtocolError::BadFrame("cannot attach fds".into()));
    }
    // The fds ride on the header's bytes; retry the rest of the header without them.
    let mut sent = rustix::net::sendmsg(
        sock,
        &[IoSlice::new(&header)],
        &mut cmsg,
        SendFlags::NOSIGNAL,
    )?;
    while sent < HEADER_LEN {
        sent += rustix::net::send(sock, &header[sent..], SendFlags::NOSIGNAL)?;
    }
    let mut w = sock;
    w.write_all(body)?;
    Ok(())
}

/// Receives one frame: its body (at most `max_body` bytes) and fds.
pub fn recv_frame(
    sock: &UnixStream,
    max_body: usize,
) -> Result<(Vec<u8>, Vec<OwnedFd>), ProtocolError> {
    recv_frame_inner(sock, max_body, None)
}

/// [`recv_frame`] that gives up at `deadline` however the peer trickles its bytes: each read
/// waits at most until then (the socket's read timeout is set before each one, so it is left
/// changed), and the frame fails with a `TimedOut` I/O error when it passes.
pub fn recv_frame_by(
    sock: &UnixStream,
    max_body: usize,
    deadline: std::time::Instant,
) -> Result<(Vec<u8>, Vec<OwnedFd>), ProtocolError> {
    recv_frame_inner(sock, max_body, Some(deadline))
}

/// Sets the read timeout to what is left until `deadline`; TimedOut when nothing is.
fn wait_at_most_until(
    sock: &UnixStream,
    deadline: Option<std::time::Instant>,
) -> Result<(), ProtocolError> {
    let Some(deadline) = deadline else {
        return Ok(());
    };
    let left = deadline.saturating_duration_since(std::time::Instant::now());
    if left.is_zero() {
        return Err(ProtocolError::Io(io::ErrorKind::TimedOut.into()));
    }
    sock.set_read_timeout(Some(left))?;
    Ok(())
}

/// `read_exact` in reads that each wait at most until `deadline`.
fn read_exact_by(
    sock: &UnixStream,
    buf: &mut [u8],
    deadline: Option<std::time::Instant>,
) -> Result<(), ProtocolError> {
    let mut r = sock;
    let mut done = 0;
    while done < buf.len() {
        wait_at_most_until(sock, deadline)?;
        match r.read(&mut buf[done..]) {
            Ok(0) => return Err(ProtocolError::Closed),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ProtocolError::Io(e)),
        }
    }
    Ok(())
}

fn recv_frame_inner(
    sock: &UnixStream,
    max_body: usize,
    deadline: Option<std::time::Instant>,
) -> Result<(Vec<u8>, Vec<OwnedFd>), ProtocolError> {
    wait_at_most_until(sock, deadline)?;
    let mut header = [0u8; HEADER_LEN];
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS_PER_FRAME))];
    let mut cmsg = RecvAncillaryBuffer::new(&mut space);
    let msg = rustix::net::recvmsg(
        sock,
        &mut [IoSliceMut::new(&mut header)],
        &mut cmsg,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut fds = Vec::new();
    for m in cmsg.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = m {
            fds.extend(received);
        }
    }
    if msg.bytes == 0 {
        return Err(ProtocolError::Closed);
    }
    // The control buffer has slack beyond MAX_FDS_PER_FRAME (cmsg alignment), so a
    // few extra fds may arrive untruncated; the limit is on the count, not the buffer.
    if msg.flags.contains(rustix::net::ReturnFlags::CTRUNC) || fds.len() > MAX_FDS_PER_FRAME {
        return Err(ProtocolError::BadFrame(format!(
            "more than {MAX_FDS_PER_FRAME} fds"
        )));
    }
    if msg.bytes < HEADER_LEN {
        read_exact_by(sock, &mut header[msg.bytes..], deadline)?;
    }
    if header[..4] != FRAME_MAGIC || header[12..16] != [0; 4] {
        return Err(ProtocolError::BadFrame(
            "bad magic or reserved bytes".into(),
        ));
    }
    let len = u32::from_le_bytes([header[4], header[5], header[6], header[7]]) as usize;
    let nfds = u32::from_le_bytes([header[8], header[9], header[10], header[11]]) as usize;
    if len > max_body {
        return Err(ProtocolError::BadFrame(format!(
            "{len}-byte body exceeds the {max_body}-byte limit"
        )));
    }
    if nfds != fds.len() {
        return Err(ProtocolError::BadFrame(format!(
            "header announces {nfds} fds, {} arrived",
            fds.len()
        )));
    }
    let mut body = vec![0u8; len];
    read_exact_by(sock, &mut body, deadline)?;
    Ok((body, fds))
}

/// Encodes a message.
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, ProtocolError> {
    postcard::to_stdvec(msg).map_err(|e| ProtocolError::BadMessage(e.to_string()))
}

/// Decodes a message; trailing bytes are an error.
pub fn decode<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, ProtocolError> {
    let (msg, rest) =
        postcard::take_from_bytes(body).map_err(|e| ProtocolError::BadMessage(e.to_string()))?;
    if !rest.is_empty() {
        return Err(ProtocolError::BadMessage(format!(
            "{} trailing bytes",
            rest.len()
        )));
    }
    Ok(msg)
}

// ---------------------------------------------------------------------------------------------
// Messages

/// A memory pool on the wire: its fd travels in the frame, named by index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireMemory {
    /// 0 ashmem, 1 mmap_fd, 2 hardware_buffer_blob, 3 hardware_buffer.
    pub kind: u8,
    /// mmap_fd protection.
    pub prot: i32,
    /// mmap_fd offset.
    pub offset: u64,
    /// Size in bytes.
    pub size: u64,
    /// Index of the fd in the frame.
    pub fd_index: u32,
}

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
        request_fmq: crate::fmq::FmqDescriptor,
        /// The result queue (datums of 24 bytes).
        result_fmq: crate::fmq::FmqDescriptor,
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

/// Collects the fds of outgoing pools.
#[derive(Debug, Default)]
pub struct FdList<'a> {
    fds: Vec<BorrowedFd<'a>>,
}

impl<'a> FdList<'a> {
    /// The fds, in index order.
    pub fn fds(&self) -> &[BorrowedFd<'a>] {
        &self.fds
    }

    /// Adds an fd that is not a pool (a queue, a socket); returns its index.
    pub fn push(&mut self, fd: BorrowedFd<'a>) -> u32 {
        self.fds.push(fd);
        (self.fds.len() - 1) as u32
    }

    /// Adds `mem`'s fd to the list and describes it.
    pub fn add(&mut self, mem: &'a Memory) -> WireMemory {
        let fd_index = self.fds.len() as u32;
        self.fds.push(mem.fd.as_fd());
        let (kind, prot, offset) = match mem.kind {
            MemoryKind::Ashmem => (0, 0, 0),
            MemoryKind::MmapFd { prot, offset } => (1, prot, offset),
            MemoryKind::HardwareBufferBlob => (2, 0, 0),
            MemoryKind::HardwareBuffer => (3, 0, 0),
        };
        WireMemory {
            kind,
            prot,
            offset,
            size: mem.size,
            fd_index,
        }
    }
}

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

/// A model for the wire; its pools' fds are added to `fds`.
pub fn model_to_wire<'a>(model: &'a Model, fds: &mut FdList<'a>) -> WireModel {
    WireModel {
        operands: model
            .operands
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
            .collect(),
        operations: model
            .operations
            .iter()
            .map(|o| WireOperation {
                operation_type: o.operation_type.code(),
                inputs: o.inputs.clone(),
                outputs: o.outputs.clone(),
            })
            .collect(),
        input_indexes: model.input_indexes.clone(),
        output_indexes: model.output_indexes.clone(),
        operand_values: model.operand_values.clone(),
        pools: model.pools.iter().map(|m| fds.add(m)).collect(),
        relax: model.relax_computation_float32_to_float16,
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

/// Received fds, each usable by at most one pool.
#[derive(Debug)]
pub struct ReceivedFds {
    fds: Vec<Option<Arc<OwnedFd>>>,
}

impl ReceivedFds {
    /// Wraps the fds of a frame.
    pub fn new(fds: Vec<OwnedFd>) -> Self {
        Self {
            fds: fds.into_iter().map(|f| Some(Arc::new(f))).collect(),
        }
    }

    /// The memory `w` describes, claiming its fd.
    pub fn memory(&mut self, w: &WireMemory) -> Result<Memory, ProtocolError> {
        let slot = self
            .fds
            .get_mut(w.fd_index as usize)
            .ok_or_else(|| bad(format!("fd index {} out of range", w.fd_index)))?;
        let fd = slot
            .take()
            .ok_or_else(|| bad(format!("fd index {} used twice", w.fd_index)))?;
        let kind = match w.kind {
            0 => MemoryKind::Ashmem,
            1 => MemoryKind::MmapFd {
                prot: w.prot,
                offset: w.offset,
            },
            2 => MemoryKind::HardwareBufferBlob,
            3 => MemoryKind::HardwareBuffer,
            k => return Err(bad(format!("unknown memory kind {k}"))),
        };
        Ok(Memory {
            kind,
            fd,
            size: w.size,
        })
    }

    /// Whether every fd was claimed by a pool.
    pub fn all_used(&self) -> bool {
        self.fds.iter().all(Option::is_none)
    }

    /// Claims the fd at `index` for something other than a pool (a queue, a socket, a cache
    /// file); each fd serves once.
    pub fn take_fd(&mut self, index: usize) -> Result<OwnedFd, ProtocolError> {
        let fd = self
            .fds
            .get_mut(index)
            .and_then(Option::take)
            .ok_or_else(|| bad(format!("no unclaimed fd at index {index}")))?;
        Arc::try_unwrap(fd).map_err(|_| bad(format!("fd {index} is shared")))
    }
}

/// A model from the wire.
pub fn model_from_wire(w: WireModel, fds: &mut ReceivedFds) -> Result<Model, ProtocolError> {
    let mut operands = Vec::with_capacity(w.operands.len());
    for (i, o) in w.operands.into_iter().enumerate() {
        operands.push(Operand {
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
    let mut operations = Vec::with_capacity(w.operations.len());
    for (i, o) in w.operations.into_iter().enumerate() {
        operations.push(Operation {
            operation_type: OperationType::from_code(o.operation_type)
                .ok_or_else(|| bad(format!("operation {i}: unknown type {}", o.operation_type)))?,
            inputs: o.inputs,
            outputs: o.outputs,
        });
    }
    let pools = w
        .pools
        .iter()
        .map(|p| fds.memory(p))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Model {
        operands,
        operations,
        input_indexes: w.input_indexes,
        output_indexes: w.output_indexes,
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
    let pools = w
        .pools
        .iter()
        .map(|p| match p {
            WirePool::Memory(m) => fds.memory(m).map(MemoryPool::Memory),
            WirePool::Token(t) => Ok(MemoryPool::Token(*t)),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Request {
        inputs: w.inputs.into_iter().map(arg).collect(),
        outputs: w.outputs.into_iter().map(arg).collect(),
        pools,
    })
}

/// A memory pool for the wire; its fd is added to `fds`.
pub fn memory_to_wire<'a>(memory: &'a Memory, fds: &mut FdList<'a>) -> WireMemory {
    fds.add(memory)
}

/// A memory pool from the wire.
pub fn memory_from_wire(w: &WireMemory, fds: &mut ReceivedFds) -> Result<Memory, ProtocolError> {
    fds.memory(w)
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

    fn pair() -> (UnixStream, UnixStream) {
        UnixStream::pair().unwrap()
    }

    #[test]
    fn frames_carry_bodies_and_fds() {
        let (a, b) = pair();
        let memfd = nnaccel_uapi::sys::memfd_create(c"frame", 4096).unwrap();
        send_frame(&a, b"hello", &[memfd.as_fd()]).unwrap();
        let (body, fds) = recv_frame(&b, 1024).unwrap();
        assert_eq!(body, b"hello");
        assert_eq!(fds.len(), 1);
        assert_eq!(nnaccel_uapi::sys::file_size(fds[0].as_fd()).unwrap(), 4096);
    }

    #[test]
    fn oversized_bodies_are_refused_before_reading_them() {
        let (a, b) = pair();
        send_frame(&a, &[0u8; 100], &[]).unwrap();
        assert!(matches!(
            recv_frame(&b, 99),
            Err(ProtocolError::BadFrame(_))
        ));
    }

    #[test]
    fn garbage_is_a_bad_frame_and_eof_is_closed() {
        let (a, b) = pair();
        (&a).write_all(b"GARBAGEGARBAGE!!").unwrap();
        assert!(matches!(
            recv_frame(&b, 1024),
            Err(ProtocolError::BadFrame(_))
        ));
        drop(a);
        assert!(matches!(recv_frame(&b, 1024), Err(ProtocolError::Closed)));
    }

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

    #[test]
    fn fd_indexes_are_checked_and_used_once() {
        let memfd = nnaccel_uapi::sys::memfd_create(c"f", 4096).unwrap();
        let mut fds = ReceivedFds::new(vec![memfd]);
        let w = WireMemory {
            kind: 0,
            prot: 0,
            offset: 0,
            size: 4096,
            fd_index: 0,
        };
        assert!(fds.memory(&w).is_ok());
        assert!(fds.memory(&w).is_err(), "the same fd twice");
        assert!(
            fds.memory(&WireMemory {
                fd_index: 5,
                ..w.clone()
            })
            .is_err()
        );
        assert!(fds.all_used());
    }
}
