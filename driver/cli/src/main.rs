//! `nnaccelctl`: run, inspect and benchmark models on an nnaccel device (or the CPU executor).
//!
//! Exit status: 0 on success; 1 when the driver answers an ErrorStatus other than NONE
//! (preparing or executing); 2 when nothing could be run: bad arguments, an unreadable,
//! oversized or malformed model or inputs file, a model too large for one request, a device
//! that cannot be opened or is not an nnaccel device.

/// Tensors and packed weights on cache lines (nnaccel_cpu::CacheAligned says why).
#[global_allocator]
static ALLOCATOR: nnaccel_cpu::CacheAligned = nnaccel_cpu::CacheAligned;

mod backend;
mod bench;
mod cache;
mod exec;
mod import;
mod info;
mod model;
mod npz;
mod run;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

/// A failure before anything ran: printed on stderr, exit status 2.
#[derive(Debug)]
pub struct CliError(pub String);

impl<E: std::fmt::Display> From<E> for CliError {
    fn from(e: E) -> Self {
        CliError(e.to_string())
    }
}

/// What a command achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Everything succeeded (exit 0).
    Ok,
    /// The driver answered an ErrorStatus other than NONE (exit 1).
    Failed,
}

const AFTER_HELP: &str = "\
Device choice: --device PATH opens that device node; --cpu runs on the CPU executor only;
otherwise /dev/nnaccel is used if it exists, else the embedded default: the simulated device,
in-process.

Model files: JSON (docs/model-format.md), or TensorFlow Lite flatbuffers (.tflite, recognised
by their TFL3 file identifier, see docs/tflite.md). Inputs files: JSON, or NumPy .npz/.npy
arrays (see run --help). A JSON model and every inputs file must be a regular file of at most
64 MiB (a FIFO, a device such as /dev/zero or a directory is refused before anything is read),
and a key may appear only once in a JSON object; a .tflite must be a regular file of at most
8 GiB (its constants may follow the flatbuffer). One request (inputs and output buffers together)
is at most 256 MiB: a model whose shapes need more is refused before anything is allocated.
A --device that does not answer as an nnaccel device (GET_PARAM, API version) is an error,
never a silent fall back to the CPU executor.

Exit status: 0 success; 1 the driver answered an ErrorStatus other than NONE (the status is
printed); 2 nothing ran: bad arguments, an unreadable, oversized or malformed model or inputs
file, a model too large for one request, or a device node that cannot be opened or is not an
nnaccel device. Whatever the input, nnaccelctl ends with one of these, never a panic or abort.";

/// Run, inspect and benchmark NN HAL models on an nnaccel device.
#[derive(Debug, Parser)]
#[command(name = "nnaccelctl", version, after_help = AFTER_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Which backend executes.
#[derive(Debug, Args, Clone)]
struct DeviceArgs {
    /// Use the device node at PATH (e.g. /dev/nnaccel, or a file served by nnaccel-sim).
    #[arg(long, value_name = "PATH", conflicts_with = "cpu")]
    device: Option<PathBuf>,
    /// Use the CPU executor only, no device.
    #[arg(long)]
    cpu: bool,
    /// Use the nnaccel-hald service listening at PATH. Without --service, --device or --cpu,
    /// the service at /run/nnaccel/hal.sock is used when that socket exists.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["cpu", "device"])]
    service: Option<PathBuf>,
}

/// The CPU executor's thread count for this process.
#[derive(Debug, Args, Clone, Copy)]
struct ThreadArgs {
    /// Threads one operation of the CPU executor may use (1 to 64), for the executors in this
    /// process: --cpu, the embedded simulated device, and CPU fallback next to a --device
    /// (a device node served by another process, such as nnaccel-sim, keeps its own count).
    /// Refused when the model would run in the service (--service, or its socket found by
    /// default): set `threads` in its hald.toml (or nnaccel-hald --threads) instead.
    /// [default: $NNACCEL_CPU_THREADS, else the number of CPUs available]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=nnaccel_cpu::MAX_THREADS as i64))]
    threads: Option<u32>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Prepare a model, execute it once on the given inputs and print its outputs.
    #[command(after_help = run::AFTER_HELP)]
    Run {
        /// The model file: JSON (model format version 1 or 2) or a .tflite flatbuffer.
        model: PathBuf,
        /// The inputs file: JSON ({"inputs": [[...], ...], "inputDimensions": [[...], ...]}),
        /// an .npz archive (arrays named by input tensor name, or arr_0, arr_1, ...) or an .npy.
        #[arg(long, value_name = "INPUTS.json|.npz")]
        inputs: PathBuf,
        /// Also write the outputs to this .npz archive (arrays named by output tensor name
        /// for a .tflite model, arr_0, arr_1, ... for a JSON model); replaces an existing file.
        #[arg(long, value_name = "OUTPUTS.npz")]
        outputs: Option<PathBuf>,
        /// Print one JSON object (status, outputs, timing) instead of a table.
        #[arg(long)]
        json: bool,
        /// Measure timing (time on device, time in driver) and print it in the table; the
        /// --json object always carries measured timing.
        #[arg(long)]
        measure: bool,
        /// Compilation cache directory: prepare from the cache files of this model and
        /// device there when they are valid, else prepare fully and save them (files named
        /// from the token, mode 0600). See docs/caching.md.
        #[arg(long, value_name = "DIR")]
        cache_dir: Option<PathBuf>,
        #[command(flatten)]
        device: DeviceArgs,
        #[command(flatten)]
        threads: ThreadArgs,
    },
    /// Show the device, its parameters and capabilities, the operations the driver runs, and,
    /// given a model, where each of its operations would run.
    Info {
        /// A model file (JSON or .tflite) to show per-operation placement for (device / cpu /
        /// unsupported); for a .tflite, per TFLite node the NNAPI operations it became.
        model: Option<PathBuf>,
        /// Print only the operation coverage table (every NNAPI operation type × tensor
        /// operand type: supported by the CPU executor, and executed by its unit tests) and
        /// open no device; the table of docs/operations.md.
        #[arg(long, conflicts_with = "model")]
        ops: bool,
        /// With --ops: the table as Markdown, as in docs/operations.md.
        #[arg(long, requires = "ops")]
        markdown: bool,
        #[command(flatten)]
        device: DeviceArgs,
    },
    /// Prepare a model once and execute it repeatedly: executions per second and latency
    /// percentiles (p50/p90/p99), with a progress bar on a terminal.
    Bench {
        /// The model file, JSON or .tflite (optional with --burst).
        #[arg(required_unless_present = "burst")]
        model: Option<PathBuf>,
        /// The inputs file (JSON, .npz or .npy, as for run); without it every input is
        /// zero-filled (which needs the model's input dimensions fully specified). A .tflite
        /// model's state variables start from their initial values, and each execution's
        /// new values feed the next.
        #[arg(long, value_name = "INPUTS.json|.npz")]
        inputs: Option<PathBuf>,
        /// Timed executions (after a few untimed warm-up runs).
        #[arg(long, short = 'n', default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
        iterations: u32,
        #[command(flatten)]
        device: DeviceArgs,
        /// Compare bursts with regular executions (p50/p99 of regular execution, a burst with
        /// polling window 0 and one with the default window, and the ratios); without MODEL,
        /// on a tiny model (one ADD of 4 floats) and a medium one (FULLY_CONNECTED 256x256).
        #[arg(long)]
        burst: bool,
        /// With --burst: run the comparison idle, then again beside N busy-looping processes
        /// this command starts (copies of itself, one CPU-bound loop each), and print both;
        /// the processes are killed and reaped when the bench ends, fails or is interrupted.
        /// 0: idle only.
        #[arg(long, value_name = "N", default_value_t = 0, requires = "burst",
              value_parser = clap::value_parser!(u32).range(0..=i64::from(bench::MAX_LOAD)))]
        load: u32,
        #[command(flatten)]
        threads: ThreadArgs,
    },
    /// The load process of `bench --burst --load N` (not for direct use): spins on one CPU
    /// until killed or until the process PARENT is gone.
    #[command(name = bench::BUSY_LOOP, hide = true)]
    BusyLoop {
        /// The bench that started it.
        #[arg(long)]
        parent: u32,
    },
    /// Convert a .tflite model to an nnaccel JSON model file (the NN HAL model `run` would
    /// prepare), printing which model input and output each TFLite tensor became.
    #[command(after_help = import::AFTER_HELP)]
    Import {
        /// The .tflite file.
        model: PathBuf,
        /// The JSON model file to write.
        #[arg(short = 'o', long = "output", value_name = "MODEL.json")]
        output: PathBuf,
        /// Replace OUTPUT if it exists (without it, an existing file is an error).
        #[arg(long)]
        force: bool,
    },
    /// List or clear the service's driver-managed compilation cache.
    #[command(after_help = cache::AFTER_HELP)]
    Cache {
        /// What to do.
        #[arg(value_enum, default_value_t = cache::Action::List)]
        action: cache::Action,
        /// Use the nnaccel-hald service listening at PATH. [default: /run/nnaccel/hal.sock]
        #[arg(long, value_name = "PATH", conflicts_with = "state_dir")]
        service: Option<PathBuf>,
        /// Work on the driver-managed cache in this state directory directly, without a
        /// service (e.g. /var/lib/nnaccel while the service is stopped).
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
    },
}

fn dispatch(cli: Cli) -> Result<Outcome, CliError> {
    match cli.command {
        Command::Run {
            model,
            inputs,
            outputs,
            json,
            measure,
            cache_dir,
            device,
            threads,
        } => run::run(&run::RunArgs {
            model,
            inputs,
            outputs,
            json,
            measure,
            cache_dir,
            device: device.device,
            cpu: device.cpu,
            service: device.service,
            threads: threads.threads,
        }),
        Command::Info {
            ops: true,
            markdown,
            ..
        } => Ok(info::operations(markdown)),
        Command::Info { model, device, .. } => {
            info::info(model.as_deref(), device.device, device.cpu, device.service)
        }
        Command::Bench {
            model,
            iterations,
            device,
            burst: true,
            threads,
            load,
            ..
        } => bench::bench_burst(
            model.as_deref(),
            iterations,
            device.device,
            device.cpu,
            device.service,
            threads.threads,
            load,
        ),
        Command::Bench {
            model,
            inputs,
            iterations,
            device,
            burst: false,
            threads,
            load: _,
        } => bench::bench(
            &model.ok_or_else(|| CliError("bench needs a model file".into()))?,
            inputs.as_deref(),
            iterations,
            device.device,
            device.cpu,
            device.service,
            threads.threads,
        ),
        Command::Import {
            model,
            output,
            force,
        } => import::import(&model, &output, force),
        Command::BusyLoop { parent } => Ok(bench::busy_loop(parent)),
        Command::Cache {
            action,
            service,
            state_dir,
        } => cache::cache(action, service, state_dir),
    }
}

fn main() -> ExitCode {
    // Like other Unix tools, end quietly when the reader of our output goes away
    // (`nnaccelctl info | head`) instead of failing on EPIPE.
    // SAFETY: restoring the default disposition of SIGPIPE before any thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = Cli::parse();
    match dispatch(cli) {
        Ok(Outcome::Ok) => ExitCode::SUCCESS,
        Ok(Outcome::Failed) => ExitCode::from(1),
        Err(CliError(msg)) => {
            eprintln!("nnaccelctl: {msg}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::error::ErrorKind;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("nnaccelctl").chain(args.iter().copied()))
    }

    /// `run ... --threads VALUE`: the count, or the usage error's kind and exit status.
    fn run_threads(value: &str) -> Result<Option<u32>, (ErrorKind, i32)> {
        match parse(&["run", "m.json", "--inputs", "i.json", "--threads", value]) {
            Ok(Cli {
                command: Command::Run { threads, .. },
            }) => Ok(threads.threads),
            Ok(other) => panic!("parsed as {other:?}"),
            Err(e) => Err((e.kind(), e.exit_code())),
        }
    }

    #[test]
    fn threads_accepts_one_to_max_threads() {
        assert_eq!(run_threads("1"), Ok(Some(1)));
        assert_eq!(run_threads("64"), Ok(Some(64)));
        assert_eq!(nnaccel_cpu::MAX_THREADS, 64);
    }

    #[test]
    fn threads_zero_too_many_or_junk_is_a_usage_error() {
        for (bad, kind) in [
            ("0", ErrorKind::ValueValidation),
            ("65", ErrorKind::ValueValidation),
            ("two", ErrorKind::ValueValidation),
            ("1.5", ErrorKind::ValueValidation),
            ("", ErrorKind::ValueValidation),
            // Taken for an option, as clap does with any leading '-'.
            ("-1", ErrorKind::UnknownArgument),
        ] {
            assert_eq!(run_threads(bad), Err((kind, 2)), "--threads {bad:?}");
        }
    }

    #[test]
    fn threads_is_an_option_of_run_and_bench_only() {
        let bench = parse(&["bench", "m.json", "--threads", "2"]);
        assert!(
            matches!(
                bench,
                Ok(Cli {
                    command: Command::Bench {
                        threads: ThreadArgs { threads: Some(2) },
                        ..
                    }
                })
            ),
            "{bench:?}"
        );
        let info = parse(&["info", "--threads", "2"]).err().map(|e| e.kind());
        assert_eq!(info, Some(ErrorKind::UnknownArgument));
    }
}
