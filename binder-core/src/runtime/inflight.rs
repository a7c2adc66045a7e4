//! Deliveries in flight: counted wherever they run, and the tasks of those that run away
//! from their queue loop, so that shutdown can wait for them and abort what outlives its
//! timeout.

use std::sync::Arc;
use std::sync::Mutex as StdMutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::sync::Notify;
use tokio::task::JoinSet;

/// Counts deliveries being handled, wherever they run, and holds the tasks of those handled
/// away from their queue loop (retries, `concurrency` above 1), so shutdown can wait for them
/// and abort what outlives its timeout.
#[derive(Debug, Default)]
pub(crate) struct Inflight {
    count: AtomicUsize,
    /// Someone waits for `count` to reach 0 (shutdown): only then is `idle` notified, so
    /// the usual delivery does not take the notifier's lock.
    waiting: AtomicBool,
    idle: Notify,
    tasks: StdMutex<Tasks>,
}

/// The tasks of deliveries handled away from their loop; once closed (shutdown gave up on
/// them), no new one starts.
#[derive(Debug, Default)]
struct Tasks {
    set: JoinSet<()>,
    closed: bool,
}

/// One delivery counted in flight until dropped (also when its task is aborted).
pub(crate) struct InflightGuard(Arc<Inflight>);

impl Drop for InflightGuard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 && self.0.waiting.load(Ordering::SeqCst)
        {
            self.0.idle.notify_waiters();
        }
    }
}

impl Inflight {
    /// Counts one delivery in flight until the guard drops.
    pub(crate) fn enter(self: &Arc<Self>) -> InflightGuard {
        self.count.fetch_add(1, Ordering::SeqCst);
        InflightGuard(self.clone())
    }

    /// Runs a delivery's work in a task of its own. After shutdown aborted the others, the
    /// work is dropped instead (its delivery returns to the queue).
    pub(crate) fn spawn(
        self: &Arc<Self>,
        fut: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let guard = self.enter();
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        if tasks.closed {
            return;
        }
        while tasks.set.try_join_next().is_some() {}
        tasks.set.spawn(async move {
            fut.await;
            drop(guard);
        });
    }

    /// Waits until nothing is in flight.
    pub(crate) async fn idle(&self) {
        // Set before reading the count: a guard that brings it to 0 after the read sees it
        // (both sequentially consistent) and notifies.
        self.waiting.store(true, Ordering::SeqCst);
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.count.load(Ordering::SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }

    /// Aborts the tasks still running (after the shutdown timeout) and waits until they are
    /// gone, so their deliveries are unsettled (and return to their queues) when it returns.
    pub(crate) async fn abort_all(&self) {
        let mut tasks = {
            let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
            tasks.closed = true;
            std::mem::take(&mut tasks.set)
        };
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
    }

    pub(crate) fn len(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dropped with the work it belongs to: stands for a delivery whose settler requeues it
    /// when dropped unsettled.
    struct Delivery(Arc<AtomicBool>);

    impl Drop for Delivery {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    /// A retry that comes due after shutdown aborted the tasks (its back-off ended, or it
    /// was spawned by an attempt that was just finishing) must not start: its work is
    /// dropped, so its delivery goes back to the queue, and nothing is left in flight.
    #[tokio::test]
    async fn no_work_starts_after_shutdown_aborted_the_tasks() {
        let inflight = Arc::new(Inflight::default());
        let (started, dropped) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );

        // A task running when shutdown gives up on it is aborted, and its work dropped.
        let delivery = Delivery(dropped.clone());
        inflight.spawn(async move {
            let _delivery = delivery;
            std::future::pending::<()>().await;
        });
        assert_eq!(inflight.len(), 1);
        inflight.abort_all().await;
        assert!(
            dropped.swap(false, Ordering::SeqCst),
            "the aborted work was dropped"
        );
        assert_eq!(inflight.len(), 0);

        // Work handed over afterwards never runs.
        let (s, delivery) = (started.clone(), Delivery(dropped.clone()));
        inflight.spawn(async move {
            let _delivery = delivery;
            s.store(true, Ordering::SeqCst);
        });
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(
            !started.load(Ordering::SeqCst),
            "a retry started after the abort"
        );
        assert!(dropped.load(Ordering::SeqCst), "its delivery was released");
        assert_eq!(inflight.len(), 0, "nothing counted in flight");
    }
}
