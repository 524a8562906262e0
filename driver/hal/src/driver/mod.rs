//! The device interface: capabilities, supported operations, preparation, execution.
//!
//! Placement is whole-model: a model runs on the device when the device runs every one of its
//! operations at fixed shapes, and on the CPU executor otherwise. A device that disappears
//! (its node closed, the simulator killed) marks itself dead and prepared models carry on with
//! the CPU plan they were prepared with.

use std::collections::HashMap;
use std::io;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use nnaccel_cpu::{ExecError, Graph, InputArg, Lifetime, PreparedGraph};
use nnaccel_uapi::abi::{BO_ACCESS_READ, BO_ACCESS_WRITE, Binding, Job, MAX_BINDINGS};
use nnaccel_uapi::program::{self, Location, Program};
use nnaccel_uapi::ring::RingError;
use nnaccel_uapi::{BufferObject, Device, DeviceExt, LoadedProgram, RingQueue};

use super::convert::model_to_graph;
use super::domain::{
    BoundRequest, BufferDesc, BufferRole, BufferTracker, DeviceBuffer, LOCAL_OWNER, OwnerId,
    RoleModel,
};
use super::memory::MappedPool;
use super::types::*;
use super::validate::{combined_dimensions, validate_model, validate_request};
use crate::device::DeviceInfo;

mod caching;

/// What the driver runs on.
#[derive(Debug, Clone)]
pub enum Backend {
    /// A device (node or in-process), with the CPU executor as fallback.
    Device(Arc<dyn Device>),
    /// The CPU executor only.
    CpuOnly,
}

/// Where an operation of a model runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// On the accelerator.
    Device,
    /// On the CPU executor (fallback).
    Cpu,
    /// Nowhere: preparing the model fails.
    Unsupported,
}

impl Placement {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Device => "device",
            Self::Cpu => "cpu",
            Self::Unsupported => "unsupported",
        }
    }
}

/// Ring depth of a prepared model's queue.
const QUEUE_ENTRIES: u32 = 16;
/// Spin before sleeping while waiting for a device job.
const WAIT_SPIN: Duration = Duration::from_micros(30);
/// A job that does not complete in this long is treated as a dead device.
const DEVICE_TIMEOUT: Duration = Duration::from_secs(30);

fn is_device_gone(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOTCONN | libc::ECONNABORTED | libc::ENODEV | libc::ENXIO | libc::ESHUTDOWN)
    )
}

/// The device side of a driver: the device, whether it still answers, and what it runs.
#[derive(Debug)]
struct DeviceHandle {
    dev: Arc<dyn Device>,
    info: DeviceInfo,
    alive: AtomicBool,
    /// Operation signature -> whether the device runs it (probed with one-op programs).
    support: Mutex<HashMap<String, bool>>,
}

impl DeviceHandle {
    fn alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// Notes a failed call; marks the device dead when the error says it is gone.
    fn note_error(&self, e: &io::Error) {
        if is_device_gone(e) && self.alive.swap(false, Ordering::SeqCst) {
            tracing::warn!(
                "the device is gone ({e}); prepared models continue on the CPU executor"
            );
        }
    }
}

/// A driver: the NN HAL `IDevice`.
#[derive(Debug, Clone)]
pub struct Driver {
    device: Option<Arc<DeviceHandle>>,
    /// Memory-domain buffers (hal/domain.rs).
    domain: BufferTracker,
    /// Compilation caching: token records and the driver-managed cache (`crate::cache`).
    cache: Arc<crate::cache::CacheState>,
}

impl Driver {
    /// A driver over `backend`. A device that does not answer GET_PARAM is not used (the
    /// driver runs CPU-only and says why in the log).
    pub fn new(backend: Backend) -> Self {
        let device = match backend {
            Backend::CpuOnly => None,
            Backend::Device(dev) => match DeviceInfo::query(&*dev) {
                Ok(info) => Some(Arc::new(DeviceHandle {
                    dev,
                    info,
                    alive: AtomicBool::new(true),
                    support: Mutex::default(),
                })),
                Err(e) => {
                    tracing::warn!("device not usable ({e}); running on the CPU executor only");
                    None
                }
            },
        };
        Self {
            device,
            domain: BufferTracker::default(),
            cache: Arc::new(crate::cache::CacheState::in_memory()),
        }
    }

    /// One line saying what executes models.
    pub fn description(&self) -> String {
        match &self.device {
            Some(d) if d.alive() => format!(
                "nnaccel device (API {}.{}, engine waits with {}), CPU executor as fallback",
                d.info.api_version >> 16,
                d.info.api_version & 0xffff,
                if d.info.engine_uses_io_uring {
                    "io_uring"
                } else {
                    "futex"
                }
            ),
            Some(_) => "nnaccel device (gone), CPU executor".to_string(),
            None => "CPU executor".to_string(),
        }
    }

    /// The device's parameters, queried now (None when CPU-only or gone).
    pub fn device_info(&self) -> Option<DeviceInfo> {
        let d = self.device.as_ref().filter(|d| d.alive())?;
        match DeviceInfo::query(&*d.dev) {
            Ok(i) => Some(i),
            Err(e) => {
                d.note_error(&e);
                None
            }
        }
    }

    /// `getCapabilities`: performance relative to the reference CPU (lower is better).
    pub fn get_capabilities(&self) -> Capabilities {
        let perf = if self.device.as_ref().is_some_and(|d| d.alive()) {
            PerformanceInfo {
                exec_time: 0.5,
                power_usage: 0.5,
            }
        } else {
            PerformanceInfo {
                exec_time: 1.0,
                power_usage: 1.0,
            }
        };
        let unsupported = PerformanceInfo {
            exec_time: f32::MAX,
            power_usage: f32::MAX,
        };
        Capabilities {
            relaxed_float32_to_float16_performance_scalar: perf,
            relaxed_float32_to_float16_performance_tensor: perf,
            operand_performance: OperandType::ALL.iter().map(|t| (*t, perf)).collect(),
            if_performance: unsupported,
            while_performance: unsupported,
        }
    }

    /// `getSupportedOperations`: per operation, whether this driver runs it (on the device or
    /// on the CPU). Operations reading constants from memory the driver cannot map
    /// (`hardware_buffer`) are reported unsupported rather than failing later.
    pub fn get_supported_operations(&self, model: &Model) -> Result<Vec<bool>, ErrorStatus> {
        Ok(self
            .operation_placement(model)?
            .iter()
            .map(|p| *p != Placement::Unsupported)
            .collect())
    }

    /// Where each operation would run (whole-model placement, see the module doc).
    pub fn operation_placement(&self, model: &Model) -> Result<Vec<Placement>, ErrorStatus> {
        validate_model(model).map_err(|e| {
            tracing::debug!("invalid model: {e}");
            ErrorStatus::InvalidArgument
        })?;
        let graph = model_to_graph(model);
        let unmappable: Vec<bool> = (0..graph.operations.len())
            .map(|i| reads_unmappable_constant(model, &graph, i))
            .collect();
        let on_device: Vec<bool> = (0..graph.operations.len())
            .map(|i| !unmappable[i] && self.device_runs_operation(model, &graph, i))
            .collect();
        let whole_on_device = on_device.iter().all(|d| *d) && has_fixed_io_shapes(&graph);
        Ok((0..graph.operations.len())
            .map(|i| {
                if unmappable[i] {
                    Placement::Unsupported
                } else if whole_on_device {
                    Placement::Device
                } else if graph.is_operation_supported(i) {
                    Placement::Cpu
                } else {
                    Placement::Unsupported
                }
            })
            .collect())
    }

    fn device_runs_operation(&self, model: &Model, graph: &Graph, index: usize) -> bool {
        let Some(d) = self.device.as_ref().filter(|d| d.alive()) else {
            return false;
        };
        let Some((key, probe)) = one_operation_program(model, graph, index) else {
            return false;
        };
        if let Some(known) = d
            .support
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
        {
            return *known;
        }
        let runs = match probe
            .encode()
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
            .and_then(|b| LoadedProgram::create(d.dev.clone(), &b))
        {
            Ok(loaded) => {
                drop(loaded);
                true
            }
            Err(e) => {
                d.note_error(&e);
                if !d.alive() {
                    return false;
                }
                false
            }
        };
        d.support
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, runs);
        runs
    }

    /// `prepareModel` without the driver-managed cache.
    pub(crate) fn prepare_model_uncached(
        &self,
        model: &Model,
        preference: ExecutionPreference,
        _priority: Priority,
        deadline: Option<Deadline>,
    ) -> Result<PreparedModel, ErrorStatus> {
        let placement = self.operation_placement(model)?;
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(ErrorStatus::MissedDeadlineTransient);
        }
        if placement.contains(&Placement::Unsupported) {
            tracing::debug!("prepare: model has operations this driver cannot run");
            return Err(ErrorStatus::GeneralFailure);
        }
        let on_device = placement.first() == Some(&Placement::Device);
        self.build_plans(model, on_device, preference)
    }

    /// The CPU plan and, when `on_device`, the device plan of a validated model.
    fn build_plans(
        &self,
        model: &Model,
        on_device: bool,
        preference: ExecutionPreference,
    ) -> Result<PreparedModel, ErrorStatus> {
        let graph = model_to_graph(model);
        let cpu = if (0..graph.operations.len()).all(|i| graph.is_operation_supported(i)) {
            let pools = model
                .pools
                .iter()
                .map(MappedPool::map_constants)
                .collect::<Result<Vec<_>, _>>()?;
            let prepared = PreparedGraph::new(graph.clone()).map_err(|e| {
                tracing::debug!("prepare: {e}");
                ErrorStatus::GeneralFailure
            })?;
            Some(CpuPlan {
                graph: prepared,
                pools,
            })
        } else {
            None
        };
        let device = match &self.device {
            Some(d) if on_device && d.alive() && has_fixed_io_shapes(&graph) => {
                match DevicePlan::compile(d, model, &graph) {
                    Ok(plan) => Some(plan),
                    Err(e) => {
                        d.note_error(&e);
                        tracing::info!(
                            "prepare: the device did not take the program ({e}); using the CPU executor"
                        );
                        None
                    }
                }
            }
            _ => None,
        };
        if device.is_none() && cpu.is_none() {
            return Err(ErrorStatus::GeneralFailure);
        }
        Ok(PreparedModel {
            inner: Arc::new(PreparedInner {
                model: model.clone(),
                cpu,
                device,
                preference,
                uid: next_prepared_uid(),
                domain: self.domain.clone(),
            }),
        })
    }

    /// `allocate` (1.3) for `owner`: a memory-domain buffer for the given roles of `models`
    /// (hal/domain.rs). Device memory (BO_CREATE) when the device is live, else a sealed memfd.
    pub fn allocate(
        &self,
        owner: OwnerId,
        desc: &BufferDesc,
        models: &[&PreparedModel],
        input_roles: &[BufferRole],
        output_roles: &[BufferRole],
    ) -> Result<Arc<DeviceBuffer>, ErrorStatus> {
        let device = self
            .device
            .as_ref()
            .filter(|d| d.alive())
            .map(|d| d.dev.clone());
        let roles: Vec<RoleModel<'_>> = models
            .iter()
            .map(|pm| RoleModel {
                uid: pm.inner.uid,
                ours: pm.inner.domain.same(&self.domain),
                model: &pm.inner.model,
            })
            .collect();
        let allocated = self.domain.allocate(
            owner,
            device.as_ref(),
            desc,
            &roles,
            input_roles,
            output_roles,
        );
        // A device that went away since the last call: the buffer lives in a memfd instead,
        // as on a CPU-only driver.
        if allocated.is_err()
            && let Some(d) = self.device.as_ref().filter(|d| d.alive())
            && let Err(e) = d.dev.get_param(nnaccel_uapi::abi::PARAM_API_VERSION)
        {
            d.note_error(&e);
            if !d.alive() {
                return self
                    .domain
                    .allocate(owner, None, desc, &roles, input_roles, output_roles);
            }
        }
        allocated
    }

    /// The driver's memory-domain buffers (live counts).
    pub fn buffers(&self) -> &BufferTracker {
        &self.domain
    }

    /// Uses `state` for compilation caching (records in its state directory, the
    /// driver-managed cache).
    pub fn with_cache(mut self, state: crate::cache::CacheState) -> Self {
        self.cache = Arc::new(state);
        self
    }

    /// The driver's caching state.
    pub fn cache_state(&self) -> &crate::cache::CacheState {
        &self.cache
    }

    /// Prepares a model decoded from a cache: validated again (the bytes are untrusted), no
    /// placement probing — `on_device` says where it ran when it was cached; a device that no
    /// longer takes the program leaves the model on the CPU. Public for the cache fuzz
    /// targets (`tests/fuzz_units`), which drive the cache load path with decoded blobs.
    #[doc(hidden)]
    pub fn prepare_from_parts(
        &self,
        model: &Model,
        on_device: bool,
        preference: ExecutionPreference,
    ) -> Result<PreparedModel, ErrorStatus> {
        validate_model(model).map_err(|e| {
            tracing::info!("cached model is not valid: {e}");
            ErrorStatus::GeneralFailure
        })?;
        self.build_plans(model, on_device, preference)
    }
}

/// Whether operation `index` reads a constant from a pool the HAL cannot map.
fn reads_unmappable_constant(model: &Model, graph: &Graph, index: usize) -> bool {
    graph.operations[index].inputs.iter().any(|&k| {
        matches!(graph.operands.get(k as usize).map(|o| &o.lifetime),
            Some(Lifetime::ConstantReference { pool, .. })
                if model.pools.get(*pool as usize).is_some_and(|p| p.kind == MemoryKind::HardwareBuffer))
    })
}

fn fully_specified(dims: &[u32], scalar: bool) -> bool {
    scalar || (!dims.is_empty() && dims.iter().all(|d| *d != 0))
}

fn has_fixed_io_shapes(graph: &Graph) -> bool {
    graph
        .input_indexes
        .iter()
        .chain(&graph.output_indexes)
        .all(|&k| {
            let o = &graph.operands[k as usize];
            fully_specified(&o.dimensions, o.ty.is_scalar())
        })
        && graph.input_indexes.len() + graph.output_indexes.len() <= MAX_BINDINGS
}

/// The bytes of a constant operand (CONSTANT_COPY or CONSTANT_REFERENCE).
fn constant_bytes(model: &Model, lifetime: &Lifetime) -> Option<Vec<u8>> {
    match *lifetime {
        Lifetime::ConstantCopy { offset, length } => model
            .operand_values
            .get(offset..offset.checked_add(length)?)
            .map(<[u8]>::to_vec),
        Lifetime::ConstantReference {
            pool,
            offset,
            length,
        } => {
            let mem = model.pools.get(pool as usize)?;
            let mapped = MappedPool::map(mem).ok()?;
            mapped.read(offset, length).ok()
        }
        _ => None,
    }
}

fn program_operand(o: &nnaccel_cpu::Operand, location: Location) -> program::Operand {
    program::Operand {
        operand_type: o.ty.code(),
        dims: o.dimensions.clone(),
        scale: o.scale,
        zero_point: o.zero_point,
        location,
        channel_quant: o
            .channel_quant
            .as_ref()
            .map(|c| (c.channel_dim, c.scales.clone())),
    }
}

/// A program with just operation `index` (constants inline), and the signature that decides
/// whether the device runs it. None when the operation cannot run at fixed shapes.
fn one_operation_program(model: &Model, graph: &Graph, index: usize) -> Option<(String, Program)> {
    let op = &graph.operations[index];
    let mut program = Program::default();
    let mut remap: HashMap<u32, u32> = HashMap::new();
    let mut key = format!("{}:", op.op.code());
    for (is_output, &k) in op
        .inputs
        .iter()
        .map(|k| (false, k))
        .chain(op.outputs.iter().map(|k| (true, k)))
    {
        let o = graph.operands.get(k as usize)?;
        let constant = o.is_constant();
        key.push_str(&format!(
            "{}/{}/{}{};",
            o.ty.code(),
            o.dimensions.len(),
            u8::from(constant),
            u8::from(is_output)
        ));
        if remap.contains_key(&k) {
            continue;
        }
        let location = if is_output {
            Location::Output
        } else if o.lifetime == Lifetime::NoValue {
            Location::NoValue
        } else if constant {
            let bytes = constant_bytes(model, &o.lifetime)?;
            let offset = program.constants.len() as u64;
            program.constants.extend_from_slice(&bytes);
            while program.constants.len() % 8 != 0 {
                program.constants.push(0);
            }
            Location::Constant {
                offset,
                length: bytes.len() as u64,
            }
        } else {
            Location::Input
        };
        if matches!(location, Location::Input | Location::Output)
            && !fully_specified(&o.dimensions, o.ty.is_scalar())
        {
            return None;
        }
        let new = program.operands.len() as u32;
        match location {
            Location::Input => program.inputs.push(new),
            Location::Output => program.outputs.push(new),
            _ => {}
        }
        program.operands.push(program_operand(o, location));
        remap.insert(k, new);
    }
    program.operations.push(program::Operation {
        operation_type: op.op.code(),
        inputs: op.inputs.iter().map(|k| remap[k]).collect(),
        outputs: op.outputs.iter().map(|k| remap[k]).collect(),
    });
    Some((key, program))
}

/// The CPU plan of a prepared model.
#[derive(Debug)]
struct CpuPlan {
    graph: PreparedGraph,
    pools: Vec<MappedPool>,
}

#[derive(Debug)]
struct DeviceQueue {
    ring: RingQueue,
    /// A job abandoned at its deadline; reaped before the next submission.
    abandoned: Option<u64>,
}

/// The device plan of a prepared model: a loaded program and a queue to run it on.
#[derive(Debug)]
struct DevicePlan {
    device: Arc<DeviceHandle>,
    /// Destroyed before `queue` (field order) when the plan is dropped.
    program: LoadedProgram,
    queue: Mutex<DeviceQueue>,
    /// Fixed dimensions and byte sizes of the inputs and outputs.
    inputs: Vec<(Vec<u32>, u64, u64)>,
    outputs: Vec<(Vec<u32>, u64, u64)>,
}

impl DevicePlan {
    fn compile(d: &Arc<DeviceHandle>, model: &Model, graph: &Graph) -> io::Result<Self> {
        let einval = || io::Error::from_raw_os_error(libc::EINVAL);
        // Pools holding constants become BOs the program refers to by slot.
        // On an early return the BOs imported so far are closed (dropped).
        let mut bo_refs = Vec::with_capacity(model.pools.len());
        for pool in &model.pools {
            let offset = match pool.kind {
                MemoryKind::MmapFd { offset, .. } => offset,
                _ => 0,
            };
            bo_refs.push(BufferObject::import(
                d.dev.clone(),
                pool.fd.as_fd(),
                offset,
                pool.size,
                BO_ACCESS_READ,
            )?);
        }
        let operands = graph
            .operands
            .iter()
            .map(|o| {
                let location = match o.lifetime {
                    Lifetime::TemporaryVariable => Location::Temporary,
                    Lifetime::SubgraphInput => Location::Input,
                    Lifetime::SubgraphOutput => Location::Output,
                    Lifetime::NoValue => Location::NoValue,
                    Lifetime::ConstantCopy { offset, length } => Location::Constant {
                        offset: offset as u64,
                        length: length as u64,
                    },
                    Lifetime::ConstantReference {
                        pool,
                        offset,
                        length,
                    } => Location::BoRef {
                        slot: pool,
                        offset: offset as u64,
                        length: length as u64,
                    },
                };
                program_operand(o, location)
            })
            .collect();
        let program = Program {
            operands,
            operations: graph
                .operations
                .iter()
                .map(|op| program::Operation {
                    operation_type: op.op.code(),
                    inputs: op.inputs.clone(),
                    outputs: op.outputs.clone(),
                })
                .collect(),
            inputs: graph.input_indexes.clone(),
            outputs: graph.output_indexes.clone(),
            bo_refs: bo_refs.iter().map(BufferObject::handle).collect(),
            constants: model.operand_values.clone(),
            relax_f32_to_f16: model.relax_computation_float32_to_float16,
        };
        let created = program
            .encode()
            .map_err(|_| einval())
            .and_then(|bytes| LoadedProgram::create(d.dev.clone(), &bytes));
        // The program holds its own references to the BOs.
        drop(bo_refs);
        let program = created?;
        // Without a queue the program is destroyed (dropped) again.
        let queue = RingQueue::create(d.dev.clone(), QUEUE_ENTRIES, 0)?;
        let spec = |k: &u32| {
            let o = &graph.operands[*k as usize];
            let bytes = o.byte_size().unwrap_or(0) as u64;
            (o.dimensions.clone(), bytes, o.ty.element_size() as u64)
        };
        Ok(Self {
            device: d.clone(),
            program,
            queue: Mutex::new(DeviceQueue {
                ring: queue,
                abandoned: None,
            }),
            inputs: graph.input_indexes.iter().map(spec).collect(),
            outputs: graph.output_indexes.iter().map(spec).collect(),
        })
    }
}

impl Drop for DevicePlan {
    fn drop(&mut self) {
        // A dead device is not called (it may hang): the program goes with the device file.
        if !self.device.alive() {
            self.program.disown();
        }
    }
}

#[derive(Debug)]
struct PreparedInner {
    model: Model,
    cpu: Option<CpuPlan>,
    device: Option<DevicePlan>,
    preference: ExecutionPreference,
    /// Identity for memory-domain roles (unique in the process, never reused).
    uid: u64,
    /// The driver's buffer tracker.
    domain: BufferTracker,
}

fn next_prepared_uid() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A prepared model: the NN HAL `IPreparedModel`.
#[derive(Debug, Clone)]
pub struct PreparedModel {
    inner: Arc<PreparedInner>,
}

/// An execution started with [`PreparedModel::execute`].
#[derive(Debug)]
pub struct ExecutionHandle {
    thread: std::thread::JoinHandle<ExecutionResult>,
}

impl ExecutionHandle {
    /// Runs `f` on its own thread.
    pub fn spawn(f: impl FnOnce() -> ExecutionResult + Send + 'static) -> Self {
        Self {
            thread: std::thread::spawn(f),
        }
    }

    /// Waits for the result.
    pub fn wait(self) -> ExecutionResult {
        self.thread
            .join()
            .unwrap_or_else(|_| ExecutionResult::failure(ErrorStatus::GeneralFailure))
    }
}

enum DeviceOutcome {
    Done(ExecutionResult),
    Fallback(&'static str),
}

impl PreparedModel {
    /// Whether executions go to the device (false after the device died).
    pub fn runs_on_device(&self) -> bool {
        self.inner.device.as_ref().is_some_and(|d| d.device.alive())
    }

    /// The model this was prepared from.
    pub fn model(&self) -> &Model {
        &self.inner.model
    }

    /// `execute`: runs asynchronously; the handle gives the result.
    pub fn execute(
        &self,
        request: Request,
        measure: MeasureTiming,
        deadline: Option<Deadline>,
    ) -> ExecutionHandle {
        let me = self.clone();
        ExecutionHandle {
            thread: std::thread::spawn(move || {
                me.execute_synchronously(&request, measure, deadline)
            }),
        }
    }

    /// `executeSynchronously`, by the in-process owner ([`LOCAL_OWNER`]) of memory-domain
    /// buffers.
    pub fn execute_synchronously(
        &self,
        request: &Request,
        measure: MeasureTiming,
        deadline: Option<Deadline>,
    ) -> ExecutionResult {
        self.execute_for(LOCAL_OWNER, request, measure, deadline)
    }

    /// `executeSynchronously` on behalf of `owner` (a service connection): tokens in the
    /// request must name buffers `owner` allocated for this prepared model's roles
    /// (hal/domain.rs). Every execution path — regular, async, burst — ends here.
    pub fn execute_for(
        &self,
        owner: OwnerId,
        request: &Request,
        measure: MeasureTiming,
        deadline: Option<Deadline>,
    ) -> ExecutionResult {
        self.execute_with(owner, request, measure, deadline, None)
    }

    /// An execution for `owner`, with a burst's cached resources (`burst`: the cache and the
    /// slot of each request pool) or without.
    fn execute_with(
        &self,
        owner: OwnerId,
        request: &Request,
        measure: MeasureTiming,
        deadline: Option<Deadline>,
        mut burst: Option<BurstSlots<'_, '_>>,
    ) -> ExecutionResult {
        let start = Instant::now();
        let model = &self.inner.model;
        if let Err(e) = validate_request(request, model) {
            tracing::debug!("invalid request: {e}");
            return ExecutionResult::failure(ErrorStatus::InvalidArgument);
        }
        let mut bound = match self
            .inner
            .domain
            .bind(owner, self.inner.uid, model, request)
        {
            Ok(b) => b,
            Err(s) => return ExecutionResult::failure(s),
        };
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return bound.finish(ExecutionResult::failure(
                ErrorStatus::MissedDeadlineTransient,
            ));
        }
        let mut result = self.run_bound(&bound, deadline, reborrow(&mut burst));
        if bound.grow_for(&result) {
            result = self.run_bound(&bound, deadline, reborrow(&mut burst));
        }
        if result.status == ErrorStatus::None && deadline.is_some_and(|d| Instant::now() > d) {
            result = ExecutionResult::failure(ErrorStatus::MissedDeadlineTransient);
        }
        let mut result = bound.finish(result);
        if result.status != ErrorStatus::None || measure == MeasureTiming::No {
            result.timing = Timing::NOT_MEASURED;
        } else {
            result.timing.time_in_driver_us =
                u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
            result.timing.time_on_device_us = result
                .timing
                .time_on_device_us
                .min(result.timing.time_in_driver_us);
        }
        result
    }

    /// Runs a checked request on the device, or on the CPU when the device cannot take it.
    fn run_bound(
        &self,
        bound: &BoundRequest,
        deadline: Option<Deadline>,
        mut burst: Option<BurstSlots<'_, '_>>,
    ) -> ExecutionResult {
        let request = bound.request();
        if let Some(plan) = self.inner.device.as_ref().filter(|p| p.device.alive()) {
            match run_on_device(
                plan,
                request,
                &bound.device_bos(),
                deadline,
                reborrow(&mut burst),
            ) {
                DeviceOutcome::Done(r) => return r,
                DeviceOutcome::Fallback(why) => {
                    tracing::debug!("execution falls back to the CPU: {why}")
                }
            }
        }
        match &self.inner.cpu {
            Some(cpu) => run_on_cpu(cpu, &self.inner.model, request, &bound.cpu_pools(), burst),
            None => ExecutionResult::failure(ErrorStatus::DeviceUnavailable),
        }
    }
}

fn fixed_shapes(specs: &[(Vec<u32>, u64, u64)]) -> Vec<OutputShape> {
    specs
        .iter()
        .map(|(dims, _, _)| OutputShape {
            dimensions: dims.clone(),
            is_sufficient: true,
        })
        .collect()
}

fn run_on_device(
    plan: &DevicePlan,
    request: &Request,
    device_bos: &[Option<u32>],
    deadline: Option<Deadline>,
    mut burst: Option<BurstSlots<'_, '_>>,
) -> DeviceOutcome {
    let args = request
        .inputs
        .iter()
        .zip(&plan.inputs)
        .chain(request.outputs.iter().zip(&plan.outputs));
    for (arg, (dims, _, elem)) in args.clone() {
        if arg.has_no_value {
            return DeviceOutcome::Fallback("an omitted argument");
        }
        if !arg.dimensions.is_empty() && arg.dimensions != *dims {
            return DeviceOutcome::Fallback("request dimensions differ from the compiled ones");
        }
        if u64::from(arg.location.offset) % elem != 0 {
            return DeviceOutcome::Fallback("an argument is not aligned to its element size");
        }
    }
    // Too-small outputs are reported without running.
    let mut shapes = fixed_shapes(&plan.outputs);
    let mut insufficient = false;
    for ((arg, (_, bytes, _)), shape) in request
        .outputs
        .iter()
        .zip(&plan.outputs)
        .zip(shapes.iter_mut())
    {
        if argument_length(request, arg) < *bytes {
            shape.is_sufficient = false;
            insufficient = true;
        }
    }
    if insufficient {
        return DeviceOutcome::Done(ExecutionResult {
            status: ErrorStatus::OutputInsufficientSize,
            output_shapes: shapes,
            timing: Timing::NOT_MEASURED,
        });
    }
    let dev = &plan.device.dev;
    // Import the request's pools for this execution; memory-domain buffers are BOs already,
    // and a burst imports each slot once.
    let mut handles = Vec::with_capacity(request.pools.len());
    // BOs imported for this execution only; closed (dropped) after it.
    let mut imported: Vec<BufferObject> = Vec::with_capacity(request.pools.len());
    for (i, pool) in request.pools.iter().enumerate() {
        if let Some(bo) = device_bos.get(i).copied().flatten() {
            handles.push(bo);
            continue;
        }
        if let Some(h) = burst.as_ref().and_then(|(c, slots)| c.bo(slots.get(i))) {
            handles.push(h);
            continue;
        }
        let MemoryPool::Memory(mem) = pool else {
            return DeviceOutcome::Fallback("a token pool");
        };
        let (offset, access) = match mem.kind {
            MemoryKind::MmapFd { offset, prot } => (
                offset,
                if prot & libc::PROT_WRITE != 0 {
                    BO_ACCESS_READ | BO_ACCESS_WRITE
                } else {
                    BO_ACCESS_READ
                },
            ),
            _ => (0, BO_ACCESS_READ | BO_ACCESS_WRITE),
        };
        let size = pool_size(mem);
        match BufferObject::import(dev.clone(), mem.fd.as_fd(), offset, size, access) {
            Ok(bo) => {
                handles.push(bo.handle());
                let unkept = match burst.as_mut() {
                    Some((c, slots)) => c.keep_bo(&plan.device, slots.get(i), bo),
                    None => Some(bo),
                };
                imported.extend(unkept);
            }
            Err(e) => {
                plan.device.note_error(&e);
                drop(imported);
                return if mem.kind == MemoryKind::HardwareBuffer {
                    DeviceOutcome::Done(ExecutionResult::failure(ErrorStatus::GeneralFailure))
                } else {
                    DeviceOutcome::Fallback("the device could not import a pool")
                };
            }
        }
    }
    let mut job = Job {
        program: plan.program.handle(),
        num_bindings: (plan.inputs.len() + plan.outputs.len()) as u32,
        ..Job::default()
    };
    let all_args = request
        .inputs
        .iter()
        .zip(&plan.inputs)
        .chain(request.outputs.iter().zip(&plan.outputs));
    for (slot, (arg, (_, bytes, _))) in job.bindings.iter_mut().zip(all_args) {
        *slot = Binding {
            bo: handles[arg.location.pool_index as usize],
            flags: 0,
            offset: u64::from(arg.location.offset),
            length: *bytes,
        };
    }
    let queue = match burst {
        Some((c, _)) => c.queue(plan),
        None => &plan.queue,
    };
    let outcome = {
        let mut q = queue.lock().unwrap_or_else(PoisonError::into_inner);
        submit_and_wait(&plan.device, &mut q, &job, deadline)
    };
    drop(imported);
    match outcome {
        Ok(c) if c.status == 0 => DeviceOutcome::Done(ExecutionResult {
            status: ErrorStatus::None,
            output_shapes: shapes,
            timing: Timing {
                time_on_device_us: c.device_time_ns / 1000,
                time_in_driver_us: 0,
            },
        }),
        Ok(c) => {
            tracing::debug!("device job failed with status {}", c.status);
            DeviceOutcome::Done(ExecutionResult::failure(ErrorStatus::GeneralFailure))
        }
        Err(RingError::TimedOut(_)) if deadline.is_some() => DeviceOutcome::Done(
            ExecutionResult::failure(ErrorStatus::MissedDeadlineTransient),
        ),
        Err(e) => {
            tracing::warn!("device execution failed ({e}); falling back to the CPU executor");
            plan.device.alive.store(false, Ordering::SeqCst);
            DeviceOutcome::Fallback("the device stopped answering")
        }
    }
}

/// How long one futex sleep lasts before the driver checks that the device still answers.
const LIVENESS_SLICE: Duration = Duration::from_millis(200);

/// Submits `job` and waits for it. The wait sleeps in slices of [`LIVENESS_SLICE`] and asks
/// the device for a parameter between slices, so a device that dies mid-job (its process
/// killed, its node closed) is noticed within a slice rather than at [`DEVICE_TIMEOUT`].
fn submit_and_wait(
    device: &DeviceHandle,
    q: &mut DeviceQueue,
    job: &Job,
    deadline: Option<Deadline>,
) -> Result<nnaccel_uapi::abi::Completion, RingError> {
    if let Some(seq) = q.abandoned.take() {
        wait_watching_device(device, q, seq, None)?;
    }
    let seq = q.ring.submit(job)?;
    match wait_watching_device(device, q, seq, deadline) {
        Err(RingError::TimedOut(s)) => {
            // Reap it before the next submission; the ring keeps one window of jobs.
            q.abandoned = Some(s);
            if deadline.is_some_and(|d| Instant::now() >= d) {
                Err(RingError::TimedOut(s))
            } else {
                Err(RingError::Device(libc::ETIMEDOUT))
            }
        }
        other => other,
    }
}

fn wait_watching_device(
    device: &DeviceHandle,
    q: &mut DeviceQueue,
    seq: u64,
    deadline: Option<Deadline>,
) -> Result<nnaccel_uapi::abi::Completion, RingError> {
    let give_up = Instant::now() + DEVICE_TIMEOUT;
    let end = deadline.map_or(give_up, |d| d.min(give_up));
    let mut spin = WAIT_SPIN;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        let slice = left.min(LIVENESS_SLICE);
        match q
            .ring
            .wait(seq, spin, Some(nnaccel_uapi::sys::deadline_after(slice)))
        {
            Err(RingError::TimedOut(s)) if slice < left => {
                if let Err(e) = device.dev.get_param(nnaccel_uapi::abi::PARAM_API_VERSION) {
                    device.note_error(&e);
                    if is_device_gone(&e) {
                        return Err(RingError::Device(e.raw_os_error().unwrap_or(libc::ENODEV)));
                    }
                }
                tracing::trace!("job {s} still running after a liveness slice");
                spin = Duration::ZERO;
            }
            other => return other,
        }
    }
}

/// The byte length of a request argument. In a hardware_buffer pool, offset 0 and length 0
/// name the whole buffer (REFERENCE.md §3).
fn argument_length(request: &Request, arg: &RequestArgument) -> u64 {
    let length = u64::from(arg.location.length);
    if length != 0 {
        return length;
    }
    match request.pools.get(arg.location.pool_index as usize) {
        Some(MemoryPool::Memory(mem)) if mem.kind == MemoryKind::HardwareBuffer => {
            pool_size(mem).saturating_sub(u64::from(arg.location.offset))
        }
        _ => 0,
    }
}

/// A pool's size; a hardware_buffer sent with size 0 is as large as its fd.
fn pool_size(mem: &Memory) -> u64 {
    if mem.size == 0 {
        nnaccel_uapi::sys::fd_size(mem.fd.as_fd()).unwrap_or(0)
    } else {
        mem.size
    }
}

/// Runs `request` on the CPU plan. `mapped[i]`, where given, is pool `i` already mapped (a
/// memory-domain buffer); the other pools are mapped for this execution, or, in a burst, once
/// per slot and kept in the burst's cache.
fn run_on_cpu(
    plan: &CpuPlan,
    model: &Model,
    request: &Request,
    mapped: &[Option<&MappedPool>],
    burst: Option<BurstSlots<'_, '_>>,
) -> ExecutionResult {
    let exec_start = Instant::now();
    let premapped = |i: usize| mapped.get(i).copied().flatten();
    let mut owned = Vec::with_capacity(request.pools.len());
    let mut cache = None;
    match burst {
        Some((c, slots)) => {
            if let Err(s) = c.map_slots(&request.pools, slots, |i| premapped(i).is_some()) {
                return ExecutionResult::failure(s);
            }
            cache = Some((&*c, slots));
        }
        None => {
            for (i, p) in request.pools.iter().enumerate() {
                let MemoryPool::Memory(mem) = p else {
                    return ExecutionResult::failure(ErrorStatus::InvalidArgument);
                };
                if premapped(i).is_some() {
                    owned.push(None);
                    continue;
                }
                match MappedPool::map(mem) {
                    Ok(m) => owned.push(Some(m)),
                    Err(s) => return ExecutionResult::failure(s),
                }
            }
        }
    }
    let mut pools: Vec<&MappedPool> = Vec::with_capacity(request.pools.len());
    for i in 0..request.pools.len() {
        let pool = premapped(i)
            .or_else(|| owned.get(i).and_then(Option::as_ref))
            .or_else(|| cache.and_then(|(c, slots)| c.mapped(slots.get(i))));
        match pool {
            Some(p) => pools.push(p),
            None => return ExecutionResult::failure(ErrorStatus::GeneralFailure),
        }
    }
    for p in &pools {
        p.begin_access(true);
    }
    let end_access = |pools: &[&MappedPool], wrote: bool| {
        for p in pools {
            p.end_access(wrote);
        }
    };
    // Input bytes: copied out of the pools into buffers of our own, as the client may write
    // its pools at any time and the executor checks values before it uses them.
    let mut input_bytes: Vec<Vec<u8>> = Vec::with_capacity(request.inputs.len());
    for arg in &request.inputs {
        if arg.has_no_value {
            input_bytes.push(Vec::new());
            continue;
        }
        let loc = &arg.location;
        match pools[loc.pool_index as usize].read(loc.offset as usize, loc.length as usize) {
            Ok(b) => input_bytes.push(b),
            Err(s) => {
                end_access(&pools, false);
                return ExecutionResult::failure(s);
            }
        }
    }
    let mut inputs = Vec::with_capacity(request.inputs.len());
    for ((arg, &k), data) in request
        .inputs
        .iter()
        .zip(&model.input_indexes)
        .zip(&input_bytes)
    {
        if arg.has_no_value {
            inputs.push(InputArg::NoValue);
            continue;
        }
        let dims =
            match combined_dimensions(&model.operands[k as usize].dimensions, &arg.dimensions) {
                Ok(d) => d,
                Err(_) => {
                    end_access(&pools, false);
                    return ExecutionResult::failure(ErrorStatus::InvalidArgument);
                }
            };
        inputs.push(InputArg::Value {
            data,
            dimensions: dims,
        });
    }
    // Outputs are computed into private buffers, then copied: two outputs (or an output and
    // an input) may share a pool, and the client may touch it concurrently.
    let mut out_bufs: Vec<Vec<u8>> = request
        .outputs
        .iter()
        .map(|a| vec![0u8; a.location.length as usize])
        .collect();
    // Constants: each pool's private snapshot (`MappedPool::constants` says why and when).
    let model_pools: Vec<&[u8]> = plan
        .pools
        .iter()
        .map(|p| p.constants().unwrap_or_default())
        .collect();
    let result = {
        let mut outs: Vec<&mut [u8]> = out_bufs.iter_mut().map(Vec::as_mut_slice).collect();
        plan.graph.execute(&model_pools, &inputs, &mut outs)
    };
    let exec_us = u64::try_from(exec_start.elapsed().as_micros()).unwrap_or(u64::MAX);
    let status = match result {
        Ok(shapes) => {
            for (arg, buf) in request.outputs.iter().zip(&out_bufs) {
                if arg.has_no_value {
                    continue;
                }
                let pool = &pools[arg.location.pool_index as usize];
                if let Err(s) = pool.write(arg.location.offset as usize, buf) {
                    for p in &pools {
                        p.end_access(false);
                    }
                    return ExecutionResult::failure(s);
                }
            }
            for p in &pools {
                p.end_access(true);
            }
            return ExecutionResult {
                status: ErrorStatus::None,
                output_shapes: shapes
                    .into_iter()
                    .map(|s| OutputShape {
                        dimensions: s.dimensions,
                        is_sufficient: s.is_sufficient,
                    })
                    .collect(),
                timing: Timing {
                    time_on_device_us: exec_us,
                    time_in_driver_us: 0,
                },
            };
        }
        Err(ExecError::OutputInsufficientSize(shapes)) => {
            for p in &pools {
                p.end_access(false);
            }
            return ExecutionResult {
                status: ErrorStatus::OutputInsufficientSize,
                output_shapes: shapes
                    .into_iter()
                    .map(|s| OutputShape {
                        dimensions: s.dimensions,
                        is_sufficient: s.is_sufficient,
                    })
                    .collect(),
                timing: Timing::NOT_MEASURED,
            };
        }
        Err(ExecError::InvalidArgument(m)) => {
            tracing::debug!("execution: {m}");
            ErrorStatus::InvalidArgument
        }
        Err(ExecError::Failed(m)) => {
            tracing::debug!("execution: {m}");
            ErrorStatus::GeneralFailure
        }
    };
    for p in &pools {
        p.end_access(false);
    }
    ExecutionResult::failure(status)
}

/// What a burst keeps across its executions (REFERENCE.md §5): per pool slot the device BO
/// (imported once, not per execution) and the CPU mapping, and its own device queue, created
/// with `QUEUE_FLAG_HIGH_PERFORMANCE` — the burst's lifetime is the device's hint to stay in
/// its high-performance state. Dropping it (the burst ends) or [`BurstCache::forget`]
/// (freeMemory) releases them.
#[derive(Debug, Default)]
pub struct BurstCache {
    bos: HashMap<i32, (Arc<DeviceHandle>, BufferObject)>,
    maps: HashMap<i32, MappedPool>,
    queue: Option<(Arc<DeviceHandle>, Mutex<DeviceQueue>)>,
}

impl BurstCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Drops what is cached for `slot` (freeMemory).
    pub fn forget(&mut self, slot: i32) {
        if let Some((device, mut bo)) = self.bos.remove(&slot) {
            // A dead device is not called (it may hang): the BO goes with the device file.
            if !device.alive() {
                bo.disown();
            }
            drop(bo);
        }
        self.maps.remove(&slot);
    }

    /// Slots with a BO or a mapping.
    pub fn len(&self) -> usize {
        let mut slots: Vec<&i32> = self.bos.keys().chain(self.maps.keys()).collect();
        slots.sort_unstable();
        slots.dedup();
        slots.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the burst has its own high-performance device queue.
    pub fn has_device_queue(&self) -> bool {
        self.queue.is_some()
    }

    fn bo(&self, slot: Option<&i32>) -> Option<u32> {
        slot.and_then(|s| self.bos.get(s))
            .map(|(_, bo)| bo.handle())
    }

    /// Keeps `bo` for `slot`; a BO the slot had before is closed (dropped) after the swap.
    /// Without a slot the BO is given back, for the caller to close after the execution.
    fn keep_bo(
        &mut self,
        device: &Arc<DeviceHandle>,
        slot: Option<&i32>,
        bo: BufferObject,
    ) -> Option<BufferObject> {
        match slot {
            Some(s) => {
                drop(self.bos.insert(*s, (device.clone(), bo)));
                None
            }
            None => Some(bo),
        }
    }

    /// The burst's own queue (created on first use with `QUEUE_FLAG_HIGH_PERFORMANCE`); the
    /// model's queue if that fails.
    fn queue<'a>(&'a mut self, plan: &'a DevicePlan) -> &'a Mutex<DeviceQueue> {
        if self.queue.is_none() {
            match RingQueue::create(
                plan.device.dev.clone(),
                QUEUE_ENTRIES,
                nnaccel_uapi::abi::QUEUE_FLAG_HIGH_PERFORMANCE,
            ) {
                Ok(ring) => {
                    let q = DeviceQueue {
                        ring,
                        abandoned: None,
                    };
                    self.queue = Some((plan.device.clone(), Mutex::new(q)));
                }
                Err(e) => {
                    tracing::debug!("burst queue: {e}; using the model's queue");
                    return &plan.queue;
                }
            }
        }
        match &self.queue {
            Some((_, q)) => q,
            None => &plan.queue,
        }
    }

    /// Maps the slots not mapped yet, but for pools `skip` names (memory-domain buffers,
    /// which have their own mapping and may be reallocated between executions).
    fn map_slots(
        &mut self,
        pools: &[MemoryPool],
        slots: &[i32],
        skip: impl Fn(usize) -> bool,
    ) -> Result<(), ErrorStatus> {
        if pools.len() != slots.len() {
            return Err(ErrorStatus::GeneralFailure);
        }
        for (i, (pool, slot)) in pools.iter().zip(slots).enumerate() {
            if skip(i) || self.maps.contains_key(slot) {
                continue;
            }
            let MemoryPool::Memory(mem) = pool else {
                return Err(ErrorStatus::InvalidArgument);
            };
            self.maps.insert(*slot, MappedPool::map(mem)?);
        }
        Ok(())
    }

    fn mapped(&self, slot: Option<&i32>) -> Option<&MappedPool> {
        slot.and_then(|s| self.maps.get(s))
    }
}

impl Drop for BurstCache {
    fn drop(&mut self) {
        let slots: Vec<i32> = self.bos.keys().copied().collect();
        for s in slots {
            self.forget(s);
        }
    }
}

impl PreparedModel {
    /// The execution preference it was prepared with (bursts derive their polling from it).
    pub fn preference(&self) -> ExecutionPreference {
        self.inner.preference
    }

    /// An execution of a burst: like [`PreparedModel::execute_for`] (same validation, same
    /// paths), with the pools' BOs and mappings taken from (and added to) `cache`, `slots[i]`
    /// naming request pool `i`, on the burst's own device queue. `owner` is the burst's
    /// client: tokens in the request must be its own.
    pub fn execute_in_burst(
        &self,
        owner: OwnerId,
        request: &Request,
        measure: MeasureTiming,
        cache: &mut BurstCache,
        slots: &[i32],
    ) -> ExecutionResult {
        self.execute_with(owner, request, measure, None, Some((cache, slots)))
    }
}

/// A burst's cache and the slot of each request pool.
type BurstSlots<'c, 's> = (&'c mut BurstCache, &'s [i32]);

/// Lends the burst's cache again (for an execution that may run twice).
fn reborrow<'a>(burst: &'a mut Option<BurstSlots<'_, '_>>) -> Option<BurstSlots<'a, 'a>> {
    burst.as_mut().map(|(c, slots)| (&mut **c, *slots))
}
