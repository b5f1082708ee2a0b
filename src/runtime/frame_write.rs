//! Writing gathered response frames (`protocol::gather`) to a connection without copying
//! their record payloads.
//!
//! A plaintext connection writes the pieces with `sendmsg` (up to `SOCKET_WRITE_IOVECS_MAX`
//! iovecs, `MSG_DONTWAIT`): one system call for a whole Fetch or ShareFetch response while the
//! socket has room. When the socket is full, the rest of the current piece goes through the
//! stream's own `write`, which waits for the socket; then `sendmsg` again. A TLS connection
//! hands the pieces to rustls as one vectored write, which encrypts them into its buffer (the
//! one copy a TLS connection makes anyway).
//!
//! [`split`] splits a connection's stream into the reader's and the writer's halves; unlike
//! `futures_lite::io::split` it forwards vectored writes (which the TLS stream needs above).
//! Both halves live on the connection's shard; a poll borrows the stream only for its own
//! duration, and the executor never runs two polls at once.

use crate::constants::SOCKET_WRITE_IOVECS_MAX;
use crate::protocol::gather::GatheredFrame;
use futures_lite::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use std::cell::RefCell;
use std::io::{self, IoSlice};
use std::os::fd::RawFd;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

/// One half of a stream split by [`split`].
pub struct Half<S>(Rc<RefCell<S>>);

/// The reader's and the writer's halves of `stream`.
pub fn split<S>(stream: S) -> (Half<S>, Half<S>) {
    let shared = Rc::new(RefCell::new(stream));
    (Half(shared.clone()), Half(shared))
}

impl<S: AsyncRead + Unpin> AsyncRead for Half<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Half<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_write_vectored(cx, bufs)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_flush(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_close(cx)
    }
}

/// A position in a frame's pieces: the piece, and the bytes of it already written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Cursor {
    piece: usize,
    offset: usize,
}

impl Cursor {
    fn done(&self, frame: &GatheredFrame) -> bool {
        self.piece == frame.pieces().len()
    }

    /// What is left to write, as at most `max` slices.
    fn slices<'a>(&self, frame: &'a GatheredFrame, max: usize) -> Vec<IoSlice<'a>> {
        let pieces = &frame.pieces()[self.piece..];
        let mut out = Vec::with_capacity(pieces.len().min(max));
        for (i, piece) in pieces.iter().take(max).enumerate() {
            let from = if i == 0 { self.offset } else { 0 };
            out.push(IoSlice::new(&piece[from..]));
        }
        out
    }

    /// The rest of the current piece.
    fn current<'a>(&self, frame: &'a GatheredFrame) -> &'a [u8] {
        &frame.pieces()[self.piece][self.offset..]
    }

    /// Moves past `written` bytes.
    fn advance(&mut self, frame: &GatheredFrame, mut written: usize) {
        while written > 0 {
            let left = frame.pieces()[self.piece].len() - self.offset;
            if written < left {
                self.offset += written;
                return;
            }
            written -= left;
            self.piece += 1;
            self.offset = 0;
        }
    }
}

/// `sendmsg` of `slices` on `fd` without waiting (`WouldBlock` when the socket is full).
fn send_now(fd: RawFd, slices: &[IoSlice<'_>]) -> io::Result<usize> {
    // SAFETY: `msghdr` is a plain C struct for which all-zero is valid (no name, no control
    // data); `IoSlice` is ABI-compatible with `iovec` on Unix (std documents it), and the
    // slices outlive the call, which only reads them.
    let sent = unsafe {
        let mut message: libc::msghdr = std::mem::zeroed();
        message.msg_iov = slices.as_ptr() as *mut libc::iovec;
        message.msg_iovlen = slices.len() as _;
        libc::sendmsg(fd, &message, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
    };
    if sent < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(sent as usize)
    }
}

/// Writes `frame` whole to `writer`; `plain_fd` is the socket of a plaintext connection
/// (written with `sendmsg`), `None` for TLS (vectored writes of the stream).
pub async fn write_gathered<W: AsyncWrite + Unpin>(
    writer: &mut W,
    plain_fd: Option<RawFd>,
    frame: &GatheredFrame,
) -> io::Result<()> {
    let mut cursor = Cursor::default();
    while !cursor.done(frame) {
        let written = match plain_fd {
            Some(fd) => match send_now(fd, &cursor.slices(frame, SOCKET_WRITE_IOVECS_MAX)) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // Full: the stream waits until the socket takes (part of) the current piece.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    writer.write(cursor.current(frame)).await?
                }
                Err(e) => return Err(e),
            },
            None => {
                writer
                    .write_vectored(&cursor.slices(frame, SOCKET_WRITE_IOVECS_MAX))
                    .await?
            }
        };
        if written == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        cursor.advance(frame, written);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::apis::{api_spec, SHARE_FETCH};
    use crate::protocol::gather::encode_response_gathered;
    use crate::protocol::generated::share_fetch_response as sfr;
    use crate::protocol::generated::ShareFetchResponse;
    use bytes::Bytes;

    /// A frame of several pieces (three large payloads).
    fn frame() -> GatheredFrame {
        let spec = api_spec(SHARE_FETCH).unwrap();
        let payloads: Vec<Bytes> = (0..3u8)
            .map(|i| Bytes::from(vec![i; 5000 + usize::from(i)]))
            .collect();
        let mut response = ShareFetchResponse::default();
        let mut topic = sfr::ShareFetchableTopicResponse::default();
        for (i, p) in payloads.iter().enumerate() {
            let mut part = sfr::PartitionData::default();
            part.partition_index = i as i32;
            part.records = Some(p.clone());
            topic.partitions.push(part);
        }
        response.responses.push(topic);
        let frame = encode_response_gathered(spec, 2, 9, &response, &payloads).unwrap();
        assert_eq!(frame.pieces().len(), 7);
        frame
    }

    #[test]
    fn the_cursor_walks_every_byte_once_whatever_the_write_sizes() {
        let frame = frame();
        let whole = frame.to_bytes();
        for step in [1usize, 7, 4096, 5003, 100_000] {
            let mut cursor = Cursor::default();
            let mut out = Vec::new();
            while !cursor.done(&frame) {
                let slices = cursor.slices(&frame, 2);
                let mut n = 0;
                for s in &slices {
                    let take = (step - n).min(s.len());
                    out.extend_from_slice(&s[..take]);
                    n += take;
                    if n == step {
                        break;
                    }
                }
                cursor.advance(&frame, n);
            }
            assert_eq!(out, whole.as_ref(), "step {step}");
        }
    }

    /// A plaintext socket pair: the whole frame arrives, in order, also when the socket is
    /// full and the writer has to wait for the reader.
    #[test]
    fn sendmsg_writes_whole_frames_through_a_full_socket() {
        use std::io::Read;
        use std::os::fd::AsRawFd;
        let frame = frame();
        let frames = 200; // ~3 MB: more than a socket buffer holds
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let reader = std::thread::spawn(move || {
            let (mut socket, _) = listener.accept().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(50));
            let mut all = Vec::new();
            socket.read_to_end(&mut all).unwrap();
            all
        });
        let mut stream = std::net::TcpStream::connect(address).unwrap();
        let fd = stream.as_raw_fd();
        // A blocking std stream as the "async" writer: its write waits for room, as the
        // runtime's does.
        struct Blocking<'a>(&'a mut std::net::TcpStream);
        impl AsyncWrite for Blocking<'_> {
            fn poll_write(
                mut self: Pin<&mut Self>,
                _: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                Poll::Ready(std::io::Write::write(&mut *self.0, buf))
            }
            fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
                Poll::Ready(Ok(()))
            }
            fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
                Poll::Ready(Ok(()))
            }
        }
        let mut writer = Blocking(&mut stream);
        futures_lite::future::block_on(async {
            for _ in 0..frames {
                write_gathered(&mut writer, Some(fd), &frame).await.unwrap();
            }
        });
        drop(writer);
        stream.shutdown(std::net::Shutdown::Write).unwrap();
        let all = reader.join().unwrap();
        let whole = frame.to_bytes();
        assert_eq!(all.len(), whole.len() * frames);
        for chunk in all.chunks(whole.len()) {
            assert_eq!(chunk, whole.as_ref());
        }
    }
}
