//! What runs the claimed nodes: the nnaccel-hald service, a device node in this process, or
//! the embedded stack (the simulated device in the interpreter's process).

use std::path::Path;
use std::sync::Arc;

use nnaccel_hal::{Backend as HalBackend, Driver, HalDevice};
use nnaccel_kmod_sim::{Config, InprocFile, SimDevice};
use nnaccel_protocol::client::{DEFAULT_SOCKET, ServiceClient};

use crate::options::Options;

/// The HAL the delegate talks to, and where it is.
#[derive(Debug, Clone)]
pub struct Backend {
    /// The HAL.
    pub hal: Arc<dyn HalDevice>,
    /// For the log: where the models run.
    pub label: String,
}

/// Chooses the backend the options ask for: `service=PATH`, `device=PATH`; otherwise the
/// service at the system socket when it exists, else the embedded stack.
pub fn select(options: &Options) -> Result<Backend, String> {
    if let Some(path) = &options.service {
        return connect(path);
    }
    if let Some(path) = &options.device {
        return device(path);
    }
    let system = Path::new(DEFAULT_SOCKET);
    if system.exists() {
        return connect(system);
    }
    embedded()
}

fn connect(path: &Path) -> Result<Backend, String> {
    let client = ServiceClient::connect(path).map_err(|e| {
        format!(
            "nnaccel delegate: cannot reach the service at {}: {e}",
            path.display()
        )
    })?;
    Ok(Backend {
        label: format!("the service at {}", path.display()),
        hal: Arc::new(client),
    })
}

fn device(path: &Path) -> Result<Backend, String> {
    let dev = nnaccel_hal::open_node(path).map_err(|e| {
        format!(
            "nnaccel delegate: cannot open the device {}: {e}",
            path.display()
        )
    })?;
    // A node that does not speak the nnaccel API would leave everything on the CPU executor
    // without saying so: refuse it, as nnaccelctl does.
    nnaccel_hal::DeviceInfo::query(&*dev).map_err(|e| {
        format!(
            "nnaccel delegate: {} is not an nnaccel device: {e}",
            path.display()
        )
    })?;
    let driver = Driver::new(HalBackend::Device(dev));
    Ok(Backend {
        label: format!("{} ({})", path.display(), driver.description()),
        hal: Arc::new(driver),
    })
}

/// The embedded stack: the simulated device in this process under the in-process HAL.
pub fn embedded() -> Result<Backend, String> {
    let sim = SimDevice::new(Config::default()).map_err(|e| {
        format!("nnaccel delegate: cannot start the embedded simulated device: {e}")
    })?;
    let file: Arc<dyn nnaccel_uapi::Device> = Arc::new(InprocFile::open(&sim));
    let driver = Driver::new(HalBackend::Device(file));
    Ok(Backend {
        label: format!("embedded, in-process ({})", driver.description()),
        hal: Arc::new(driver),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn an_unreachable_service_is_an_error_naming_the_socket() {
        let o = Options {
            service: Some(PathBuf::from("/nonexistent/nnaccel-delegate-test.sock")),
            ..Options::default()
        };
        let err = select(&o).err().unwrap_or_default();
        assert!(err.contains("cannot reach the service"), "{err}");
        assert!(
            err.contains("/nonexistent/nnaccel-delegate-test.sock"),
            "{err}"
        );
    }

    #[test]
    fn a_device_that_is_not_nnaccel_is_refused() {
        let o = Options {
            device: Some(PathBuf::from("/dev/null")),
            ..Options::default()
        };
        let err = select(&o).err().unwrap_or_default();
        assert!(err.contains("/dev/null"), "{err}");
    }
}
