//! Running a request on the device: pools imported as buffer objects, one job on the plan's
//! queue, the completion awaited while the device's liveness is watched.
//!
//! A job that reaches the client's deadline or the device timeout is cancelled (JOB_CANCEL)
//! before the execution answers: once the cancel returned, the device never writes that job's
//! outputs, so nothing writes the client's memory after the final reply (docs/uapi.md). An
//! overrunning job fails its own execution only; it never marks the device dead.

use super::*;

pub(super) fn run_on_device(
    plan: &DevicePlan,
    request: &Request,
    device_bos: &[Option<u32>],
    deadline: Option<Deadline>,
    mut burst: Option<BurstSlots<'_, '_>>,
) -> DeviceOutcome {
    let args = request
        .inputs
        .iter()
        .zip(&plan.inputs)
        .chain(request.outputs.iter().zip(&plan.outputs));
    for (arg, (dims, _, elem)) in args.clone() {
        if arg.has_no_value {
            return DeviceOutcome::Fallback("an omitted argument");
        }
        if !arg.dimensions.is_empty() && arg.dimensions != *dims {
            return DeviceOutcome::Fallback("request dimensions differ from the compiled ones");
        }
        if u64::from(arg.location.offset) % elem != 0 {
            return DeviceOutcome::Fallback("an argument is not aligned to its element size");
        }
    }
    // Too-small outputs are reported without running.
    let mut shapes = fixed_shapes(&plan.outputs);
    let mut insufficient = false;
    for ((arg, (_, bytes, _)), shape) in request
        .outputs
        .iter()
        .zip(&plan.outputs)
        .zip(shapes.iter_mut())
    {
        if argument_length(request, arg) < *bytes {
            shape.is_sufficient = false;
            insufficient = true;
        }
    }
    if insufficient {
        return DeviceOutcome::Done(ExecutionResult {
            status: ErrorStatus::OutputInsufficientSize,
            output_shapes: shapes,
            timing: Timing::NOT_MEASURED,
        });
    }
    let dev = &plan.device.dev;
    // Import the request's pools for this execution; memory-domain buffers are BOs already,
    // and a burst imports each slot once.
    let mut handles = Vec::with_capacity(request.pools.len());
    // BOs imported for this execution only; closed (dropped) after it.
    let mut imported: Vec<BufferObject> = Vec::with_capacity(request.pools.len());
    for (i, pool) in request.pools.iter().enumerate() {
        if let Some(bo) = device_bos.get(i).copied().flatten() {
            handles.push(bo);
            continue;
        }
        if let Some(h) = burst.as_ref().and_then(|(c, slots)| c.bo(slots.get(i))) {
            handles.push(h);
            continue;
        }
        let MemoryPool::Memory(mem) = pool else {
            return DeviceOutcome::Fallback("a token pool");
        };
        match import_pool(dev, mem) {
            Ok(bo) => {
                handles.push(bo.handle());
                let unkept = match burst.as_mut() {
                    Some((c, slots)) => c.keep_bo(&plan.device, slots.get(i), bo),
                    None => Some(bo),
                };
                imported.extend(unkept);
            }
            Err(e) => {
                // This request's pool, not the device: only a failed health probe ends the
                // device (note_error asks one).
                plan.device.note_error(&e);
                drop(imported);
                return if mem.kind == MemoryKind::HardwareBuffer {
                    DeviceOutcome::Done(ExecutionResult::failure(ErrorStatus::GeneralFailure))
                } else {
                    DeviceOutcome::Fallback("the device could not import a pool")
                };
            }
        }
    }
    let mut job = Job {
        program: plan.program.handle(),
        num_bindings: (plan.inputs.len() + plan.outputs.len()) as u32,
        ..Job::default()
    };
    let all_args = request
        .inputs
        .iter()
        .zip(&plan.inputs)
        .chain(request.outputs.iter().zip(&plan.outputs));
    for (slot, (arg, (_, bytes, _))) in job.bindings.iter_mut().zip(all_args) {
        *slot = Binding {
            bo: handles[arg.location.pool_index as usize],
            flags: 0,
            offset: u64::from(arg.location.offset),
            length: *bytes,
        };
    }
    let queue = match burst {
        Some((c, _)) => c.queue(plan),
        None => &plan.queue,
    };
    let outcome = {
        let mut q = queue.lock().unwrap_or_else(PoisonError::into_inner);
        submit_and_wait(&plan.device, &mut q, &job, deadline)
    };
    drop(imported);
    match outcome {
        Ok(c) if c.status == 0 => DeviceOutcome::Done(ExecutionResult {
            status: ErrorStatus::None,
            output_shapes: shapes,
            timing: Timing {
                time_on_device_us: c.device_time_ns / 1000,
                time_in_driver_us: 0,
            },
        }),
        Ok(_) if deadline.is_some_and(|d| Instant::now() >= d) => DeviceOutcome::Done(
            ExecutionResult::failure(ErrorStatus::MissedDeadlineTransient),
        ),
        Ok(c) => {
            tracing::debug!("device job failed with status {}", c.status);
            DeviceOutcome::Done(ExecutionResult::failure(ErrorStatus::GeneralFailure))
        }
        Err(RingError::TimedOut(_)) if deadline.is_some() => DeviceOutcome::Done(
            ExecutionResult::failure(ErrorStatus::MissedDeadlineTransient),
        ),
        // The job outlasted the device timeout: it was cancelled and fenced. It fails alone;
        // the device stays in service, and the job is not re-run on the CPU.
        Err(RingError::TimedOut(_) | RingError::Device(libc::ETIMEDOUT)) => {
            tracing::warn!(
                "a device job overran the device timeout ({:?}); cancelled, this execution fails",
                device_timeout()
            );
            DeviceOutcome::Done(ExecutionResult::failure(ErrorStatus::GeneralFailure))
        }
        Err(e) => {
            tracing::warn!(
                "device execution failed ({e}); this request falls back to the CPU executor"
            );
            plan.device.note_error(&io::Error::other(e.to_string()));
            DeviceOutcome::Fallback("the device job failed")
        }
    }
}

/// Imports a request pool as a BO for one execution (or a burst's slot): readable, and
/// writable unless an `mmap_fd` lacks `PROT_WRITE`.
pub(super) fn import_pool(dev: &Arc<dyn Device>, mem: &Memory) -> io::Result<BufferObject> {
    let (offset, access) = match mem.kind {
        MemoryKind::MmapFd { offset, prot } => (
            offset,
            if prot & libc::PROT_WRITE != 0 {
                BO_ACCESS_READ | BO_ACCESS_WRITE
            } else {
                BO_ACCESS_READ
            },
        ),
        _ => (0, BO_ACCESS_READ | BO_ACCESS_WRITE),
    };
    BufferObject::import(dev.clone(), mem.fd.as_fd(), offset, pool_size(mem), access)
}

/// How long one futex sleep lasts before the driver checks that the device still answers.
pub(super) const LIVENESS_SLICE: Duration = Duration::from_millis(200);

/// Names the device timeout in milliseconds, overriding [`DEVICE_TIMEOUT`] (tests, slow
/// machines); read once per process.
pub(crate) const DEVICE_TIMEOUT_ENV: &str = "NNACCEL_DEVICE_TIMEOUT_MS";

/// How long one device job may run before the driver cancels it: [`DEVICE_TIMEOUT`], or
/// [`DEVICE_TIMEOUT_ENV`] when set to a positive number of milliseconds.
pub(super) fn device_timeout() -> Duration {
    static TIMEOUT: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *TIMEOUT.get_or_init(|| match std::env::var(DEVICE_TIMEOUT_ENV) {
        Err(_) => DEVICE_TIMEOUT,
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(ms) if ms > 0 => Duration::from_millis(ms),
            _ => {
                tracing::warn!(
                    "{DEVICE_TIMEOUT_ENV}={v:?} is not a positive number; using {DEVICE_TIMEOUT:?}"
                );
                DEVICE_TIMEOUT
            }
        },
    })
}

/// Submits `job` and waits for it. The wait sleeps in slices of [`LIVENESS_SLICE`] and asks
/// the device for a parameter between slices, so a device that dies mid-job (its process
/// killed, its node closed) is noticed within a slice rather than at the device timeout.
///
/// At the client's deadline or the device timeout the job is cancelled and fenced (see
/// [`fence`]) before this returns, so the caller may answer the client at once. The job also
/// carries the device timeout as its own `timeout_ns`, so the device ends it even if this
/// process dies.
pub(super) fn submit_and_wait(
    device: &DeviceHandle,
    q: &mut DeviceQueue,
    job: &Job,
    deadline: Option<Deadline>,
) -> Result<nnaccel_uapi::abi::Completion, RingError> {
    if let Some(seq) = q.abandoned.take() {
        // Fenced already: its completion comes soon, and frees its place in the ring.
        match wait_watching_device(device, q, seq, None) {
            Err(RingError::TimedOut(s)) => {
                q.abandoned = Some(s);
                return Err(RingError::Device(libc::ETIMEDOUT));
            }
            other => {
                other?;
            }
        }
    }
    let mut job = *job;
    if device.info.capabilities & nnaccel_uapi::abi::CAP_JOB_CANCEL != 0 {
        job.timeout_ns = nnaccel_uapi::sys::deadline_after(device_timeout());
    }
    let seq = q.ring.submit(&job)?;
    match wait_watching_device(device, q, seq, deadline) {
        Err(RingError::TimedOut(s)) => {
            if fence(device, q, s)? {
                // Reap it before the next submission; the ring keeps one window of jobs.
                q.abandoned = Some(s);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                Err(RingError::TimedOut(s))
            } else {
                Err(RingError::Device(libc::ETIMEDOUT))
            }
        }
        other => other,
    }
}

/// Ends job `seq` so that the device never writes its outputs again: JOB_CANCEL, which returns
/// only once the job is fenced (`EALREADY`: it ended by itself). A device without JOB_CANCEL
/// is waited on for one more device timeout instead. Returns whether the job's completion is
/// still to be reaped.
fn fence(device: &DeviceHandle, q: &mut DeviceQueue, seq: u64) -> Result<bool, RingError> {
    let e = match device.dev.job_cancel(q.ring.id(), seq) {
        Ok(_) => return Ok(true),
        Err(e) => e,
    };
    if is_device_gone(&e) {
        // A device that is gone writes nothing any more.
        return Err(RingError::Device(e.raw_os_error().unwrap_or(libc::ENODEV)));
    }
    tracing::warn!("the device cannot cancel job {seq} ({e}); waiting for it to end");
    match wait_watching_device(device, q, seq, None) {
        Ok(_) => Ok(false),
        Err(RingError::TimedOut(_)) => {
            // It neither ends nor can be cancelled: it may still write, so stop using the
            // device rather than answer while it can.
            device.alive.store(false, Ordering::SeqCst);
            Err(RingError::Device(libc::EIO))
        }
        Err(e) => Err(e),
    }
}

pub(super) fn wait_watching_device(
    device: &DeviceHandle,
    q: &mut DeviceQueue,
    seq: u64,
    deadline: Option<Deadline>,
) -> Result<nnaccel_uapi::abi::Completion, RingError> {
    let give_up = Instant::now() + device_timeout();
    let end = deadline.map_or(give_up, |d| d.min(give_up));
    let mut spin = WAIT_SPIN;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        let slice = left.min(LIVENESS_SLICE);
        match q
            .ring
            .wait(seq, spin, Some(nnaccel_uapi::sys::deadline_after(slice)))
        {
            Err(RingError::TimedOut(s)) if slice < left => {
                if let Err(e) = device.dev.get_param(nnaccel_uapi::abi::PARAM_API_VERSION) {
                    device.probe_failed(&e);
                    if is_device_gone(&e) {
                        return Err(RingError::Device(e.raw_os_error().unwrap_or(libc::ENODEV)));
                    }
                }
                tracing::trace!("job {s} still running after a liveness slice");
                spin = Duration::ZERO;
            }
            other => return other,
        }
    }
}

/// The byte length of a request argument. In a hardware_buffer pool, offset 0 and length 0
/// name the whole buffer (REFERENCE.md §3).
pub(super) fn argument_length(request: &Request, arg: &RequestArgument) -> u64 {
    let length = u64::from(arg.location.length);
    if length != 0 {
        return length;
    }
    match request.pools.get(arg.location.pool_index as usize) {
        Some(MemoryPool::Memory(mem)) if mem.kind == MemoryKind::HardwareBuffer => {
            pool_size(mem).saturating_sub(u64::from(arg.location.offset))
        }
        _ => 0,
    }
}

/// A pool's size; a hardware_buffer sent with size 0 is as large as its fd.
pub(super) fn pool_size(mem: &Memory) -> u64 {
    if mem.size == 0 {
        nnaccel_uapi::sys::fd_size(mem.fd.as_fd()).unwrap_or(0)
    } else {
        mem.size
    }
}
