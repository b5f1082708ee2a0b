//! Getting queued I/O to the kernel now, instead of when the executor's task queues run dry.
//!
//! glommio 0.9 queues every file operation and submits it to io_uring only from the executor's
//! loop, between runs of its task queues: when they run dry, or when a run is preempted. A run
//! is preempted when the latency ring has a completion (the preempt timer, 100 ms, is one). So
//! a write queued by one task waits for every other runnable task of its queue (all the
//! appenders a flush released, the connections they answer) before the disk sees it: the disk
//! and the appenders take turns instead of overlapping (README, "Storage engine").
//!
//! A shorter preempt timer would do, but glommio 0.9 then can park with runnable tasks
//! (glommio/glommio#53, fixed in no release the registry serves). [`kick`] makes a
//! latency-ring completion at once instead: each executor keeps a loopback UDP socket whose
//! receives wait on that ring ([`install`]), and a kick sends it a datagram from the same
//! thread. The kernel completes a waiting receive before `send` returns, so `need_preempt` is
//! true at once (the unit test checks it): the task queue ends its run after the current task,
//! and the loop submits what is queued. A kick is one `send(2)`; none is sent while a
//! preemption is already due.
//!
//! Two details make it work (measured, README): a receive is re-armed in the kernel only when
//! its task runs and the loop submits again, so [`DOORBELL_RECEIVES`] receives wait at any
//! time, not one; and the receives have a task queue of their own.
//!
//! [`kicked`] kicks each time a future returns `Pending` (it has queued I/O and waits for it).
//! Without [`install`] on the thread (or with `LOCKSTEP_IO_KICK=off`), kicks do nothing.

use crate::constants::DOORBELL_RECEIVES;
use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::net::UdpSocket;
use std::rc::Rc;

thread_local! {
    /// The sending end of this executor's doorbell, once [`install`]ed.
    static DOORBELL: RefCell<Option<Rc<UdpSocket>>> = const { RefCell::new(None) };
}

/// False if `LOCKSTEP_IO_KICK=off` (read once per process): I/O is then submitted when glommio's
/// queues run dry, as before the doorbell (for measuring one against the other).
pub fn kicks_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("LOCKSTEP_IO_KICK").as_deref() != Ok("off"))
}

/// Sets up this executor's doorbell (once per thread; later calls do nothing). Must run inside
/// a glommio executor: the receiving tasks live there until the executor ends. An error (no
/// loopback) leaves the executor without kicks: I/O is submitted as glommio does by itself.
pub fn install() -> io::Result<()> {
    if !kicks_on() || DOORBELL.with(|d| d.borrow().is_some()) {
        return Ok(());
    }
    let receiver = glommio::net::UdpSocket::bind("127.0.0.1:0")?;
    let sender = UdpSocket::bind("127.0.0.1:0")?;
    sender.connect(receiver.local_addr()?)?;
    sender.set_nonblocking(true)?;
    let from = sender.local_addr()?;
    let queue = glommio::executor().create_task_queue(
        glommio::Shares::default(),
        glommio::Latency::NotImportant,
        "io-kick",
    );
    let receiver = Rc::new(receiver);
    let sender = Rc::new(sender);
    DOORBELL.with(|d| *d.borrow_mut() = Some(sender));
    glommio::spawn_local(async move {
        // glommio's `recv` answers only a connected socket (ENOTCONN otherwise).
        if receiver.connect(from).await.is_err() {
            DOORBELL.with(|d| d.borrow_mut().take());
            return;
        }
        let receives = (0..DOORBELL_RECEIVES)
            .map(|_| {
                let receiver = receiver.clone();
                glommio::spawn_local_into(
                    async move {
                        let mut datagram = [0u8; 8];
                        while receiver.recv(&mut datagram).await.is_ok() {}
                    },
                    queue,
                )
            })
            .collect::<Result<Vec<_>, _>>();
        if let Ok(receives) = receives {
            for receive in receives {
                receive.await;
            }
        }
        // The socket failed (it does not on loopback): kicks stop, I/O is submitted as before.
        DOORBELL.with(|d| d.borrow_mut().take());
    })
    .detach();
    Ok(())
}

/// Ends the current task-queue run after the current task, so that queued I/O is submitted.
pub fn kick() {
    DOORBELL.with(|d| {
        if let Some(sender) = d.borrow().as_ref() {
            // A full socket buffer (WouldBlock) means datagrams wait to be received: a
            // preemption is due anyway.
            if !glommio::executor().need_preempt() {
                let _ = sender.send(&[0]);
            }
        }
    });
}

/// `future`, with a [`kick`] each time it returns `Pending`.
pub async fn kicked<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    std::future::poll_fn(|cx| {
        let poll = future.as_mut().poll(cx);
        if poll.is_pending() {
            kick();
        }
        poll
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A kick makes `need_preempt` true before `kick` returns, every time (the receives are
    /// re-armed between kicks), and the executor goes on.
    #[test]
    fn a_kick_preempts_at_once() {
        glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .spawn(|| async {
                install().unwrap();
                // Let the receives reach the kernel.
                glommio::timer::sleep(Duration::from_millis(20)).await;
                assert!(DOORBELL.with(|d| d.borrow().is_some()), "installed");
                for round in 0..20 {
                    assert!(!glommio::executor().need_preempt(), "round {round}");
                    kick();
                    assert!(glommio::executor().need_preempt(), "round {round}");
                    glommio::executor().yield_if_needed().await;
                    futures_lite::future::yield_now().await;
                }
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
