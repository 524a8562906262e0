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
    graph.operations[index].inputs.iter().any(|&k| {
        matches!(
            graph.operands.get(k as usize).map(|o| &o.lifetime),
            Some(Lifetime::Subgraph { .. })
        )
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
        let demote = all.iter().enumerate().find(|(r, run)| {
            run.placement == Placement::Device
                && (run.inputs.len() + run.outputs.len() > MAX_BINDINGS
                    || (*r > 0
                        && *r < last
                        && !run.ops.iter().any(|&i| is_heavy(graph.operations[i].op))))
        });
        match demote {
            Some((_, run)) => {
                for &i in &run.ops {
                    placement[i] = Placement::Cpu;
                }
            }
            None => {
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
            // A model output only this part reads (and no one outputs) stays internal.
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
    Some(Model {
        operands,
        operations,
        input_indexes,
        output_indexes,
        ..model.clone()
    })
}

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
                Placement::Cpu => {
                    let Ok(pools) = sub
                        .pools
                        .iter()
                        .map(MappedPool::map_constants)
                        .collect::<Result<Vec<_>, _>>()
                    else {
                        return Ok(None);
                    };
                    let Ok(prepared) = PreparedGraph::new(sub_graph) else {
                        return Ok(None);
                    };
                    PartPlan::Cpu(CpuPlan {
                        graph: prepared,
                        pools,
                    })
                }
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
        let on_device = self
            .parts
            .iter()
            .filter(|p| matches!(p.plan, PartPlan::Device(_)))
            .count();
        (self.parts.len(), on_device)
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
        let outcome = self.run_parts(bound, arena.as_ref(), deadline, burst);
        if let Some(a) = arena {
            self.give_back(a);
        }
        outcome
    }

    fn run_parts(
        &self,
        bound: &BoundRequest,
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
        let mut maps = bound.cpu_pools();
        maps.resize(n, None);
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
                PartPlan::Cpu(plan) => run_on_cpu(plan, &part.model, &sub, &maps, part_burst),
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
