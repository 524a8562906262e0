//! Running a request on the CPU executor: pools mapped (or taken from a burst's cache), inputs
//! copied in, outputs computed into the HAL's buffers and copied into their pools.

use super::*;

/// The CPU plan of a prepared model.
#[derive(Debug)]
pub(super) struct CpuPlan {
    pub(super) graph: PreparedGraph,
    pub(super) pools: Vec<MappedPool>,
}

impl CpuPlan {
    /// The plan of `graph`, converted from a model whose constant pools are `pools`. With
    /// `runs_here` (no device plan will run the model instead), the constants in constant
    /// pools are decoded and their GEMM weights packed now, from the pools' snapshots taken now
    /// rather than at the first execution: every execution passes that snapshot, so decoding
    /// and packing it once is exact. Without, the snapshot, the decoding and the packing are
    /// left to the executions (a fallback from the device), so that a model the device runs
    /// costs no second copy of its weights.
    pub(super) fn prepare(
        graph: Graph,
        pools: &[Memory],
        runs_here: bool,
    ) -> Result<Self, ErrorStatus> {
        let pools = pools
            .iter()
            .map(MappedPool::map_constants)
            .collect::<Result<Vec<_>, _>>()?;
        let snapshots = if runs_here {
            pools
                .iter()
                .map(MappedPool::constants)
                .collect::<Result<Vec<_>, _>>()?
        } else {
            Vec::new()
        };
        let graph = PreparedGraph::with_pools(graph, &snapshots).map_err(|e| {
            tracing::debug!("prepare: {e}");
            ErrorStatus::GeneralFailure
        })?;
        Ok(Self { graph, pools })
    }
}

/// How long a WHILE loop of this execution may run: NNAPI's default loop timeout, cut short by
/// the execution's deadline when that comes first (a loop that outlives either fails with
/// MISSED_DEADLINE_TRANSIENT rather than holding the caller).
fn loop_timeout(deadline: Option<Deadline>) -> Duration {
    let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
    left.map_or(nnaccel_cpu::DEFAULT_LOOP_TIMEOUT, |l| {
        l.min(nnaccel_cpu::DEFAULT_LOOP_TIMEOUT)
    })
}

/// The largest total of input bytes [`KeptInputs`] keeps on a thread between executions.
const KEPT_INPUT_BYTES: usize = 16 << 20;

thread_local! {
    static KEPT_INPUTS: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The buffers an execution copies its inputs into, one per input, taken from those the last
/// execution on this thread left (a new zeroed buffer per input was a memset of its size on
/// every execution: 0.5% of MobileNetV2 float32) and given back when dropped, up to
/// [`KEPT_INPUT_BYTES`] in all. A buffer is only read after the input's bytes were copied
/// over the whole of it, so nothing of one execution reaches another.
struct KeptInputs(Vec<Vec<u8>>);

impl KeptInputs {
    fn take(n: usize) -> KeptInputs {
        let mut v = KEPT_INPUTS
            .try_with(|k| std::mem::take(&mut *k.borrow_mut()))
            .unwrap_or_default();
        v.resize_with(n, Vec::new);
        KeptInputs(v)
    }
}

impl Drop for KeptInputs {
    fn drop(&mut self) {
        let bytes: usize = self.0.iter().map(Vec::capacity).sum();
        if bytes <= KEPT_INPUT_BYTES {
            // Not kept when the thread's storage is already gone (the thread is ending).
            let _ = KEPT_INPUTS.try_with(|k| *k.borrow_mut() = std::mem::take(&mut self.0));
        }
    }
}

/// Runs `request` on the CPU plan. `mapped[i]`, where given, is pool `i` already mapped (a
/// memory-domain buffer); the other pools are found in or added to `recent` (the prepared
/// model's last mapped pools), or, in a burst, mapped once per slot and kept in the burst's
/// cache. WHILE loops stop at [`loop_timeout`].
pub(super) fn run_on_cpu(
    plan: &CpuPlan,
    model: &Model,
    request: &Request,
    mapped: &[Option<&MappedPool>],
    recent: &RecentPools,
    deadline: Option<Deadline>,
    burst: Option<BurstSlots<'_, '_>>,
) -> ExecutionResult {
    let exec_start = Instant::now();
    let premapped = |i: usize| mapped.get(i).copied().flatten();
    let mut owned = Vec::with_capacity(request.pools.len());
    let mut cache = None;
    match burst {
        Some((c, slots)) => {
            if let Err(s) = c.map_slots(&request.pools, slots, |i| premapped(i).is_some()) {
                return ExecutionResult::failure(s);
            }
            cache = Some((&*c, slots));
        }
        None => {
            for (i, p) in request.pools.iter().enumerate() {
                let MemoryPool::Memory(mem) = p else {
                    return ExecutionResult::failure(ErrorStatus::InvalidArgument);
                };
                if premapped(i).is_some() {
                    owned.push(None);
                    continue;
                }
                match recent.map(mem) {
                    Ok(m) => owned.push(Some(m)),
                    Err(s) => return ExecutionResult::failure(s),
                }
            }
        }
    }
    let mut pools: Vec<&MappedPool> = Vec::with_capacity(request.pools.len());
    for i in 0..request.pools.len() {
        let pool = premapped(i)
            .or_else(|| owned.get(i).and_then(Option::as_deref))
            .or_else(|| cache.and_then(|(c, slots)| c.mapped(slots.get(i))));
        match pool {
            Some(p) => pools.push(p),
            None => return ExecutionResult::failure(ErrorStatus::GeneralFailure),
        }
    }
    for p in &pools {
        p.begin_access(true);
    }
    let end_access = |pools: &[&MappedPool], wrote: bool| {
        for p in pools {
            p.end_access(wrote);
        }
    };
    // Input bytes: copied out of the pools into buffers of our own, as the client may write
    // its pools at any time and the executor checks values before it uses them.
    let mut kept = KeptInputs::take(request.inputs.len());
    for (arg, buf) in request.inputs.iter().zip(kept.0.iter_mut()) {
        if arg.has_no_value {
            buf.clear();
            continue;
        }
        let loc = &arg.location;
        // Only bytes past the kept length are cleared (none when the length repeats); the
        // read overwrites all of them.
        buf.resize(loc.length as usize, 0);
        if let Err(s) = pools[loc.pool_index as usize].read_into(loc.offset as usize, buf) {
            end_access(&pools, false);
            return ExecutionResult::failure(s);
        }
    }
    let input_bytes = &kept.0;
    let mut inputs = Vec::with_capacity(request.inputs.len());
    for ((arg, &k), data) in request
        .inputs
        .iter()
        .zip(&model.input_indexes)
        .zip(input_bytes)
    {
        if arg.has_no_value {
            inputs.push(InputArg::NoValue);
            continue;
        }
        let dims =
            match combined_dimensions(&model.operands[k as usize].dimensions, &arg.dimensions) {
                Ok(d) => d,
                Err(_) => {
                    end_access(&pools, false);
                    return ExecutionResult::failure(ErrorStatus::InvalidArgument);
                }
            };
        inputs.push(InputArg::Value {
            data,
            dimensions: dims,
        });
    }
    // Outputs are computed into private buffers, then copied: two outputs (or an output and
    // an input) may share a pool, and the client may touch it concurrently.
    let mut out_bufs: Vec<Vec<u8>> = request
        .outputs
        .iter()
        .map(|a| vec![0u8; a.location.length as usize])
        .collect();
    // Constants: each pool's private snapshot (`MappedPool::constants` says why and when).
    let model_pools: Vec<&[u8]> = plan
        .pools
        .iter()
        .map(|p| p.constants().unwrap_or_default())
        .collect();
    let result = {
        let mut outs: Vec<&mut [u8]> = out_bufs.iter_mut().map(Vec::as_mut_slice).collect();
        plan.graph.execute_with_loop_timeout(
            &model_pools,
            &inputs,
            &mut outs,
            loop_timeout(deadline),
        )
    };
    let exec_us = u64::try_from(exec_start.elapsed().as_micros()).unwrap_or(u64::MAX);
    let status = match result {
        Ok(shapes) => {
            for (arg, buf) in request.outputs.iter().zip(&out_bufs) {
                if arg.has_no_value {
                    continue;
                }
                let pool = &pools[arg.location.pool_index as usize];
                if let Err(s) = pool.write(arg.location.offset as usize, buf) {
                    for p in &pools {
                        p.end_access(false);
                    }
                    return ExecutionResult::failure(s);
                }
            }
            for p in &pools {
                p.end_access(true);
            }
            return ExecutionResult {
                status: ErrorStatus::None,
                output_shapes: shapes
                    .into_iter()
                    .map(|s| OutputShape {
                        dimensions: s.dimensions,
                        is_sufficient: s.is_sufficient,
                    })
                    .collect(),
                timing: Timing {
                    time_on_device_us: exec_us,
                    time_in_driver_us: 0,
                },
            };
        }
        Err(ExecError::OutputInsufficientSize(shapes)) => {
            for p in &pools {
                p.end_access(false);
            }
            return ExecutionResult {
                status: ErrorStatus::OutputInsufficientSize,
                output_shapes: shapes
                    .into_iter()
                    .map(|s| OutputShape {
                        dimensions: s.dimensions,
                        is_sufficient: s.is_sufficient,
                    })
                    .collect(),
                timing: Timing::NOT_MEASURED,
            };
        }
        Err(ExecError::InvalidArgument(m)) => {
            tracing::debug!("execution: {m}");
            ErrorStatus::InvalidArgument
        }
        Err(ExecError::Failed(m)) => {
            tracing::debug!("execution: {m}");
            ErrorStatus::GeneralFailure
        }
        Err(ExecError::LoopTimeout(m)) => {
            tracing::debug!("execution: {m}");
            ErrorStatus::MissedDeadlineTransient
        }
    };
    for p in &pools {
        p.end_access(false);
    }
    ExecutionResult::failure(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_inputs_come_back_to_the_next_execution_on_the_thread() {
        let mut first = KeptInputs::take(2);
        first.0[0].resize(1000, 7);
        first.0[1].resize(10, 7);
        let at = first.0[0].as_ptr();
        drop(first);
        let again = KeptInputs::take(3);
        assert_eq!(again.0.len(), 3);
        assert_eq!(
            again.0[0].as_ptr(),
            at,
            "the first buffer is the same allocation"
        );
        assert_eq!(
            (again.0[0].len(), again.0[1].len(), again.0[2].len()),
            (1000, 10, 0)
        );
    }

    #[test]
    fn kept_inputs_larger_than_the_limit_are_freed() {
        let mut big = KeptInputs::take(1);
        big.0[0].resize(KEPT_INPUT_BYTES + 1, 0);
        drop(big);
        let next = KeptInputs::take(1);
        assert_eq!(next.0[0].capacity(), 0, "a buffer over the limit was kept");
    }
}
