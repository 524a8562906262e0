//! The sockets of a service's live threads (client connections, burst workers), kept so that a
//! stopping service can end each thread the way its peer would (by shutting its socket down) and
//! wait for it a bounded time. A thread is a member from [`LiveSockets::join`] until its
//! [`Membership`] drops, normally when the thread ends.

use std::collections::HashMap;
use std::io;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rustix::net::Shutdown;

/// Who a member serves (a service connection's owner id), for the per-owner limit.
pub type Owner = u64;

/// The set.
#[derive(Debug)]
pub struct LiveSockets {
    state: Mutex<State>,
    gone: Condvar,
    /// Members one owner may have at once.
    per_owner: usize,
}

#[derive(Debug, Default)]
struct State {
    stopping: bool,
    next: u64,
    /// Per member, its owner and a second handle on its socket (to shut it down).
    live: HashMap<u64, (Owner, UnixStream)>,
}

/// A thread's place in the set; leaving it (the drop) wakes a waiting [`LiveSockets::stop`].
#[derive(Debug)]
pub struct Membership {
    set: Arc<LiveSockets>,
    id: u64,
}

impl Drop for Membership {
    fn drop(&mut self) {
        let mut state = self.set.lock();
        state.live.remove(&self.id);
        drop(state);
        self.set.gone.notify_all();
    }
}

impl LiveSockets {
    /// An empty set in which one owner may have at most `per_owner` members.
    pub fn new(per_owner: usize) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::default(),
            gone: Condvar::new(),
            per_owner,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Members now.
    pub fn len(&self) -> usize {
        self.lock().live.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds a thread serving `owner` over `socket`. Refused with `ConnectionAborted` once the
    /// set is stopping, and with `QuotaExceeded` when `owner` has its limit already.
    pub fn join(self: &Arc<Self>, owner: Owner, socket: &UnixStream) -> io::Result<Membership> {
        let handle = socket.try_clone()?;
        let mut state = self.lock();
        if state.stopping {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the service is stopping",
            ));
        }
        // The sets are small (at most a few hundred members): counting is cheaper than keeping
        // a second map in step.
        let owned = state.live.values().filter(|(o, _)| *o == owner).count();
        if owned >= self.per_owner {
            return Err(io::Error::new(
                io::ErrorKind::QuotaExceeded,
                format!("this client has {owned} running, its limit"),
            ));
        }
        let id = state.next;
        state.next += 1;
        state.live.insert(id, (owner, handle));
        Ok(Membership {
            set: self.clone(),
            id,
        })
    }

    /// Refuses new members, shuts every member's socket down (`how`) and waits until they have
    /// left or `timeout` passed. Returns how many are still there.
    pub fn stop(&self, how: Shutdown, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        let mut state = self.lock();
        state.stopping = true;
        for (_, socket) in state.live.values() {
            let _ = rustix::net::shutdown(socket, how);
        }
        while !state.live.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            state = match self.gone.wait_timeout(state, left) {
                Ok((s, _)) => s,
                Err(e) => e.into_inner().0,
            };
        }
        state.live.len()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_owner_gets_at_most_its_limit_and_a_left_place_is_free_again() {
        let set = LiveSockets::new(2);
        let (a, _peer) = UnixStream::pair().unwrap();
        let first = set.join(1, &a).unwrap();
        let _second = set.join(1, &a).unwrap();
        let refused = set.join(1, &a).unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::QuotaExceeded);
        // Another owner is not held to the first one's count.
        let _other = set.join(2, &a).unwrap();
        assert_eq!(set.len(), 3);
        drop(first);
        assert!(set.join(1, &a).is_ok());
    }

    #[test]
    fn stop_shuts_members_down_waits_for_them_and_refuses_new_ones() {
        let set = LiveSockets::new(usize::MAX);
        let (ours, peer) = UnixStream::pair().unwrap();
        let member = set.join(7, &ours).unwrap();
        let thread = std::thread::spawn(move || {
            // The member's thread: reads until its socket is shut down, then leaves.
            let mut buf = [0u8; 1];
            let n = std::io::Read::read(&mut &ours, &mut buf).unwrap();
            drop(member);
            n
        });
        assert_eq!(set.stop(Shutdown::Read, Duration::from_secs(30)), 0);
        assert_eq!(thread.join().unwrap(), 0, "the member saw end-of-file");
        assert!(set.is_empty());
        let again = set.join(7, &peer).unwrap_err();
        assert_eq!(again.kind(), io::ErrorKind::ConnectionAborted);
    }

    #[test]
    fn stop_gives_up_after_its_timeout_and_says_how_many_are_left() {
        let set = LiveSockets::new(usize::MAX);
        let (ours, _peer) = UnixStream::pair().unwrap();
        let _stuck = set.join(1, &ours).unwrap();
        assert_eq!(set.stop(Shutdown::Both, Duration::from_millis(10)), 1);
    }
}
