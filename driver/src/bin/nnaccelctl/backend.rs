//! Choosing what executes: a device node, the embedded simulated device, or the CPU executor.

use std::path::PathBuf;

use nnaccel::hal::{Backend, Driver};

use crate::CliError;

/// The device node used when it exists and no --device/--cpu is given.
pub const DEFAULT_NODE: &str = "/dev/nnaccel";

/// Where the driver's backend came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
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
            Source::Node(p) => p.display().to_string(),
            Source::Embedded => "embedded (the simulated device, in-process)".to_string(),
            Source::Cpu { why } => format!("none ({why})"),
        }
    }
}

/// A driver and where its backend came from.
#[derive(Debug)]
pub struct Selected {
    /// The driver.
    pub driver: Driver,
    /// Where the backend came from.
    pub source: Source,
}

impl Selected {
    /// One line for human output: which backend executes.
    pub fn describe(&self) -> String {
        let what = self.driver.description();
        match &self.source {
            Source::Node(p) => format!("{} ({what})", p.display()),
            Source::Embedded => format!("embedded simulated device, in-process ({what})"),
            Source::Cpu { why } => format!("{what} ({why})"),
        }
    }
}

/// Opens the backend the options ask for.
pub fn select(device: Option<PathBuf>, cpu: bool) -> Result<Selected, CliError> {
    if cpu {
        return Ok(Selected {
            driver: Driver::new(Backend::CpuOnly),
            source: Source::Cpu { why: "--cpu" },
        });
    }
    let node = match device {
        Some(p) => Some(p),
        None => Some(PathBuf::from(DEFAULT_NODE)).filter(|p| p.exists()),
    };
    if let Some(path) = node {
        let dev = nnaccel::open_node(&path).map_err(|e| {
            CliError(format!(
                "cannot open the device {}: {e} (use --cpu for the CPU executor)",
                path.display()
            ))
        })?;
        return Ok(Selected {
            driver: Driver::new(Backend::Device(dev)),
            source: Source::Node(path),
        });
    }
    embedded()
}

#[cfg(feature = "embedded")]
fn embedded() -> Result<Selected, CliError> {
    use std::sync::Arc;

    use nnaccel_kmod_sim::{Config, InprocFile, SimDevice};

    let sim = SimDevice::new(Config::default())
        .map_err(|e| CliError(format!("cannot start the embedded simulated device: {e}")))?;
    let file: Arc<dyn nnaccel_uapi::Device> = Arc::new(InprocFile::open(&sim));
    Ok(Selected {
        driver: Driver::new(Backend::Device(file)),
        source: Source::Embedded,
    })
}

#[cfg(not(feature = "embedded"))]
fn embedded() -> Result<Selected, CliError> {
    Ok(Selected {
        driver: Driver::new(Backend::CpuOnly),
        source: Source::Cpu {
            why: "no /dev/nnaccel, and built without the embedded simulated device",
        },
    })
}
