//! One thread per device that fires deadline callbacks (WAIT timeouts).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use nnaccel_uapi::sys;

type Callback = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct State {
    pending: BTreeMap<(u64, u64), Callback>,
    shutdown: bool,
}

struct Shared {
    state: Mutex<State>,
    cond: Condvar,
    next_id: AtomicU64,
}

/// A key that cancels a timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimerKey(u64, u64);

/// Deadline timers on absolute CLOCK_MONOTONIC nanoseconds.
pub struct Timers {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Timers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timers").finish_non_exhaustive()
    }
}

impl Timers {
    /// Starts the timer thread.
    pub fn new() -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::default(),
            cond: Condvar::new(),
            next_id: AtomicU64::new(1),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("nnaccel-timers".into())
            .spawn(move || run(&s))?;
        Ok(Self {
            shared,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Calls `f` on the timer thread at `deadline_ns`, unless cancelled first.
    pub fn add(&self, deadline_ns: u64, f: impl FnOnce() + Send + 'static) -> TimerKey {
        let key = TimerKey(
            deadline_ns,
            self.shared.next_id.fetch_add(1, Ordering::Relaxed),
        );
        let mut st = self
            .shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        st.pending.insert((key.0, key.1), Box::new(f));
        drop(st);
        self.shared.cond.notify_one();
        key
    }

    /// Cancels a timer; false if it already fired.
    pub fn cancel(&self, key: TimerKey) -> bool {
        let mut st = self
            .shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        st.pending.remove(&(key.0, key.1)).is_some()
    }
}

impl Drop for Timers {
    fn drop(&mut self) {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .shutdown = true;
        self.shared.cond.notify_one();
        if let Some(t) = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = t.join();
        }
    }
}

fn run(shared: &Shared) {
    let mut st = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        if st.shutdown {
            return;
        }
        let now = sys::monotonic_ns();
        match st.pending.first_key_value().map(|(k, _)| *k) {
            Some(k) if k.0 <= now => {
                let cb = st.pending.remove(&k);
                drop(st);
                if let Some(cb) = cb {
                    cb();
                }
                st = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
            }
            Some(k) => {
                let wait = Duration::from_nanos(k.0 - now);
                st = shared
                    .cond
                    .wait_timeout(st, wait)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
            None => st = shared.cond.wait(st).unwrap_or_else(PoisonError::into_inner),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn timers_fire_in_deadline_order_and_cancelled_ones_do_not() {
        let t = Timers::new().unwrap();
        let (tx, rx) = mpsc::channel();
        let now = sys::monotonic_ns();
        let tx2 = tx.clone();
        let tx3 = tx.clone();
        t.add(now + 30_000_000, move || tx.send(2).unwrap());
        t.add(now + 10_000_000, move || tx2.send(1).unwrap());
        let k = t.add(now + 20_000_000, move || tx3.send(99).unwrap());
        assert!(t.cancel(k));
        assert_eq!(rx.recv_timeout(Duration::from_secs(2)).unwrap(), 1);
        assert_eq!(rx.recv_timeout(Duration::from_secs(2)).unwrap(), 2);
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
    }
}
