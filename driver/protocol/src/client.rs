//! The client library for `nnaccel-hald`: the HAL calls over the service socket, memory pools
//! passed as fds. A service that goes away fails every call with DEVICE_UNAVAILABLE; no call
//! waits on a dead peer.

use std::io;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use crate::*;
use nnaccel_hal::cache::{CacheFiles, CacheHandle};
use nnaccel_hal::*;

/// The default service socket.
pub const DEFAULT_SOCKET: &str = "/run/nnaccel/hal.sock";

#[derive(Debug)]
struct Inner {
    sock: Mutex<UnixStream>,
    server: String,
    /// The message of the service's last error frame (see [`ServiceClient::last_error`]).
    last_error: Mutex<Option<String>>,
}

impl Inner {
    fn call(&self, msg: &ClientMessage, fds: &FdList<'_>) -> Result<ServiceMessage, ErrorStatus> {
        let body = encode(msg).map_err(|_| ErrorStatus::GeneralFailure)?;
        let sock = self.sock.lock().unwrap_or_else(PoisonError::into_inner);
        let unavailable = |e: ProtocolError| {
            tracing::debug!("service call failed: {e}");
            ErrorStatus::DeviceUnavailable
        };
        send_frame(&sock, &body, fds.fds()).map_err(unavailable)?;
        let (body, _fds) = recv_frame(&sock, DEFAULT_MAX_MESSAGE_BYTES).map_err(unavailable)?;
        match decode::<ServiceMessage>(&body).map_err(unavailable)? {
            ServiceMessage::Error { status, message } => {
                tracing::debug!("service: {message}");
                *self
                    .last_error
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some(message);
                Err(ErrorStatus::from_code(status)
                    .filter(|s| *s != ErrorStatus::None)
                    .unwrap_or(ErrorStatus::GeneralFailure))
            }
            other => Ok(other),
        }
    }
}

/// A connection to the service.
#[derive(Debug, Clone)]
pub struct ServiceClient {
    inner: Arc<Inner>,
}

fn unexpected(m: &ServiceMessage) -> ErrorStatus {
    tracing::debug!("unexpected answer from the service: {m:?}");
    ErrorStatus::GeneralFailure
}

fn timeout_ns(deadline: Option<Deadline>) -> Option<u64> {
    deadline.map(|d| {
        u64::try_from(d.saturating_duration_since(Instant::now()).as_nanos()).unwrap_or(u64::MAX)
    })
}

impl ServiceClient {
    /// Connects and shakes hands.
    pub fn connect(path: &Path) -> io::Result<Self> {
        let sock = UnixStream::connect(path)?;
        let inner = Inner {
            sock: Mutex::new(sock),
            server: String::new(),
            last_error: Mutex::default(),
        };
        let hello = ClientMessage::Hello {
            version: PROTOCOL_VERSION,
            client: format!("nnaccel client, pid {}", std::process::id()),
        };
        match inner.call(&hello, &FdList::default()) {
            Ok(ServiceMessage::Hello { version, server }) if version == PROTOCOL_VERSION => {
                Ok(Self {
                    inner: Arc::new(Inner { server, ..inner }),
                })
            }
            Ok(_) | Err(_) => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} did not accept protocol version {PROTOCOL_VERSION}",
                    path.display()
                ),
            )),
        }
    }

    /// What the service said it is.
    pub fn server(&self) -> &str {
        &self.inner.server
    }

    /// The message of the last error frame the service sent on this connection (the HAL calls
    /// answer with a status only): for a refused preparation, the operation and the rule, as
    /// `operation 7 (STRIDED_SLICE, TENSOR_QUANT8_ASYMM): …`.
    pub fn last_error(&self) -> Option<String> {
        self.inner
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The service's state.
    pub fn info(&self) -> Result<ServiceInfo, ErrorStatus> {
        match self.inner.call(&ClientMessage::Info, &FdList::default())? {
            ServiceMessage::Info(i) => Ok(i),
            m => Err(unexpected(&m)),
        }
    }

    /// The driver-managed cache: whether the service keeps one, and its entries.
    pub fn cache_list(&self) -> Result<(bool, Vec<nnaccel_hal::cache::Entry>), ErrorStatus> {
        match self
            .inner
            .call(&ClientMessage::CacheList, &FdList::default())?
        {
            ServiceMessage::CacheEntries { enabled, entries } => Ok((
                enabled,
                entries
                    .into_iter()
                    .map(|(key, bytes, last_used)| nnaccel_hal::cache::Entry {
                        key,
                        bytes,
                        last_used,
                    })
                    .collect(),
            )),
            m => Err(unexpected(&m)),
        }
    }

    /// Empties the driver-managed cache; returns how many entries went.
    pub fn cache_clear(&self) -> Result<u64, ErrorStatus> {
        match self
            .inner
            .call(&ClientMessage::CacheClear, &FdList::default())?
        {
            ServiceMessage::CacheCleared { removed } => Ok(removed),
            m => Err(unexpected(&m)),
        }
    }

    fn prepared(&self, answer: ServiceMessage) -> Result<Arc<dyn HalPreparedModel>, ErrorStatus> {
        match answer {
            ServiceMessage::Prepared {
                model_id,
                on_device,
            } => Ok(Arc::new(RemotePreparedModel {
                inner: self.inner.clone(),
                model_id,
                on_device,
            })),
            m => Err(unexpected(&m)),
        }
    }
}

/// Attaches every fd of the cache handles; each handle becomes its list of fd indexes.
fn cache_to_wire<'a>(cache: &CacheFiles<'a>, fds: &mut FdList<'a>) -> WireCacheFiles {
    let mut handles = |hs: &[CacheHandle<'a>]| -> Vec<Vec<u32>> {
        hs.iter()
            .map(|h| h.iter().map(|fd| fds.push(*fd)).collect())
            .collect()
    };
    WireCacheFiles {
        model: handles(cache.model),
        data: handles(cache.data),
        token: *cache.token,
    }
}

impl HalDevice for ServiceClient {
    fn description(&self) -> String {
        self.inner.server.clone()
    }

    fn get_capabilities(&self) -> Result<Capabilities, ErrorStatus> {
        match self
            .inner
            .call(&ClientMessage::GetCapabilities, &FdList::default())?
        {
            ServiceMessage::Capabilities {
                relaxed_scalar,
                relaxed_tensor,
                operand_performance,
                if_performance,
                while_performance,
            } => {
                let p = |(exec_time, power_usage): (f32, f32)| PerformanceInfo {
                    exec_time,
                    power_usage,
                };
                Ok(Capabilities {
                    relaxed_float32_to_float16_performance_scalar: p(relaxed_scalar),
                    relaxed_float32_to_float16_performance_tensor: p(relaxed_tensor),
                    operand_performance: operand_performance
                        .into_iter()
                        .filter_map(|(t, e, w)| OperandType::from_code(t).map(|t| (t, p((e, w)))))
                        .collect(),
                    if_performance: p(if_performance),
                    while_performance: p(while_performance),
                })
            }
            m => Err(unexpected(&m)),
        }
    }

    fn get_supported_operations(&self, model: &Model) -> Result<Vec<bool>, ErrorStatus> {
        Ok(self
            .operation_placement(model)?
            .into_iter()
            .map(|p| p != Placement::Unsupported)
            .collect())
    }

    fn operation_placement(&self, model: &Model) -> Result<Vec<Placement>, ErrorStatus> {
        let mut fds = FdList::default();
        let wire = model_to_wire(model, &mut fds);
        match self
            .inner
            .call(&ClientMessage::GetSupportedOperations { model: wire }, &fds)?
        {
            ServiceMessage::SupportedOperations { placement, .. } => Ok(placement
                .into_iter()
                .map(|p| match p {
                    0 => Placement::Device,
                    1 => Placement::Cpu,
                    _ => Placement::Unsupported,
                })
                .collect()),
            m => Err(unexpected(&m)),
        }
    }

    fn prepare_model(
        &self,
        model: &Model,
        preference: ExecutionPreference,
        priority: Priority,
        deadline: Option<Deadline>,
    ) -> Result<Arc<dyn HalPreparedModel>, ErrorStatus> {
        let mut fds = FdList::default();
        let wire = model_to_wire(model, &mut fds);
        let msg = ClientMessage::PrepareModel {
            model: wire,
            preference: preference.code(),
            priority: priority.code(),
            timeout_ns: timeout_ns(deadline),
        };
        let answer = self.inner.call(&msg, &fds)?;
        self.prepared(answer)
    }

    fn get_number_of_cache_files_needed(&self) -> Result<(u32, u32), ErrorStatus> {
        match self.inner.call(
            &ClientMessage::GetNumberOfCacheFilesNeeded,
            &FdList::default(),
        )? {
            ServiceMessage::CacheFilesNeeded { model, data } => Ok((model, data)),
            m => Err(unexpected(&m)),
        }
    }

    fn allocate(
        &self,
        desc: &BufferDesc,
        models: &[Arc<dyn HalPreparedModel>],
        input_roles: &[BufferRole],
        output_roles: &[BufferRole],
    ) -> Result<Arc<dyn HalBuffer>, ErrorStatus> {
        Ok(Arc::new(self.allocate_buffer(
            desc,
            models,
            input_roles,
            output_roles,
        )?))
    }

    fn prepare_model_with_cache(
        &self,
        model: &Model,
        preference: ExecutionPreference,
        priority: Priority,
        deadline: Option<Deadline>,
        cache: CacheFiles<'_>,
    ) -> Result<Arc<dyn HalPreparedModel>, ErrorStatus> {
        let mut fds = FdList::default();
        let wire = model_to_wire(model, &mut fds);
        let msg = ClientMessage::PrepareModelWithCache {
            model: wire,
            preference: preference.code(),
            priority: priority.code(),
            timeout_ns: timeout_ns(deadline),
            cache: cache_to_wire(&cache, &mut fds),
        };
        let answer = self.inner.call(&msg, &fds)?;
        self.prepared(answer)
    }

    fn prepare_model_from_cache(
        &self,
        preference: ExecutionPreference,
        priority: Priority,
        deadline: Option<Deadline>,
        cache: CacheFiles<'_>,
    ) -> Result<Arc<dyn HalPreparedModel>, ErrorStatus> {
        let mut fds = FdList::default();
        let msg = ClientMessage::PrepareModelFromCache {
            preference: preference.code(),
            priority: priority.code(),
            timeout_ns: timeout_ns(deadline),
            cache: cache_to_wire(&cache, &mut fds),
        };
        let answer = self.inner.call(&msg, &fds)?;
        self.prepared(answer)
    }
}

/// A model prepared by the service; released there when dropped.
#[derive(Debug)]
pub(crate) struct RemotePreparedModel {
    inner: Arc<Inner>,
    model_id: u64,
    on_device: bool,
}

impl HalPreparedModel for RemotePreparedModel {
    fn execute_synchronously(
        &self,
        request: &Request,
        measure: MeasureTiming,
        deadline: Option<Deadline>,
    ) -> ExecutionResult {
        execute_remote(&self.inner, self.model_id, request, measure, deadline)
    }

    fn runs_on_device(&self) -> bool {
        self.on_device
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn configure_execution_burst(
        &self,
        config: nnaccel_hal::burst::BurstConfig,
    ) -> Result<nnaccel_hal::burst::ExecutionBurstController, ErrorStatus> {
        let (inner, model_id) = (self.inner.clone(), self.model_id);
        let fallback: nnaccel_hal::burst::controller::Fallback =
            Box::new(move |r, m| execute_remote(&inner, model_id, r, m, None));
        nnaccel_hal::burst::controller::configure(fallback, config.result_length, |ends| {
            let mut fds = FdList::default();
            fds.push(ends.request.fd());
            fds.push(ends.result.fd());
            fds.push(std::os::fd::AsFd::as_fd(&ends.channel));
            let msg = ClientMessage::ConfigureBurst {
                model_id: self.model_id,
                request_fmq: ends.request.descriptor(),
                result_fmq: ends.result.descriptor(),
                polling_window_us: config.polling_window_us,
            };
            match self.inner.call(&msg, &fds)? {
                ServiceMessage::BurstConfigured {
                    polling_window_us,
                    wait,
                } => Ok(nnaccel_hal::burst::controller::BurstInfo {
                    polling_window: std::time::Duration::from_micros(u64::from(polling_window_us)),
                    wait,
                }),
                m => Err(unexpected(&m)),
            }
        })
    }
}

/// A regular execution over the service connection.
fn execute_remote(
    inner: &Inner,
    model_id: u64,
    request: &Request,
    measure: MeasureTiming,
    deadline: Option<Deadline>,
) -> ExecutionResult {
    let mut fds = FdList::default();
    let wire = request_to_wire(request, &mut fds);
    let msg = ClientMessage::Execute {
        model_id,
        request: wire,
        measure: measure == MeasureTiming::Yes,
        timeout_ns: timeout_ns(deadline),
    };
    match inner.call(&msg, &fds) {
        Ok(ServiceMessage::Executed {
            status,
            output_shapes,
            timing,
        }) => ExecutionResult {
            status: ErrorStatus::from_code(status).unwrap_or(ErrorStatus::GeneralFailure),
            output_shapes: output_shapes
                .into_iter()
                .map(|(dimensions, is_sufficient)| OutputShape {
                    dimensions,
                    is_sufficient,
                })
                .collect(),
            timing: Timing {
                time_on_device_us: timing.0,
                time_in_driver_us: timing.1,
            },
        },
        Ok(m) => ExecutionResult::failure(unexpected(&m)),
        Err(s) => ExecutionResult::failure(s),
    }
}

impl Drop for RemotePreparedModel {
    fn drop(&mut self) {
        let _ = self.inner.call(
            &ClientMessage::ReleaseModel {
                model_id: self.model_id,
            },
            &FdList::default(),
        );
    }
}

impl ServiceClient {
    /// `allocate` (1.3) on the service: `models` must be prepared models of this connection
    /// (INVALID_ARGUMENT otherwise, as for any foreign prepared model).
    pub fn allocate_buffer(
        &self,
        desc: &BufferDesc,
        models: &[Arc<dyn HalPreparedModel>],
        input_roles: &[BufferRole],
        output_roles: &[BufferRole],
    ) -> Result<RemoteBuffer, ErrorStatus> {
        let mut model_ids = Vec::with_capacity(models.len());
        for m in models {
            match m.as_any().downcast_ref::<RemotePreparedModel>() {
                Some(r) if Arc::ptr_eq(&r.inner, &self.inner) => model_ids.push(r.model_id),
                _ => {
                    tracing::debug!("allocate: a prepared model of another connection or device");
                    return Err(ErrorStatus::InvalidArgument);
                }
            }
        }
        let wire = |roles: &[BufferRole]| {
            roles
                .iter()
                .map(|r| WireRole {
                    model_index: r.model_index,
                    io_index: r.io_index,
                    frequency: r.frequency,
                })
                .collect()
        };
        let msg = ClientMessage::Allocate {
            dimensions: desc.dimensions.clone(),
            model_ids,
            input_roles: wire(input_roles),
            output_roles: wire(output_roles),
        };
        match self.inner.call(&msg, &FdList::default())? {
            ServiceMessage::Allocated { token } if token != 0 => Ok(RemoteBuffer {
                inner: self.inner.clone(),
                token,
            }),
            m => Err(unexpected(&m)),
        }
    }
}

/// A memory-domain buffer held by the service for this connection (`IBuffer`); freed there
/// when dropped (or when the connection closes).
#[derive(Debug)]
pub struct RemoteBuffer {
    inner: Arc<Inner>,
    token: u32,
}

impl RemoteBuffer {
    fn copy(&self, memory: &Memory, dimensions: Option<&[u32]>) -> Result<(), ErrorStatus> {
        let mut fds = FdList::default();
        let memory = memory_to_wire(memory, &mut fds);
        let msg = match dimensions {
            Some(d) => ClientMessage::CopyFrom {
                token: self.token,
                memory,
                dimensions: d.to_vec(),
            },
            None => ClientMessage::CopyTo {
                token: self.token,
                memory,
            },
        };
        match self.inner.call(&msg, &fds)? {
            ServiceMessage::Copied => Ok(()),
            m => Err(unexpected(&m)),
        }
    }
}

impl HalBuffer for RemoteBuffer {
    fn token(&self) -> u32 {
        self.token
    }

    fn copy_to(&self, dst: &Memory) -> Result<(), ErrorStatus> {
        self.copy(dst, None)
    }

    fn copy_from(&self, src: &Memory, dimensions: &[u32]) -> Result<(), ErrorStatus> {
        self.copy(src, Some(dimensions))
    }
}

impl Drop for RemoteBuffer {
    fn drop(&mut self) {
        let _ = self.inner.call(
            &ClientMessage::FreeBuffer { token: self.token },
            &FdList::default(),
        );
    }
}
