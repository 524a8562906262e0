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
