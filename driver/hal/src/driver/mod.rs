//! The device interface: capabilities, supported operations, preparation, execution.
//!
//! - this file: [`Driver`] (capabilities, placement, preparation, memory-domain allocation)
//!   and [`PreparedModel`] (the execution entry points, binding a request to a plan);
//! - `lower`: a model or one operation to a device program, and the device plan;
//! - `on_device`: one request as a job on the device's queue;
//! - `on_cpu`: one request on the CPU executor;
//! - `burst_cache`: what a burst keeps across executions ([`BurstCache`]);
//! - `caching`: preparation through the compilation cache;
//! - `partition`: placement per operation, and models split into device and CPU parts.
//!
//! Placement is per operation: a model runs whole on the device when the device runs every one
//! of its operations at fixed shapes; otherwise the operations the device runs form device
//! parts and the rest CPU parts, run in order inside one execution, with the tensors crossing
//! between parts in a driver-owned memfd (the arena) the device imports once
//! (`partition.rs` has the rules; a model nothing of which runs on the device is whole on the
//! CPU executor). A failed device call fails
//! (or sends to the CPU) the request that made it, nothing more: the device is declared dead
//! only when a health probe (a plain GET_PARAM) says it is gone, and prepared models then carry
//! on with the CPU plan they were prepared with. A dead device is probed again at most every
//! [`REPROBE_INTERVAL`] (on the next preparation, execution placement or info call), its node
//! reopened when the driver knows it ([`Driver::with_device_node`]), and adopted again when it
//! answers: new preparations run on it, with no restart.

use std::collections::HashMap;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
use super::memory::{MappedPool, RecentPools};
use super::types::*;
use super::validate::{combined_dimensions, validate_model, validate_request};
use crate::device::DeviceInfo;

mod burst_cache;
mod caching;
mod lower;
mod on_cpu;
mod on_device;
mod partition;

pub use burst_cache::BurstCache;
use burst_cache::{BurstSlots, reborrow};
use lower::*;
use on_cpu::*;
use on_device::*;
use partition::{PartitionOutcome, PartitionPlan};

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
/// A job that does not complete in this long is cancelled and fails its execution (the device
/// stays in service); `NNACCEL_DEVICE_TIMEOUT_MS` overrides it (`on_device::device_timeout`).
const DEVICE_TIMEOUT: Duration = Duration::from_secs(30);
/// A dead device is probed again at most this often.
pub const REPROBE_INTERVAL: Duration = Duration::from_secs(1);

/// Whether a failed *health probe* (a plain GET_PARAM) says the device is gone. Only a probe
/// decides: the same errno from BO_IMPORT or PROGRAM_CREATE may be the caller's fault (a pipe
/// given as a pool is ENODEV there).
fn is_device_gone(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::ENOTCONN
                | libc::ECONNABORTED
                | libc::ENODEV
                | libc::ENXIO
                | libc::ESHUTDOWN
                | libc::EIO
        )
    )
}

/// How often the device was lost and adopted again (shared by every generation of a driver's
/// device handle).
#[derive(Debug, Default)]
struct HealthCounts {
    lost: AtomicU64,
    adopted: AtomicU64,
}

/// Whether the device is alive, and how often it was lost and adopted again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceHealth {
    /// The device answers (or has not been found dead).
    pub alive: bool,
    /// Times a health probe found it gone.
    pub lost: u64,
    /// Times it was adopted again after that.
    pub adopted: u64,
}

impl std::fmt::Display for DeviceHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "device {}, lost {} time(s), adopted again {} time(s)",
            if self.alive { "alive" } else { "gone" },
            self.lost,
            self.adopted
        )
    }
}

/// The device side of a driver: the device, whether it still answers, and what it runs.
#[derive(Debug)]
struct DeviceHandle {
    dev: Arc<dyn Device>,
    info: DeviceInfo,
    alive: AtomicBool,
    /// Operation signature -> whether the device runs it (probed with one-op programs).
    support: Mutex<HashMap<String, bool>>,
    health: Arc<HealthCounts>,
}

impl DeviceHandle {
    fn new(dev: Arc<dyn Device>, info: DeviceInfo, health: Arc<HealthCounts>) -> Self {
        Self {
            dev,
            info,
            alive: AtomicBool::new(true),
            support: Mutex::default(),
            health,
        }
    }

    fn alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// Notes a failed call (an import, a program, a submission): that request's failure. The
    /// device is asked a plain GET_PARAM, and declared dead only if that probe fails too.
    fn note_error(&self, e: &io::Error) {
        if !self.alive() {
            return;
        }
        match self.dev.get_param(nnaccel_uapi::abi::PARAM_API_VERSION) {
            Ok(_) => tracing::debug!(
                "a device call failed ({e}); the device answers its health probe, so only \
                 that request is affected"
            ),
            Err(p) => self.probe_failed(&p),
        }
    }

    /// A health probe (a plain GET_PARAM) failed with `e`: the device is dead if `e` says so.
    fn probe_failed(&self, e: &io::Error) {
        if is_device_gone(e) && self.alive.swap(false, Ordering::SeqCst) {
            self.health.lost.fetch_add(1, Ordering::SeqCst);
            tracing::warn!(
                "the device is gone (health probe: {e}); prepared models continue on the CPU \
                 executor, and the device is probed again every {REPROBE_INTERVAL:?}"
            );
        }
    }
}

/// The driver's device across its generations: the current handle, and what it takes to
/// adopt the device again once it died.
#[derive(Debug)]
struct DeviceSlot {
    /// None until a device at `node` first answers (it was missing or mute at start).
    current: Mutex<Option<Arc<DeviceHandle>>>,
    /// The node to reopen (a restarted device is a new file behind the same path).
    node: Option<PathBuf>,
    /// When a dead device was last probed; held while probing, so one thread probes.
    last_probe: Mutex<Option<Instant>>,
    health: Arc<HealthCounts>,
}

impl DeviceSlot {
    fn current(&self) -> Option<Arc<DeviceHandle>> {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The live device: the current handle when alive, else one adopted by a probe (at most
    /// one every [`REPROBE_INTERVAL`]): the same file answering again, or the node (re)opened.
    /// A device never seen before (missing or mute when the driver started) is found the same
    /// way.
    fn live(&self) -> Option<Arc<DeviceHandle>> {
        let current = self.current();
        if let Some(c) = current.as_ref().filter(|c| c.alive()) {
            return Some(c.clone());
        }
        let mut last = self
            .last_probe
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if last.is_some_and(|t| t.elapsed() < REPROBE_INTERVAL) {
            return None;
        }
        *last = Some(Instant::now());
        let same_file = match &current {
            Some(c) => {
                DeviceInfo::query(&*c.dev).map(|info| (c.dev.clone(), info, "the same file"))
            }
            None => Err(io::Error::from_raw_os_error(libc::ENODEV)),
        };
        let found = same_file.or_else(|e| match &self.node {
            Some(node) => crate::device::open_node(node).and_then(|dev| {
                let how = if current.is_some() {
                    "its node reopened"
                } else {
                    "its node, missing or mute until now"
                };
                DeviceInfo::query(&*dev).map(|info| (dev, info, how))
            }),
            None => Err(e),
        });
        match found {
            Ok((dev, info, how)) => {
                // A new generation: plans of the old one stay on the CPU (their programs and
                // queues died with it); new preparations use this one.
                let handle = Arc::new(DeviceHandle::new(dev, info, self.health.clone()));
                *self.current.lock().unwrap_or_else(PoisonError::into_inner) = Some(handle.clone());
                let n = self.health.adopted.fetch_add(1, Ordering::SeqCst) + 1;
                tracing::warn!("the device answers ({how}): adopted ({n} time(s))");
                Some(handle)
            }
            Err(e) => {
                tracing::debug!("the device is still gone: {e}");
                None
            }
        }
    }
}

/// A driver: the NN HAL `IDevice`.
#[derive(Debug, Clone)]
pub struct Driver {
    device: Option<Arc<DeviceSlot>>,
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
                Ok(info) => {
                    let health = Arc::new(HealthCounts::default());
                    Some(Arc::new(DeviceSlot {
                        current: Mutex::new(Some(Arc::new(DeviceHandle::new(
                            dev,
                            info,
                            health.clone(),
                        )))),
                        node: None,
                        last_probe: Mutex::default(),
                        health,
                    }))
                }
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

    /// Adopts the device again from `node` (reopened) when it died and a new one answers
    /// there; without it only the same file answering again is adopted. A driver whose device
    /// did not answer at start (or that has none) probes `node` the same way and adopts the
    /// device when it first answers: a service started before its device finds it later.
    pub fn with_device_node(mut self, node: &Path) -> Self {
        let (current, health) = match &self.device {
            Some(slot) => (slot.current(), slot.health.clone()),
            None => (None, Arc::new(HealthCounts::default())),
        };
        self.device = Some(Arc::new(DeviceSlot {
            current: Mutex::new(current),
            node: Some(node.to_path_buf()),
            last_probe: Mutex::default(),
            health,
        }));
        self
    }

    /// The live device, a dead one probed again (see [`DeviceSlot::live`]).
    fn live_device(&self) -> Option<Arc<DeviceHandle>> {
        self.device.as_ref().and_then(|s| s.live())
    }

    /// Whether the device is alive and how often it was lost and adopted again (None when
    /// CPU-only). A dead device is probed again first (at most every [`REPROBE_INTERVAL`]).
    pub fn device_health(&self) -> Option<DeviceHealth> {
        let slot = self.device.as_ref()?;
        Some(DeviceHealth {
            alive: slot.live().is_some(),
            lost: slot.health.lost.load(Ordering::SeqCst),
            adopted: slot.health.adopted.load(Ordering::SeqCst),
        })
    }

    /// One line saying what executes models.
    pub fn description(&self) -> String {
        match self.device.as_ref().map(|s| s.live().ok_or(s)) {
            Some(Ok(d)) => format!(
                "nnaccel device (API {}.{}, engine waits with {}), CPU executor as fallback",
                d.info.api_version >> 16,
                d.info.api_version & 0xffff,
                if d.info.engine_uses_io_uring {
                    "io_uring"
                } else {
                    "futex"
                }
            ),
            Some(Err(slot)) if slot.current().is_none() => format!(
                "nnaccel device (not answering yet at {}), CPU executor",
                slot.node
                    .as_deref()
                    .map_or_else(|| "its node".into(), |n| n.display().to_string())
            ),
            Some(Err(_)) => "nnaccel device (gone), CPU executor".to_string(),
            None => "CPU executor".to_string(),
        }
    }

    /// The device's parameters, queried now (None when CPU-only or gone).
    pub fn device_info(&self) -> Option<DeviceInfo> {
        let d = self.live_device()?;
        match DeviceInfo::query(&*d.dev) {
            Ok(i) => Some(i),
            Err(e) => {
                d.probe_failed(&e);
                None
            }
        }
    }

    /// `getCapabilities`: performance relative to the reference CPU (lower is better).
    pub fn get_capabilities(&self) -> Capabilities {
        let perf = if self.live_device().is_some() {
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
        // IF and WHILE always run on the CPU executor (device programs carry no subgraphs).
        let on_cpu = PerformanceInfo {
            exec_time: 1.0,
            power_usage: 1.0,
        };
        Capabilities {
            relaxed_float32_to_float16_performance_scalar: perf,
            relaxed_float32_to_float16_performance_tensor: perf,
            operand_performance: OperandType::ALL.iter().map(|t| (*t, perf)).collect(),
            if_performance: on_cpu,
            while_performance: on_cpu,
        }
    }

    /// Why this driver refuses to prepare `model`, naming the place: the HAL rule it breaks,
    /// or the first operation neither the device nor the CPU executor runs, as
    /// `operation 7 (STRIDED_SLICE, TENSOR_QUANT8_ASYMM): <the rule>`. None when it would
    /// prepare. For messages (the service's error frame, nnaccelctl); `prepare_model` itself
    /// answers with a status only, as the HAL does.
    pub fn refusal_reason(&self, model: &Model) -> Option<String> {
        if let Err(e) = validate_model(model) {
            return Some(e.0);
        }
        let graph = model_to_graph(model);
        if let Err(e) = graph.validate() {
            return Some(e.to_string());
        }
        (0..graph.operations.len()).find_map(|i| {
            if reads_unmappable_constant(model, &graph, i) {
                Some(format!(
                    "operation {i} ({}): reads a constant from memory the driver cannot map",
                    graph.operations[i].op.name()
                ))
            } else {
                graph.unsupported_reason(i)
            }
        })
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

    /// Where each operation would run (per operation, see the module doc and
    /// `partition.rs`): Device for what the live device runs, Cpu for the rest the CPU
    /// executor runs, Unsupported otherwise.
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
            .map(|i| {
                !unmappable[i]
                    && !partition::reads_subgraph(&graph, i)
                    && self.device_runs_operation(model, &graph, i)
            })
            .collect();
        if on_device.iter().all(|d| *d) && has_fixed_io_shapes(&graph) {
            return Ok(vec![Placement::Device; graph.operations.len()]);
        }
        let base = (0..graph.operations.len())
            .map(|i| {
                if unmappable[i] {
                    Placement::Unsupported
                } else if on_device[i] {
                    Placement::Device
                } else if graph.is_operation_supported(i) {
                    Placement::Cpu
                } else {
                    Placement::Unsupported
                }
            })
            .collect();
        let settled = partition::settle(&graph, base);
        if settled.iter().all(|p| *p == Placement::Device) {
            // Every operation on the device, but the model's own inputs or outputs are not of
            // fixed shape (or too many for one job): the CPU executor runs it, as before.
            return Ok((0..graph.operations.len())
                .map(|i| {
                    if graph.is_operation_supported(i) {
                        Placement::Cpu
                    } else {
                        Placement::Unsupported
                    }
                })
                .collect());
        }
        Ok(settled)
    }

    fn device_runs_operation(&self, model: &Model, graph: &Graph, index: usize) -> bool {
        let Some(d) = self.live_device() else {
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
        if placement.iter().all(|p| *p == Placement::Device) {
            self.build_plans(model, true, None, preference)
        } else if placement.contains(&Placement::Device) {
            self.build_plans(model, false, Some(&placement), preference)
        } else {
            self.build_plans(model, false, None, preference)
        }
    }

    /// The CPU plan and, when `on_device`, the device plan of a validated model; with
    /// `partitioned`, a per-operation placement, the partitioned plan. The CPU plan packs the
    /// GEMM weights in constant pools too when it is the plan that runs (`CpuPlan::prepare`).
    fn build_plans(
        &self,
        model: &Model,
        on_device: bool,
        partitioned: Option<&[Placement]>,
        preference: ExecutionPreference,
    ) -> Result<PreparedModel, ErrorStatus> {
        let graph = model_to_graph(model);
        let cpu_runs = (0..graph.operations.len()).all(|i| graph.is_operation_supported(i));
        let device = match self.live_device() {
            Some(d) if on_device && has_fixed_io_shapes(&graph) => {
                match DevicePlan::compile(&d, model, &graph) {
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
        let partition = match (self.live_device(), partitioned) {
            (Some(d), Some(placement)) if cpu_runs => {
                match PartitionPlan::build(&d, model, &graph, placement) {
                    Ok(Some(plan)) => Some(plan),
                    Ok(None) => {
                        tracing::debug!("prepare: the model cannot be partitioned; CPU executor");
                        None
                    }
                    Err(e) => {
                        d.note_error(&e);
                        tracing::info!(
                            "prepare: the device did not take a part ({e}); using the CPU executor"
                        );
                        None
                    }
                }
            }
            _ => None,
        };
        let cpu = if cpu_runs {
            let runs_here = device.is_none() && partition.is_none();
            Some(CpuPlan::prepare(graph, &model.pools, runs_here)?)
        } else {
            None
        };
        if device.is_none() && cpu.is_none() {
            return Err(ErrorStatus::GeneralFailure);
        }
        Ok(PreparedModel {
            inner: Arc::new(PreparedInner {
                model: model.clone(),
                cpu,
                device,
                partition,
                preference,
                uid: next_prepared_uid(),
                domain: self.domain.clone(),
                recent_pools: RecentPools::new(),
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
        let device = self.live_device().map(|d| d.dev.clone());
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
            && let Some(d) = self.live_device()
            && let Err(e) = d.dev.get_param(nnaccel_uapi::abi::PARAM_API_VERSION)
        {
            d.probe_failed(&e);
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
        let pm = self.build_plans(model, on_device, None, preference)?;
        if !on_device || pm.runs_on_device() {
            return Ok(pm);
        }
        // It ran partitioned when it was cached (or the device changed): place it per
        // operation again.
        let placement = self.operation_placement(model)?;
        if placement.contains(&Placement::Device) && placement.contains(&Placement::Cpu) {
            return self.build_plans(model, false, Some(&placement), preference);
        }
        Ok(pm)
    }
}

#[derive(Debug)]
struct PreparedInner {
    model: Model,
    cpu: Option<CpuPlan>,
    device: Option<DevicePlan>,
    /// Parts on the device and on the CPU (`partition.rs`), when the model is split.
    partition: Option<PartitionPlan>,
    preference: ExecutionPreference,
    /// Identity for memory-domain roles (unique in the process, never reused).
    uid: u64,
    /// The driver's buffer tracker.
    domain: BufferTracker,
    /// The pools regular executions mapped last, kept for the next ones.
    recent_pools: RecentPools,
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
    /// Whether executions go to the device, whole or in parts (false after the device died).
    pub fn runs_on_device(&self) -> bool {
        self.inner.device.as_ref().is_some_and(|d| d.device.alive()) || self.is_partitioned()
    }

    /// Whether executions run partitioned: some parts on the device, the rest on the CPU
    /// (false after the device died).
    pub fn is_partitioned(&self) -> bool {
        self.inner
            .partition
            .as_ref()
            .is_some_and(|p| p.device.alive())
    }

    /// The parts of a partitioned model: (all parts, parts on the device); None when the model
    /// is not partitioned.
    pub fn partition_counts(&self) -> Option<(usize, usize)> {
        self.inner.partition.as_ref().map(PartitionPlan::counts)
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
        } else if let Some(plan) = self.inner.partition.as_ref() {
            match plan.run(
                bound,
                &self.inner.recent_pools,
                deadline,
                reborrow(&mut burst),
            ) {
                PartitionOutcome::Done(r) => return r,
                PartitionOutcome::WholeCpu(why) => {
                    tracing::debug!("the partitioned execution runs whole on the CPU: {why}")
                }
            }
        }
        match &self.inner.cpu {
            Some(cpu) => run_on_cpu(
                cpu,
                &self.inner.model,
                request,
                &bound.cpu_pools(),
                &self.inner.recent_pools,
                deadline,
                burst,
            ),
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
