//! Choosing what executes: the nnaccel-hald service, a device node, the embedded simulated
//! device, or the CPU executor.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use nnaccel_hal::{Backend, Driver, HalDevice};
use nnaccel_protocol::client::{DEFAULT_SOCKET, ServiceClient};

use crate::CliError;

/// The device node used when it exists and no --device/--cpu is given.
pub const DEFAULT_NODE: &str = "/dev/nnaccel";

/// Where the backend came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The nnaccel-hald service at this socket.
    Service(PathBuf),
    /// A device node.
    Node(PathBuf),
    /// The simulated device in this process.
    #[cfg_attr(not(feature = "embedded"), allow(dead_code))]
    Embedded,
    /// The CPU executor (--cpu, or no device available).
    Cpu {
        /// Why there is no device.
        why: &'static str,
    },
}

impl Source {
    /// For `info`'s "device:" line.
    pub fn device_label(&self) -> String {
        match self {
            Source::Service(p) => format!("through the service at {}", p.display()),
            Source::Node(p) => p.display().to_string(),
            Source::Embedded => "embedded (the simulated device, in-process)".to_string(),
            Source::Cpu { why } => format!("none ({why})"),
        }
    }
}

/// The HAL to talk to and where it came from.
#[derive(Debug)]
pub struct Selected {
    /// The HAL.
    pub driver: Arc<dyn HalDevice>,
    /// The in-process driver, when not going through the service.
    pub local: Option<Driver>,
    /// The service connection, when going through the service.
    pub service: Option<ServiceClient>,
    /// Where the backend came from.
    pub source: Source,
}

impl Selected {
    /// Why the backend refused to prepare `model`: the in-process driver's reason, or the
    /// message of the service's error frame.
    pub fn refusal_reason(&self, model: &nnaccel_hal::Model) -> Option<String> {
        match (&self.local, &self.service) {
            (Some(driver), _) => driver.refusal_reason(model),
            (None, Some(client)) => client.last_error(),
            (None, None) => None,
        }
    }

    /// One line for human output: which backend executes.
    pub fn describe(&self) -> String {
        let what = self.driver.description();
        match &self.source {
            Source::Service(p) => format!("service at {} ({what})", p.display()),
            Source::Node(p) => format!("{} ({what})", p.display()),
            Source::Embedded => format!("embedded simulated device, in-process ({what})"),
            Source::Cpu { why } => format!("{what} ({why})"),
        }
    }

    fn local(driver: Driver, source: Source) -> Self {
        Self {
            driver: Arc::new(driver.clone()),
            local: Some(driver),
            service: None,
            source,
        }
    }
}

fn connect(path: &Path) -> Result<Selected, CliError> {
    let client = ServiceClient::connect(path).map_err(|e| {
        CliError(format!(
            "cannot reach the service at {}: {e} (use --device or --cpu to run in this process)",
            path.display()
        ))
    })?;
    Ok(Selected {
        driver: Arc::new(client.clone()),
        local: None,
        service: Some(client),
        source: Source::Service(path.to_path_buf()),
    })
}

/// Opens the backend the options ask for: `--service`, `--device`, `--cpu`; otherwise the
/// service when its default socket exists, then `/dev/nnaccel`, then the embedded default.
pub fn select(
    device: Option<PathBuf>,
    cpu: bool,
    service: Option<PathBuf>,
) -> Result<Selected, CliError> {
    if let Some(path) = service {
        return connect(&path);
    }
    if cpu {
        return Ok(Selected::local(
            Driver::new(Backend::CpuOnly),
            Source::Cpu { why: "--cpu" },
        ));
    }
    if device.is_none() && Path::new(DEFAULT_SOCKET).exists() {
        return connect(Path::new(DEFAULT_SOCKET));
    }
    let node = match device {
        Some(p) => Some(p),
        None => Some(PathBuf::from(DEFAULT_NODE)).filter(|p| p.exists()),
    };
    if let Some(path) = node {
        let dev = nnaccel_hal::open_node(&path).map_err(|e| {
            CliError(format!(
                "cannot open the device {}: {e} (use --cpu for the CPU executor)",
                path.display()
            ))
        })?;
        // A node that does not answer GET_PARAM, or speaks another API (/dev/null, a regular
        // file, another driver's node), is an error: the driver would quietly run everything
        // on the CPU executor instead, and the user asked for this device.
        nnaccel_hal::DeviceInfo::query(&*dev).map_err(|e| {
            CliError(format!(
                "{} is not an nnaccel device: {e} (use --cpu for the CPU executor)",
                path.display()
            ))
        })?;
        return Ok(Selected::local(
            Driver::new(Backend::Device(dev)),
            Source::Node(path),
        ));
    }
    embedded()
}

/// [`select`] for `run` and `bench`, which take `--threads`: with a count, sets the CPU
/// executor's thread limit for this process (`nnaccel_cpu::set_max_threads`), which the CPU
/// executor and the embedded simulated device use. Refused (before connecting, for an explicit
/// `--service`) when the model would run in the service: its executor is the daemon's, set by
/// the daemon's own `threads` setting, and silently ignoring the option would mislead.
pub fn select_with_threads(
    device: Option<PathBuf>,
    cpu: bool,
    service: Option<PathBuf>,
    threads: Option<u32>,
) -> Result<Selected, CliError> {
    if let (Some(_), Some(path)) = (threads, &service) {
        return Err(threads_with_service(path));
    }
    let selected = select(device, cpu, service)?;
    if let Some(n) = threads {
        if let Source::Service(path) = &selected.source {
            return Err(threads_with_service(path));
        }
        nnaccel_cpu::set_max_threads(n as usize);
    }
    Ok(selected)
}

fn threads_with_service(path: &Path) -> CliError {
    CliError(format!(
        "--threads applies to executors in this process, but the model would run in the \
         service at {}: set `threads` in its configuration (/etc/nnaccel/hald.toml, or \
         nnaccel-hald --threads N), or use --cpu or --device to run here",
        path.display()
    ))
}

impl Selected {
    /// For `bench`'s header: how many threads one operation of the CPU executor may use, and
    /// what set it (`threads` is the command line's `--threads`).
    pub fn threads_label(&self, threads: Option<u32>) -> String {
        match (&self.source, threads) {
            (Source::Service(_), _) => {
                "the service's (its `threads` setting; the backend line above says how many)"
                    .to_string()
            }
            (_, Some(_)) => format!("{} (--threads)", nnaccel_cpu::max_threads()),
            (_, None) => format!(
                "{} (NNACCEL_CPU_THREADS, else the CPUs available)",
                nnaccel_cpu::max_threads()
            ),
        }
    }
}

#[cfg(feature = "embedded")]
fn embedded() -> Result<Selected, CliError> {
    use nnaccel_kmod_sim::{Config, InprocFile, SimDevice};

    let sim = SimDevice::new(Config::default())
        .map_err(|e| CliError(format!("cannot start the embedded simulated device: {e}")))?;
    let file: Arc<dyn nnaccel_uapi::Device> = Arc::new(InprocFile::open(&sim));
    Ok(Selected::local(
        Driver::new(Backend::Device(file)),
        Source::Embedded,
    ))
}

#[cfg(not(feature = "embedded"))]
fn embedded() -> Result<Selected, CliError> {
    Ok(Selected::local(
        Driver::new(Backend::CpuOnly),
        Source::Cpu {
            why: "no /dev/nnaccel, and built without the embedded simulated device",
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_with_an_explicit_service_is_refused_before_connecting() {
        // Nothing listens there: an attempt to connect would fail with "cannot reach".
        let path = PathBuf::from("/nonexistent/nnaccel-threads-test.sock");
        let err = select_with_threads(None, false, Some(path), Some(2))
            .err()
            .map(|e| e.0)
            .unwrap_or_default();
        assert!(err.contains("`threads`"), "{err}");
        assert!(
            err.contains("/nonexistent/nnaccel-threads-test.sock"),
            "{err}"
        );
        assert!(!err.contains("cannot reach"), "{err}");
    }

    #[test]
    fn threads_on_the_cpu_executor_set_the_process_limit() {
        let selected = select_with_threads(None, true, None, Some(3));
        assert!(selected.is_ok());
        assert_eq!(nnaccel_cpu::max_threads(), 3);
        if let Ok(s) = selected {
            assert_eq!(s.threads_label(Some(3)), "3 (--threads)");
        }
    }
}
