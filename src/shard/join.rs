//! Runtime-agnostic future combinators used by handlers: wait for all, or for the first; and
//! a task started in place before it is spawned ([`started`]).
//!
//! Handlers fan a request out to several shards and gather the replies in request order;
//! these helpers poll the futures in place (no spawning, no executor dependency). Both poll
//! only futures not yet finished, so each future is polled after completion never.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::Poll;

/// Runs all futures concurrently; returns their outputs in input order.
pub async fn join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut pending: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = pending.iter().map(|_| None).collect();
    poll_fn(|cx| {
        let mut all_done = true;
        for (future, output) in pending.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => *output = Some(value),
                    Poll::Pending => all_done = false,
                }
            }
        }
        if all_done {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    outputs
        .into_iter()
        .map(|output| output.expect("every future completed"))
        .collect()
}

/// Runs the futures concurrently until the first completes; returns its index and output.
/// The others are dropped. `futures` must not be empty.
pub async fn first_of<F: Future>(futures: Vec<F>) -> (usize, F::Output) {
    assert!(!futures.is_empty(), "first_of needs at least one future");
    let mut pending: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    poll_fn(|cx| {
        for (index, future) in pending.iter_mut().enumerate() {
            if let Poll::Ready(value) = future.as_mut().poll(cx) {
                return Poll::Ready((index, value));
            }
        }
        Poll::Pending
    })
    .await
}

/// `task` polled once in place (with a waker that does nothing): whatever it does before its
/// first wait happens now, not when a spawned task first runs, after every task ready before
/// it (a write-behind's writes are queued at once). `None` if it already finished; else the
/// task to spawn, whose first poll from the executor registers the executor's waker.
pub fn started<F: Future<Output = ()> + 'static>(task: F) -> Option<Pin<Box<F>>> {
    let mut task = Box::pin(task);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match task.as_mut().poll(&mut cx) {
        Poll::Ready(()) => None,
        Poll::Pending => Some(task),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::future::block_on;
    use std::cell::Cell;
    use std::rc::Rc;

    /// A future that is pending `polls` times (waking itself) and then yields `value`.
    fn after(polls: usize, value: u32, log: Rc<Cell<u32>>) -> impl Future<Output = u32> {
        let mut left = polls;
        poll_fn(move |cx| {
            if left == 0 {
                log.set(log.get() + 1);
                Poll::Ready(value)
            } else {
                left -= 1;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        })
    }

    #[test]
    fn started_runs_a_task_until_its_first_wait() {
        let log = Rc::new(Cell::new(0));
        assert!(started(async {}).is_none());
        let (steps, task_log) = (log.clone(), log.clone());
        let task = started(async move {
            steps.set(10);
            after(1, 0, task_log).await;
        })
        .expect("waits once");
        assert_eq!(log.get(), 10, "ran up to its first wait");
        block_on(task);
        assert_eq!(log.get(), 11, "finished when polled again");
    }

    #[test]
    fn join_all_keeps_input_order() {
        let log = Rc::new(Cell::new(0));
        let futures = vec![
            after(5, 1, log.clone()),
            after(0, 2, log.clone()),
            after(2, 3, log.clone()),
        ];
        assert_eq!(block_on(join_all(futures)), vec![1, 2, 3]);
        assert_eq!(log.get(), 3, "each future completed exactly once");
        let none: Vec<std::future::Ready<u8>> = Vec::new();
        assert!(block_on(join_all(none)).is_empty());
    }

    #[test]
    fn first_of_returns_the_quickest() {
        let log = Rc::new(Cell::new(0));
        let futures = vec![after(9, 1, log.clone()), after(3, 2, log.clone())];
        assert_eq!(block_on(first_of(futures)), (1, 2));
        assert_eq!(log.get(), 1);
    }
}
