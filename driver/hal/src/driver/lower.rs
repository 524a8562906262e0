//! Lowering: a model (or one operation of it) to a device program, and the device plan of a
//! prepared model (its loaded program and queue). The device runs fixed-shape programs whose
//! constants are inline or in imported buffer objects.

use super::*;

/// Whether operation `index` reads a constant from a pool the HAL cannot map.
pub(super) fn reads_unmappable_constant(model: &Model, graph: &Graph, index: usize) -> bool {
    graph.operations[index].inputs.iter().any(|&k| {
        matches!(graph.operands.get(k as usize).map(|o| &o.lifetime),
            Some(Lifetime::ConstantReference { pool, .. })
                if model.pools.get(*pool as usize).is_some_and(|p| p.kind == MemoryKind::HardwareBuffer))
    })
}

pub(super) fn fully_specified(dims: &[u32], scalar: bool) -> bool {
    scalar || (!dims.is_empty() && dims.iter().all(|d| *d != 0))
}

pub(super) fn has_fixed_io_shapes(graph: &Graph) -> bool {
    graph
        .input_indexes
        .iter()
        .chain(&graph.output_indexes)
        .all(|&k| {
            let o = &graph.operands[k as usize];
            fully_specified(&o.dimensions, o.ty.is_scalar())
        })
        && graph.input_indexes.len() + graph.output_indexes.len() <= MAX_BINDINGS
}

/// The bytes of a constant operand (CONSTANT_COPY or CONSTANT_REFERENCE).
pub(super) fn constant_bytes(model: &Model, lifetime: &Lifetime) -> Option<Vec<u8>> {
    match *lifetime {
        Lifetime::ConstantCopy { offset, length } => model
            .operand_values
            .get(offset..offset.checked_add(length)?)
            .map(<[u8]>::to_vec),
        Lifetime::ConstantReference {
            pool,
            offset,
            length,
        } => {
            let mem = model.pools.get(pool as usize)?;
            let mapped = MappedPool::map(mem).ok()?;
            mapped.read(offset, length).ok()
        }
        _ => None,
    }
}

pub(super) fn program_operand(o: &nnaccel_cpu::Operand, location: Location) -> program::Operand {
    program::Operand {
        operand_type: o.ty.code(),
        dims: o.dimensions.clone(),
        scale: o.scale,
        zero_point: o.zero_point,
        location,
        channel_quant: o
            .channel_quant
            .as_ref()
            .map(|c| (c.channel_dim, c.scales.clone())),
    }
}

/// A program with just operation `index` (constants inline), and the signature that decides
/// whether the device runs it. None when the operation cannot run at fixed shapes.
pub(super) fn one_operation_program(
    model: &Model,
    graph: &Graph,
    index: usize,
) -> Option<(String, Program)> {
    let op = &graph.operations[index];
    let mut program = Program::default();
    let mut remap: HashMap<u32, u32> = HashMap::new();
    let mut key = format!("{}:", op.op.code());
    for (is_output, &k) in op
        .inputs
        .iter()
        .map(|k| (false, k))
        .chain(op.outputs.iter().map(|k| (true, k)))
    {
        let o = graph.operands.get(k as usize)?;
        let constant = o.is_constant();
        key.push_str(&format!(
            "{}/{}/{}{};",
            o.ty.code(),
            o.dimensions.len(),
            u8::from(constant),
            u8::from(is_output)
        ));
        if remap.contains_key(&k) {
            continue;
        }
        let location = if is_output {
            Location::Output
        } else if o.lifetime == Lifetime::NoValue {
            Location::NoValue
        } else if constant {
            let bytes = constant_bytes(model, &o.lifetime)?;
            let offset = program.constants.len() as u64;
            program.constants.extend_from_slice(&bytes);
            while program.constants.len() % 8 != 0 {
                program.constants.push(0);
            }
            Location::Constant {
                offset,
                length: bytes.len() as u64,
            }
        } else {
            Location::Input
        };
        if matches!(location, Location::Input | Location::Output)
            && !fully_specified(&o.dimensions, o.ty.is_scalar())
        {
            return None;
        }
        let new = program.operands.len() as u32;
        match location {
            Location::Input => program.inputs.push(new),
            Location::Output => program.outputs.push(new),
            _ => {}
        }
        program.operands.push(program_operand(o, location));
        remap.insert(k, new);
    }
    program.operations.push(program::Operation {
        operation_type: op.op.code(),
        inputs: op.inputs.iter().map(|k| remap[k]).collect(),
        outputs: op.outputs.iter().map(|k| remap[k]).collect(),
    });
    Some((key, program))
}

#[derive(Debug)]
pub(super) struct DeviceQueue {
    pub(super) ring: RingQueue,
    /// A job abandoned at its deadline; reaped before the next submission.
    pub(super) abandoned: Option<u64>,
}

/// The device plan of a prepared model: a loaded program and a queue to run it on.
#[derive(Debug)]
pub(super) struct DevicePlan {
    pub(super) device: Arc<DeviceHandle>,
    /// Destroyed before `queue` (field order) when the plan is dropped.
    pub(super) program: LoadedProgram,
    pub(super) queue: Mutex<DeviceQueue>,
    /// Fixed dimensions and byte sizes of the inputs and outputs.
    pub(super) inputs: Vec<(Vec<u32>, u64, u64)>,
    pub(super) outputs: Vec<(Vec<u32>, u64, u64)>,
}

impl DevicePlan {
    pub(super) fn compile(d: &Arc<DeviceHandle>, model: &Model, graph: &Graph) -> io::Result<Self> {
        let einval = || io::Error::from_raw_os_error(libc::EINVAL);
        // Pools holding constants become BOs the program refers to by slot.
        // On an early return the BOs imported so far are closed (dropped).
        let mut bo_refs = Vec::with_capacity(model.pools.len());
        for pool in &model.pools {
            let offset = match pool.kind {
                MemoryKind::MmapFd { offset, .. } => offset,
                _ => 0,
            };
            bo_refs.push(BufferObject::import(
                d.dev.clone(),
                pool.fd.as_fd(),
                offset,
                pool.size,
                BO_ACCESS_READ,
            )?);
        }
        let operands = graph
            .operands
            .iter()
            .map(|o| {
                let location = match o.lifetime {
                    // Device programs carry no subgraphs; placement keeps IF and WHILE on the
                    // CPU executor, so a SUBGRAPH operand never reaches a device program.
                    Lifetime::Subgraph { .. } => return Err(einval()),
                    Lifetime::TemporaryVariable => Location::Temporary,
                    Lifetime::SubgraphInput => Location::Input,
                    Lifetime::SubgraphOutput => Location::Output,
                    Lifetime::NoValue => Location::NoValue,
                    Lifetime::ConstantCopy { offset, length } => Location::Constant {
                        offset: offset as u64,
                        length: length as u64,
                    },
                    Lifetime::ConstantReference {
                        pool,
                        offset,
                        length,
                    } => Location::BoRef {
                        slot: pool,
                        offset: offset as u64,
                        length: length as u64,
                    },
                };
                Ok(program_operand(o, location))
            })
            .collect::<io::Result<Vec<_>>>()?;
        let program = Program {
            operands,
            operations: graph
                .operations
                .iter()
                .map(|op| program::Operation {
                    operation_type: op.op.code(),
                    inputs: op.inputs.clone(),
                    outputs: op.outputs.clone(),
                })
                .collect(),
            inputs: graph.input_indexes.clone(),
            outputs: graph.output_indexes.clone(),
            bo_refs: bo_refs.iter().map(BufferObject::handle).collect(),
            constants: model.operand_values.clone(),
            relax_f32_to_f16: model.relax_computation_float32_to_float16,
        };
        let created = program
            .encode()
            .map_err(|_| einval())
            .and_then(|bytes| LoadedProgram::create(d.dev.clone(), &bytes));
        // The program holds its own references to the BOs.
        drop(bo_refs);
        let program = created?;
        // Without a queue the program is destroyed (dropped) again.
        let queue = RingQueue::create(d.dev.clone(), QUEUE_ENTRIES, 0)?;
        let spec = |k: &u32| {
            let o = &graph.operands[*k as usize];
            let bytes = o.byte_size().unwrap_or(0) as u64;
            (o.dimensions.clone(), bytes, o.ty.element_size() as u64)
        };
        Ok(Self {
            device: d.clone(),
            program,
            queue: Mutex::new(DeviceQueue {
                ring: queue,
                abandoned: None,
            }),
            inputs: graph.input_indexes.iter().map(spec).collect(),
            outputs: graph.output_indexes.iter().map(spec).collect(),
        })
    }
}

impl Drop for DevicePlan {
    fn drop(&mut self) {
        // A dead device is not called (it may hang): the program goes with the device file.
        if !self.device.alive() {
            self.program.disown();
        }
    }
}
