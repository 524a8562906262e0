//! `nnaccel-sim`: serves the simulated nnaccel device as a CUSE character device or on a FUSE
//! file, or runs an in-process demonstration.

/// Tensors and packed weights on cache lines (nnaccel_cpu::CacheAligned says why).
#[global_allocator]
static ALLOCATOR: nnaccel_cpu::CacheAligned = nnaccel_cpu::CacheAligned;

use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use nnaccel_cpu::OperationType;
use nnaccel_kmod_sim::cuse::{self, CuseServer};
use nnaccel_kmod_sim::frontend::Frontend;
use nnaccel_kmod_sim::fuse::FuseServer;
use nnaccel_kmod_sim::{Config, Faults, InprocFile, SimDevice, WaitMode};

mod demo;

#[derive(Clone, Copy, Debug, ValueEnum)]
enum WaitModeArg {
    /// io_uring FUTEX_WAIT where the kernel has it, else the futex syscall.
    Auto,
    /// The futex syscall.
    Futex,
    /// io_uring FUTEX_WAIT; fail to start if the kernel lacks it.
    IoUring,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum FrontendArg {
    /// CUSE when /dev/cuse exists and --path is /dev/<name>, FUSE otherwise.
    Auto,
    /// A FUSE file that behaves as the char device (any path).
    Fuse,
    /// A real character device node /dev/<name> through /dev/cuse.
    Cuse,
}

/// The simulated nnaccel device: a character device served through CUSE, or a stand-in
/// served on a FUSE file.
///
/// With --path, serves the device there until SIGTERM or SIGINT: as a CUSE char device when
/// the path is /dev/<name> and /dev/cuse exists (or with --frontend cuse), else by mounting
/// FUSE on that file (created if missing; as root `--path /dev/nnaccel` works), unmounted at
/// the end. With --demo, runs the device in-process and pushes a few jobs through it.
#[derive(Parser, Debug)]
#[command(version, about, long_about)]
struct Args {
    /// Where to serve the device: /dev/<name> (CUSE node or FUSE mount point) or any file
    /// (FUSE mount point).
    #[arg(long, required_unless_present = "demo", conflicts_with = "demo")]
    path: Option<PathBuf>,

    /// Which frontend serves --path.
    #[arg(long, value_enum, default_value_t = FrontendArg::Auto)]
    frontend: FrontendArg,

    /// Run the device in-process, submit a few jobs through its queue and print what happened.
    #[arg(long)]
    demo: bool,

    /// Device memory for BO_CREATE, in bytes.
    #[arg(long, default_value_t = Config::default().device_memory)]
    device_memory: u64,

    /// Largest buffer object, in bytes.
    #[arg(long, default_value_t = Config::default().max_bo_size)]
    max_bo_size: u64,

    /// Buffer objects per open file.
    #[arg(long, default_value_t = Config::default().max_bos)]
    max_bos: u32,

    /// How engine workers wait on queue doorbells.
    #[arg(long, value_enum, default_value_t = WaitModeArg::Auto)]
    wait_mode: WaitModeArg,

    /// Operation types this device lacks, comma-separated HAL names (`CONV_2D,TANH`): programs
    /// using one are refused with EOPNOTSUPP at PROGRAM_CREATE, like a real NPU's, so the HAL
    /// places those operations on the CPU.
    #[arg(long, value_delimiter = ',', value_parser = parse_operation)]
    without_ops: Vec<OperationType>,

    /// FUSE/CUSE worker threads.
    #[arg(long, default_value_t = 4)]
    threads: usize,

    /// Fault injection (debug): every job sleeps this many milliseconds.
    #[arg(long, default_value_t = 0, hide_short_help = true)]
    fault_delay_job_ms: u64,

    /// Fault injection (debug): delay only jobs whose outputs add up to at least this many bytes.
    #[arg(long, default_value_t = 0, hide_short_help = true)]
    fault_delay_job_min_output_bytes: u64,

    /// Fault injection (debug): the Nth ioctl fails with EIO.
    #[arg(long, default_value_t = 0, hide_short_help = true)]
    fault_fail_ioctl: u64,

    /// Fault injection (debug): the Nth job's completion is never posted.
    #[arg(long, default_value_t = 0, hide_short_help = true)]
    fault_drop_completion: u64,

    /// Fault injection (debug): exit abruptly, without unmounting, on the Nth ioctl.
    #[arg(long, default_value_t = 0, hide_short_help = true)]
    fault_exit_on_ioctl: u64,
}

/// An operation type by its HAL name (`CONV_2D`).
fn parse_operation(s: &str) -> Result<OperationType, String> {
    OperationType::from_name(s.trim()).ok_or_else(|| format!("no operation is named {s:?}"))
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("NNACCEL_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .without_time()
        .init();
    let args = Args::parse();
    let faults = Faults {
        delay_job_ms: args.fault_delay_job_ms,
        delay_job_min_output_bytes: args.fault_delay_job_min_output_bytes,
        fail_ioctl: args.fault_fail_ioctl,
        drop_completion: args.fault_drop_completion,
        exit_on_ioctl: args.fault_exit_on_ioctl,
    };
    if faults.any() && !nnaccel_kmod_sim::config::FAULT_INJECTION {
        eprintln!("nnaccel-sim: fault injection is not compiled into this build");
        return ExitCode::from(2);
    }
    let config = Config {
        device_memory: args.device_memory,
        max_bo_size: args.max_bo_size,
        max_bos: args.max_bos,
        wait_mode: match args.wait_mode {
            WaitModeArg::Auto => WaitMode::Auto,
            WaitModeArg::Futex => WaitMode::Futex,
            WaitModeArg::IoUring => WaitMode::IoUring,
        },
        faults,
        without_ops: args.without_ops,
        ..Config::default()
    };
    let dev = match SimDevice::new(config) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("nnaccel-sim: cannot create the device: {e}");
            return ExitCode::FAILURE;
        }
    };
    if args.demo {
        let file = Arc::new(InprocFile::open(&dev));
        return match demo::run(file) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("nnaccel-sim: demo failed: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let Some(path) = args.path else {
        return ExitCode::from(2);
    };
    let use_cuse = match args.frontend {
        FrontendArg::Cuse => true,
        FrontendArg::Fuse => false,
        FrontendArg::Auto => cuse::can_serve(&path),
    };
    if use_cuse {
        let server = CuseServer::start(dev.clone(), &path, args.threads);
        serve(dev, &path, server)
    } else {
        let server = FuseServer::mount(dev.clone(), &path, args.threads);
        serve(dev, &path, server)
    }
}

/// SIGTERM/SIGINT handling: `on_signal` runs on a thread of its own at the first signal.
fn on_signals(
    on_signal: impl FnOnce(i32) + Send + 'static,
) -> Result<signal_hook::iterator::Handle, ExitCode> {
    let mut signals = match signal_hook::iterator::Signals::new([libc::SIGTERM, libc::SIGINT]) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("nnaccel-sim: cannot install signal handlers: {e}");
            return Err(ExitCode::FAILURE);
        }
    };
    let handle = signals.handle();
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            on_signal(sig);
        }
    });
    Ok(handle)
}

/// Serves the device through `server` until SIGTERM/SIGINT (or until the kernel ends the
/// session), then releases every open file. One lifecycle for both frontends.
fn serve<F: Frontend>(dev: Arc<SimDevice>, path: &Path, server: io::Result<F>) -> ExitCode {
    let mut server = match server {
        Ok(s) => s,
        Err(e) => {
            eprintln!(
                "nnaccel-sim: cannot serve {} ({}): {e}",
                path.display(),
                F::NAME
            );
            return ExitCode::FAILURE;
        }
    };
    let stop = server.stopper();
    let path_shown = path.display().to_string();
    let handle = match on_signals(move |sig| {
        tracing::info!("signal {sig}: stopping {path_shown}");
        if let Err(e) = stop() {
            tracing::error!("stopping failed: {e}");
            std::process::exit(1);
        }
    }) {
        Ok(h) => h,
        Err(code) => return code,
    };
    // Said only now that the device can be opened: FUSE has mounted, and CUSE's init reply
    // has been written (the kernel then has registered the character device as well as made
    // the node). Tests, and anyone else waiting for the device, take this line as the sign
    // that it is ready.
    tracing::info!(
        "serving {} ({}), engine waits with {:?}",
        path.display(),
        F::NAME,
        dev.core().wait_mode
    );
    let result = server.run();
    handle.close();
    dev.release_all();
    // Give in-flight replies a moment to drain before the process goes.
    std::thread::sleep(Duration::from_millis(10));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nnaccel-sim: {} session ended with an error: {e}", F::NAME);
            ExitCode::FAILURE
        }
    }
}
