//! `nnaccel-hald`: the nnaccel HAL service. It owns the device, validates every model and
//! request, and serves clients on a Unix socket (fds attached). Meant to run under systemd
//! (Type=notify, watchdog, socket activation) but runs fine by hand.

/// Tensors and packed weights on cache lines (nnaccel_cpu::CacheAligned says why).
#[global_allocator]
static ALLOCATOR: nnaccel_cpu::CacheAligned = nnaccel_cpu::CacheAligned;

use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use nnaccel_hal::{Backend, Driver};
use nnaccel_service::{self as service, Service, ServiceConfig, systemd};
use serde::Deserialize;

mod log;

/// The nnaccel HAL service.
///
/// Serves the NN HAL (capabilities, supported operations, preparation, execution) to clients
/// on a Unix socket, running models on the accelerator (`/dev/nnaccel`) with the CPU executor
/// as fallback. Under systemd it takes its socket from socket activation and reports
/// READY=1, WATCHDOG=1 and STOPPING=1. Settings come from the command line and, if present,
/// the configuration file; the command line wins.
#[derive(Parser, Debug)]
#[command(version, about, long_about)]
struct Args {
    /// Socket to listen on (ignored when socket-activated). [default: /run/nnaccel/hal.sock]
    #[arg(long)]
    socket: Option<PathBuf>,

    /// Device node. [default: /dev/nnaccel]
    #[arg(long, conflicts_with = "cpu")]
    device: Option<PathBuf>,

    /// Run on the CPU executor only, without opening a device.
    #[arg(long)]
    cpu: bool,

    /// Threads one operation of the CPU executor may use (1 to 64): the CPU-only mode and the
    /// CPU fallback next to the device. [default: $NNACCEL_CPU_THREADS, else the number of
    /// CPUs available]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=nnaccel_cpu::MAX_THREADS as i64))]
    threads: Option<u32>,

    /// Configuration file (TOML: socket, device, cpu, threads, max_message_bytes, max_models_per_connection,
    /// max_bursts_per_connection, burst_polling_us, state_dir, managed_cache_max_bytes,
    /// idle_timeout_ms, frame_timeout_ms, max_partial_frame_bytes, admin_group,
    /// max_model_operations, max_model_operands, max_model_bytes, and a [budgets] table; see
    /// systemd/hald.toml.example).
    #[arg(long, default_value = "/etc/nnaccel/hald.toml")]
    config: PathBuf,

    /// Largest client message in bytes. [default: 67108864]
    #[arg(long)]
    max_message_bytes: Option<usize>,

    /// Burst workers' polling window in µs before they sleep (LOW_POWER models: 0). [default: 50]
    #[arg(long)]
    burst_polling_us: Option<u64>,

    /// How burst workers sleep: `auto` (io_uring FutexWait where the kernel has it) or `futex`.
    #[arg(long, default_value = "auto", value_parser = ["auto", "futex"])]
    burst_wait: String,
    /// State directory: compilation-cache records and the driver-managed cache.
    /// [default: $STATE_DIRECTORY (systemd's StateDirectory=), else /var/lib/nnaccel]
    #[arg(long)]
    state_dir: Option<PathBuf>,

    /// Bound on the driver-managed cache in bytes; 0 turns it off. [default: 268435456]
    #[arg(long)]
    managed_cache_max_bytes: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    socket: Option<PathBuf>,
    device: Option<PathBuf>,
    cpu: Option<bool>,
    threads: Option<u32>,
    max_message_bytes: Option<usize>,
    max_models_per_connection: Option<usize>,
    max_bursts_per_connection: Option<usize>,
    burst_polling_us: Option<u64>,
    state_dir: Option<PathBuf>,
    managed_cache_max_bytes: Option<u64>,
    idle_timeout_ms: Option<u64>,
    frame_timeout_ms: Option<u64>,
    max_partial_frame_bytes: Option<u64>,
    admin_group: Option<u32>,
    max_model_operations: Option<usize>,
    max_model_operands: Option<usize>,
    max_model_bytes: Option<u64>,
    #[serde(default)]
    budgets: FileBudgets,
}

/// `[budgets]`: each budget `{ per_uid = N, global = M }`, either half optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileBudgets {
    connections: Option<FileLimit>,
    prepared_models: Option<FileLimit>,
    model_memory_bytes: Option<FileLimit>,
    device_queues: Option<FileLimit>,
    bursts: Option<FileLimit>,
    device_buffers: Option<FileLimit>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLimit {
    per_uid: Option<u64>,
    global: Option<u64>,
}

impl FileBudgets {
    fn apply(&self, b: &mut service::budget::Budgets) {
        let set = |limit: &mut service::budget::Limit, file: &Option<FileLimit>| {
            if let Some(f) = file {
                limit.per_uid = f.per_uid.unwrap_or(limit.per_uid);
                limit.global = f.global.unwrap_or(limit.global);
            }
        };
        set(&mut b.connections, &self.connections);
        set(&mut b.prepared_models, &self.prepared_models);
        set(&mut b.model_memory, &self.model_memory_bytes);
        set(&mut b.device_queues, &self.device_queues);
        set(&mut b.bursts, &self.bursts);
        set(&mut b.device_buffers, &self.device_buffers);
    }
}

/// The CPU executor's threads per operation: `--threads` (checked by clap), else the file's
/// `threads`, which must be 1 to [`nnaccel_cpu::MAX_THREADS`]; `None`: neither is set (the
/// executor's default: `NNACCEL_CPU_THREADS`, else the CPUs available).
fn threads_setting(
    flag: Option<u32>,
    file: Option<u32>,
    config: &Path,
) -> Result<Option<usize>, String> {
    if let Some(n) = flag {
        return Ok(Some(n as usize));
    }
    match file {
        None => Ok(None),
        Some(n) if (1..=nnaccel_cpu::MAX_THREADS).contains(&(n as usize)) => Ok(Some(n as usize)),
        Some(n) => Err(format!(
            "{}: threads = {n}: the CPU executor's threads per operation must be 1 to {}",
            config.display(),
            nnaccel_cpu::MAX_THREADS
        )),
    }
}

fn load_config(path: &Path, explicit: bool) -> Result<FileConfig, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => {
            Ok(FileConfig::default())
        }
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

fn main() -> ExitCode {
    log::init();
    let args = Args::parse();
    let explicit_config = std::env::args().any(|a| a == "--config" || a.starts_with("--config="));
    let file = match load_config(&args.config, explicit_config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("nnaccel-hald: bad configuration: {e}");
            return ExitCode::from(2);
        }
    };
    match threads_setting(args.threads, file.threads, &args.config) {
        Ok(Some(n)) => nnaccel_cpu::set_max_threads(n),
        Ok(None) => {}
        Err(e) => {
            eprintln!("nnaccel-hald: bad configuration: {e}");
            return ExitCode::from(2);
        }
    }
    tracing::info!(
        "CPU executor: up to {} threads per operation",
        nnaccel_cpu::max_threads()
    );
    let cpu = args.cpu || (args.device.is_none() && file.cpu.unwrap_or(false));
    let device_path = args
        .device
        .or(file.device)
        .unwrap_or_else(|| PathBuf::from("/dev/nnaccel"));
    let socket_path = args
        .socket
        .or(file.socket)
        .unwrap_or_else(|| PathBuf::from(nnaccel_protocol::client::DEFAULT_SOCKET));
    let mut config = ServiceConfig::default();
    if let Some(n) = args.max_message_bytes.or(file.max_message_bytes) {
        config.max_message_bytes = n;
    }
    if let Some(n) = file.max_models_per_connection {
        config.max_models_per_connection = n;
    }
    if let Some(n) = file.max_bursts_per_connection {
        config.max_bursts_per_connection = n;
    }
    file.budgets.apply(&mut config.budgets);
    if let Some(ms) = file.idle_timeout_ms {
        config.idle_timeout = std::time::Duration::from_millis(ms);
    }
    if let Some(ms) = file.frame_timeout_ms {
        config.frame_timeout = std::time::Duration::from_millis(ms);
    }
    if let Some(n) = file.max_partial_frame_bytes {
        config.max_partial_frame_bytes = n;
    }
    config.admin_gid = file.admin_group;
    if let Some(n) = file.max_model_operations {
        config.max_model_operations = n;
    }
    if let Some(n) = file.max_model_operands {
        config.max_model_operands = n;
    }
    if let Some(n) = file.max_model_bytes {
        config.max_model_bytes = n;
    }
    if let Some(us) = args.burst_polling_us.or(file.burst_polling_us) {
        config.burst_polling_window =
            std::time::Duration::from_micros(us).min(nnaccel_hal::burst::MAX_POLLING_WINDOW);
    }
    // Every client's pools, every burst's queues, channel and io_uring ring are fds here: 256
    // bursts alone need over a thousand, past the usual soft limit of 1024, and an fd that
    // cannot be installed is dropped from the frame that carried it (the frame is refused).
    // The unit sets LimitNOFILE= too; this covers a service started by hand.
    match nnaccel_service::raise_fd_limit() {
        Ok(n) => tracing::debug!("open-file limit: {n:?}"),
        Err(e) => tracing::warn!("cannot raise the open-file limit: {e}"),
    }
    // Probe (or force) the burst workers' wait mechanism now, so the log says it at start.
    if args.burst_wait == "futex" {
        nnaccel_hal::burst::server::force_futex_wait();
    } else {
        nnaccel_hal::burst::server::wait_mechanism();
    }

    // Socket activation first: reading LISTEN_FDS unsets the activation variables, which is
    // only sound while this process has a single thread (opening the device starts workers).
    let listener = match listener(&socket_path) {
        Ok(l) => Arc::new(l),
        Err(e) => {
            eprintln!("nnaccel-hald: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (driver, status) = open_driver(cpu, &device_path);
    tracing::info!("{status}");
    let state_dir = args
        .state_dir
        .or(file.state_dir)
        .or_else(|| std::env::var_os("STATE_DIRECTORY").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/var/lib/nnaccel"));
    let driver = with_cache(
        driver,
        &state_dir,
        args.managed_cache_max_bytes
            .or(file.managed_cache_max_bytes)
            .unwrap_or(nnaccel_hal::cache::managed::DEFAULT_MAX_BYTES),
    );
    let service = Service::new(driver, config);
    // Signal handlers before READY=1: a SIGTERM that follows READY at once must find them.
    if let Err(e) = spawn_signal_thread(service.clone(), listener.clone()) {
        eprintln!("nnaccel-hald: cannot install signal handlers: {e}");
        return ExitCode::FAILURE;
    }
    let notifier = systemd::Notifier::from_env();
    let _watchdog = match systemd::watchdog_from_env(notifier.as_ref()) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("nnaccel-hald: cannot start the watchdog: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(n) = &notifier
        && let Err(e) = n.ready(&status)
    {
        tracing::warn!("sd_notify READY=1 failed: {e}");
    }
    let result = service.serve(&listener);
    if let Some(n) = &notifier {
        let _ = n.stopping();
    }
    match result {
        Ok(()) => {
            tracing::info!("stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("nnaccel-hald: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Opens the device, or says why the service runs CPU-only.
fn open_driver(cpu: bool, device: &Path) -> (Driver, String) {
    if cpu {
        return (
            Driver::new(Backend::CpuOnly),
            "serving on the CPU executor only (--cpu)".into(),
        );
    }
    match nnaccel_hal::open_node(device) {
        Ok(dev) => {
            let driver = Driver::new(Backend::Device(dev)).with_device_node(device);
            let status = format!(
                "serving with {}: {}",
                device.display(),
                driver.description()
            );
            (driver, status)
        }
        // Not there (yet): serve on the CPU, and adopt the device when it first answers (a
        // module loaded after the service, a simulator started later).
        Err(e) => (
            Driver::new(Backend::CpuOnly).with_device_node(device),
            format!(
                "serving on the CPU executor: cannot open {}: {e}; probing it again every {:?} \
                 (on the next preparation or info call) and adopting it when it answers",
                device.display(),
                nnaccel_hal::REPROBE_INTERVAL
            ),
        ),
    }
}

/// Compilation caching under `state_dir`; without a usable state directory the records live
/// in memory (caches work until the service stops) and there is no driver-managed cache.
fn with_cache(driver: Driver, state_dir: &Path, managed_max_bytes: u64) -> Driver {
    match nnaccel_hal::cache::CacheState::open(state_dir, managed_max_bytes) {
        Ok(state) => {
            tracing::info!(
                "compilation caching: state in {} (driver build {})",
                state_dir.display(),
                state.build_id()
            );
            driver.with_cache(state)
        }
        Err(e) => {
            tracing::warn!("compilation-cache records kept in memory only: {e}");
            driver
        }
    }
}

/// The socket from systemd, or one bound at `path`.
fn listener(path: &Path) -> Result<UnixListener, String> {
    if let Some(l) = systemd::listener_from_env().map_err(|e| format!("socket activation: {e}"))? {
        tracing::info!("listening on the socket systemd passed");
        return Ok(l);
    }
    let l = service::bind_socket(path)
        .map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
    tracing::info!("listening on {}", path.display());
    Ok(l)
}

fn spawn_signal_thread(service: Arc<Service>, listener: Arc<UnixListener>) -> std::io::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([libc::SIGTERM, libc::SIGINT])?;
    std::thread::Builder::new()
        .name("nnaccel-signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                tracing::info!("signal {sig}: shutting down");
                if let Some(n) = systemd::Notifier::from_env() {
                    let _ = n.stopping();
                }
                service.stop(&listener);
            }
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> Result<FileConfig, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    #[test]
    fn threads_comes_from_the_flag_before_the_file() {
        let p = Path::new("hald.toml");
        assert_eq!(threads_setting(Some(2), Some(8), p), Ok(Some(2)));
        assert_eq!(threads_setting(None, Some(8), p), Ok(Some(8)));
        assert_eq!(threads_setting(None, None, p), Ok(None));
    }

    #[test]
    fn threads_in_the_file_must_be_one_to_max_threads() {
        let p = Path::new("/etc/nnaccel/hald.toml");
        assert_eq!(threads_setting(None, Some(1), p), Ok(Some(1)));
        assert_eq!(threads_setting(None, Some(64), p), Ok(Some(64)));
        for bad in [0, 65, u32::MAX] {
            let err = threads_setting(None, Some(bad), p)
                .err()
                .unwrap_or_default();
            assert!(
                err.contains(&format!("threads = {bad}")) && err.contains("1 to 64"),
                "{bad}: {err}"
            );
            assert!(err.starts_with("/etc/nnaccel/hald.toml: "), "{err}");
        }
    }

    #[test]
    fn threads_in_the_file_parses_as_a_count() {
        assert_eq!(file("threads = 4").map(|f| f.threads), Ok(Some(4)));
        assert_eq!(file("").map(|f| f.threads), Ok(None));
        for bad in [
            "threads = -1",
            "threads = \"4\"",
            "threads = 2.5",
            "threads = true",
        ] {
            let err = file(bad).err().unwrap_or_default();
            assert!(err.contains("threads"), "{bad}: {err}");
        }
    }

    #[test]
    fn threads_flag_accepts_one_to_max_threads_only() {
        let parse = |v: &str| Args::try_parse_from(["nnaccel-hald", "--threads", v]);
        assert_eq!(parse("1").map(|a| a.threads).ok(), Some(Some(1)));
        assert_eq!(parse("64").map(|a| a.threads).ok(), Some(Some(64)));
        for bad in ["0", "65", "junk", "-3"] {
            assert!(parse(bad).is_err(), "--threads {bad}");
        }
    }
}
