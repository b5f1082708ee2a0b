//! Runtime-agnostic future combinators used by handlers: wait for all, or for the first.
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
