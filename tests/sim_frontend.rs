//! The FUSE frontend's life cycle as an administrator sees it: clean unmount on SIGTERM,
//! recovery from a stale mount, refusing a live one, and non-root clients (allow_other).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::ffi::CString;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nnaccel_tests::{
    MOUNT_TIMEOUT, is_fuse_mounted, lazy_unmount, require_privileges, sim_binary, with_timeout,
};
use nnaccel_uapi::DeviceExt;
use nnaccel_uapi::abi::{GetParam, PARAM_API_VERSION};
use nnaccel_uapi::ioctl::NNACCEL_IOCTL_GET_PARAM;

fn spawn(path: &Path) -> Child {
    Command::new(sim_binary())
        .arg("--path")
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn wait_mounted(path: &Path, child: &mut Child) {
    let deadline = Instant::now() + MOUNT_TIMEOUT;
    while !is_fuse_mounted(path) {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("nnaccel-sim exited before mounting: {status}");
        }
        assert!(
            Instant::now() < deadline,
            "no mount at {} within {MOUNT_TIMEOUT:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn sigterm(child: &Child) {
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
}

#[test]
fn sigterm_unmounts_cleanly_and_exits_zero() {
    if !require_privileges() {
        return;
    }
    with_timeout(
        Duration::from_secs(30),
        "sigterm unmounts cleanly and exits zero",
        || {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("nnaccel");
            let mut child = spawn(&path);
            wait_mounted(&path, &mut child);
            sigterm(&child);
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "exit status {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(!is_fuse_mounted(&path), "still mounted after SIGTERM");
        },
    );
}

#[test]
fn a_stale_mount_left_by_a_killed_instance_is_cleared_by_the_next() {
    if !require_privileges() {
        return;
    }
    with_timeout(
        Duration::from_secs(30),
        "a stale mount left by a killed instance is cleared by the next",
        || {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("nnaccel");
            let mut first = spawn(&path);
            wait_mounted(&path, &mut first);
            first.kill().unwrap();
            first.wait().unwrap();
            let stale = std::fs::metadata(&path).unwrap_err();
            assert_eq!(
                stale.raw_os_error(),
                Some(libc::ENOTCONN),
                "a killed FUSE server leaves a stale mount"
            );
            let mut second = spawn(&path);
            wait_mounted(&path, &mut second);
            let dev = nnaccel_uapi::FdDevice::open(&path).unwrap();
            assert_eq!(dev.get_param(PARAM_API_VERSION).unwrap() >> 16, 1);
            drop(dev);
            sigterm(&second);
            assert!(second.wait().unwrap().success());
            lazy_unmount(&path);
        },
    );
}

#[test]
fn a_second_instance_on_a_live_mount_is_refused() {
    if !require_privileges() {
        return;
    }
    with_timeout(
        Duration::from_secs(30),
        "a second instance on a live mount is refused",
        || {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("nnaccel");
            let mut first = spawn(&path);
            wait_mounted(&path, &mut first);
            let second = spawn(&path).wait_with_output().unwrap();
            assert_eq!(second.status.code(), Some(1));
            assert!(
                String::from_utf8_lossy(&second.stderr).contains("already served"),
                "{}",
                String::from_utf8_lossy(&second.stderr)
            );
            let dev = nnaccel_uapi::FdDevice::open(&path).unwrap();
            assert!(
                dev.get_param(PARAM_API_VERSION).is_ok(),
                "the first instance keeps serving"
            );
            drop(dev);
            sigterm(&first);
            assert!(first.wait().unwrap().success());
        },
    );
}

#[test]
fn a_non_root_client_can_open_and_use_the_device() {
    if !require_privileges() {
        return;
    }
    with_timeout(
        Duration::from_secs(30),
        "a non root client can open and use the device",
        || {
            let dir = tempfile::tempdir().unwrap();
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
            let path = dir.path().join("nnaccel");
            let mut sim = spawn(&path);
            wait_mounted(&path, &mut sim);
            let cpath = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
            let mut arg = GetParam {
                param: PARAM_API_VERSION,
                ..Default::default()
            };
            // SAFETY: the child runs only `probe_as_nobody` (raw system calls on memory prepared
            // before the fork) and `_exit`, never returning into the test harness.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                let code = probe_as_nobody(&cpath, &mut arg);
                // SAFETY: ends the forked child at once.
                unsafe { libc::_exit(code) };
            }
            let mut status = 0;
            // SAFETY: waiting for the child forked above.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            assert!(libc::WIFEXITED(status), "client did not exit normally");
            assert_eq!(
                libc::WEXITSTATUS(status),
                0,
                "uid 65534 could not use the device (10 setuid, 11 open, 12 ioctl)"
            );
            sigterm(&sim);
            assert!(sim.wait().unwrap().success());
        },
    );
}

/// In a forked child: become uid/gid 65534, open the device and issue GET_PARAM. Returns 0,
/// or 10 (setuid failed), 11 (open failed), 12 (ioctl failed).
fn probe_as_nobody(path: &CString, arg: &mut GetParam) -> i32 {
    // SAFETY: setgid/setuid take plain integers.
    if unsafe { libc::setgid(65534) } != 0 || unsafe { libc::setuid(65534) } != 0 {
        return 10;
    }
    // SAFETY: `path` is a valid NUL-terminated string.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return 11;
    }
    // SAFETY: `arg` is a live GetParam, exactly the size the command encodes.
    let rc = unsafe {
        libc::ioctl(
            fd,
            NNACCEL_IOCTL_GET_PARAM as libc::c_ulong,
            arg as *mut GetParam,
        )
    };
    if rc != 0 || arg.value >> 16 != 1 {
        12
    } else {
        0
    }
}
