//! `nnaccel-service`: the daemon `nnaccel-hald`. It accepts client connections on a Unix
//! socket and serves the HAL (`nnaccel-hal`) over the client protocol (`nnaccel-protocol`).
//! Each connection has its own thread and owns its objects (prepared models, device buffers,
//! bursts); they go when it disconnects or its process dies. A malformed or oversized message
//! gets an error reply and closes that connection only. [`systemd`] speaks systemd's
//! protocols (socket activation, sd_notify, the watchdog); [`domain`] and [`cache_serve`]
//! serve memory domains and the compilation-cache messages.
//!
//! It may import the HAL and the protocol; nothing but the `nnaccel-hald` binary (and tests)
//! imports it: the CLI and other clients link `nnaccel-protocol` only.

pub(crate) mod cache_serve;
pub mod domain;
pub mod systemd;

use std::collections::HashMap;
use std::io;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nnaccel_hal::live_sockets::LiveSockets;
use nnaccel_hal::{
    Driver, ErrorStatus, ExecutionPreference, MeasureTiming, Placement, PreparedModel, Priority,
};
use nnaccel_protocol::*;
use rustix::net::Shutdown;

/// Service limits.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// Largest message body accepted.
    pub max_message_bytes: usize,
    /// Prepared models one connection may hold.
    pub max_models_per_connection: usize,
    /// Bursts one connection may have running at once (each of the service's
    /// [`nnaccel_hal::burst::server::MAX_ACTIVE_BURSTS`] places is a thread, two queue mappings and a
    /// socket); a burst counts until its worker ends, even after the connection has gone.
    pub max_bursts_per_connection: usize,
    /// Burst workers' polling window unless the preference is LOW_POWER or the burst asks.
    pub burst_polling_window: Duration,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        Self {
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            max_models_per_connection: 256,
            max_bursts_per_connection: DEFAULT_MAX_BURSTS_PER_CONNECTION,
            burst_polling_window: nnaccel_hal::burst::DEFAULT_POLLING_WINDOW,
        }
    }
}

/// Default of [`ServiceConfig::max_bursts_per_connection`]: a quarter of the service's burst
/// places, so that one client leaves room for others.
pub const DEFAULT_MAX_BURSTS_PER_CONNECTION: usize =
    nnaccel_hal::burst::server::MAX_ACTIVE_BURSTS / 4;

/// The credentials of a connected client (`SO_PEERCRED`), recorded with its objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PeerCred {
    /// Process id at connect time.
    pub pid: i32,
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

#[derive(Debug, Default)]
struct Stats {
    prepared_models: AtomicU64,
}

/// The service.
#[derive(Debug)]
pub struct Service {
    driver: Driver,
    config: ServiceConfig,
    stats: Stats,
    stop: AtomicBool,
    /// The client connections' threads, drained when the service stops.
    connections: Arc<LiveSockets>,
    /// The burst workers of every connection, ended when the service stops.
    bursts: Arc<nnaccel_hal::burst::server::Workers>,
}

/// How long a stopping service waits for its connections to end. Each connection's socket is
/// shut down for reading: a call in progress (a preparation, an execution) finishes and is
/// answered, then the thread sees end-of-file and releases the connection's objects.
pub(crate) const CONNECTION_STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a stopping service waits for its burst workers to end (each sees its socket shut
/// down; one in the middle of an execution finishes it first).
pub(crate) const BURST_STOP_TIMEOUT: Duration = Duration::from_secs(2);

struct Held {
    model: PreparedModel,
    owner: Option<PeerCred>,
}

impl Service {
    /// A service over `driver`.
    pub fn new(driver: Driver, config: ServiceConfig) -> Arc<Self> {
        let bursts = nnaccel_hal::burst::server::Workers::new(config.max_bursts_per_connection);
        Arc::new(Self {
            driver,
            config,
            stats: Stats::default(),
            stop: AtomicBool::new(false),
            connections: LiveSockets::new(usize::MAX),
            bursts,
        })
    }

    /// The driver.
    pub fn driver(&self) -> &Driver {
        &self.driver
    }

    /// Asks [`Service::serve`] to return; wakes it by shutting the listener down.
    pub fn stop(&self, listener: &UnixListener) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = rustix::net::shutdown(listener, rustix::net::Shutdown::Both);
    }

    /// Burst workers running for this service's clients.
    pub fn live_bursts(&self) -> usize {
        self.bursts.len()
    }

    /// Client connections being served.
    pub fn live_connections(&self) -> usize {
        self.connections.len()
    }

    /// Accepts connections until [`Service::stop`]; then drains the connections (each answers
    /// the call it is in, at most [`CONNECTION_STOP_TIMEOUT`]) and ends the burst workers (at
    /// most [`BURST_STOP_TIMEOUT`]) before returning.
    pub fn serve(self: &Arc<Self>, listener: &UnixListener) -> io::Result<()> {
        self.accept_until_stopped(listener);
        let stops = [
            (
                "connections",
                &self.connections,
                Shutdown::Read,
                CONNECTION_STOP_TIMEOUT,
            ),
            (
                "burst workers",
                &self.bursts,
                Shutdown::Both,
                BURST_STOP_TIMEOUT,
            ),
        ];
        for (what, set, how, timeout) in stops {
            let live = set.len();
            match set.stop(how, timeout) {
                0 => tracing::info!("stopped {live} {what}"),
                left => tracing::warn!("{left} of {live} {what} did not end within {timeout:?}"),
            }
        }
        Ok(())
    }

    fn accept_until_stopped(self: &Arc<Self>, listener: &UnixListener) {
        for conn in listener.incoming() {
            if self.stop.load(Ordering::SeqCst) {
                break;
            }
            match conn {
                Ok(stream) => {
                    let membership = match self.connections.join(0, &stream) {
                        Ok(m) => m,
                        Err(e) => {
                            tracing::warn!("not serving a new connection: {e}");
                            continue;
                        }
                    };
                    let me = self.clone();
                    let spawned = std::thread::Builder::new()
                        .name("nnaccel-conn".into())
                        .spawn(move || {
                            me.connection(stream);
                            drop(membership);
                        });
                    if let Err(e) = spawned {
                        tracing::error!("cannot start a connection thread: {e}");
                    }
                }
                Err(e) if self.stop.load(Ordering::SeqCst) => {
                    tracing::debug!("accept ended: {e}");
                    break;
                }
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM | libc::ENOBUFS)
                    ) =>
                {
                    tracing::warn!("accept: {e}; backing off");
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => tracing::warn!("accept: {e}"),
            }
        }
    }

    fn connection(self: Arc<Self>, stream: UnixStream) {
        let cred = rustix::net::sockopt::socket_peercred(&stream)
            .ok()
            .map(|c| PeerCred {
                pid: c.pid.as_raw_nonzero().get(),
                uid: c.uid.as_raw(),
                gid: c.gid.as_raw(),
            });
        let who = cred.map_or_else(
            || "unknown peer".to_string(),
            |c| format!("pid {} uid {}", c.pid, c.uid),
        );
        tracing::debug!("connection from {who}");
        let mut models: HashMap<u64, Held> = HashMap::new();
        let mut next_id = 1u64;
        let mut handshaken = false;
        let mut buffers = domain::ConnectionBuffers::new();
        loop {
            let (body, fds) = match recv_frame(&stream, self.config.max_message_bytes) {
                Ok(f) => f,
                Err(ProtocolError::Closed) => break,
                Err(ProtocolError::Io(e)) => {
                    tracing::debug!("{who}: {e}");
                    break;
                }
                Err(e) => {
                    tracing::warn!("{who}: {e}; closing the connection");
                    let _ = reply(&stream, &error(ErrorStatus::InvalidArgument, e.to_string()));
                    break;
                }
            };
            let msg = match decode::<ClientMessage>(&body) {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!("{who}: {e}; closing the connection");
                    let _ = reply(&stream, &error(ErrorStatus::InvalidArgument, e.to_string()));
                    break;
                }
            };
            if !handshaken {
                match msg {
                    ClientMessage::Hello { version, client } if version == PROTOCOL_VERSION => {
                        tracing::debug!("{who}: hello from {client:?}");
                        handshaken = true;
                        let hello = ServiceMessage::Hello {
                            version: PROTOCOL_VERSION,
                            server: format!(
                                "nnaccel-hald {}: {}",
                                env!("CARGO_PKG_VERSION"),
                                self.driver.description()
                            ),
                        };
                        if reply(&stream, &hello).is_err() {
                            break;
                        }
                        continue;
                    }
                    ClientMessage::Hello { version, .. } => {
                        let _ = reply(
                            &stream,
                            &error(
                                ErrorStatus::InvalidArgument,
                                format!(
                                    "protocol version {version} is not supported; this service speaks {PROTOCOL_VERSION}"
                                ),
                            ),
                        );
                        break;
                    }
                    _ => {
                        let _ = reply(
                            &stream,
                            &error(
                                ErrorStatus::InvalidArgument,
                                "the first message must be Hello".into(),
                            ),
                        );
                        break;
                    }
                }
            }
            let answer = self.handle(msg, fds, &mut models, &mut next_id, cred, &mut buffers);
            if reply(&stream, &answer).is_err() {
                break;
            }
        }
        let n = models.len() as u64;
        tracing::debug!("{who}: releasing {} memory-domain buffers", buffers.len());
        drop(buffers);
        drop(models);
        self.stats.prepared_models.fetch_sub(n, Ordering::SeqCst);
        tracing::debug!("{who}: disconnected; released {n} prepared models");
    }

    fn handle(
        &self,
        msg: ClientMessage,
        fds: Vec<std::os::fd::OwnedFd>,
        models: &mut HashMap<u64, Held>,
        next_id: &mut u64,
        cred: Option<PeerCred>,
        buffers: &mut domain::ConnectionBuffers,
    ) -> ServiceMessage {
        let mut fds = ReceivedFds::new(fds);
        let deadline = |t: Option<u64>| t.map(|ns| Instant::now() + Duration::from_nanos(ns));
        match msg {
            ClientMessage::Hello { .. } => error(
                ErrorStatus::InvalidArgument,
                "Hello was already exchanged".into(),
            ),
            ClientMessage::GetCapabilities => capabilities_to_wire(&self.driver.get_capabilities()),
            ClientMessage::GetSupportedOperations { model } => {
                let model = match model_from_wire(model, &mut fds) {
                    Ok(m) => m,
                    Err(e) => return error(ErrorStatus::InvalidArgument, e.to_string()),
                };
                match self.driver.operation_placement(&model) {
                    Ok(p) => ServiceMessage::SupportedOperations {
                        supported: p.iter().map(|p| *p != Placement::Unsupported).collect(),
                        placement: p.iter().map(|p| placement_code(*p)).collect(),
                    },
                    Err(s) => error(s, "the model is not valid".into()),
                }
            }
            ClientMessage::PrepareModel {
                model,
                preference,
                priority,
                timeout_ns,
            } => self.hold(models, next_id, cred, |driver| {
                let model = model_from_wire(model, &mut fds)
                    .map_err(|e| (ErrorStatus::InvalidArgument, e.to_string()))?;
                let (Some(preference), Some(priority)) = (
                    ExecutionPreference::from_code(preference),
                    Priority::from_code(priority),
                ) else {
                    return Err((
                        ErrorStatus::InvalidArgument,
                        "unknown preference or priority".into(),
                    ));
                };
                driver
                    .prepare_model(&model, preference, priority, deadline(timeout_ns))
                    .map_err(|s| (s, "preparation failed".into()))
            }),
            ClientMessage::ReleaseModel { model_id } => match models.remove(&model_id) {
                Some(held) => {
                    tracing::trace!("released model {model_id} of {:?}", held.owner);
                    self.stats.prepared_models.fetch_sub(1, Ordering::SeqCst);
                    ServiceMessage::Released
                }
                None => error(
                    ErrorStatus::InvalidArgument,
                    format!("no prepared model {model_id} on this connection"),
                ),
            },
            ClientMessage::Execute {
                model_id,
                request,
                measure,
                timeout_ns,
            } => {
                let Some(held) = models.get(&model_id) else {
                    return error(
                        ErrorStatus::InvalidArgument,
                        format!("no prepared model {model_id} on this connection"),
                    );
                };
                let request = match request_from_wire(request, &mut fds) {
                    Ok(r) => r,
                    Err(e) => return error(ErrorStatus::InvalidArgument, e.to_string()),
                };
                let measure = if measure {
                    MeasureTiming::Yes
                } else {
                    MeasureTiming::No
                };
                let r = held.model.execute_for(
                    buffers.owner(),
                    &request,
                    measure,
                    deadline(timeout_ns),
                );
                ServiceMessage::Executed {
                    status: r.status.code(),
                    output_shapes: r
                        .output_shapes
                        .into_iter()
                        .map(|s| (s.dimensions, s.is_sufficient))
                        .collect(),
                    timing: (r.timing.time_on_device_us, r.timing.time_in_driver_us),
                }
            }
            ClientMessage::Info => {
                let info = self.driver.device_info();
                // The description, and whether the device is alive with how often it was lost
                // and adopted again (`nnaccelctl info` prints it).
                let driver = match self.driver.device_health() {
                    Some(h) => format!("{}; {h}", self.driver.description()),
                    None => self.driver.description(),
                };
                ServiceMessage::Info(ServiceInfo {
                    driver,
                    connections: self.connections.len() as u64,
                    prepared_models: self.stats.prepared_models.load(Ordering::SeqCst),
                    device_live: info
                        .as_ref()
                        .map(|i| [i.live.files, i.live.bos, i.live.programs, i.live.queues]),
                    device_jobs_completed: info.as_ref().map(|i| i.jobs_completed),
                    device_memory_used: info.map(|i| i.device_memory_used),
                    domain_buffers: self.driver.buffers().live_buffers(),
                    domain_bytes: self.driver.buffers().live_bytes(),
                })
            }
            msg @ (ClientMessage::Allocate { .. }
            | ClientMessage::CopyTo { .. }
            | ClientMessage::CopyFrom { .. }
            | ClientMessage::FreeBuffer { .. }) => {
                buffers.handle(&self.driver, msg, &mut fds, |id| {
                    models.get(&id).map(|h| &h.model)
                })
            }
            ClientMessage::ConfigureBurst {
                model_id,
                request_fmq,
                result_fmq,
                polling_window_us,
            } => {
                let Some(held) = models.get(&model_id) else {
                    return error(
                        ErrorStatus::InvalidArgument,
                        format!("no prepared model {model_id} on this connection"),
                    );
                };
                let ends = nnaccel_hal::burst::server::ReceivedEnds {
                    fds: &mut fds,
                    request: request_fmq,
                    result: result_fmq,
                };
                let window = nnaccel_hal::burst::server::polling_window(
                    polling_window_us,
                    held.model.preference(),
                    self.config.burst_polling_window,
                );
                match nnaccel_hal::burst::server::start_from_wire(
                    held.model.clone(),
                    buffers.owner(),
                    ends,
                    window,
                    &self.bursts,
                ) {
                    Ok(wait) => ServiceMessage::BurstConfigured {
                        polling_window_us: window.as_micros() as u32,
                        wait: wait.describe().into(),
                    },
                    Err((s, m)) => error(s, m),
                }
            }
            ClientMessage::GetNumberOfCacheFilesNeeded => {
                let (model, data) = self.driver.get_number_of_cache_files_needed();
                ServiceMessage::CacheFilesNeeded { model, data }
            }
            ClientMessage::PrepareModelWithCache {
                model,
                preference,
                priority,
                timeout_ns,
                cache,
            } => self.hold(models, next_id, cred, |driver| {
                crate::cache_serve::prepare_with_cache(
                    driver,
                    &mut fds,
                    model,
                    preference,
                    priority,
                    deadline(timeout_ns),
                    &cache,
                )
            }),
            ClientMessage::PrepareModelFromCache {
                preference,
                priority,
                timeout_ns,
                cache,
            } => self.hold(models, next_id, cred, |driver| {
                crate::cache_serve::prepare_from_cache(
                    driver,
                    &mut fds,
                    preference,
                    priority,
                    deadline(timeout_ns),
                    &cache,
                )
            }),
            ClientMessage::CacheList => match crate::cache_serve::list(&self.driver) {
                Ok((enabled, entries)) => ServiceMessage::CacheEntries { enabled, entries },
                Err((s, m)) => error(s, m),
            },
            ClientMessage::CacheClear => match crate::cache_serve::clear(&self.driver) {
                Ok(removed) => ServiceMessage::CacheCleared { removed },
                Err((s, m)) => error(s, m),
            },
        }
    }

    /// Prepares with `prepare` (within the per-connection limit) and holds the result for
    /// the connection.
    fn hold(
        &self,
        models: &mut HashMap<u64, Held>,
        next_id: &mut u64,
        cred: Option<PeerCred>,
        prepare: impl FnOnce(&Driver) -> Result<PreparedModel, (ErrorStatus, String)>,
    ) -> ServiceMessage {
        if models.len() >= self.config.max_models_per_connection {
            return error(
                ErrorStatus::ResourceExhaustedTransient,
                format!(
                    "at most {} prepared models per connection",
                    self.config.max_models_per_connection
                ),
            );
        }
        match prepare(&self.driver) {
            Ok(pm) => {
                let id = *next_id;
                *next_id += 1;
                let on_device = pm.runs_on_device();
                models.insert(
                    id,
                    Held {
                        model: pm,
                        owner: cred,
                    },
                );
                self.stats.prepared_models.fetch_add(1, Ordering::SeqCst);
                ServiceMessage::Prepared {
                    model_id: id,
                    on_device,
                }
            }
            Err((s, m)) => error(s, m),
        }
    }
}

/// Placement on the wire.
pub(crate) fn placement_code(p: Placement) -> u8 {
    match p {
        Placement::Device => 0,
        Placement::Cpu => 1,
        Placement::Unsupported => 2,
    }
}

fn error(status: ErrorStatus, message: String) -> ServiceMessage {
    ServiceMessage::Error {
        status: status.code(),
        message,
    }
}

fn reply(stream: &UnixStream, msg: &ServiceMessage) -> Result<(), ProtocolError> {
    let body = encode(msg)?;
    send_frame(stream, &body, &[])
}

/// Binds the service socket at `path`: creates the directory, and replaces a stale socket file
/// nobody listens on (a crashed instance's) but never a live one.
pub fn bind_socket(path: &std::path::Path) -> io::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    match UnixListener::bind(path) {
        Ok(l) => Ok(l),
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
            if UnixStream::connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("{} is served by a running service", path.display()),
                ));
            }
            std::fs::remove_file(path)?;
            UnixListener::bind(path)
        }
        Err(e) => Err(e),
    }
}

/// Raises this process's soft limit on open files to its hard limit; returns the limit now in
/// force (None: unlimited).
pub fn raise_fd_limit() -> io::Result<Option<u64>> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: limit.maximum,
                maximum: limit.maximum,
            },
        )?;
    }
    Ok(limit.maximum)
}

#[cfg(test)]
mod tests;
