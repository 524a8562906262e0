//! Opening a device and asking it what it is.

use std::io;
use std::path::Path;
use std::sync::Arc;

use nnaccel_uapi::abi::*;
use nnaccel_uapi::{Device, DeviceExt, FdDevice};

/// Opens a device node (`/dev/nnaccel`, or a FUSE/CUSE node of the simulator).
pub fn open_node(path: &Path) -> io::Result<Arc<dyn Device>> {
    Ok(Arc::new(FdDevice::open(path)?))
}

/// Live-object counters of the device (all its open files).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveObjects {
    /// Open files.
    pub files: u64,
    /// Buffer objects.
    pub bos: u64,
    /// Programs.
    pub programs: u64,
    /// Queues (default queues included).
    pub queues: u64,
}

/// What GET_PARAM tells about a device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// `major << 16 | minor`.
    pub api_version: u64,
    /// `CAP_*` bits.
    pub capabilities: u64,
    /// BOs per open file.
    pub max_bos: u64,
    /// Largest BO in bytes.
    pub max_bo_size: u64,
    /// Device memory in bytes.
    pub device_memory: u64,
    /// Device memory in use.
    pub device_memory_used: u64,
    /// Largest program in bytes.
    pub max_program_size: u64,
    /// Most entries per queue ring.
    pub max_queue_depth: u64,
    /// Most bindings per job.
    pub max_bindings: u64,
    /// Jobs completed since the device started.
    pub jobs_completed: u64,
    /// Whether the engine waits with io_uring.
    pub engine_uses_io_uring: bool,
    /// Live objects.
    pub live: LiveObjects,
}

impl DeviceInfo {
    /// Queries every parameter. Fails if the device speaks another major API version.
    pub fn query(dev: &dyn Device) -> io::Result<Self> {
        let p = |param| dev.get_param(param);
        let api_version = p(PARAM_API_VERSION)?;
        if api_version >> 16 != NNACCEL_API_VERSION >> 16 {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "device API {}.{} is not the {}.x this driver speaks",
                    api_version >> 16,
                    api_version & 0xffff,
                    NNACCEL_API_VERSION >> 16
                ),
            ));
        }
        Ok(Self {
            api_version,
            capabilities: p(PARAM_CAPABILITIES)?,
            max_bos: p(PARAM_MAX_BOS)?,
            max_bo_size: p(PARAM_MAX_BO_SIZE)?,
            device_memory: p(PARAM_DEVICE_MEMORY_SIZE)?,
            device_memory_used: p(PARAM_DEVICE_MEMORY_USED)?,
            max_program_size: p(PARAM_MAX_PROGRAM_SIZE)?,
            max_queue_depth: p(PARAM_MAX_QUEUE_DEPTH)?,
            max_bindings: p(PARAM_MAX_BINDINGS)?,
            jobs_completed: p(PARAM_JOBS_COMPLETED)?,
            engine_uses_io_uring: p(PARAM_ENGINE_WAIT_MODE)? == WAIT_MODE_IO_URING,
            live: LiveObjects {
                files: p(PARAM_LIVE_FILES)?,
                bos: p(PARAM_LIVE_BOS)?,
                programs: p(PARAM_LIVE_PROGRAMS)?,
                queues: p(PARAM_LIVE_QUEUES)?,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nnaccel_kmod_sim::{Config, InprocFile, SimDevice};

    #[test]
    fn info_of_an_inproc_device_reports_its_limits_and_live_objects() {
        let sim = SimDevice::new(Config {
            device_memory: 1 << 20,
            ..Config::default()
        })
        .unwrap();
        let file = InprocFile::open(&sim);
        let bo = file.bo_create(4096).unwrap();
        let info = DeviceInfo::query(&file).unwrap();
        assert_eq!(info.api_version, NNACCEL_API_VERSION);
        assert_eq!(info.device_memory, 1 << 20);
        assert_eq!(info.device_memory_used, 4096);
        assert_eq!(
            info.live,
            LiveObjects {
                files: 1,
                bos: 1,
                programs: 0,
                queues: 0
            }
        );
        file.bo_close(bo).unwrap();
        assert_eq!(DeviceInfo::query(&file).unwrap().live.bos, 0);
    }

    #[test]
    fn opening_a_missing_node_fails_with_enoent() {
        let e = open_node(Path::new("/nonexistent/nnaccel")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
    }
}
