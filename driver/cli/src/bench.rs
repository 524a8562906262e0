//! `nnaccelctl bench`.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use nnaccel_hal::{ErrorStatus, MeasureTiming, Model};
use nnaccel_protocol::modelfile::InputValue;

use crate::exec::{self, PooledRequest, known_size};
use crate::model::{self, LoadedModel};
use crate::{CliError, Outcome, backend};

/// Untimed executions before the timed ones.
const WARMUP: u32 = 3;

/// Zero-filled inputs at the model's input dimensions (a TFLite model's state inputs: their
/// initial values).
fn zero_inputs(loaded: &LoadedModel) -> Result<Vec<InputValue>, CliError> {
    let model = &loaded.model;
    let user = loaded
        .user_inputs()
        .into_iter()
        .map(|k| {
            let idx = model.input_indexes.get(k).copied().unwrap_or(u32::MAX);
            let o = model.operands.get(idx as usize).ok_or_else(|| {
                CliError(format!(
                    "model input {k} names operand {idx}, which does not exist"
                ))
            })?;
            let size = known_size(o.operand_type, &o.dimensions).ok_or_else(|| {
                CliError(format!(
                    "model input {k} (operand {idx}) has dimensions {:?} with unknown extents; \
                     give --inputs",
                    o.dimensions
                ))
            })?;
            // Checked before anything is allocated: the dimensions are the model file's.
            if size > exec::MAX_REQUEST_BYTES {
                return Err(exec::too_large(
                    &format!(
                        "model input {k} (operand {idx}, {} {:?})",
                        o.operand_type, o.dimensions
                    ),
                    size,
                ));
            }
            let size = size as usize;
            Ok(InputValue {
                bytes: vec![0; size],
                element_count: size / o.operand_type.element_size(),
                dimensions: Vec::new(),
                has_no_value: false,
            })
        })
        .collect::<Result<Vec<_>, CliError>>()?;
    Ok(loaded.with_state(user))
}

use nnaccel_protocol::bench::percentile;

fn us(d: Duration) -> String {
    format!("{:.1} us", d.as_secs_f64() * 1e6)
}

/// `nnaccelctl bench`.
pub fn bench(
    model_path: &Path,
    inputs_path: Option<&Path>,
    iterations: u32,
    device: Option<PathBuf>,
    cpu: bool,
    service: Option<PathBuf>,
    threads: Option<u32>,
) -> Result<Outcome, CliError> {
    let loaded = model::load(model_path)?;
    let model = &loaded.model;
    let inputs = match inputs_path {
        Some(p) => loaded.load_inputs(p)?,
        None => zero_inputs(&loaded)?,
    };
    exec::check_request_fits(model, &inputs)?;
    let selected = backend::select_with_threads(device, cpu, service, threads)?;
    println!("backend: {}", selected.describe());
    println!("threads: {}", selected.threads_label(threads));
    let prepared = match exec::prepare(&*selected.driver, model) {
        Ok(p) => p,
        Err(status) => {
            println!("status: {} (preparing the model)", status.name());
            eprintln!(
                "nnaccelctl: preparing the model failed with {}{}",
                status.name(),
                selected
                    .refusal_reason(model)
                    .map(|w| format!(": {w}"))
                    .unwrap_or_default()
            );
            return Ok(Outcome::Failed);
        }
    };
    // One run sizes outputs with unknown extents.
    let first = exec::execute(&*prepared, model, &inputs, MeasureTiming::No)?;
    if first.result.status != ErrorStatus::None {
        println!("status: {} (executing)", first.result.status.name());
        eprintln!(
            "nnaccelctl: the execution failed with {}",
            first.result.status.name()
        );
        return Ok(Outcome::Failed);
    }
    let sizes: Vec<u64> = first.outputs.iter().map(|o| o.bytes.len() as u64).collect();
    // State variables: each execution reads what the one before wrote, starting with the
    // sizing run's.
    let mut inputs = inputs;
    for s in &loaded.state {
        if let (Some(i), Some(o)) = (inputs.get_mut(s.input), first.outputs.get(s.output)) {
            if i.bytes.len() == o.bytes.len() {
                i.bytes.clone_from(&o.bytes);
            }
        }
    }
    let req = PooledRequest::new(model, &inputs, Some(&sizes))?;
    let carry_state = || -> Result<(), CliError> {
        for s in &loaded.state {
            req.carry(s.output, s.input)?;
        }
        Ok(())
    };
    println!(
        "model: {} ({}, {}), {iterations} iterations after {WARMUP} warm-up",
        model_path.display(),
        loaded.summary(),
        if prepared.runs_on_device() {
            "on the device"
        } else {
            "on the CPU executor"
        }
    );
    for _ in 0..WARMUP {
        prepared.execute_synchronously(&req.request, MeasureTiming::No, None);
        carry_state()?;
    }
    let bar = if std::io::stderr().is_terminal() {
        let bar = ProgressBar::new(u64::from(iterations));
        if let Ok(style) =
            ProgressStyle::with_template("{bar:40} {pos}/{len} executions ({per_sec}, eta {eta})")
        {
            bar.set_style(style);
        }
        bar
    } else {
        ProgressBar::hidden()
    };
    let mut latencies = Vec::with_capacity(iterations as usize);
    let mut on_device = Vec::with_capacity(iterations as usize);
    let start = Instant::now();
    for _ in 0..iterations {
        let t = Instant::now();
        let r = prepared.execute_synchronously(&req.request, MeasureTiming::Yes, None);
        latencies.push(t.elapsed());
        if r.status != ErrorStatus::None {
            bar.abandon();
            println!("status: {} (executing)", r.status.name());
            eprintln!("nnaccelctl: an execution failed with {}", r.status.name());
            return Ok(Outcome::Failed);
        }
        if r.timing.time_on_device_us != u64::MAX {
            on_device.push(Duration::from_micros(r.timing.time_on_device_us));
        }
        carry_state()?;
        bar.inc(1);
    }
    let total = start.elapsed();
    bar.finish_and_clear();
    latencies.sort();
    on_device.sort();
    println!(
        "throughput: {:.1} executions/s",
        f64::from(iterations) / total.as_secs_f64().max(1e-9)
    );
    println!(
        "latency: p50 {}, p90 {}, p99 {} (min {}, max {})",
        us(percentile(&latencies, 0.50)),
        us(percentile(&latencies, 0.90)),
        us(percentile(&latencies, 0.99)),
        us(latencies.first().copied().unwrap_or_default()),
        us(latencies.last().copied().unwrap_or_default()),
    );
    if !on_device.is_empty() {
        println!(
            "reported time on device: p50 {}, p99 {}",
            us(percentile(&on_device, 0.50)),
            us(percentile(&on_device, 0.99))
        );
    }
    Ok(Outcome::Ok)
}

/// The hidden subcommand a load process of `bench --burst --load N` runs (`nnaccelctl
/// busy-loop --parent PID`).
pub const BUSY_LOOP: &str = "busy-loop";

/// Most load processes `--load` starts.
pub const MAX_LOAD: u32 = 64;

/// `nnaccelctl busy-loop --parent PID`: spins on the CPU until killed or until its parent
/// (`PID`) is gone. `bench --burst --load N` starts N of these beside the bench.
pub fn busy_loop(parent: u32) -> Outcome {
    let mut x = 0u64;
    loop {
        for _ in 0..1 << 22 {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        // Besides the parent-death signal the bench sets (see `Load::start`): a loop whose
        // parent went before that signal was armed still ends.
        // SAFETY: getppid has no preconditions.
        if u32::try_from(unsafe { libc::getppid() }).ok() != Some(parent) {
            return Outcome::Ok;
        }
    }
}

/// Busy-looping child processes beside a bench: killed and reaped when dropped (the bench
/// ending, failing, or returning early with an error). Each also gets SIGKILL from the kernel
/// when the bench dies (`PR_SET_PDEATHSIG`: killed by a signal, Ctrl-C), and then init reaps
/// it.
struct Load(Vec<std::process::Child>);

impl Load {
    /// Starts `n` processes of this binary's hidden `busy-loop` subcommand.
    fn start(n: u32) -> Result<Self, CliError> {
        use std::os::unix::process::CommandExt;
        use std::process::{Command, Stdio};
        let exe = std::env::current_exe()
            .map_err(|e| CliError(format!("--load: cannot find this program to start: {e}")))?;
        let parent = std::process::id();
        let mut load = Load(Vec::with_capacity(n as usize));
        for _ in 0..n {
            let mut cmd = Command::new(&exe);
            cmd.args([BUSY_LOOP, "--parent", &parent.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let arm = move || -> std::io::Result<()> {
                // SAFETY: PR_SET_PDEATHSIG with a valid signal number touches no memory.
                if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The bench died before the signal was armed: do not start.
                // SAFETY: getppid has no preconditions.
                if u32::try_from(unsafe { libc::getppid() }).ok() != Some(parent) {
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            };
            // SAFETY: `arm` runs in the child between fork and exec and calls only prctl and
            // getppid, which are async-signal-safe, and builds io::Errors from raw errnos,
            // which does not allocate.
            unsafe { cmd.pre_exec(arm) };
            // On failure `load` is dropped: the processes started so far are killed.
            let child = cmd.spawn().map_err(|e| {
                CliError(format!(
                    "--load: cannot start a busy-looping process ({}): {e}",
                    exe.display()
                ))
            })?;
            load.0.push(child);
        }
        Ok(load)
    }

    fn pids(&self) -> String {
        self.0
            .iter()
            .map(|c| c.id().to_string())
            .collect::<Vec<_>>()
            .join(" ")
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `nnaccelctl bench --burst`: regular executions against bursts (`nnaccel_protocol::bench`),
/// on an idle machine and then, with `load` > 0, beside that many busy-looping processes.
#[allow(clippy::too_many_arguments)]
pub fn bench_burst(
    model_path: Option<&Path>,
    iterations: u32,
    device: Option<PathBuf>,
    cpu: bool,
    service: Option<PathBuf>,
    threads: Option<u32>,
    load: u32,
) -> Result<Outcome, CliError> {
    let selected = backend::select_with_threads(device, cpu, service, threads)?;
    println!("backend: {}", selected.describe());
    println!("threads: {}", selected.threads_label(threads));
    let models = match model_path {
        Some(p) => vec![(p.display().to_string(), model::load(p)?.model)],
        None => vec![
            (
                "tiny: ADD of 4 floats".to_string(),
                nnaccel_protocol::bench::tiny_model().map_err(CliError)?,
            ),
            (
                "medium: FULLY_CONNECTED 256x256".to_string(),
                nnaccel_protocol::bench::medium_model().map_err(CliError)?,
            ),
        ],
    };
    if load == 0 {
        return burst_series(&*selected.driver, &models, iterations);
    }
    println!("=== idle");
    if burst_series(&*selected.driver, &models, iterations)? == Outcome::Failed {
        return Ok(Outcome::Failed);
    }
    let hogs = Load::start(load)?;
    println!(
        "=== loaded: {load} busy-looping process{} beside the bench (pid {})",
        if load == 1 { "" } else { "es" },
        hogs.pids()
    );
    // Let them reach their loops before the first timed series.
    std::thread::sleep(Duration::from_millis(100));
    let outcome = burst_series(&*selected.driver, &models, iterations)?;
    drop(hogs);
    println!(
        "load stopped: {load} busy-looping process{} killed and reaped",
        if load == 1 { "" } else { "es" }
    );
    Ok(outcome)
}

/// The burst comparison of each model, printed.
fn burst_series(
    driver: &dyn nnaccel_hal::HalDevice,
    models: &[(String, Model)],
    iterations: u32,
) -> Result<Outcome, CliError> {
    for (label, model) in models {
        match nnaccel_protocol::bench::run(driver, label, model, iterations) {
            Ok(lines) => {
                for l in lines {
                    println!("{l}");
                }
            }
            Err(e) => {
                println!("status: failed ({e})");
                eprintln!("nnaccelctl: {e}");
                return Ok(Outcome::Failed);
            }
        }
    }
    Ok(Outcome::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let d: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        assert_eq!(percentile(&d, 0.5), Duration::from_micros(50));
        assert_eq!(percentile(&d, 0.9), Duration::from_micros(90));
        assert_eq!(percentile(&d, 0.99), Duration::from_micros(99));
        assert_eq!(percentile(&d[..1], 0.99), Duration::from_micros(1));
        assert_eq!(percentile(&[], 0.5), Duration::ZERO);
    }
}
