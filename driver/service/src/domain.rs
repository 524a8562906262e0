//! The service side of memory domains: a connection's buffers, and the Allocate / CopyTo /
//! CopyFrom / FreeBuffer messages. Buffers belong to the connection that allocated them (its
//! [`OwnerId`]): tokens of other connections are unknown here, and the buffers go when the
//! connection closes.

use std::collections::HashMap;
use std::sync::Arc;

use nnaccel_hal::domain::{BufferDesc, BufferRole, DeviceBuffer, OwnerId, new_owner};
use nnaccel_hal::pool_fd::PoolRole;
use nnaccel_hal::{Driver, ErrorStatus, PreparedModel};
use nnaccel_protocol::{ClientMessage, ReceivedFds, ServiceMessage, WireRole, memory_from_wire};

/// Buffers one connection may hold.
pub(crate) const MAX_BUFFERS_PER_CONNECTION: usize = 1024;

/// The memory-domain buffers of one connection.
#[derive(Debug)]
pub(crate) struct ConnectionBuffers {
    owner: OwnerId,
    buffers: HashMap<u32, Arc<DeviceBuffer>>,
}

impl Default for ConnectionBuffers {
    fn default() -> Self {
        Self::new()
    }
}

fn error(status: ErrorStatus, message: String) -> ServiceMessage {
    ServiceMessage::Error {
        status: status.code(),
        message,
    }
}

fn roles(wire: &[WireRole]) -> Vec<BufferRole> {
    wire.iter()
        .map(|r| BufferRole {
            model_index: r.model_index,
            io_index: r.io_index,
            frequency: r.frequency,
        })
        .collect()
}

impl ConnectionBuffers {
    /// No buffers, a new owner id.
    pub fn new() -> Self {
        Self {
            owner: new_owner(),
            buffers: HashMap::new(),
        }
    }

    /// The owner id executions of this connection run as.
    pub fn owner(&self) -> OwnerId {
        self.owner
    }

    /// Buffers held.
    pub fn len(&self) -> usize {
        self.buffers.len()
    }

    /// Answers a memory-domain message; `model` finds this connection's prepared models.
    pub fn handle<'m>(
        &mut self,
        driver: &Driver,
        msg: ClientMessage,
        fds: &mut ReceivedFds,
        model: impl Fn(u64) -> Option<&'m PreparedModel>,
    ) -> ServiceMessage {
        match msg {
            ClientMessage::Allocate {
                dimensions,
                model_ids,
                input_roles,
                output_roles,
            } => {
                if self.buffers.len() >= MAX_BUFFERS_PER_CONNECTION {
                    return error(
                        ErrorStatus::GeneralFailure,
                        format!("at most {MAX_BUFFERS_PER_CONNECTION} buffers per connection"),
                    );
                }
                let mut models = Vec::with_capacity(model_ids.len());
                for id in model_ids {
                    match model(id) {
                        Some(m) => models.push(m),
                        None => {
                            return error(
                                ErrorStatus::InvalidArgument,
                                format!("no prepared model {id} on this connection"),
                            );
                        }
                    }
                }
                let desc = BufferDesc { dimensions };
                match driver.allocate(
                    self.owner,
                    &desc,
                    &models,
                    &roles(&input_roles),
                    &roles(&output_roles),
                ) {
                    Ok(buffer) => {
                        let token = buffer.token();
                        self.buffers.insert(token, buffer);
                        ServiceMessage::Allocated { token }
                    }
                    Err(s) => error(s, "allocation failed".into()),
                }
            }
            ClientMessage::CopyTo { token, memory } => {
                let memory =
                    match memory_from_wire(&memory, fds, "the copyTo target", PoolRole::Write) {
                        Ok(m) => m,
                        Err(e) => return error(ErrorStatus::InvalidArgument, e.to_string()),
                    };
                match self.buffers.get(&token) {
                    Some(b) => match b.copy_to(&memory) {
                        Ok(()) => ServiceMessage::Copied,
                        Err(s) => error(s, "copyTo failed".into()),
                    },
                    None => unknown(token),
                }
            }
            ClientMessage::CopyFrom {
                token,
                memory,
                dimensions,
            } => {
                let memory =
                    match memory_from_wire(&memory, fds, "the copyFrom source", PoolRole::Read) {
                        Ok(m) => m,
                        Err(e) => return error(ErrorStatus::InvalidArgument, e.to_string()),
                    };
                match self.buffers.get(&token) {
                    Some(b) => match b.copy_from(&memory, &dimensions) {
                        Ok(()) => ServiceMessage::Copied,
                        Err(s) => error(s, "copyFrom failed".into()),
                    },
                    None => unknown(token),
                }
            }
            ClientMessage::FreeBuffer { token } => match self.buffers.remove(&token) {
                Some(_) => ServiceMessage::BufferFreed,
                None => unknown(token),
            },
            other => error(
                ErrorStatus::GeneralFailure,
                format!("not a memory-domain message: {other:?}"),
            ),
        }
    }
}

fn unknown(token: u32) -> ServiceMessage {
    error(
        ErrorStatus::InvalidArgument,
        format!("no buffer with token {token} on this connection"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use nnaccel_hal::{Backend, ExecutionPreference, Model, Priority};
    use nnaccel_protocol::WireMemory;

    /// RELU from one FLOAT32 [4] input to one output.
    fn model() -> Model {
        let operand = |lifetime| nnaccel_hal::Operand {
            operand_type: nnaccel_hal::OperandType::TensorFloat32,
            dimensions: vec![4],
            scale: 0.0,
            zero_point: 0,
            lifetime,
            location: nnaccel_hal::DataLocation::default(),
            extra_params: None,
        };
        Model {
            operands: vec![
                operand(nnaccel_hal::OperandLifetime::SubgraphInput),
                operand(nnaccel_hal::OperandLifetime::SubgraphOutput),
            ],
            operations: vec![nnaccel_hal::Operation {
                operation_type: nnaccel_hal::OperationType::Relu,
                inputs: vec![0],
                outputs: vec![1],
            }],
            input_indexes: vec![0],
            output_indexes: vec![1],
            ..Model::default()
        }
    }

    fn status(m: &ServiceMessage) -> Option<i32> {
        match m {
            ServiceMessage::Error { status, .. } => Some(*status),
            _ => None,
        }
    }

    #[test]
    fn messages_allocate_copy_and_free_on_this_connection_only() {
        let driver = Driver::new(Backend::CpuOnly);
        let pm = driver
            .prepare_model(
                &model(),
                ExecutionPreference::FastSingleAnswer,
                Priority::Medium,
                None,
            )
            .unwrap();
        let lookup = |id: u64| (id == 1).then_some(&pm);
        let mut conn = ConnectionBuffers::new();
        let mut other = ConnectionBuffers::new();
        assert_ne!(conn.owner(), other.owner());
        let role = WireRole {
            model_index: 0,
            io_index: 0,
            frequency: 1.0,
        };
        let allocate = |ids: Vec<u64>| ClientMessage::Allocate {
            dimensions: vec![],
            model_ids: ids,
            input_roles: vec![role],
            output_roles: vec![],
        };
        let mut no_fds = ReceivedFds::new(vec![]);
        let unknown_model = conn.handle(&driver, allocate(vec![2]), &mut no_fds, lookup);
        assert_eq!(
            status(&unknown_model),
            Some(ErrorStatus::InvalidArgument.code())
        );
        let ServiceMessage::Allocated { token } =
            conn.handle(&driver, allocate(vec![1]), &mut no_fds, lookup)
        else {
            panic!("allocation failed");
        };
        assert!(token > 0 && conn.len() == 1);
        // copyFrom with a memfd of the right size, on the owning connection only.
        let copy_from = |token| ClientMessage::CopyFrom {
            token,
            memory: WireMemory {
                kind: 0,
                prot: 0,
                offset: 0,
                size: 16,
                fd_index: 0,
            },
            dimensions: vec![],
        };
        let memfd = || {
            ReceivedFds::new(vec![
                nnaccel_uapi::sys::memfd_create(c"svc-domain", 16).unwrap(),
            ])
        };
        let theirs = other.handle(&driver, copy_from(token), &mut memfd(), lookup);
        assert_eq!(status(&theirs), Some(ErrorStatus::InvalidArgument.code()));
        let ours = conn.handle(&driver, copy_from(token), &mut memfd(), lookup);
        assert_eq!(ours, ServiceMessage::Copied);
        let free = |token| ClientMessage::FreeBuffer { token };
        let theirs = other.handle(&driver, free(token), &mut no_fds, lookup);
        assert_eq!(status(&theirs), Some(ErrorStatus::InvalidArgument.code()));
        assert_eq!(
            conn.handle(&driver, free(token), &mut no_fds, lookup),
            ServiceMessage::BufferFreed
        );
        assert_eq!(conn.len(), 0);
        assert_eq!(driver.buffers().live_buffers(), 0);
    }
}
