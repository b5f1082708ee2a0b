//! Single-threaded synchronisation primitives for one shard's tasks: a one-shot reply slot, a
//! set-once event, and a notification that can fire many times. Not `Send`: they never leave
//! their executor thread. Executor-agnostic (plain wakers), so the shard core uses them under
//! the runtime's executor and under the deterministic simulation alike, and they are tested without either.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

struct Slot<T> {
    value: Option<T>,
    waker: Option<Waker>,
    sender_alive: bool,
}

/// Sending half of a one-shot slot.
pub struct OneshotSender<T> {
    slot: Rc<RefCell<Slot<T>>>,
}

/// Receiving half: a future that yields the value, or `None` if the sender was dropped unused.
pub struct OneshotReceiver<T> {
    slot: Rc<RefCell<Slot<T>>>,
}

/// A fresh one-shot slot.
pub fn oneshot<T>() -> (OneshotSender<T>, OneshotReceiver<T>) {
    let slot = Rc::new(RefCell::new(Slot {
        value: None,
        waker: None,
        sender_alive: true,
    }));
    (
        OneshotSender { slot: slot.clone() },
        OneshotReceiver { slot },
    )
}

impl<T> OneshotSender<T> {
    /// Delivers the value (dropped if the receiver is gone).
    pub fn send(self, value: T) {
        let waker = {
            let mut slot = self.slot.borrow_mut();
            assert!(slot.value.is_none(), "a one-shot slot is filled once");
            slot.value = Some(value);
            slot.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl<T> Drop for OneshotSender<T> {
    fn drop(&mut self) {
        let waker = {
            let mut slot = self.slot.borrow_mut();
            slot.sender_alive = false;
            slot.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl<T> OneshotReceiver<T> {
    /// True once awaiting it would not wait: the value was sent, or the sender dropped.
    pub fn is_done(&self) -> bool {
        let slot = self.slot.borrow();
        slot.value.is_some() || !slot.sender_alive
    }
}

impl<T> Future for OneshotReceiver<T> {
    type Output = Option<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut slot = self.slot.borrow_mut();
        if let Some(value) = slot.value.take() {
            return Poll::Ready(Some(value));
        }
        if !slot.sender_alive {
            return Poll::Ready(None);
        }
        slot.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

/// An event that is set once and wakes every waiter, present and future.
#[derive(Clone, Default)]
pub struct Event {
    inner: Rc<RefCell<EventInner>>,
}

#[derive(Default)]
struct EventInner {
    set: bool,
    wakers: Vec<Waker>,
}

impl Event {
    pub fn new() -> Event {
        Event::default()
    }

    pub fn set(&self) {
        let wakers = {
            let mut inner = self.inner.borrow_mut();
            inner.set = true;
            std::mem::take(&mut inner.wakers)
        };
        for waker in wakers {
            waker.wake();
        }
    }

    pub fn is_set(&self) -> bool {
        self.inner.borrow().set
    }

    /// Completes once the event is set.
    pub fn wait(&self) -> impl Future<Output = ()> + 'static {
        let inner = self.inner.clone();
        std::future::poll_fn(move |cx| {
            let mut inner = inner.borrow_mut();
            if inner.set {
                Poll::Ready(())
            } else {
                if !inner.wakers.iter().any(|w| w.will_wake(cx.waker())) {
                    inner.wakers.push(cx.waker().clone());
                }
                Poll::Pending
            }
        })
    }
}

/// A notification that fires any number of times: [`Notify::listen`] returns a future that
/// completes at the first [`Notify::notify`] after the call to `listen` (not before), so a
/// waiter listens, then checks its condition, then waits, and no notification is lost between.
#[derive(Clone, Default)]
pub struct Notify {
    inner: Rc<RefCell<NotifyInner>>,
}

#[derive(Default)]
struct NotifyInner {
    generation: u64,
    wakers: Vec<Waker>,
}

impl Notify {
    pub fn new() -> Notify {
        Notify::default()
    }

    /// Wakes every current listener.
    pub fn notify(&self) {
        let wakers = {
            let mut inner = self.inner.borrow_mut();
            inner.generation += 1;
            std::mem::take(&mut inner.wakers)
        };
        for waker in wakers {
            waker.wake();
        }
    }

    /// Completes at the next [`Notify::notify`].
    pub fn listen(&self) -> impl Future<Output = ()> + 'static {
        let inner = self.inner.clone();
        let seen = inner.borrow().generation;
        std::future::poll_fn(move |cx| {
            let mut inner = inner.borrow_mut();
            if inner.generation != seen {
                Poll::Ready(())
            } else {
                if !inner.wakers.iter().any(|w| w.will_wake(cx.waker())) {
                    inner.wakers.push(cx.waker().clone());
                }
                Poll::Pending
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::future::{block_on, poll_once};

    #[test]
    fn oneshot_delivers_or_reports_a_dropped_sender() {
        let (tx, rx) = oneshot();
        tx.send(5);
        assert_eq!(block_on(rx), Some(5));
        let (tx, rx) = oneshot::<u8>();
        drop(tx);
        assert_eq!(block_on(rx), None);
        let (tx, mut rx) = oneshot::<u8>();
        assert_eq!(block_on(poll_once(&mut rx)), None, "pending before send");
        tx.send(1);
        assert_eq!(block_on(rx), Some(1));
    }

    #[test]
    fn event_wakes_all_waiters_and_stays_set() {
        let event = Event::new();
        let mut a = Box::pin(event.wait());
        let mut b = Box::pin(event.wait());
        assert!(block_on(poll_once(&mut a)).is_none());
        assert!(block_on(poll_once(&mut b)).is_none());
        event.set();
        block_on(a);
        block_on(b);
        block_on(event.wait());
        assert!(event.is_set());
    }

    #[test]
    fn notify_wakes_listeners_registered_before_it_only() {
        let notify = Notify::new();
        let mut before = Box::pin(notify.listen());
        assert!(block_on(poll_once(&mut before)).is_none());
        notify.notify();
        block_on(before);
        let mut after = Box::pin(notify.listen());
        assert!(
            block_on(poll_once(&mut after)).is_none(),
            "an earlier notification does not complete a later listener"
        );
        notify.notify();
        block_on(after);
    }
}
