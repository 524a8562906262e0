//! Partitioned execution: a model part on the device, part on the CPU executor, in one
//! execution.
//!
//! Placement per operation ([`settle`]) starts from what each operation can run on (the device,
//! probed per operation signature, or the CPU executor) and then applies the part rules:
//!
//! - operations are taken in execution order (`nnaccel_cpu::execution_order`) and split into
//!   maximal runs of the same placement; each run is one *part*;
//! - a device run between two CPU runs that holds no heavy operation ([`is_heavy`]:
//!   convolutions, fully connected, recurrent) goes to the CPU: its two part switches (two
//!   job round trips and the crossing copies) cost more than the cheap operations save, and
//!   the three parts merge into one CPU part;
//! - a device run needing more than `MAX_BINDINGS` inputs and outputs goes to the CPU (one
//!   job binds at most that many);
//! - every operand crossing between parts must have a fixed shape (a device part's operands
//!   always do, the per-operation probe needs it); when a CPU-to-CPU crossing across a device
//!   part has a dynamic shape the whole model goes to the CPU.
//!
//! The rules repeat until nothing moves. A [`PartitionPlan`] holds one device program or
//! CPU graph per part, each over a sub-model whose inputs are the model inputs and crossing
//! operands it reads and whose outputs are the model outputs it makes and the crossing
//! operands later parts read. Crossing operands that are not model outputs live in an
//! *arena*: a memfd the device imports once as a BO and the CPU maps once, kept with the
//! prepared model and reused (one per concurrent execution). A model output a later part
//! reads is read back from the client's output buffer, not copied.

use super::*;

/// Operations that make a device part worth its part switches.
pub(super) fn is_heavy(op: nnaccel_cpu::OperationType) -> bool {
    use nnaccel_cpu::OperationType as T;
    matches!(
        op,
        T::Conv2d
            | T::DepthwiseConv2d
            | T::GroupedConv2d
            | T::TransposeConv2d
            | T::FullyConnected
            | T::Lstm
            | T::Rnn
            | T::Svdf
            | T::BidirectionalSequenceLstm
            | T::BidirectionalSequenceRnn
            | T::UnidirectionalSequenceLstm
            | T::UnidirectionalSequenceRnn
            | T::Quantized16bitLstm
            | T::QuantizedLstm
    )
}

/// Whether operation `index` names a subgraph (IF, WHILE): device programs carry none.
pub(super) fn reads_subgraph(graph: &Graph, index: usize) -> bool {
    graph.operations.get(index).is_some_and(|op| {
        op.inputs.iter().any(|&k| {
            matches!(
                graph.operands.get(k as usize).map(|o| &o.lifetime),
                Some(Lifetime::Subgraph { .. })
            )
        })
    })
}

/// The execution order of `graph`'s operations (None when there is none: a cycle).
fn order_of(graph: &Graph) -> Option<Vec<usize>> {
    nnaccel_cpu::execution_order(
        graph.operands.len(),
        graph
            .operations
            .iter()
            .map(|o| (o.inputs.as_slice(), o.outputs.as_slice())),
    )
    .ok()
}

/// One part: operations (in execution order) of one placement, and the operands it reads
/// from outside it and makes for outside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Run {
    pub(super) placement: Placement,
    pub(super) ops: Vec<usize>,
    /// Non-constant operands read but not made here: model inputs and earlier parts' outputs.
    pub(super) inputs: Vec<u32>,
    /// Operands made here that the model outputs or a later part reads.
    pub(super) outputs: Vec<u32>,
}

/// Splits the operations, in `order`, into maximal runs of the same placement.
pub(super) fn runs(graph: &Graph, order: &[usize], placement: &[Placement]) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    for &i in order {
        let p = placement.get(i).copied().unwrap_or(Placement::Unsupported);
        match runs.last_mut() {
            Some(r) if r.placement == p => r.ops.push(i),
            _ => runs.push(Run {
                placement: p,
                ops: vec![i],
                inputs: Vec::new(),
                outputs: Vec::new(),
            }),
        }
    }
    // Which run makes each operand.
    let mut maker: Vec<Option<usize>> = vec![None; graph.operands.len()];
    for (r, run) in runs.iter().enumerate() {
        for &i in &run.ops {
            for &k in &graph.operations[i].outputs {
                if let Some(m) = maker.get_mut(k as usize) {
                    *m = Some(r);
                }
            }
        }
    }
    let mut needed_outside: Vec<bool> = vec![false; graph.operands.len()];
    for &k in &graph.output_indexes {
        if let Some(n) = needed_outside.get_mut(k as usize) {
            *n = true;
        }
    }
    for (r, run) in runs.iter_mut().enumerate() {
        for &i in &run.ops {
            for &k in &graph.operations[i].inputs {
                let Some(o) = graph.operands.get(k as usize) else {
                    continue;
                };
                if o.is_constant()
                    || matches!(o.lifetime, Lifetime::NoValue | Lifetime::Subgraph { .. })
                {
                    continue;
                }
                let made_by = maker.get(k as usize).copied().flatten();
                if made_by != Some(r) {
                    if !run.inputs.contains(&k) {
                        run.inputs.push(k);
                    }
                    if let Some(n) = needed_outside.get_mut(k as usize) {
                        *n = true;
                    }
                }
            }
        }
    }
    for run in &mut runs {
        for &i in &run.ops {
            for &k in &graph.operations[i].outputs {
                if needed_outside.get(k as usize).copied().unwrap_or(false)
                    && !run.outputs.contains(&k)
                {
                    run.outputs.push(k);
                }
            }
        }
    }
    runs
}

fn fixed_shape(graph: &Graph, k: u32) -> bool {
    graph.operands.get(k as usize).is_some_and(|o| {
        fully_specified(&o.dimensions, o.ty.is_scalar()) && o.byte_size().is_some()
    })
}

/// Applies the part rules (module doc) to a per-operation placement, `base` saying for each
/// operation Device (the device runs it), Cpu or Unsupported. A placement with Unsupported
/// operations is returned as it is (the model does not prepare).
pub(super) fn settle(graph: &Graph, mut placement: Vec<Placement>) -> Vec<Placement> {
    if placement.contains(&Placement::Unsupported) || !placement.contains(&Placement::Device) {
        return placement;
    }
    let Some(order) = order_of(graph) else {
        return placement;
    };
    loop {
        let all = runs(graph, &order, &placement);
        let last = all.len().saturating_sub(1);
        // Demoting a device run only merges CPU runs, which changes no other device run's
        // standing, so every run the rules name moves in one pass.
        let demote: Vec<&Run> = all
            .iter()
            .enumerate()
            .filter(|(r, run)| {
                run.placement == Placement::Device
                    && (run.inputs.len() + run.outputs.len() > MAX_BINDINGS
                        || (*r > 0
                            && *r < last
                            && !run.ops.iter().any(|&i| is_heavy(graph.operations[i].op))))
            })
            .map(|(_, run)| run)
            .collect();
        for &i in demote.iter().flat_map(|run| &run.ops) {
            if let Some(p) = placement.get_mut(i) {
                *p = Placement::Cpu;
            }
        }
        if demote.is_empty() {
            let crossing_fixed = all
                .iter()
                .flat_map(|r| r.inputs.iter())
                .filter(|k| !graph.input_indexes.contains(k))
                .all(|&k| fixed_shape(graph, k));
            if !crossing_fixed {
                placement.iter_mut().for_each(|p| *p = Placement::Cpu);
            }
            return placement;
        }
    }
}

/// Where a part's input comes from.
#[derive(Debug, Clone, Copy)]
enum Source {
    /// Request input `j`.
    ModelInput(usize),
    /// Request output `j` (made by an earlier part), `length` bytes of it.
    ModelOutput(usize, u32),
    /// The arena, at `offset`, `length` bytes.
    Arena(u32, u32),
}

/// Where a part's output goes.
#[derive(Debug, Clone, Copy)]
enum Sink {
    /// Request output `j`.
    ModelOutput(usize),
    /// The arena, at `offset`, `length` bytes.
    Arena(u32, u32),
}

#[derive(Debug)]
enum PartPlan {
    Device(DevicePlan),
    Cpu(CpuPlan),
}

#[derive(Debug)]
struct Part {
    plan: PartPlan,
    /// The part's own model (its operations, its inputs and outputs).
    model: Model,
    inputs: Vec<Source>,
    outputs: Vec<Sink>,
}

/// Crossing operands that are not model outputs: a memfd the device imported and the CPU
/// mapped.
#[derive(Debug)]
struct Arena {
    memory: Memory,
    mapped: MappedPool,
    bo: BufferObject,
    device: Arc<DeviceHandle>,
}

impl Drop for Arena {
    fn drop(&mut self) {
        // A dead device is not called (it may hang): the BO goes with the device file.
        if !self.device.alive() {
            self.bo.disown();
        }
    }
}

/// BOs imported for one execution, closed when it ends (given up without a call when the
/// device is dead: it may hang).
struct ExecutionBos<'a> {
    device: &'a DeviceHandle,
    bos: Vec<BufferObject>,
}

impl Drop for ExecutionBos<'_> {
    fn drop(&mut self) {
        if !self.device.alive() {
            for bo in &mut self.bos {
                bo.disown();
            }
        }
    }
}

/// Alignment of each crossing operand in the arena.
const ARENA_ALIGN: u64 = 64;
/// The burst slot given to the arena: never looked up (its BO and mapping are passed in).
const ARENA_SLOT: i32 = i32::MIN;

/// A partitioned model's plan: its parts in execution order and the arenas they share.
#[derive(Debug)]
pub(super) struct PartitionPlan {
    pub(super) device: Arc<DeviceHandle>,
    parts: Vec<Part>,
    arena_size: u64,
    /// Arenas not in use; an execution takes one (or makes one) and gives it back.
    arenas: Mutex<Vec<Arena>>,
}

/// What a partitioned execution ended with.
pub(super) enum PartitionOutcome {
    Done(ExecutionResult),
    /// Run the whole model on the CPU plan instead.
    WholeCpu(&'static str),
}

/// The model of one part: its operations, the operands they name (renumbered), `inputs` as
/// inputs and `outputs` as outputs; constants stay constants.
fn sub_model(model: &Model, ops: &[usize], inputs: &[u32], outputs: &[u32]) -> Option<Model> {
    let mut remap: HashMap<u32, u32> = HashMap::new();
    let mut operands = Vec::new();
    let mut add = |k: u32, operands: &mut Vec<Operand>| -> Option<u32> {
        if let Some(n) = remap.get(&k) {
            return Some(*n);
        }
        let mut o = model.operands.get(k as usize)?.clone();
        if inputs.contains(&k) {
            o.lifetime = OperandLifetime::SubgraphInput;
            o.location = DataLocation::default();
        } else if outputs.contains(&k) {
            o.lifetime = OperandLifetime::SubgraphOutput;
            o.location = DataLocation::default();
        } else if matches!(
            o.lifetime,
            OperandLifetime::SubgraphInput | OperandLifetime::SubgraphOutput
        ) {
            // Not reached: a model input or output this part names is one of its inputs or
            // outputs. Were it not, it would be this part's own temporary.
            o.lifetime = OperandLifetime::TemporaryVariable;
        }
        let n = u32::try_from(operands.len()).ok()?;
        operands.push(o);
        remap.insert(k, n);
        Some(n)
    };
    let input_indexes = inputs
        .iter()
        .map(|&k| add(k, &mut operands))
        .collect::<Option<Vec<_>>>()?;
    let mut operations = Vec::with_capacity(ops.len());
    for &i in ops {
        let op = model.operations.get(i)?;
        operations.push(Operation {
            operation_type: op.operation_type,
            inputs: op
                .inputs
                .iter()
                .map(|&k| add(k, &mut operands))
                .collect::<Option<_>>()?,
            outputs: op
                .outputs
                .iter()
                .map(|&k| add(k, &mut operands))
                .collect::<Option<_>>()?,
        });
    }
    let output_indexes = outputs
        .iter()
        .map(|&k| add(k, &mut operands))
        .collect::<Option<Vec<_>>>()?;
    // A part carries only the constant bytes its own operands use, so a model cut into many
    // parts does not hold its constants once per part. Referenced subgraphs (IF and WHILE)
    // locate their constants in the whole model's bytes: a part naming one keeps them all.
    let names_subgraph = operands
        .iter()
        .any(|o| o.lifetime == OperandLifetime::Subgraph);
    let (operand_values, referenced) = if names_subgraph {
        (model.operand_values.clone(), model.referenced.clone())
    } else {
        let mut values = Vec::new();
        for o in operands
            .iter_mut()
            .filter(|o| o.lifetime == OperandLifetime::ConstantCopy)
        {
            let start = o.location.offset as usize;
            let bytes = model
                .operand_values
                .get(start..start.checked_add(o.location.length as usize)?)?;
            let at = values.len().next_multiple_of(PART_VALUE_ALIGN);
            values.resize(at, 0);
            values.extend_from_slice(bytes);
            o.location.offset = u32::try_from(at).ok()?;
        }
        (values, Vec::new())
    };
    Some(Model {
        operands,
        operations,
        input_indexes,
        output_indexes,
        operand_values,
        pools: model.pools.clone(),
        relax_computation_float32_to_float16: model.relax_computation_float32_to_float16,
        referenced,
    })
}

/// Alignment of each constant in a part's own `operand_values`, as the whole model's
/// converter places referenced subgraphs' constants.
const PART_VALUE_ALIGN: usize = 8;

impl PartitionPlan {
    /// The plan of `model` placed as `placement` (from [`settle`]), its device parts compiled
    /// on `d`. Ok(None) when the placement cannot be partitioned (the model then runs whole
    /// on the CPU); Err when the device refused a part.
    pub(super) fn build(
        d: &Arc<DeviceHandle>,
        model: &Model,
        graph: &Graph,
        placement: &[Placement],
    ) -> io::Result<Option<Self>> {
        let Some(order) = order_of(graph) else {
            return Ok(None);
        };
        let all = runs(graph, &order, placement);
        let position = |list: &[u32], k: u32| list.iter().position(|x| *x == k);
        // Every model output must be made by a part.
        let made: Vec<u32> = all.iter().flat_map(|r| r.outputs.iter().copied()).collect();
        if graph.output_indexes.iter().any(|k| !made.contains(k)) {
            return Ok(None);
        }
        // Arena offsets of crossing operands that are not model outputs.
        let mut arena: HashMap<u32, (u32, u32)> = HashMap::new();
        let mut size: u64 = 0;
        for run in &all {
            for &k in &run.outputs {
                if position(&graph.output_indexes, k).is_some() {
                    continue;
                }
                let Some(bytes) = graph.operands.get(k as usize).and_then(|o| o.byte_size()) else {
                    return Ok(None);
                };
                let (Ok(offset), Ok(length)) = (u32::try_from(size), u32::try_from(bytes)) else {
                    return Ok(None);
                };
                arena.insert(k, (offset, length));
                size = size
                    .saturating_add(bytes as u64)
                    .div_ceil(ARENA_ALIGN)
                    .saturating_mul(ARENA_ALIGN);
            }
        }
        if u32::try_from(size).is_err() {
            return Ok(None);
        }
        let mut parts = Vec::with_capacity(all.len());
        for run in &all {
            let mut inputs = Vec::with_capacity(run.inputs.len());
            for &k in &run.inputs {
                let source = if let Some(j) = position(&graph.input_indexes, k) {
                    Source::ModelInput(j)
                } else if let Some(j) = position(&graph.output_indexes, k) {
                    let Some(bytes) = graph.operands.get(k as usize).and_then(|o| o.byte_size())
                    else {
                        return Ok(None);
                    };
                    let Ok(length) = u32::try_from(bytes) else {
                        return Ok(None);
                    };
                    Source::ModelOutput(j, length)
                } else if let Some(&(offset, length)) = arena.get(&k) {
                    Source::Arena(offset, length)
                } else {
                    return Ok(None);
                };
                inputs.push(source);
            }
            let mut outputs = Vec::with_capacity(run.outputs.len());
            for &k in &run.outputs {
                let sink = if let Some(j) = position(&graph.output_indexes, k) {
                    Sink::ModelOutput(j)
                } else if let Some(&(offset, length)) = arena.get(&k) {
                    Sink::Arena(offset, length)
                } else {
                    return Ok(None);
                };
                outputs.push(sink);
            }
            let Some(sub) = sub_model(model, &run.ops, &run.inputs, &run.outputs) else {
                return Ok(None);
            };
            let sub_graph = model_to_graph(&sub);
            let plan = match run.placement {
                Placement::Device => PartPlan::Device(DevicePlan::compile(d, &sub, &sub_graph)?),
                Placement::Cpu => match CpuPlan::prepare(sub_graph, &sub.pools, true) {
                    Ok(plan) => PartPlan::Cpu(plan),
                    Err(_) => return Ok(None),
                },
                Placement::Unsupported => return Ok(None),
            };
            parts.push(Part {
                plan,
                model: sub,
                inputs,
                outputs,
            });
        }
        let plan = Self {
            device: d.clone(),
            parts,
            arena_size: size,
            arenas: Mutex::default(),
        };
        // One arena now, so the first execution pays no import.
        if size > 0 {
            let first = plan.new_arena()?;
            plan.give_back(first);
        }
        Ok(Some(plan))
    }

    /// How many parts, and how many of them run on the device.
    pub(super) fn counts(&self) -> (usize, usize) {
        (self.parts.len(), self.parts.len() - self.cpu_parts())
    }

    fn cpu_parts(&self) -> usize {
        self.parts
            .iter()
            .filter(|p| matches!(p.plan, PartPlan::Cpu(_)))
            .count()
    }

    fn new_arena(&self) -> io::Result<Arena> {
        let fd = nnaccel_uapi::sys::memfd_create(c"nnaccel-partition", self.arena_size)?;
        let memory = Memory {
            kind: MemoryKind::Ashmem,
            fd: Arc::new(fd),
            size: self.arena_size,
        };
        let mapped =
            MappedPool::map(&memory).map_err(|_| io::Error::from_raw_os_error(libc::ENOMEM))?;
        let bo = BufferObject::import(
            self.device.dev.clone(),
            memory.fd.as_fd(),
            0,
            self.arena_size,
            BO_ACCESS_READ | BO_ACCESS_WRITE,
        )?;
        Ok(Arena {
            memory,
            mapped,
            bo,
            device: self.device.clone(),
        })
    }

    fn take_arena(&self) -> io::Result<Option<Arena>> {
        if self.arena_size == 0 {
            return Ok(None);
        }
        let kept = self
            .arenas
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        match kept {
            Some(a) => Ok(Some(a)),
            None => self.new_arena().map(Some),
        }
    }

    fn give_back(&self, arena: Arena) {
        self.arenas
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(arena);
    }

    /// Runs the parts of a checked request in order. `device_bos` and `cpu_pools` are the
    /// request's memory-domain buffers (by pool), `burst` the burst's cache.
    pub(super) fn run(
        &self,
        bound: &BoundRequest,
        recent: &RecentPools,
        deadline: Option<Deadline>,
        burst: Option<BurstSlots<'_, '_>>,
    ) -> PartitionOutcome {
        if !self.device.alive() {
            return PartitionOutcome::WholeCpu("the device is gone");
        }
        let arena = match self.take_arena() {
            Ok(a) => a,
            Err(e) => {
                self.device.note_error(&e);
                return PartitionOutcome::WholeCpu("no crossing memory");
            }
        };
        let outcome = self.run_parts(bound, recent, arena.as_ref(), deadline, burst);
        if let Some(a) = arena {
            self.give_back(a);
        }
        outcome
    }

    fn run_parts(
        &self,
        bound: &BoundRequest,
        recent: &RecentPools,
        arena: Option<&Arena>,
        deadline: Option<Deadline>,
        mut burst: Option<BurstSlots<'_, '_>>,
    ) -> PartitionOutcome {
        let request = bound.request();
        let n = request.pools.len();
        let Ok(arena_pool) = u32::try_from(n) else {
            return PartitionOutcome::WholeCpu("too many pools");
        };
        // The request's pools and, last, the arena's.
        let mut pools = request.pools.clone();
        let mut bos = bound.device_bos();
        bos.resize(n, None);
        // Without a burst (whose cache imports each slot once) the request's pools are
        // imported once for all the device parts of this execution, and closed after it. A
        // pool that does not import is left to the device path, which answers for it.
        let device_parts = self.parts.len() - self.cpu_parts();
        let mut imported = ExecutionBos {
            device: &self.device,
            bos: Vec::new(),
        };
        if burst.is_none() && device_parts > 1 {
            for (pool, bo) in request.pools.iter().zip(bos.iter_mut()) {
                if let (MemoryPool::Memory(mem), None) = (pool, &bo)
                    && let Ok(b) = import_pool(&self.device.dev, mem)
                {
                    *bo = Some(b.handle());
                    imported.bos.push(b);
                }
            }
        }
        let mut maps = bound.cpu_pools();
        maps.resize(n, None);
        // Without a burst (whose cache maps each slot once) the request's pools are mapped
        // once for all the CPU parts of this execution, not once per part. A pool that does
        // not map is left to the CPU path, which answers for it.
        let cpu_parts = self.cpu_parts();
        let owned: Vec<Option<Arc<MappedPool>>> = if burst.is_none() && cpu_parts > 1 {
            request
                .pools
                .iter()
                .zip(&maps)
                .map(|(p, premapped)| match p {
                    MemoryPool::Memory(m) if premapped.is_none() => recent.map(m).ok(),
                    _ => None,
                })
                .collect()
        } else {
            Vec::new()
        };
        for (slot, m) in maps.iter_mut().zip(&owned) {
            if let Some(m) = m {
                *slot = Some(m);
            }
        }
        if let Some(a) = arena {
            pools.push(MemoryPool::Memory(a.memory.clone()));
            bos.push(Some(a.bo.handle()));
            maps.push(Some(&a.mapped));
        }
        let slots: Option<Vec<i32>> = burst.as_ref().map(|(_, s)| {
            let mut v = s.to_vec();
            if arena.is_some() {
                v.push(ARENA_SLOT);
            }
            v
        });
        let mut shapes: Vec<Option<OutputShape>> = vec![None; request.outputs.len()];
        let mut busy_us: u64 = 0;
        let mut sub = Request {
            inputs: Vec::new(),
            outputs: Vec::new(),
            pools,
        };
        for part in &self.parts {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return PartitionOutcome::Done(ExecutionResult::failure(
                    ErrorStatus::MissedDeadlineTransient,
                ));
            }
            let Some((inputs, outputs)) = part.arguments(request, arena_pool) else {
                return PartitionOutcome::Done(ExecutionResult::failure(
                    ErrorStatus::GeneralFailure,
                ));
            };
            sub.inputs = inputs;
            sub.outputs = outputs;
            let part_burst = match (reborrow(&mut burst), slots.as_deref()) {
                (Some((c, _)), Some(s)) => Some((c, s)),
                _ => None,
            };
            let r = match &part.plan {
                PartPlan::Device(plan) => {
                    match run_on_device(plan, &sub, &bos, deadline, part_burst) {
                        DeviceOutcome::Done(r) => r,
                        DeviceOutcome::Fallback(why) => return PartitionOutcome::WholeCpu(why),
                    }
                }
                PartPlan::Cpu(plan) => {
                    run_on_cpu(plan, &part.model, &sub, &maps, recent, deadline, part_burst)
                }
            };
            match r.status {
                ErrorStatus::None => {}
                // The parts after this one cannot run, so the shapes they would report are
                // unknown: the whole model on the CPU finds every output's shape.
                ErrorStatus::OutputInsufficientSize => {
                    return PartitionOutcome::WholeCpu("an output buffer is too small");
                }
                _ => return PartitionOutcome::Done(r),
            }
            busy_us = busy_us.saturating_add(r.timing.time_on_device_us);
            for (sink, shape) in part.outputs.iter().zip(r.output_shapes) {
                if let Sink::ModelOutput(j) = *sink
                    && let Some(s) = shapes.get_mut(j)
                {
                    *s = Some(shape);
                }
            }
        }
        match shapes.into_iter().collect::<Option<Vec<_>>>() {
            Some(output_shapes) => PartitionOutcome::Done(ExecutionResult {
                status: ErrorStatus::None,
                output_shapes,
                timing: Timing {
                    time_on_device_us: busy_us,
                    time_in_driver_us: 0,
                },
            }),
            None => PartitionOutcome::Done(ExecutionResult::failure(ErrorStatus::GeneralFailure)),
        }
    }
}

impl Part {
    /// The part's request arguments for `request`, the arena being pool `arena_pool`.
    fn arguments(
        &self,
        request: &Request,
        arena_pool: u32,
    ) -> Option<(Vec<RequestArgument>, Vec<RequestArgument>)> {
        let in_arena = |offset: u32, length: u32| RequestArgument {
            has_no_value: false,
            location: DataLocation {
                pool_index: arena_pool,
                offset,
                length,
                padding: 0,
            },
            dimensions: Vec::new(),
        };
        let inputs = self
            .inputs
            .iter()
            .map(|s| match *s {
                Source::ModelInput(j) => request.inputs.get(j).cloned(),
                Source::ModelOutput(j, length) => request.outputs.get(j).map(|a| RequestArgument {
                    has_no_value: false,
                    location: DataLocation {
                        length,
                        padding: 0,
                        ..a.location
                    },
                    dimensions: Vec::new(),
                }),
                Source::Arena(offset, length) => Some(in_arena(offset, length)),
            })
            .collect::<Option<Vec<_>>>()?;
        let outputs = self
            .outputs
            .iter()
            .map(|s| match *s {
                Sink::ModelOutput(j) => request.outputs.get(j).cloned(),
                Sink::Arena(offset, length) => Some(in_arena(offset, length)),
            })
            .collect::<Option<Vec<_>>>()?;
        Some((inputs, outputs))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU64};

    use nnaccel_kmod_sim::{Config, InprocFile, SimDevice};
    use nnaccel_uapi::ioctl::NNACCEL_IOCTL_BO_IMPORT;
    use nnaccel_uapi::sys::{self, Mapping};

    use super::*;

    /// The in-process device lacking MUL, with `faults`; told to die, its ioctls fail with
    /// ENOTCONN (like a killed FUSE server).
    #[derive(Debug)]
    struct LackingMul {
        inner: InprocFile,
        dead: AtomicBool,
        /// BO_IMPORT calls.
        imports: AtomicU64,
    }

    impl LackingMul {
        fn new() -> Arc<Self> {
            Self::with_faults(nnaccel_kmod_sim::Faults::default())
        }

        fn with_faults(faults: nnaccel_kmod_sim::Faults) -> Arc<Self> {
            let sim = SimDevice::new(Config {
                without_ops: vec![OperationType::Mul],
                faults,
                ..Config::default()
            })
            .unwrap();
            Arc::new(Self {
                inner: InprocFile::open(&sim),
                dead: AtomicBool::new(false),
                imports: AtomicU64::new(0),
            })
        }

        fn jobs(&self) -> u64 {
            self.inner
                .device()
                .core()
                .stats
                .jobs_completed
                .load(Ordering::SeqCst)
        }
    }

    impl Device for LackingMul {
        fn ioctl(&self, cmd: u32, arg: &mut [u8]) -> io::Result<()> {
            if cmd == NNACCEL_IOCTL_BO_IMPORT {
                self.imports.fetch_add(1, Ordering::SeqCst);
            }
            if self.dead.load(Ordering::SeqCst) {
                return Err(io::Error::from_raw_os_error(libc::ENOTCONN));
            }
            self.inner.ioctl(cmd, arg)
        }
    }

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// Builds float models: operands are added with their lifetime and, for constants, bytes.
    struct Builder(Model);

    impl Builder {
        fn new() -> Self {
            Self(Model::default())
        }

        /// A model with input `x` [1, 4], the constant `c` = [1, 2, 3, 4] ([1, 4]) and the
        /// activation NONE: (builder, x, c, none).
        fn with_input() -> (Self, u32, u32, u32) {
            let mut m = Self::new();
            let x = m.operand(&[1, 4], OperandLifetime::SubgraphInput);
            let c = m.constant(
                OperandType::TensorFloat32,
                &[1, 4],
                &f32_bytes(&[1.0, 2.0, 3.0, 4.0]),
            );
            let none = m.constant(OperandType::Int32, &[], &0i32.to_le_bytes());
            (m, x, c, none)
        }

        fn operand(&mut self, dims: &[u32], lifetime: OperandLifetime) -> u32 {
            self.0.operands.push(Operand {
                operand_type: OperandType::TensorFloat32,
                dimensions: dims.to_vec(),
                scale: 0.0,
                zero_point: 0,
                lifetime,
                location: DataLocation::default(),
                extra_params: None,
            });
            (self.0.operands.len() - 1) as u32
        }

        fn constant(&mut self, ty: OperandType, dims: &[u32], bytes: &[u8]) -> u32 {
            let k = self.operand(dims, OperandLifetime::ConstantCopy);
            let offset = self.0.operand_values.len() as u32;
            self.0.operand_values.extend_from_slice(bytes);
            let o = &mut self.0.operands[k as usize];
            o.operand_type = ty;
            o.location = DataLocation {
                pool_index: 0,
                offset,
                length: bytes.len() as u32,
                padding: 0,
            };
            k
        }

        /// The model, with these inputs and outputs.
        fn finish(mut self, inputs: &[u32], outputs: &[u32]) -> Model {
            self.0.input_indexes = inputs.to_vec();
            self.0.output_indexes = outputs.to_vec();
            self.0
        }

        fn op(&mut self, ty: OperationType, inputs: &[u32], output: u32) {
            self.0.operations.push(Operation {
                operation_type: ty,
                inputs: inputs.to_vec(),
                outputs: vec![output],
            });
        }
    }

    /// One memfd pool for a request; `args` are (offset, length) of the inputs, then outputs.
    struct Io {
        memory: Memory,
        map: Mapping,
    }

    impl Io {
        fn new() -> Self {
            let fd = sys::memfd_create(c"partition-unit", 4096).unwrap();
            let map = Mapping::map_shared(fd.as_fd(), 0, 4096, true).unwrap();
            Self {
                memory: Memory {
                    kind: MemoryKind::Ashmem,
                    fd: Arc::new(fd),
                    size: 4096,
                },
                map,
            }
        }

        fn write(&self, offset: usize, v: &[f32]) {
            self.map.write_at(offset, &f32_bytes(v)).unwrap();
        }

        fn read(&self, offset: usize, n: usize) -> Vec<f32> {
            let mut b = vec![0u8; n * 4];
            self.map.read_at(offset, &mut b).unwrap();
            b.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        }

        fn request(&self, inputs: &[(u32, u32)], outputs: &[(u32, u32)]) -> Request {
            let arg = |&(offset, length): &(u32, u32)| RequestArgument {
                has_no_value: false,
                location: DataLocation {
                    pool_index: 0,
                    offset,
                    length,
                    padding: 0,
                },
                dimensions: vec![],
            };
            Request {
                inputs: inputs.iter().map(arg).collect(),
                outputs: outputs.iter().map(arg).collect(),
                pools: vec![MemoryPool::Memory(self.memory.clone())],
            }
        }
    }

    /// `model` prepared on a new device lacking MUL, its placement checked to be `expected`.
    fn placed(model: &Model, expected: &[Placement]) -> (Arc<LackingMul>, PreparedModel) {
        let dev = LackingMul::new();
        let driver = Driver::new(Backend::Device(dev.clone()));
        assert_eq!(driver.operation_placement(model).unwrap(), expected);
        (dev, prepare(&driver, model))
    }

    /// Executes `pm` (one [1, 4] input, one [1, 4] output) on `x`: the result and the output.
    fn run_one(pm: &PreparedModel, x: &[f32]) -> (ExecutionResult, Vec<f32>) {
        let io = Io::new();
        io.write(0, x);
        let r = pm.execute_synchronously(
            &io.request(&[(0, 16)], &[(64, 16)]),
            MeasureTiming::No,
            None,
        );
        (r, io.read(64, 4))
    }

    /// [`run_one`] that must succeed: the output and how many jobs the device ran.
    fn run_counting(dev: &LackingMul, pm: &PreparedModel, x: &[f32]) -> (Vec<f32>, u64) {
        let before = dev.jobs();
        let (r, out) = run_one(pm, x);
        assert_eq!(r.status, ErrorStatus::None);
        (out, dev.jobs() - before)
    }

    fn prepare(driver: &Driver, model: &Model) -> PreparedModel {
        driver
            .prepare_model_uncached(
                model,
                ExecutionPreference::FastSingleAnswer,
                Priority::Medium,
                None,
            )
            .unwrap()
    }

    /// `MUL(x, c) -> FULLY_CONNECTED(w, b) -> MUL(d)`: x [1, 4], w [2, 4], output [1, 2].
    fn mul_fc_mul() -> Model {
        let (mut m, x, c, none) = Builder::with_input();
        let t1 = m.operand(&[1, 4], OperandLifetime::TemporaryVariable);
        m.op(OperationType::Mul, &[x, c, none], t1);
        let w = m.constant(
            OperandType::TensorFloat32,
            &[2, 4],
            &f32_bytes(&[1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0]),
        );
        let b = m.constant(OperandType::TensorFloat32, &[2], &f32_bytes(&[0.5, -1.0]));
        let t2 = m.operand(&[1, 2], OperandLifetime::TemporaryVariable);
        m.op(OperationType::FullyConnected, &[t1, w, b, none], t2);
        let d = m.constant(OperandType::TensorFloat32, &[1, 2], &f32_bytes(&[2.0, 3.0]));
        let out = m.operand(&[1, 2], OperandLifetime::SubgraphOutput);
        m.op(OperationType::Mul, &[t2, d, none], out);
        m.finish(&[x], &[out])
    }

    #[test]
    fn a_part_carries_only_the_constant_bytes_its_operations_use() {
        let m = mul_fc_mul();
        // Operands: x 0, c 1, none 2, t1 3, w 4, b 5, t2 6, d 7, out 8. The FULLY_CONNECTED
        // part reads w (32 bytes), b (8) and none (4), not c or d: 44 of the model's 68 bytes.
        assert_eq!(m.operand_values.len(), 68);
        let part = sub_model(&m, &[1], &[3], &[6]).expect("a part");
        assert_eq!(part.operand_values.len(), 44);
        let bytes_of = |o: &Operand| {
            let at = o.location.offset as usize;
            part.operand_values[at..at + o.location.length as usize].to_vec()
        };
        let w = &part.operands[part.operations[0].inputs[1] as usize];
        assert_eq!(
            bytes_of(w),
            f32_bytes(&[1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0])
        );
        let b = &part.operands[part.operations[0].inputs[2] as usize];
        assert_eq!(bytes_of(b), f32_bytes(&[0.5, -1.0]));
        crate::validate::validate_model(&part).expect("the part is a valid model");
    }

    #[test]
    fn a_heavy_device_run_between_cpu_parts_stays_on_the_device() {
        let (dev, pm) = placed(
            &mul_fc_mul(),
            &[Placement::Cpu, Placement::Device, Placement::Cpu],
        );
        assert_eq!(pm.partition_counts(), Some((3, 1)));
        let io = Io::new();
        io.write(0, &[1.0, 2.0, 3.0, 4.0]);
        let before = dev.jobs();
        let r =
            pm.execute_synchronously(&io.request(&[(0, 16)], &[(64, 8)]), MeasureTiming::No, None);
        assert_eq!(r.status, ErrorStatus::None);
        assert_eq!(dev.jobs(), before + 1);
        // x * c = [1, 4, 9, 16]; FC: [1 + 0.5, 4 + 9 + 16 - 1] = [1.5, 28]; * [2, 3].
        assert_eq!(io.read(64, 2), vec![3.0, 84.0]);
        assert_eq!(r.output_shapes[0].dimensions, vec![1, 2]);
    }

    /// `t = ADD(x, c)` is output 0 and feeds `MUL(t, c)`, output 1.
    fn output_read_by_a_later_part() -> Model {
        let (mut m, x, c, none) = Builder::with_input();
        let t = m.operand(&[1, 4], OperandLifetime::SubgraphOutput);
        m.op(OperationType::Add, &[x, c, none], t);
        let out = m.operand(&[1, 4], OperandLifetime::SubgraphOutput);
        m.op(OperationType::Mul, &[t, c, none], out);
        m.finish(&[x], &[t, out])
    }

    #[test]
    fn a_model_output_a_later_part_reads_is_read_back_from_the_clients_buffer() {
        let (_dev, pm) = placed(
            &output_read_by_a_later_part(),
            &[Placement::Device, Placement::Cpu],
        );
        assert_eq!(pm.partition_counts(), Some((2, 1)));
        assert_eq!(
            pm.inner.partition.as_ref().unwrap().arena_size,
            0,
            "no arena needed"
        );
        let io = Io::new();
        io.write(0, &[1.0, 2.0, 3.0, 4.0]);
        let request = io.request(&[(0, 16)], &[(64, 16), (128, 16)]);
        let r = pm.execute_synchronously(&request, MeasureTiming::No, None);
        assert_eq!(r.status, ErrorStatus::None);
        // t = x + c = [2, 4, 6, 8]; t * c = [2, 8, 18, 32].
        assert_eq!(io.read(64, 4), vec![2.0, 4.0, 6.0, 8.0]);
        assert_eq!(io.read(128, 4), vec![2.0, 8.0, 18.0, 32.0]);
        assert_eq!(r.output_shapes.len(), 2);
    }

    /// `ADD -> MUL -> ADD` over x [1, 4] with c = [1, 2, 3, 4].
    fn add_mul_add() -> Model {
        let (mut m, x, c, none) = Builder::with_input();
        let t1 = m.operand(&[1, 4], OperandLifetime::TemporaryVariable);
        m.op(OperationType::Add, &[x, c, none], t1);
        let t2 = m.operand(&[1, 4], OperandLifetime::TemporaryVariable);
        m.op(OperationType::Mul, &[t1, c, none], t2);
        let out = m.operand(&[1, 4], OperandLifetime::SubgraphOutput);
        m.op(OperationType::Add, &[t2, c, none], out);
        m.finish(&[x], &[out])
    }

    #[test]
    fn the_device_dying_mid_execution_leaves_the_result_right() {
        // Every job takes 300 ms; the device dies as soon as the first part's job completes,
        // so the last part's job is watched by a dead device's liveness probe.
        let dev = LackingMul::with_faults(nnaccel_kmod_sim::Faults {
            delay_job_ms: 300,
            ..Default::default()
        });
        let driver = Driver::new(Backend::Device(dev.clone()));
        let pm = prepare(&driver, &add_mul_add());
        assert_eq!(pm.partition_counts(), Some((3, 2)));
        let before = dev.jobs();
        let killer = {
            let dev = dev.clone();
            std::thread::spawn(move || {
                let limit = Instant::now() + Duration::from_secs(10);
                while dev.jobs() == before && Instant::now() < limit {
                    std::thread::sleep(Duration::from_millis(1));
                }
                dev.dead.store(true, Ordering::SeqCst);
            })
        };
        let (r, out) = run_one(&pm, &[1.0, 2.0, 3.0, 4.0]);
        killer.join().unwrap();
        assert_eq!(r.status, ErrorStatus::None);
        // (x + c) * c + c = [3, 10, 21, 36].
        assert_eq!(out, vec![3.0, 10.0, 21.0, 36.0]);
        assert!(!pm.is_partitioned());
        assert!(!pm.runs_on_device());
    }

    #[test]
    fn concurrent_executions_each_get_an_arena() {
        let dev = LackingMul::new();
        let driver = Driver::new(Backend::Device(dev));
        let pm = prepare(&driver, &add_mul_add());
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let pm = pm.clone();
                std::thread::spawn(move || {
                    let io = Io::new();
                    for i in 0..25 {
                        let x = (t * 100 + i) as f32;
                        io.write(0, &[x; 4]);
                        let r = pm.execute_synchronously(
                            &io.request(&[(0, 16)], &[(64, 16)]),
                            MeasureTiming::No,
                            None,
                        );
                        assert_eq!(r.status, ErrorStatus::None);
                        let want: Vec<f32> = [1.0f32, 2.0, 3.0, 4.0]
                            .iter()
                            .map(|c| (x + c) * c + c)
                            .collect();
                        assert_eq!(io.read(64, 4), want, "thread {t}, execution {i}");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let arenas = pm
            .inner
            .partition
            .as_ref()
            .unwrap()
            .arenas
            .lock()
            .unwrap()
            .len();
        assert!((1..=4).contains(&arenas), "{arenas} arenas kept");
    }

    #[test]
    fn an_operation_naming_a_subgraph_is_not_for_the_device() {
        let mut model = add_mul_add();
        assert!(!reads_subgraph(&model_to_graph(&model), 0));
        // The activation operand, retyped as a SUBGRAPH reference (what IF and WHILE read).
        model.operands[2].lifetime = OperandLifetime::Subgraph;
        assert!(reads_subgraph(&model_to_graph(&model), 0));
    }

    #[test]
    fn a_device_run_with_more_bindings_than_a_job_has_goes_to_the_cpu() {
        // MUL(x_i, c) for 40 inputs (CPU), then one ADD per product (device candidates, one
        // run of 40 operations reading 40 crossing tensors and making 40 outputs).
        let mut m = Builder::new();
        let c = m.constant(OperandType::TensorFloat32, &[1], &f32_bytes(&[2.0]));
        let none = m.constant(OperandType::Int32, &[], &0i32.to_le_bytes());
        let mut products = Vec::new();
        for _ in 0..40 {
            let x = m.operand(&[1], OperandLifetime::SubgraphInput);
            m.0.input_indexes.push(x);
            let p = m.operand(&[1], OperandLifetime::TemporaryVariable);
            m.op(OperationType::Mul, &[x, c, none], p);
            products.push(p);
        }
        for p in products {
            let out = m.operand(&[1], OperandLifetime::SubgraphOutput);
            m.0.output_indexes.push(out);
            m.op(OperationType::Add, &[p, c, none], out);
        }
        let graph = model_to_graph(&m.0);
        let base: Vec<Placement> =
            m.0.operations
                .iter()
                .map(|o| {
                    if o.operation_type == OperationType::Mul {
                        Placement::Cpu
                    } else {
                        Placement::Device
                    }
                })
                .collect();
        assert_eq!(settle(&graph, base), vec![Placement::Cpu; 80]);
    }

    #[test]
    fn a_partitioned_model_loaded_from_the_cache_is_partitioned_again() {
        let dev = LackingMul::new();
        let driver = Driver::new(Backend::Device(dev.clone()));
        let model = add_mul_add();
        // The cache records "on the device" for a partitioned model (`runs_on_device`).
        assert!(prepare(&driver, &model).runs_on_device());
        let pm = driver
            .prepare_from_parts(&model, true, ExecutionPreference::FastSingleAnswer)
            .unwrap();
        assert_eq!(pm.partition_counts(), Some((3, 2)));
        let (out, jobs) = run_counting(&dev, &pm, &[0.0; 4]);
        assert_eq!(jobs, 2);
        // (0 + c) * c + c = [2, 6, 12, 20].
        assert_eq!(out, vec![2.0, 6.0, 12.0, 20.0]);
    }

    #[test]
    fn a_tensor_read_by_two_later_parts_crosses_through_the_arena_once() {
        // t1 = x + c (device), t2 = t1 * c (CPU), out = t2 + t1 (device): t1 skips a part.
        let (mut m, x, c, none) = Builder::with_input();
        let t1 = m.operand(&[1, 4], OperandLifetime::TemporaryVariable);
        m.op(OperationType::Add, &[x, c, none], t1);
        let t2 = m.operand(&[1, 4], OperandLifetime::TemporaryVariable);
        m.op(OperationType::Mul, &[t1, c, none], t2);
        let out = m.operand(&[1, 4], OperandLifetime::SubgraphOutput);
        m.op(OperationType::Add, &[t2, t1, none], out);
        let model = m.finish(&[x], &[out]);
        let graph = model_to_graph(&model);
        let placement = [Placement::Device, Placement::Cpu, Placement::Device];
        let parts = runs(&graph, &[0, 1, 2], &placement);
        assert_eq!(parts.len(), 3);
        assert_eq!(
            (parts[0].inputs.clone(), parts[0].outputs.clone()),
            (vec![x], vec![t1])
        );
        assert_eq!(
            (parts[1].inputs.clone(), parts[1].outputs.clone()),
            (vec![t1], vec![t2])
        );
        assert_eq!(
            (parts[2].inputs.clone(), parts[2].outputs.clone()),
            (vec![t2, t1], vec![out])
        );
        let (dev, pm) = placed(&model, &placement);
        // t1 and t2 in the arena, each 16 bytes at a 64-byte step.
        assert_eq!(pm.inner.partition.as_ref().unwrap().arena_size, 128);
        let (out, jobs) = run_counting(&dev, &pm, &[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(jobs, 2);
        // t1 = [2, 4, 6, 8]; t2 = t1 * c = [2, 8, 18, 32]; t2 + t1 = [4, 12, 24, 40].
        assert_eq!(out, vec![4.0, 12.0, 24.0, 40.0]);
    }

    #[test]
    fn every_cheap_interior_device_run_goes_to_the_cpu_and_the_ends_stay() {
        // v = op(v, c) for ADD, MUL, ADD, MUL, ADD on a device lacking MUL.
        let (mut m, x, c, none) = Builder::with_input();
        let mut v = x;
        let ops = [
            OperationType::Add,
            OperationType::Mul,
            OperationType::Add,
            OperationType::Mul,
            OperationType::Add,
        ];
        for (k, op) in ops.iter().enumerate() {
            let lifetime = if k + 1 == ops.len() {
                OperandLifetime::SubgraphOutput
            } else {
                OperandLifetime::TemporaryVariable
            };
            let out = m.operand(&[1, 4], lifetime);
            m.op(*op, &[v, c, none], out);
            v = out;
        }
        let model = m.finish(&[x], &[v]);
        let dev = LackingMul::new();
        let driver = Driver::new(Backend::Device(dev));
        use Placement::{Cpu, Device};
        assert_eq!(
            driver.operation_placement(&model).unwrap(),
            vec![Device, Cpu, Cpu, Cpu, Device]
        );
        let pm = prepare(&driver, &model);
        assert_eq!(pm.partition_counts(), Some((3, 2)));
        let (r, out) = run_one(&pm, &[0.0, 1.0, -1.0, 0.5]);
        assert_eq!(r.status, ErrorStatus::None);
        // ((((x + c) * c + c) * c) + c), by hand for x = [0, 1, -1, 0.5], c = [1, 2, 3, 4]:
        // x + c = [1, 3, 2, 4.5]; * c = [1, 6, 6, 18]; + c = [2, 8, 9, 22];
        // * c = [2, 16, 27, 88]; + c = [3, 18, 30, 92].
        assert_eq!(out, vec![3.0, 18.0, 30.0, 92.0]);
    }

    #[test]
    fn a_request_pool_is_imported_once_for_all_device_parts() {
        let dev = LackingMul::new();
        let driver = Driver::new(Backend::Device(dev.clone()));
        let pm = prepare(&driver, &add_mul_add());
        assert_eq!(pm.partition_counts(), Some((3, 2)));
        for _ in 0..3 {
            let imports = dev.imports.load(Ordering::SeqCst);
            let (r, out) = run_one(&pm, &[1.0, 2.0, 3.0, 4.0]);
            assert_eq!(r.status, ErrorStatus::None);
            assert_eq!(out, vec![3.0, 10.0, 21.0, 36.0]);
            // One pool, two device parts, one import; the arena was imported at prepare.
            assert_eq!(dev.imports.load(Ordering::SeqCst), imports + 1);
        }
    }
}
