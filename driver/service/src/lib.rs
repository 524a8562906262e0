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

pub mod budget;
pub(crate) mod cache_serve;
pub mod domain;
pub mod systemd;

use std::collections::HashMap;
use std::io;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use budget::{Budgets, Charge, Ledger, Resource};
use nnaccel_hal::live_sockets::LiveSockets;
use nnaccel_hal::{
    Driver, ErrorStatus, ExecutionPreference, MeasureTiming, Model, OperandLifetime, Placement,
    PreparedModel, Priority,
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
    /// Budgets per client uid and for the whole service.
    pub budgets: Budgets,
    /// A connection that holds nothing (no prepared model, no buffer) and sends no frame for
    /// this long gets an error frame and is closed.
    pub idle_timeout: Duration,
    /// Once a frame's first byte came, the whole frame must arrive within this.
    pub frame_timeout: Duration,
    /// Bytes all connections' partly received frame bodies may hold together.
    pub max_partial_frame_bytes: u64,
    /// Members of this group (primary or supplementary, from `SO_PEERGROUPS`) may use the
    /// admin operations (cache list and clear, the global counts); root always may.
    pub admin_gid: Option<u32>,
    /// Operations one model may have.
    pub max_model_operations: usize,
    /// Operands one model may have.
    pub max_model_operands: usize,
    /// Bytes one prepared model may plan (constants, temporaries with known shapes, and
    /// [`PREPARED_BYTES_PER_OPERATION`] per operation).
    pub max_model_bytes: u64,
}

/// What a prepared model keeps per operation besides its operands' bytes (the operation's
/// lowered form, its program entry, its bookkeeping); charged to the model-memory budget.
/// Measured by `cargo bench -p nnaccel-tests --bench prepared_memory` (`docs/service.md`,
/// "Model limits"): 432 B kept on the CPU executor, 700 B with a device program, and the
/// daemon's RSS grows by about 950 B per operation while it holds the model; the charge is
/// the round figure above all three.
pub const PREPARED_BYTES_PER_OPERATION: u64 = 1024;

impl Default for ServiceConfig {
    fn default() -> Self {
        Self {
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            max_models_per_connection: 256,
            max_bursts_per_connection: DEFAULT_MAX_BURSTS_PER_CONNECTION,
            burst_polling_window: nnaccel_hal::burst::DEFAULT_POLLING_WINDOW,
            budgets: Budgets::default(),
            idle_timeout: Duration::from_secs(60),
            frame_timeout: Duration::from_secs(10),
            max_partial_frame_bytes: 256 << 20,
            admin_gid: None,
            max_model_operations: 100_000,
            max_model_operands: 400_000,
            max_model_bytes: 1 << 30,
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
    /// Bytes held by frame bodies being received, all connections.
    partial_frame_bytes: AtomicU64,
}

/// A frame body's share of [`ServiceConfig::max_partial_frame_bytes`] while it is received.
struct PartialFrame<'a> {
    held: &'a AtomicU64,
    bytes: u64,
}

impl Drop for PartialFrame<'_> {
    fn drop(&mut self) {
        self.held.fetch_sub(self.bytes, Ordering::SeqCst);
    }
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
    /// What each client uid uses of its budgets.
    ledger: Arc<Ledger>,
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
    /// Its prepared-model, model-memory and device-queue shares of the owner's budgets.
    _charges: Vec<Charge>,
}

/// What one connection holds and who it is.
struct Conn {
    models: HashMap<u64, Held>,
    next_id: u64,
    cred: Option<PeerCred>,
    /// The uid budgets are charged to (`u32::MAX` for a peer without credentials).
    uid: u32,
    admin: bool,
    buffers: domain::ConnectionBuffers,
    /// Each buffer's share of the device-buffers budget, by token.
    buffer_charges: HashMap<u32, Charge>,
}

/// A refusal as an error reply.
fn refused(r: budget::Refusal) -> (ErrorStatus, String) {
    (r.status(), r.to_string())
}

impl Service {
    /// A service over `driver`.
    pub fn new(driver: Driver, config: ServiceConfig) -> Arc<Self> {
        let bursts = nnaccel_hal::burst::server::Workers::new(config.max_bursts_per_connection);
        let ledger = Ledger::new(config.budgets);
        Arc::new(Self {
            driver,
            config,
            stats: Stats::default(),
            stop: AtomicBool::new(false),
            connections: LiveSockets::new(usize::MAX),
            bursts,
            ledger,
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
                    let cred = peer_cred(&stream);
                    let uid = cred.map_or(u32::MAX, |c| c.uid);
                    let charge = match self.ledger.charge(uid, Resource::Connections, 1) {
                        Ok(c) => c,
                        Err(r) => {
                            tracing::warn!("not serving a new connection: {r}");
                            let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
                            let _ = reply(&stream, &error(r.status(), r.to_string()));
                            continue;
                        }
                    };
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
                            me.connection(stream, cred);
                            drop(membership);
                            drop(charge);
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

    fn connection(self: Arc<Self>, stream: UnixStream, cred: Option<PeerCred>) {
        let uid = cred.map_or(u32::MAX, |c| c.uid);
        let admin = cred.is_some_and(|c| {
            c.uid == 0
                || self
                    .config
                    .admin_gid
                    .is_some_and(|g| c.gid == g || peer_groups(&stream).contains(&g))
        });
        let who = cred.map_or_else(
            || "unknown peer".to_string(),
            |c| format!("pid {} uid {}", c.pid, c.uid),
        );
        tracing::debug!("connection from {who}");
        let mut conn = Conn {
            models: HashMap::new(),
            next_id: 1,
            cred,
            uid,
            admin,
            buffers: domain::ConnectionBuffers::new(),
            buffer_charges: HashMap::new(),
        };
        let mut handshaken = false;
        loop {
            let holds_nothing = conn.models.is_empty() && conn.buffers.len() == 0;
            let idle_by = holds_nothing.then(|| Instant::now() + self.config.idle_timeout);
            let received = recv_frame_guarded(
                &stream,
                self.config.max_message_bytes,
                idle_by,
                self.config.frame_timeout,
                |len| self.admit_partial_frame(len),
            );
            let (body, fds) = match received {
                Ok((body, fds, partial)) => {
                    drop(partial);
                    (body, fds)
                }
                Err(ProtocolError::Closed) => break,
                Err(ProtocolError::Io(e))
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    let m = format!(
                        "no complete frame in time (idle timeout {:?} for a connection that \
                         holds nothing, {:?} for a frame once it starts); closing the connection",
                        self.config.idle_timeout, self.config.frame_timeout
                    );
                    tracing::info!("{who}: {m}");
                    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
                    let _ = reply(&stream, &error(ErrorStatus::InvalidArgument, m));
                    break;
                }
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
                                "nnaccel-hald {}: {}; CPU executor threads: {}",
                                env!("CARGO_PKG_VERSION"),
                                self.driver.description(),
                                nnaccel_cpu::max_threads()
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
            let answer = self.handle(msg, fds, &mut conn);
            if reply(&stream, &answer).is_err() {
                break;
            }
        }
        let n = conn.models.len() as u64;
        tracing::debug!(
            "{who}: releasing {} memory-domain buffers",
            conn.buffers.len()
        );
        drop(conn.buffers);
        drop(conn.buffer_charges);
        drop(conn.models);
        self.stats.prepared_models.fetch_sub(n, Ordering::SeqCst);
        tracing::debug!("{who}: disconnected; released {n} prepared models");
    }

    /// Reserves `len` bytes of [`ServiceConfig::max_partial_frame_bytes`] for a frame body.
    fn admit_partial_frame(&self, len: usize) -> Result<PartialFrame<'_>, ProtocolError> {
        let bytes = len as u64;
        let cap = self.config.max_partial_frame_bytes;
        let held = &self.stats.partial_frame_bytes;
        match held.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
            (n.saturating_add(bytes) <= cap).then_some(n + bytes)
        }) {
            Ok(_) => Ok(PartialFrame { held, bytes }),
            Err(n) => Err(ProtocolError::BadFrame(format!(
                "a {bytes}-byte body does not fit: frames being received hold {n} of {cap} bytes"
            ))),
        }
    }

    /// Checks `model` against the model limits and charges its planned memory to `uid`.
    fn admit_model(&self, uid: u32, model: &Model) -> Result<Charge, (ErrorStatus, String)> {
        let c = &self.config;
        for (what, n, max, key) in [
            (
                "operations",
                model.all_operations().count(),
                c.max_model_operations,
                "max_model_operations",
            ),
            (
                "operands",
                model.all_operands().count(),
                c.max_model_operands,
                "max_model_operands",
            ),
        ] {
            if n > max {
                return Err((
                    ErrorStatus::InvalidArgument,
                    format!("the model has {n} {what}; this service takes at most {max} ({key})"),
                ));
            }
        }
        let bytes = planned_bytes(model);
        if bytes > c.max_model_bytes {
            return Err((
                ErrorStatus::ResourceExhaustedPersistent,
                format!(
                    "uid {uid}: the model plans {bytes} bytes (constants, temporaries, \
                     {PREPARED_BYTES_PER_OPERATION} per operation); at most {} per model \
                     (max_model_bytes)",
                    c.max_model_bytes
                ),
            ));
        }
        self.ledger
            .charge(uid, Resource::ModelMemory, bytes)
            .map_err(refused)
    }

    /// [`ServiceInfo`]: the service's and the device's counts for an admin, the client's own
    /// counts for everybody else.
    /// The description, and whether the device is alive with how often it was lost and adopted
    /// again (`nnaccelctl info` prints it).
    fn driver_line(&self) -> String {
        match self.driver.device_health() {
            Some(h) => format!("{}; {h}", self.driver.description()),
            None => self.driver.description(),
        }
    }

    fn info(&self, conn: &Conn) -> ServiceInfo {
        if !conn.admin {
            let mine = |r| self.ledger.used_by(conn.uid, r);
            return ServiceInfo {
                driver: self.driver_line(),
                connections: mine(Resource::Connections),
                prepared_models: mine(Resource::PreparedModels),
                device_live: None,
                device_jobs_completed: None,
                device_memory_used: None,
                domain_buffers: mine(Resource::DeviceBuffers),
                domain_bytes: 0,
            };
        }
        let info = self.driver.device_info();
        ServiceInfo {
            driver: self.driver_line(),
            connections: self.connections.len() as u64,
            prepared_models: self.stats.prepared_models.load(Ordering::SeqCst),
            device_live: info
                .as_ref()
                .map(|i| [i.live.files, i.live.bos, i.live.programs, i.live.queues]),
            device_jobs_completed: info.as_ref().map(|i| i.jobs_completed),
            device_memory_used: info.map(|i| i.device_memory_used),
            domain_buffers: self.driver.buffers().live_buffers(),
            domain_bytes: self.driver.buffers().live_bytes(),
        }
    }

    fn handle(
        &self,
        msg: ClientMessage,
        fds: Vec<std::os::fd::OwnedFd>,
        conn: &mut Conn,
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
                if let Err((s, m)) = self.admit_model(conn.uid, &model) {
                    return error(s, m);
                }
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
            } => self.hold(conn, |driver, admit| {
                let model = model_from_wire(model, &mut fds)
                    .map_err(|e| (ErrorStatus::InvalidArgument, e.to_string()))?;
                let charge = admit(&model)?;
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
                    .map(|pm| (pm, Some(charge)))
                    .map_err(|s| {
                        let why = driver.refusal_reason(&model);
                        (s, why.unwrap_or_else(|| "preparation failed".into()))
                    })
            }),
            ClientMessage::ReleaseModel { model_id } => match conn.models.remove(&model_id) {
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
                let Some(held) = conn.models.get(&model_id) else {
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
                    conn.buffers.owner(),
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
            ClientMessage::Info => ServiceMessage::Info(self.info(conn)),
            msg @ ClientMessage::Allocate { .. } => {
                let charge = match self.ledger.charge(conn.uid, Resource::DeviceBuffers, 1) {
                    Ok(c) => c,
                    Err(r) => return error(r.status(), r.to_string()),
                };
                let models = &conn.models;
                let answer = conn.buffers.handle(&self.driver, msg, &mut fds, |id| {
                    models.get(&id).map(|h| &h.model)
                });
                if let ServiceMessage::Allocated { token } = answer {
                    conn.buffer_charges.insert(token, charge);
                }
                answer
            }
            msg @ (ClientMessage::CopyTo { .. }
            | ClientMessage::CopyFrom { .. }
            | ClientMessage::FreeBuffer { .. }) => {
                let freed = match msg {
                    ClientMessage::FreeBuffer { token } => Some(token),
                    _ => None,
                };
                let models = &conn.models;
                let answer = conn.buffers.handle(&self.driver, msg, &mut fds, |id| {
                    models.get(&id).map(|h| &h.model)
                });
                if let (Some(token), ServiceMessage::BufferFreed) = (freed, &answer) {
                    conn.buffer_charges.remove(&token);
                }
                answer
            }
            ClientMessage::ConfigureBurst {
                model_id,
                request_fmq,
                result_fmq,
                polling_window_us,
            } => {
                let Some(held) = conn.models.get(&model_id) else {
                    return error(
                        ErrorStatus::InvalidArgument,
                        format!("no prepared model {model_id} on this connection"),
                    );
                };
                let charge = match self.ledger.charge(conn.uid, Resource::Bursts, 1) {
                    Ok(c) => c,
                    Err(r) => return error(r.status(), r.to_string()),
                };
                let ends = nnaccel_hal::burst::server::ReceivedEnds {
                    fds: &mut fds,
                    request: request_fmq,
                    result: result_fmq,
                    keep: Some(Box::new(charge)),
                };
                let window = nnaccel_hal::burst::server::polling_window(
                    polling_window_us,
                    held.model.preference(),
                    self.config.burst_polling_window,
                );
                match nnaccel_hal::burst::server::start_from_wire(
                    held.model.clone(),
                    conn.buffers.owner(),
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
            } => self.hold(conn, |driver, admit| {
                crate::cache_serve::prepare_with_cache(
                    driver,
                    &mut fds,
                    model,
                    preference,
                    priority,
                    deadline(timeout_ns),
                    &cache,
                    admit,
                )
                .map(|(pm, charge)| (pm, Some(charge)))
            }),
            ClientMessage::PrepareModelFromCache {
                preference,
                priority,
                timeout_ns,
                cache,
            } => self.hold(conn, |driver, admit| {
                let pm = crate::cache_serve::prepare_from_cache(
                    driver,
                    &mut fds,
                    preference,
                    priority,
                    deadline(timeout_ns),
                    &cache,
                )?;
                // The model came from a cache this service wrote; its memory is known only now.
                let charge = admit(pm.model())?;
                Ok((pm, Some(charge)))
            }),
            ClientMessage::CacheList | ClientMessage::CacheClear if !conn.admin => error(
                ErrorStatus::InvalidArgument,
                format!(
                    "uid {}: listing and clearing the driver-managed cache is for root{}",
                    conn.uid,
                    self.config
                        .admin_gid
                        .map_or(String::new(), |g| format!(" and group {g}"))
                ),
            ),
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

    /// Prepares with `prepare` (within the per-connection limit and the uid's budgets: it calls
    /// the admit function it is given with the model before preparing it) and holds the result
    /// for the connection.
    fn hold(
        &self,
        conn: &mut Conn,
        prepare: impl FnOnce(
            &Driver,
            &dyn Fn(&Model) -> Result<Charge, (ErrorStatus, String)>,
        ) -> Result<(PreparedModel, Option<Charge>), (ErrorStatus, String)>,
    ) -> ServiceMessage {
        let uid = conn.uid;
        let mut charges = match self.ledger.charge(uid, Resource::PreparedModels, 1) {
            Ok(c) => vec![c],
            Err(r) => return error(r.status(), r.to_string()),
        };
        if conn.models.len() >= self.config.max_models_per_connection {
            return error(
                ErrorStatus::ResourceExhaustedTransient,
                format!(
                    "at most {} prepared models per connection",
                    self.config.max_models_per_connection
                ),
            );
        }
        let admit = |model: &Model| self.admit_model(uid, model);
        match prepare(&self.driver, &admit) {
            Ok((pm, memory)) => {
                charges.extend(memory);
                let on_device = pm.runs_on_device();
                if on_device {
                    match self.ledger.charge(uid, Resource::DeviceQueues, 1) {
                        Ok(c) => charges.push(c),
                        Err(r) => return error(r.status(), r.to_string()),
                    }
                }
                let id = conn.next_id;
                conn.next_id += 1;
                conn.models.insert(
                    id,
                    Held {
                        model: pm,
                        owner: conn.cred,
                        _charges: charges,
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

/// Bytes a prepared `model` plans: its constants, its temporaries whose shapes are known, and
/// [`PREPARED_BYTES_PER_OPERATION`] per operation, in the main and every referenced subgraph,
/// computed before anything is allocated.
pub(crate) fn planned_bytes(model: &Model) -> u64 {
    let operands = model
        .all_operands()
        .filter(|o| {
            matches!(
                o.lifetime,
                OperandLifetime::TemporaryVariable
                    | OperandLifetime::ConstantCopy
                    | OperandLifetime::ConstantReference
            )
        })
        .filter_map(|o| nnaccel_hal::validate::byte_size(o.operand_type, &o.dimensions))
        .fold(0u64, u64::saturating_add);
    (model.all_operations().count() as u64)
        .saturating_mul(PREPARED_BYTES_PER_OPERATION)
        .saturating_add(operands)
}

/// The peer's credentials (`SO_PEERCRED`).
fn peer_cred(stream: &UnixStream) -> Option<PeerCred> {
    rustix::net::sockopt::socket_peercred(stream)
        .ok()
        .map(|c| PeerCred {
            pid: c.pid.as_raw_nonzero().get(),
            uid: c.uid.as_raw(),
            gid: c.gid.as_raw(),
        })
}

/// The peer's supplementary groups (`SO_PEERGROUPS`); empty when they cannot be read.
fn peer_groups(stream: &UnixStream) -> Vec<u32> {
    use std::os::fd::AsRawFd;
    let mut groups = vec![0 as libc::gid_t; 256];
    let mut len = (groups.len() * std::mem::size_of::<libc::gid_t>()) as libc::socklen_t;
    // SAFETY: `groups` is a live buffer of `len` bytes, which the kernel fills with at most
    // `len` bytes and then sets `len` to what it wrote.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERGROUPS,
            groups.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Vec::new();
    }
    groups.truncate(len as usize / std::mem::size_of::<libc::gid_t>());
    groups
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
