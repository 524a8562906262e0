//! Memory domains (NN HAL 1.3 `IDevice::allocate`, `IBuffer`): device buffers allocated for
//! roles of prepared models and named by token in requests. See `docs/domains.md`.
//!
//! - [`BufferTracker`]: one per driver. It hands out tokens (never 0; the smallest free one, so
//!   freed tokens are reused), maps them to live buffers, and counts live buffers and bytes.
//! - [`DeviceBuffer`]: the `IBuffer`. Its memory is a device BO (BO_CREATE) reached by the CPU
//!   through BO_EXPORT's fd, or, without a live device, a private sealed memfd. Dropping the
//!   last reference frees the memory and the token.
//! - [`BoundRequest`]: a request whose token pools were checked against the buffers (owner,
//!   roles, aliasing, dimensions, initialization) and replaced by the buffers' memory. Every
//!   execution path (regular, and a burst server's) goes through [`BufferTracker::bind`] and
//!   [`BoundRequest::finish`].

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use nnaccel_uapi::{BufferObject, Device};

use super::memory::MappedPool;
use super::types::*;
use super::validate::{byte_size, combined_dimensions, is_fully_specified};

/// Who owns a buffer: a service connection, or [`LOCAL_OWNER`] for an in-process driver.
pub type OwnerId = u64;

/// The owner of buffers allocated through an in-process [`super::Driver`].
pub const LOCAL_OWNER: OwnerId = 0;

/// A new owner id (never [`LOCAL_OWNER`]); the service takes one per connection.
pub fn new_owner() -> OwnerId {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Memory a CPU-only driver gives memory-domain buffers in total.
pub(crate) const CPU_DOMAIN_MEMORY: u64 = 1 << 30;

/// The smallest storage made for an output whose size is not known before it runs.
const PLACEHOLDER_BYTES: u64 = 4096;

/// `BufferDesc` (1.3): the dimensions the client asks for (empty or 0 extents: unknown).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BufferDesc {
    /// Extents.
    pub dimensions: Vec<u32>,
}

/// `BufferRole` (1.3): an input or output of one of the prepared models given to `allocate`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BufferRole {
    /// Index into the prepared models given to `allocate`.
    pub model_index: u32,
    /// Index of the model's input (input roles) or output (output roles).
    pub io_index: u32,
    /// How often the buffer is expected in this role, in (0, 1].
    pub frequency: f32,
}

/// A prepared model as `allocate` sees it: its identity and its model.
#[derive(Clone, Copy, Debug)]
pub struct RoleModel<'a> {
    /// The prepared model's id, unique in the process.
    pub uid: u64,
    /// Whether it was prepared by this tracker's driver.
    pub ours: bool,
    /// The model.
    pub model: &'a Model,
}

/// Why a memory-domain call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DomainError {
    /// A HAL rule is broken: INVALID_ARGUMENT.
    #[error("invalid: {0}")]
    Invalid(String),
    /// The driver cannot do it (memory, device): GENERAL_FAILURE.
    #[error("failed: {0}")]
    Failed(String),
}

fn invalid<T>(msg: impl Into<String>) -> Result<T, DomainError> {
    Err(DomainError::Invalid(msg.into()))
}

fn failed(msg: impl Into<String>) -> DomainError {
    DomainError::Failed(msg.into())
}

/// Logs `e` and gives its status.
fn status_of(e: DomainError) -> ErrorStatus {
    tracing::debug!("memory domain: {e}");
    ErrorStatus::from(e)
}

/// Combines two dimension lists (REFERENCE.md §6): an empty side takes the other, ranks must
/// match, a 0 takes the other extent, two non-zero extents must be equal.
pub(crate) fn combine_dimensions(a: &[u32], b: &[u32]) -> Option<Vec<u32>> {
    combined_dimensions(a, b).ok()
}

// ---------------------------------------------------------------------------------------------
// Storage

/// Bytes counted in a tracker's `live_bytes` and given back when dropped, unless handed over
/// to the [`Storage`] whose Drop gives them back instead.
struct Reserved<'a> {
    live_bytes: &'a AtomicU64,
    size: u64,
}

impl<'a> Reserved<'a> {
    /// Adds `size` to `live_bytes` if the total stays within `limit`; else the bytes in use.
    fn take(live_bytes: &'a AtomicU64, size: u64, limit: u64) -> Result<Self, u64> {
        live_bytes.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
            used.checked_add(size).filter(|&total| total <= limit)
        })?;
        Ok(Self { live_bytes, size })
    }

    fn hand_over(self) {
        std::mem::forget(self);
    }
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        self.live_bytes.fetch_sub(self.size, Ordering::SeqCst);
    }
}

/// The memory behind a buffer: a BO on the device or a memfd, mapped once for the CPU.
struct Storage {
    /// The BO (on the device path), closed when the storage is dropped.
    bo: Option<BufferObject>,
    /// The memory as a pool (an exported BO fd or the memfd), for CPU access and CPU runs.
    memory: Memory,
    mapped: MappedPool,
    tracker: Arc<TrackerInner>,
}

impl fmt::Debug for Storage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Storage")
            .field("bo", &self.bo.as_ref().map(BufferObject::handle))
            .field("bytes", &self.memory.size)
            .finish()
    }
}

impl Storage {
    fn len(&self) -> u64 {
        self.memory.size
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        // The BO is closed before its bytes are given back: the tracker never counts fewer
        // bytes than the device still holds for it.
        drop(self.bo.take());
        self.tracker
            .live_bytes
            .fetch_sub(self.memory.size, Ordering::SeqCst);
    }
}

// ---------------------------------------------------------------------------------------------
// The tracker

#[derive(Debug, Default)]
struct TokenTable {
    buffers: HashMap<u32, Weak<DeviceBuffer>>,
    /// Freed tokens, reused smallest first.
    free: BTreeSet<u32>,
    /// The next never-used token.
    next: u32,
}

#[derive(Debug)]
struct TrackerInner {
    tokens: Mutex<TokenTable>,
    live_buffers: AtomicU64,
    live_bytes: AtomicU64,
    cpu_limit: u64,
}

/// The buffers of one driver, by token.
#[derive(Debug, Clone)]
pub struct BufferTracker {
    inner: Arc<TrackerInner>,
}

impl Default for BufferTracker {
    fn default() -> Self {
        Self::with_cpu_limit(CPU_DOMAIN_MEMORY)
    }
}

/// What `allocate` decided a buffer is, before any memory exists.
#[derive(Debug, Clone, PartialEq)]
struct Shape {
    operand_type: OperandType,
    scale: f32,
    zero_point: i32,
    dims: Vec<u32>,
}

impl BufferTracker {
    /// A tracker whose memfd-backed buffers (no live device) may use `cpu_limit` bytes.
    pub fn with_cpu_limit(cpu_limit: u64) -> Self {
        Self {
            inner: Arc::new(TrackerInner {
                tokens: Mutex::default(),
                live_buffers: AtomicU64::new(0),
                live_bytes: AtomicU64::new(0),
                cpu_limit,
            }),
        }
    }

    /// Whether two handles name the same tracker (a prepared model belongs to this driver).
    pub fn same(&self, other: &BufferTracker) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Live buffers.
    pub fn live_buffers(&self) -> u64 {
        self.inner.live_buffers.load(Ordering::SeqCst)
    }

    /// Bytes of memory the live buffers hold (device or memfd).
    pub fn live_bytes(&self) -> u64 {
        self.inner.live_bytes.load(Ordering::SeqCst)
    }

    /// `allocate`: validates the description and roles (INVALID_ARGUMENT), combines the
    /// dimensions, and makes the buffer, with its memory now when its size is known (device
    /// memory on `device`, else a memfd), later otherwise. GENERAL_FAILURE when the memory
    /// cannot be had.
    pub fn allocate(
        &self,
        owner: OwnerId,
        device: Option<&Arc<dyn Device>>,
        desc: &BufferDesc,
        models: &[RoleModel<'_>],
        input_roles: &[BufferRole],
        output_roles: &[BufferRole],
    ) -> Result<Arc<DeviceBuffer>, ErrorStatus> {
        let (shape, roles) =
            validate_allocation(desc, models, input_roles, output_roles).map_err(status_of)?;
        let storage = match byte_size(shape.operand_type, &shape.dims)
            .filter(|_| is_fully_specified(shape.operand_type, &shape.dims))
        {
            Some(size) => Some(Arc::new(
                self.make_storage(device, size).map_err(status_of)?,
            )),
            None => None,
        };
        let token = self.take_token();
        let buffer = Arc::new(DeviceBuffer {
            token,
            owner,
            shape,
            roles,
            device: device.cloned(),
            state: Mutex::new(BufferState {
                initialized: false,
                dims: Vec::new(),
                storage,
            }),
            tracker: self.clone(),
        });
        self.inner.live_buffers.fetch_add(1, Ordering::SeqCst);
        self.inner
            .tokens
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .buffers
            .insert(token, Arc::downgrade(&buffer));
        Ok(buffer)
    }

    fn take_token(&self) -> u32 {
        let mut t = self
            .inner
            .tokens
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(token) = t.free.pop_first() {
            return token;
        }
        t.next = t.next.max(1);
        let token = t.next;
        t.next = t.next.saturating_add(1);
        token
    }

    fn release_token(&self, token: u32) {
        let mut t = self
            .inner
            .tokens
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        t.buffers.remove(&token);
        t.free.insert(token);
    }

    /// The live buffer `token` names, if `owner` owns it.
    pub fn lookup(&self, owner: OwnerId, token: u32) -> Option<Arc<DeviceBuffer>> {
        // Upgrade outside the lock: dropping the upgraded reference may free the buffer,
        // whose Drop takes the lock to release its token.
        let weak = self
            .inner
            .tokens
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .buffers
            .get(&token)
            .cloned()?;
        weak.upgrade().filter(|b| b.owner == owner)
    }

    /// Memory of `size` bytes: a device BO when a device is given (exported for CPU access),
    /// else a sealed memfd within the CPU limit.
    fn make_storage(
        &self,
        device: Option<&Arc<dyn Device>>,
        size: u64,
    ) -> Result<Storage, DomainError> {
        // Reserve the bytes before making anything: a check followed by a later add would let
        // concurrent allocations together pass the CPU limit. Device BOs are counted but not
        // limited here (the device refuses what it cannot hold).
        let limit = if device.is_some() {
            u64::MAX
        } else {
            self.inner.cpu_limit
        };
        let reserved = Reserved::take(&self.inner.live_bytes, size, limit).map_err(|used| {
            failed(format!(
                "{size} bytes would pass the {limit}-byte memory-domain limit ({used} in use)"
            ))
        })?;
        let (bo, fd) = match device {
            Some(dev) => {
                let bo = BufferObject::create(dev.clone(), size)
                    .map_err(|e| failed(format!("the device has no {size} bytes for it: {e}")))?;
                // A BO that cannot be exported is closed (dropped) on the way out.
                let fd = bo
                    .export()
                    .map_err(|e| failed(format!("cannot export the buffer's BO: {e}")))?;
                (Some(bo), fd)
            }
            None => {
                let fd = nnaccel_uapi::sys::memfd_create(c"nnaccel-domain", size)
                    .map_err(|e| failed(format!("memfd of {size} bytes: {e}")))?;
                nnaccel_uapi::sys::seal_size(fd.as_fd())
                    .map_err(|e| failed(format!("sealing the buffer's memfd: {e}")))?;
                (None, fd)
            }
        };
        // A device may export a dma-buf: CPU access to it is bracketed with syncs.
        let kind = if nnaccel_uapi::sys::is_dmabuf(fd.as_fd()) {
            MemoryKind::HardwareBufferBlob
        } else {
            MemoryKind::Ashmem
        };
        let memory = Memory {
            kind,
            fd: Arc::new(fd),
            size,
        };
        let mapped = match MappedPool::map(&memory) {
            Ok(m) => m,
            Err(_) => {
                drop(bo);
                return Err(failed("cannot map the buffer's memory"));
            }
        };
        // From here `Storage`'s Drop gives the bytes back and closes the BO.
        reserved.hand_over();
        Ok(Storage {
            bo,
            memory,
            mapped,
            tracker: self.inner.clone(),
        })
    }

    /// Checks a request's token pools for an execution of the prepared model `model_uid`
    /// (`model`) by `owner`, and replaces them with the buffers' memory. Call it after
    /// `validate_request`; call [`BoundRequest::finish`] with the execution's result.
    ///
    /// INVALID_ARGUMENT: an unknown token or one of another owner, a role not granted at
    /// allocation, a buffer as input and output or as two outputs, dimensions that do not
    /// combine with the buffer's. GENERAL_FAILURE: an uninitialized buffer as input.
    pub fn bind(
        &self,
        owner: OwnerId,
        model_uid: u64,
        model: &Model,
        request: &Request,
    ) -> Result<BoundRequest, ErrorStatus> {
        bind(self, owner, model_uid, model, request).map_err(status_of)
    }
}

fn role_operand<'m>(
    models: &[RoleModel<'m>],
    role: &BufferRole,
    output: bool,
) -> Result<(u64, &'m Operand), DomainError> {
    let what = if output { "output" } else { "input" };
    let Some(m) = models.get(role.model_index as usize) else {
        return invalid(format!(
            "{what} role names prepared model {} of {}",
            role.model_index,
            models.len()
        ));
    };
    if !m.ours {
        return invalid(format!(
            "prepared model {} was not prepared by this driver",
            role.model_index
        ));
    }
    let indexes = if output {
        &m.model.output_indexes
    } else {
        &m.model.input_indexes
    };
    let Some(operand) = indexes
        .get(role.io_index as usize)
        .and_then(|&k| m.model.operands.get(k as usize))
    else {
        return invalid(format!(
            "{what} role: model {} has no {what} {}",
            role.model_index, role.io_index
        ));
    };
    if !(role.frequency > 0.0 && role.frequency <= 1.0) {
        return invalid(format!(
            "{what} role frequency {} is outside (0, 1]",
            role.frequency
        ));
    }
    Ok((m.uid, operand))
}

/// A granted role: prepared model uid, output, io index.
type RoleKey = (u64, bool, u32);

fn validate_allocation(
    desc: &BufferDesc,
    models: &[RoleModel<'_>],
    input_roles: &[BufferRole],
    output_roles: &[BufferRole],
) -> Result<(Shape, HashSet<RoleKey>), DomainError> {
    if input_roles.is_empty() && output_roles.is_empty() {
        return invalid("no roles");
    }
    let mut roles = HashSet::new();
    let mut shape: Option<Shape> = None;
    let all = input_roles
        .iter()
        .map(|r| (r, false))
        .chain(output_roles.iter().map(|r| (r, true)));
    for (role, output) in all {
        let (uid, operand) = role_operand(models, role, output)?;
        if !roles.insert((uid, output, role.io_index)) {
            return invalid(format!(
                "the role (model {}, {} {}) is given twice",
                role.model_index,
                if output { "output" } else { "input" },
                role.io_index
            ));
        }
        let ty = operand.operand_type;
        if ty.is_scalar() && !desc.dimensions.is_empty() {
            return invalid(format!(
                "dimensions {:?} for a scalar {} role",
                desc.dimensions,
                ty.name()
            ));
        }
        match &mut shape {
            None => {
                let dims =
                    combine_dimensions(&desc.dimensions, &operand.dimensions).ok_or_else(|| {
                        DomainError::Invalid(format!(
                            "the description's dimensions {:?} conflict with the role's {:?}",
                            desc.dimensions, operand.dimensions
                        ))
                    })?;
                shape = Some(Shape {
                    operand_type: ty,
                    scale: operand.scale,
                    zero_point: operand.zero_point,
                    dims,
                });
            }
            Some(s) => {
                if s.operand_type != ty {
                    return invalid(format!(
                        "roles differ in type: {} and {}",
                        s.operand_type.name(),
                        ty.name()
                    ));
                }
                if s.scale != operand.scale || s.zero_point != operand.zero_point {
                    return invalid(format!(
                        "roles differ in quantization: ({}, {}) and ({}, {})",
                        s.scale, s.zero_point, operand.scale, operand.zero_point
                    ));
                }
                s.dims = combine_dimensions(&s.dims, &operand.dimensions).ok_or_else(|| {
                    DomainError::Invalid(format!(
                        "role dimensions {:?} conflict with {:?}",
                        operand.dimensions, s.dims
                    ))
                })?;
            }
        }
    }
    let shape = shape.ok_or_else(|| DomainError::Invalid("no roles".into()))?;
    Ok((shape, roles))
}

// ---------------------------------------------------------------------------------------------
// Buffers

#[derive(Debug)]
struct BufferState {
    initialized: bool,
    /// The dimensions of the contents (meaningful when initialized).
    dims: Vec<u32>,
    storage: Option<Arc<Storage>>,
}

/// A memory-domain buffer: the HAL's `IBuffer`. The token and the memory go with the last
/// reference.
pub struct DeviceBuffer {
    token: u32,
    owner: OwnerId,
    shape: Shape,
    roles: HashSet<RoleKey>,
    device: Option<Arc<dyn Device>>,
    state: Mutex<BufferState>,
    tracker: BufferTracker,
}

impl fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("token", &self.token)
            .field("owner", &self.owner)
            .field("type", &self.shape.operand_type)
            .field("dims", &self.shape.dims)
            .finish()
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        self.tracker.release_token(self.token);
        self.tracker
            .inner
            .live_buffers
            .fetch_sub(1, Ordering::SeqCst);
    }
}

impl DeviceBuffer {
    /// The token (> 0) that names the buffer in requests.
    pub fn token(&self) -> u32 {
        self.token
    }

    /// The owner.
    pub fn owner(&self) -> OwnerId {
        self.owner
    }

    /// The dimensions combined at allocation (0 extents or `[]`: not known yet).
    pub fn dimensions(&self) -> &[u32] {
        &self.shape.dims
    }

    /// Whether the buffer holds data.
    pub fn is_initialized(&self) -> bool {
        self.lock().initialized
    }

    /// Bytes of memory the buffer holds now (0 before its size is known).
    pub fn capacity(&self) -> u64 {
        self.lock().storage.as_ref().map_or(0, |s| s.len())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BufferState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Storage of exactly `size` bytes (the current one if it is that large already).
    fn storage_of(&self, state: &mut BufferState, size: u64) -> Result<Arc<Storage>, DomainError> {
        if let Some(s) = state.storage.as_ref().filter(|s| s.len() == size) {
            return Ok(s.clone());
        }
        let device = self.device.as_ref();
        let s = Arc::new(self.tracker.make_storage(device, size)?);
        state.storage = Some(s.clone());
        Ok(s)
    }

    /// `copyFrom(memory, dims)`: the contents from `src`. The dimensions must combine with the
    /// buffer's into fully known ones (empty only when the buffer's are fully known) and the
    /// memory's size must be the data's size: else INVALID_ARGUMENT. A failed copy leaves the
    /// buffer uninitialized.
    pub fn copy_from(&self, src: &Memory, dims: &[u32]) -> Result<(), ErrorStatus> {
        self.try_copy_from(src, dims).map_err(status_of)
    }

    fn try_copy_from(&self, src: &Memory, dims: &[u32]) -> Result<(), DomainError> {
        let ty = self.shape.operand_type;
        if dims.contains(&0) {
            return invalid(format!(
                "copyFrom dimensions {dims:?} have an unknown extent"
            ));
        }
        let Some(dims) = combine_dimensions(&self.shape.dims, dims) else {
            return invalid(format!(
                "copyFrom dimensions {dims:?} conflict with the buffer's {:?}",
                self.shape.dims
            ));
        };
        if !is_fully_specified(ty, &dims) {
            return invalid(format!(
                "copyFrom dimensions {dims:?} are not fully specified"
            ));
        }
        let size = byte_size(ty, &dims)
            .ok_or_else(|| DomainError::Invalid(format!("the size of {dims:?} overflows")))?;
        if src.size != size {
            return invalid(format!(
                "copyFrom memory of {} bytes for {size} bytes of data",
                src.size
            ));
        }
        let source = MappedPool::map(src).map_err(|_| failed("cannot map the copyFrom memory"))?;
        let mut state = self.lock();
        state.initialized = false;
        let storage = self.storage_of(&mut state, size)?;
        source.begin_access(false);
        let copied = source
            .read(0, size as usize)
            .and_then(|bytes| storage.mapped.write(0, &bytes));
        source.end_access(false);
        copied.map_err(|_| failed("copyFrom: the copy failed"))?;
        state.initialized = true;
        state.dims = dims;
        Ok(())
    }

    /// `copyTo(memory)`: the contents into `dst`, whose size must be the data's size
    /// (INVALID_ARGUMENT); an uninitialized buffer is GENERAL_FAILURE.
    pub fn copy_to(&self, dst: &Memory) -> Result<(), ErrorStatus> {
        self.try_copy_to(dst).map_err(status_of)
    }

    fn try_copy_to(&self, dst: &Memory) -> Result<(), DomainError> {
        let state = self.lock();
        let size = match (&state.storage, state.initialized) {
            (Some(_), true) => byte_size(self.shape.operand_type, &state.dims).unwrap_or(0),
            _ => self.known_size().unwrap_or(0),
        };
        if size != 0 && dst.size != size {
            return invalid(format!(
                "copyTo memory of {} bytes for {size} bytes of data",
                dst.size
            ));
        }
        let (Some(storage), true) = (&state.storage, state.initialized) else {
            return Err(failed("copyTo from an uninitialized buffer"));
        };
        let target = MappedPool::map(dst).map_err(|_| failed("cannot map the copyTo memory"))?;
        target.begin_access(true);
        let copied = storage
            .mapped
            .read(0, size as usize)
            .and_then(|bytes| target.write(0, &bytes));
        target.end_access(copied.is_ok());
        copied.map_err(|_| failed("copyTo: the copy failed"))
    }

    fn known_size(&self) -> Option<u64> {
        byte_size(self.shape.operand_type, &self.shape.dims)
            .filter(|_| is_fully_specified(self.shape.operand_type, &self.shape.dims))
    }
}

// ---------------------------------------------------------------------------------------------
// Requests

/// One token pool of a bound request.
#[derive(Debug)]
struct BoundPool {
    pool: usize,
    buffer: Arc<DeviceBuffer>,
    storage: Arc<Storage>,
    /// The output this buffer takes, if any.
    output: Option<usize>,
}

/// A request whose token pools are checked and replaced by the buffers' memory, ready for the
/// device or the CPU. Keeps the buffers' memory alive while the execution runs.
#[derive(Debug)]
pub struct BoundRequest {
    request: Request,
    pools: Vec<BoundPool>,
}

impl BoundRequest {
    /// The request to run: token pools replaced by the buffers' memory (offset 0, whole
    /// length), arguments in them with their dimensions filled in.
    pub fn request(&self) -> &Request {
        &self.request
    }

    /// Whether the request named any token.
    pub fn has_tokens(&self) -> bool {
        !self.pools.is_empty()
    }

    /// For each request pool, the device BO already holding it (token pools on the device
    /// path): bind it directly instead of importing the pool.
    pub fn device_bos(&self) -> Vec<Option<u32>> {
        let mut bos = vec![None; self.request.pools.len()];
        for p in &self.pools {
            if let Some(bo) = &p.storage.bo {
                bos[p.pool] = Some(bo.handle());
            }
        }
        bos
    }

    /// For each request pool, the buffer's own mapping (token pools): the CPU executor uses
    /// it instead of mapping the memory for each execution.
    pub fn cpu_pools(&self) -> Vec<Option<&MappedPool>> {
        let mut mapped = vec![None; self.request.pools.len()];
        for p in &self.pools {
            mapped[p.pool] = Some(&p.storage.mapped);
        }
        mapped
    }

    /// After an execution that answered OUTPUT_INSUFFICIENT_SIZE: grows the buffers whose
    /// outputs were too small to the sizes reported, and says whether to run again. Other
    /// results (or a needed size that is not known) give false.
    pub fn grow_for(&mut self, result: &ExecutionResult) -> bool {
        if result.status != ErrorStatus::OutputInsufficientSize {
            return false;
        }
        let mut grew = false;
        for p in &mut self.pools {
            let Some(k) = p.output else { continue };
            let Some(shape) = result.output_shapes.get(k).filter(|s| !s.is_sufficient) else {
                continue;
            };
            let ty = p.buffer.shape.operand_type;
            let Some(size) = byte_size(ty, &shape.dimensions)
                .filter(|_| is_fully_specified(ty, &shape.dimensions))
            else {
                return false;
            };
            let mut state = p.buffer.lock();
            state.initialized = false;
            match p.buffer.storage_of(&mut state, size) {
                Ok(s) => {
                    p.storage = s;
                    grew = true;
                }
                Err(e) => {
                    tracing::debug!("memory domain: growing buffer {}: {e}", p.buffer.token);
                    return false;
                }
            }
            if let Some(MemoryPool::Memory(m)) = self.request.pools.get_mut(p.pool) {
                *m = p.storage.memory.clone();
            }
            if let Some(arg) = self.request.outputs.get_mut(k) {
                arg.location.length = u32::try_from(size).unwrap_or(u32::MAX);
            }
        }
        grew
    }

    /// Records the outcome in the buffers and gives the result to return: on success the
    /// output buffers hold data of the shapes produced; on failure they are uninitialized, and
    /// OUTPUT_INSUFFICIENT_SIZE for a buffer output becomes GENERAL_FAILURE.
    pub fn finish(self, result: ExecutionResult) -> ExecutionResult {
        let ok = result.status == ErrorStatus::None;
        let mut buffer_too_small = false;
        for p in &self.pools {
            let Some(k) = p.output else { continue };
            let mut state = p.buffer.lock();
            let shape = result.output_shapes.get(k);
            if ok && let Some(shape) = shape {
                state.initialized = true;
                state.dims = shape.dimensions.clone();
            } else {
                state.initialized = false;
                buffer_too_small |= shape.is_some_and(|s| !s.is_sufficient);
            }
        }
        if result.status == ErrorStatus::OutputInsufficientSize && buffer_too_small {
            return ExecutionResult::failure(ErrorStatus::GeneralFailure);
        }
        result
    }
}

fn bind(
    tracker: &BufferTracker,
    owner: OwnerId,
    model_uid: u64,
    model: &Model,
    request: &Request,
) -> Result<BoundRequest, DomainError> {
    let mut bound = BoundRequest {
        request: request.clone(),
        pools: Vec::new(),
    };
    let mut buffers: HashMap<usize, Arc<DeviceBuffer>> = HashMap::new();
    for (i, pool) in request.pools.iter().enumerate() {
        if let MemoryPool::Token(token) = pool {
            let Some(b) = tracker.lookup(owner, *token) else {
                return invalid(format!(
                    "request pool {i}: token {token} names no buffer of this client"
                ));
            };
            buffers.insert(i, b);
        }
    }
    if buffers.is_empty() {
        return Ok(bound);
    }
    // Roles, aliasing and dimensions first (INVALID_ARGUMENT), initialization last.
    let mut uses: HashMap<u32, (u32, u32)> = HashMap::new();
    let mut plan: Vec<(usize, bool, usize, Vec<u32>)> = Vec::new();
    let args = request
        .inputs
        .iter()
        .zip(&model.input_indexes)
        .enumerate()
        .map(|(k, a)| (k, false, a))
        .chain(
            request
                .outputs
                .iter()
                .zip(&model.output_indexes)
                .enumerate()
                .map(|(k, a)| (k, true, a)),
        );
    for (k, output, (arg, &operand)) in args {
        if arg.has_no_value {
            continue;
        }
        let pool = arg.location.pool_index as usize;
        let Some(buffer) = buffers.get(&pool) else {
            continue;
        };
        let what = if output { "output" } else { "input" };
        if !buffer.roles.contains(&(model_uid, output, k as u32)) {
            return invalid(format!(
                "buffer {} was not allocated for {what} {k} of this prepared model",
                buffer.token
            ));
        }
        let u = uses.entry(buffer.token).or_default();
        if output {
            u.1 += 1;
        } else {
            u.0 += 1;
        }
        if u.1 > 1 || (u.1 == 1 && u.0 > 0) {
            return invalid(format!(
                "buffer {} is used as an output and in another role of the same request",
                buffer.token
            ));
        }
        let model_dims = model
            .operands
            .get(operand as usize)
            .map_or(&[][..], |o| &o.dimensions[..]);
        let dims = combine_dimensions(model_dims, &arg.dimensions)
            .and_then(|d| combine_dimensions(&d, &buffer.shape.dims))
            .ok_or_else(|| {
                DomainError::Invalid(format!(
                    "{what} {k}: dimensions {:?} conflict with buffer {}'s {:?}",
                    arg.dimensions, buffer.token, buffer.shape.dims
                ))
            })?;
        plan.push((k, output, pool, dims));
    }
    let mut initialized_dims: Vec<(usize, Vec<u32>, Arc<Storage>)> = Vec::new();
    for (k, output, pool, dims) in &plan {
        let Some(buffer) = buffers.get(pool) else {
            continue;
        };
        if *output {
            continue;
        }
        let state = buffer.lock();
        let (Some(storage), true) = (&state.storage, state.initialized) else {
            return Err(failed(format!(
                "input {k}: buffer {} is not initialized",
                buffer.token
            )));
        };
        let Some(actual) = combine_dimensions(dims, &state.dims) else {
            return invalid(format!(
                "input {k}: dimensions {dims:?} conflict with buffer {}'s contents {:?}",
                buffer.token, state.dims
            ));
        };
        initialized_dims.push((*k, actual, storage.clone()));
    }
    for (k, dims, storage) in initialized_dims {
        let arg = &mut bound.request.inputs[k];
        let pool = arg.location.pool_index as usize;
        let size = byte_size(model_operand_type(model, k, false), &dims).unwrap_or(0);
        arg.location.length = u32::try_from(size).unwrap_or(u32::MAX);
        arg.dimensions = dims;
        if !bound.pools.iter().any(|p| p.pool == pool) {
            bound.request.pools[pool] = MemoryPool::Memory(storage.memory.clone());
            bound.pools.push(BoundPool {
                pool,
                buffer: buffers[&pool].clone(),
                storage,
                output: None,
            });
        }
    }
    for (k, output, pool, dims) in plan {
        if !output {
            continue;
        }
        let buffer = buffers[&pool].clone();
        let ty = buffer.shape.operand_type;
        let storage = {
            let mut state = buffer.lock();
            match (
                &state.storage,
                byte_size(ty, &dims).filter(|_| is_fully_specified(ty, &dims)),
            ) {
                (Some(s), None) => s.clone(),
                (_, Some(size)) => buffer.storage_of(&mut state, size)?,
                (None, None) => buffer.storage_of(&mut state, PLACEHOLDER_BYTES)?,
            }
        };
        let arg = &mut bound.request.outputs[k];
        arg.location.length = u32::try_from(storage.len()).unwrap_or(u32::MAX);
        arg.dimensions = dims;
        bound.request.pools[pool] = MemoryPool::Memory(storage.memory.clone());
        bound.pools.push(BoundPool {
            pool,
            buffer,
            storage,
            output: Some(k),
        });
    }
    // A token pool no argument uses still has to be a pool the executors accept.
    for (pool, buffer) in &buffers {
        if bound.pools.iter().any(|p| p.pool == *pool) {
            continue;
        }
        let storage = {
            let mut state = buffer.lock();
            match &state.storage {
                Some(s) => s.clone(),
                None => buffer.storage_of(&mut state, PLACEHOLDER_BYTES)?,
            }
        };
        bound.request.pools[*pool] = MemoryPool::Memory(storage.memory.clone());
        bound.pools.push(BoundPool {
            pool: *pool,
            buffer: buffer.clone(),
            storage,
            output: None,
        });
    }
    Ok(bound)
}

fn model_operand_type(model: &Model, k: usize, output: bool) -> OperandType {
    let indexes = if output {
        &model.output_indexes
    } else {
        &model.input_indexes
    };
    indexes
        .get(k)
        .and_then(|&i| model.operands.get(i as usize))
        .map_or(OperandType::TensorFloat32, |o| o.operand_type)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One FLOAT32 input and one output of `dims` (no operations: enough for roles).
    pub(crate) fn model(dims: &[u32]) -> Model {
        let operand = |lifetime| Operand {
            operand_type: OperandType::TensorFloat32,
            dimensions: dims.to_vec(),
            scale: 0.0,
            zero_point: 0,
            lifetime,
            location: DataLocation::default(),
            extra_params: None,
        };
        Model {
            operands: vec![
                operand(OperandLifetime::SubgraphInput),
                operand(OperandLifetime::SubgraphOutput),
            ],
            input_indexes: vec![0],
            output_indexes: vec![1],
            ..Model::default()
        }
    }

    fn role(io_index: u32) -> BufferRole {
        BufferRole {
            model_index: 0,
            io_index,
            frequency: 0.5,
        }
    }

    fn buffer(t: &BufferTracker, owner: OwnerId, m: &Model) -> Arc<DeviceBuffer> {
        let models = [RoleModel {
            uid: 1,
            ours: true,
            model: m,
        }];
        t.allocate(
            owner,
            None,
            &BufferDesc::default(),
            &models,
            &[role(0)],
            &[role(0)],
        )
        .unwrap()
    }

    fn memfd(size: u64) -> Memory {
        Memory {
            kind: MemoryKind::Ashmem,
            fd: Arc::new(nnaccel_uapi::sys::memfd_create(c"domain-test", size).unwrap()),
            size,
        }
    }

    #[test]
    fn tokens_start_at_one_and_freed_ones_are_reused_smallest_first() {
        let t = BufferTracker::default();
        let m = model(&[4]);
        let a = buffer(&t, 1, &m);
        let b = buffer(&t, 1, &m);
        let c = buffer(&t, 1, &m);
        assert_eq!((a.token(), b.token(), c.token()), (1, 2, 3));
        drop(c);
        drop(a);
        let again = buffer(&t, 1, &m);
        assert_eq!(again.token(), 1);
        assert_eq!(t.live_buffers(), 2, "b and the new one");
    }

    #[test]
    fn a_token_resolves_only_for_its_owner() {
        let t = BufferTracker::default();
        let m = model(&[4]);
        let a = buffer(&t, 7, &m);
        assert!(t.lookup(7, a.token()).is_some());
        assert!(t.lookup(8, a.token()).is_none());
        assert!(t.lookup(7, a.token() + 1).is_none());
    }

    #[test]
    fn memory_returns_when_the_last_reference_goes() {
        let t = BufferTracker::default();
        let m = model(&[4]);
        let a = buffer(&t, 1, &m);
        assert_eq!(t.live_bytes(), 16);
        drop(a);
        assert_eq!((t.live_buffers(), t.live_bytes()), (0, 0));
        // Unknown extents: no memory until the first write.
        let d = buffer(&t, 1, &model(&[0]));
        assert_eq!(d.capacity(), 0);
        d.copy_from(&memfd(12), &[3]).unwrap();
        assert_eq!((d.capacity(), t.live_bytes()), (12, 12));
    }

    #[test]
    fn the_cpu_limit_refuses_oversized_buffers_cleanly() {
        let t = BufferTracker::with_cpu_limit(32);
        let m = model(&[4]);
        let _a = buffer(&t, 1, &m);
        let _b = buffer(&t, 1, &m);
        let models = [RoleModel {
            uid: 1,
            ours: true,
            model: &m,
        }];
        let third = t.allocate(1, None, &BufferDesc::default(), &models, &[role(0)], &[]);
        assert_eq!(third.unwrap_err(), ErrorStatus::GeneralFailure);
        assert_eq!(t.live_buffers(), 2);
    }

    #[test]
    fn concurrent_allocations_never_pass_the_cpu_limit_together() {
        let size = 1 << 20;
        let t = BufferTracker::with_cpu_limit(2 * size);
        let m = model(&[(size / 4) as u32]);
        for round in 0..20 {
            let start = std::sync::Barrier::new(8);
            let made: Vec<Arc<DeviceBuffer>> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..8)
                    .map(|_| {
                        s.spawn(|| {
                            let models = [RoleModel {
                                uid: 1,
                                ours: true,
                                model: &m,
                            }];
                            start.wait();
                            t.allocate(1, None, &BufferDesc::default(), &models, &[role(0)], &[])
                                .ok()
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .filter_map(|h| h.join().unwrap())
                    .collect()
            });
            assert_eq!(
                made.len(),
                2,
                "round {round}: buffers within a 2-buffer limit"
            );
            assert!(
                t.live_bytes() <= 2 * size,
                "round {round}: {}",
                t.live_bytes()
            );
        }
        assert_eq!(t.live_bytes(), 0);
    }

    fn token_request(input: &Memory, token: u32) -> Request {
        let arg = |pool_index, length| RequestArgument {
            has_no_value: false,
            location: DataLocation {
                pool_index,
                offset: 0,
                length,
                padding: 0,
            },
            dimensions: vec![],
        };
        Request {
            inputs: vec![arg(0, input.size as u32)],
            outputs: vec![arg(1, 0)],
            pools: vec![MemoryPool::Memory(input.clone()), MemoryPool::Token(token)],
        }
    }

    #[test]
    fn an_insufficient_buffer_output_is_a_general_failure_and_uninitializes_it() {
        let t = BufferTracker::default();
        let m = model(&[4]);
        let b = buffer(&t, 1, &m);
        b.copy_from(&memfd(16), &[]).unwrap();
        let bound = t
            .bind(1, 1, &m, &token_request(&memfd(16), b.token()))
            .unwrap();
        assert_eq!(bound.device_bos(), vec![None, None], "memfd-backed: no BOs");
        let r = bound.finish(ExecutionResult {
            status: ErrorStatus::OutputInsufficientSize,
            output_shapes: vec![OutputShape {
                dimensions: vec![4],
                is_sufficient: false,
            }],
            timing: Timing::NOT_MEASURED,
        });
        assert_eq!(r, ExecutionResult::failure(ErrorStatus::GeneralFailure));
        assert!(!b.is_initialized());
    }

    #[test]
    fn bind_rewrites_token_pools_and_checks_owner_and_role() {
        let t = BufferTracker::default();
        let m = model(&[4]);
        let b = buffer(&t, 1, &m);
        let r = token_request(&memfd(16), b.token());
        assert_eq!(
            t.bind(2, 1, &m, &r).unwrap_err(),
            ErrorStatus::InvalidArgument
        );
        assert_eq!(
            t.bind(1, 9, &m, &r).unwrap_err(),
            ErrorStatus::InvalidArgument
        );
        let bound = t.bind(1, 1, &m, &r).unwrap();
        assert!(bound.has_tokens());
        let MemoryPool::Memory(mem) = &bound.request().pools[1] else {
            panic!("the token pool is the buffer's memory now");
        };
        assert_eq!(mem.size, 16);
        assert_eq!(bound.request().outputs[0].location.length, 16);
        assert!(bound.cpu_pools()[1].is_some() && bound.cpu_pools()[0].is_none());
        let ok = bound.finish(ExecutionResult {
            status: ErrorStatus::None,
            output_shapes: vec![OutputShape {
                dimensions: vec![4],
                is_sufficient: true,
            }],
            timing: Timing::NOT_MEASURED,
        });
        assert_eq!(ok.status, ErrorStatus::None);
        assert!(
            b.is_initialized(),
            "a successful write initializes the buffer"
        );
    }

    #[test]
    fn copy_from_refuses_zero_extents_and_wrong_sizes() {
        let t = BufferTracker::default();
        let b = buffer(&t, 1, &model(&[2, 2]));
        let src = memfd(16);
        assert_eq!(
            b.copy_from(&src, &[0, 2]).unwrap_err(),
            ErrorStatus::InvalidArgument
        );
        assert_eq!(
            b.copy_from(&memfd(8), &[]).unwrap_err(),
            ErrorStatus::InvalidArgument
        );
        assert!(!b.is_initialized());
        b.copy_from(&src, &[]).unwrap();
        assert!(b.is_initialized());
    }
}
