//! Budgets per client uid (from `SO_PEERCRED`) and for the whole service: what one user may
//! hold at once (connections, prepared models, model memory, device queues, bursts, device
//! buffers), so that one user cannot take the device or the daemon from another. Every use is a
//! [`Charge`] that gives its amount back when dropped, so a connection, model, burst or buffer
//! that goes (however it goes) frees its share. `docs/service.md` ("Budgets per client") lists
//! the budgets and their defaults.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use nnaccel_hal::ErrorStatus;

/// What a budget counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resource {
    /// Client connections.
    Connections,
    /// Prepared models held.
    PreparedModels,
    /// Bytes of constants plus planned temporaries of the prepared models held.
    ModelMemory,
    /// Prepared models that run on the device (each has a device queue).
    DeviceQueues,
    /// Bursts running (a worker thread, two queue mappings and a socket each).
    Bursts,
    /// Memory-domain buffers (device buffers).
    DeviceBuffers,
}

const RESOURCES: usize = 6;

impl Resource {
    fn index(self) -> usize {
        self as usize
    }

    /// The budget's name in refusals and logs.
    pub fn name(self) -> &'static str {
        match self {
            Self::Connections => "connections",
            Self::PreparedModels => "prepared models",
            Self::ModelMemory => "model memory bytes",
            Self::DeviceQueues => "device queues",
            Self::Bursts => "bursts",
            Self::DeviceBuffers => "device buffers",
        }
    }
}

/// One budget: at most `per_uid` for each uid, at most `global` for all of them together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// What one uid may use.
    pub per_uid: u64,
    /// What all uids together may use.
    pub global: u64,
}

/// Every budget (defaults in [`Budgets::default`], documented in `docs/service.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budgets {
    /// Client connections.
    pub connections: Limit,
    /// Prepared models.
    pub prepared_models: Limit,
    /// Model memory in bytes (constants plus planned temporaries, counted at prepare time).
    pub model_memory: Limit,
    /// Device queues (prepared models placed on the device).
    pub device_queues: Limit,
    /// Bursts running.
    pub bursts: Limit,
    /// Memory-domain buffers.
    pub device_buffers: Limit,
}

impl Default for Budgets {
    fn default() -> Self {
        Self {
            connections: Limit {
                per_uid: 64,
                global: 512,
            },
            prepared_models: Limit {
                per_uid: 1024,
                global: 4096,
            },
            model_memory: Limit {
                per_uid: 2 << 30,
                global: 8 << 30,
            },
            device_queues: Limit {
                per_uid: 16,
                global: 64,
            },
            bursts: Limit {
                per_uid: 64,
                global: nnaccel_hal::burst::server::MAX_ACTIVE_BURSTS as u64,
            },
            device_buffers: Limit {
                per_uid: 1024,
                global: 4096,
            },
        }
    }
}

impl Budgets {
    fn limit(&self, r: Resource) -> Limit {
        match r {
            Resource::Connections => self.connections,
            Resource::PreparedModels => self.prepared_models,
            Resource::ModelMemory => self.model_memory,
            Resource::DeviceQueues => self.device_queues,
            Resource::Bursts => self.bursts,
            Resource::DeviceBuffers => self.device_buffers,
        }
    }
}

/// A use that a budget does not allow: which budget, whose, and the amounts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Refusal {
    /// The budget.
    pub resource: Resource,
    /// The client's uid.
    pub uid: u32,
    /// In use already (by the uid, or by everybody when `global`).
    pub used: u64,
    /// Asked for.
    pub asked: u64,
    /// The limit.
    pub limit: u64,
    /// Whether the service-wide limit refused it (else the uid's).
    pub global: bool,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whose = if self.global {
            "all clients together"
        } else {
            "its limit"
        };
        let name = self.resource.name();
        if self.asked == 1 {
            write!(
                f,
                "uid {}: {name} {} of {} in use ({whose})",
                self.uid, self.used, self.limit
            )
        } else {
            write!(
                f,
                "uid {}: {name}: {} asked, {} of {} in use ({whose})",
                self.uid, self.asked, self.used, self.limit
            )
        }
    }
}

impl Refusal {
    /// The NN HAL status: PERSISTENT when the ask alone exceeds the limit (retrying cannot
    /// help), TRANSIENT when uses held now stand in the way.
    pub fn status(&self) -> ErrorStatus {
        if self.asked > self.limit {
            ErrorStatus::ResourceExhaustedPersistent
        } else {
            ErrorStatus::ResourceExhaustedTransient
        }
    }
}

#[derive(Debug, Default)]
struct Usage {
    per_uid: HashMap<u32, [u64; RESOURCES]>,
    global: [u64; RESOURCES],
}

/// The service's budgets and what is in use.
#[derive(Debug)]
pub struct Ledger {
    budgets: Budgets,
    usage: Mutex<Usage>,
}

/// An amount of one budget in use; given back when dropped.
#[derive(Debug)]
pub struct Charge {
    ledger: Arc<Ledger>,
    uid: u32,
    resource: Resource,
    amount: u64,
}

impl Drop for Charge {
    fn drop(&mut self) {
        let mut usage = self.ledger.lock();
        let i = self.resource.index();
        usage.global[i] = usage.global[i].saturating_sub(self.amount);
        if let Some(u) = usage.per_uid.get_mut(&self.uid) {
            u[i] = u[i].saturating_sub(self.amount);
            if u.iter().all(|n| *n == 0) {
                usage.per_uid.remove(&self.uid);
            }
        }
    }
}

impl Ledger {
    /// A ledger with nothing in use.
    pub fn new(budgets: Budgets) -> Arc<Self> {
        Arc::new(Self {
            budgets,
            usage: Mutex::default(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Usage> {
        self.usage.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes `amount` of `resource` for `uid`, or says which limit refuses it.
    pub fn charge(
        self: &Arc<Self>,
        uid: u32,
        resource: Resource,
        amount: u64,
    ) -> Result<Charge, Refusal> {
        let limit = self.budgets.limit(resource);
        let i = resource.index();
        let mut usage = self.lock();
        let mine = usage.per_uid.get(&uid).map_or(0, |u| u[i]);
        let all = usage.global[i];
        let refuse = |used, limit, global| Refusal {
            resource,
            uid,
            used,
            asked: amount,
            limit,
            global,
        };
        if mine.saturating_add(amount) > limit.per_uid {
            return Err(refuse(mine, limit.per_uid, false));
        }
        if all.saturating_add(amount) > limit.global {
            return Err(refuse(all, limit.global, true));
        }
        usage.global[i] += amount;
        usage.per_uid.entry(uid).or_default()[i] += amount;
        drop(usage);
        Ok(Charge {
            ledger: self.clone(),
            uid,
            resource,
            amount,
        })
    }

    /// What `uid` uses of `resource` now.
    pub fn used_by(&self, uid: u32, resource: Resource) -> u64 {
        self.lock()
            .per_uid
            .get(&uid)
            .map_or(0, |u| u[resource.index()])
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn limits_count_per_uid_and_globally_and_charges_give_back_when_dropped() {
        let budgets = Budgets {
            prepared_models: Limit {
                per_uid: 2,
                global: 3,
            },
            ..Budgets::default()
        };
        let ledger = Ledger::new(budgets);
        let a1 = ledger.charge(1000, Resource::PreparedModels, 1).unwrap();
        let _a2 = ledger.charge(1000, Resource::PreparedModels, 1).unwrap();
        let refused = ledger
            .charge(1000, Resource::PreparedModels, 1)
            .unwrap_err();
        assert_eq!(
            refused.to_string(),
            "uid 1000: prepared models 2 of 2 in use (its limit)"
        );
        assert_eq!(refused.status(), ErrorStatus::ResourceExhaustedTransient);
        let _b1 = ledger.charge(1001, Resource::PreparedModels, 1).unwrap();
        assert!(
            ledger
                .charge(1002, Resource::PreparedModels, 1)
                .unwrap_err()
                .global
        );
        drop(a1);
        assert_eq!(ledger.used_by(1000, Resource::PreparedModels), 1);
        assert!(ledger.charge(1002, Resource::PreparedModels, 1).is_ok());
    }

    #[test]
    fn an_ask_beyond_the_limit_itself_is_persistent() {
        let ledger = Ledger::new(Budgets::default());
        let r = ledger
            .charge(5, Resource::ModelMemory, 8 << 30)
            .unwrap_err();
        assert_eq!(r.status(), ErrorStatus::ResourceExhaustedPersistent);
        assert!(r.to_string().contains("model memory bytes"), "{r}");
    }
}
