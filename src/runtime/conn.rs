//! The Kafka listeners of one shard and their client connections.
//!
//! A TLS listener (SSL) runs the rustls handshake first (at most `TLS_HANDSHAKE_MS_MAX`; a
//! failed or slow handshake closes the connection and nothing else), takes the principal from
//! a client certificate if there is one, then serves frames over the TLS stream exactly as a
//! plaintext connection. Connections in their handshake count against `SHARD_CONNECTIONS_MAX`.
//!
//! Per connection, a reader (this task) turns bytes into frames and starts one handler task
//! per request; a writer task awaits the handlers **in request order** and writes their
//! responses, so responses keep request order whatever the handlers' durations.
//!
//! Bounds (constants.rs):
//! - at most `CONNECTION_INFLIGHT_REQUESTS_MAX` requests queued per connection (the reader
//!   stops reading when the queue is full: TCP backpressure);
//! - at most `SHARD_INFLIGHT_REQUEST_BYTES_MAX` bytes of requests per shard, reserved as soon
//!   as a frame's size prefix is read (before its body is buffered) and released when its
//!   response is written; so memory for requests is bounded however clients behave;
//! - frames above `REQUEST_FRAME_BYTES_MAX` close the connection before their body is read;
//! - at most `SHARD_CONNECTIONS_MAX` connections per shard.
//!
//! A malformed frame, unknown API key or unsupported version gets no response: the connection
//! is closed after the responses to earlier requests are written (Kafka's behaviour). Other
//! connections are unaffected.

use super::shard_runtime::ShardHandle;
use crate::config_file::SecurityProtocol;
use crate::constants::{
    CONNECTION_INFLIGHT_REQUESTS_MAX, REQUEST_FRAME_BYTES_MAX, SHARD_CONNECTIONS_MAX,
    SOCKET_READ_CHUNK_BYTES, TLS_HANDSHAKE_MS_MAX,
};
use crate::protocol::codec::{parse_frame, Inbound};
use crate::protocol::framing::FrameDecoder;
use crate::server::dispatch::dispatch;
use crate::server::{ConnInfo, Outcome};
use futures_lite::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use glommio::channels::local_channel;
use glommio::net::{TcpListener, TcpStream};
use glommio::sync::StaticPermit;
use glommio::Task;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// One listener as its shard serves it.
pub struct Endpoint {
    /// Kafka's listener name (for logs).
    pub name: String,
    pub protocol: SecurityProtocol,
    /// The address handlers name as this broker (else each connection's local one).
    pub advertised: Option<SocketAddr>,
    /// Set for SSL and SASL_SSL listeners.
    pub tls: Option<futures_rustls::TlsAcceptor>,
    /// The authorizer's settings, if one is configured (every connection's requests are
    /// authorized against them and the registry's ACLs).
    pub authorizer: Option<std::sync::Arc<crate::authz::AuthorizerConfig>>,
}

/// A request whose response the writer still has to write.
enum Queued {
    Handler {
        task: Task<Outcome>,
        api: &'static str,
        started: Instant,
        _permit: StaticPermit,
    },
    Ready(Outcome, Option<StaticPermit>),
}

/// Accepts connections of `endpoint` until shutdown; each connection runs in its own task.
pub async fn accept_loop(ctx: ShardHandle, listener: TcpListener, endpoint: Rc<Endpoint>) {
    loop {
        let accepted = futures_lite::future::or(async { Some(listener.accept().await) }, async {
            ctx.shutdown.wait().await;
            None
        })
        .await;
        match accepted {
            None => break,
            Some(Ok(stream)) => {
                if ctx.connections_active.get() >= SHARD_CONNECTIONS_MAX {
                    tracing::warn!(shard = %ctx.id, "connection limit reached; closing a new connection");
                    drop(stream);
                    continue;
                }
                let conn_ctx = ctx.clone();
                let conn_endpoint = endpoint.clone();
                glommio::spawn_local(async move {
                    serve_connection(conn_ctx, stream, conn_endpoint).await
                })
                .detach();
            }
            Some(Err(e)) => {
                tracing::warn!(shard = %ctx.id, error = %e, "accept failed");
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    tracing::debug!(shard = %ctx.id, listener = %endpoint.name, "listener closed");
}

async fn serve_connection(ctx: ShardHandle, stream: TcpStream, endpoint: Rc<Endpoint>) {
    let (local_addr, peer_addr) = match (stream.local_addr(), stream.peer_addr()) {
        (Ok(l), Ok(p)) => (l, p),
        _ => return,
    };
    let _ = stream.set_nodelay(true);
    ctx.connections_active.set(ctx.connections_active.get() + 1);
    ctx.with_metrics(|m| {
        m.connections_total += 1;
        m.connections_active += 1;
    });
    let mut conn = ConnInfo::new(endpoint.advertised.unwrap_or(local_addr), peer_addr);
    conn.authorizer = endpoint.authorizer.clone();
    let closed_on_error = match &endpoint.tls {
        None => serve_frames(&ctx, stream, conn).await,
        Some(acceptor) => {
            let handshake =
                futures_lite::future::or(async { Some(acceptor.accept(stream).await) }, async {
                    futures_lite::future::or(
                        glommio::timer::sleep(Duration::from_millis(TLS_HANDSHAKE_MS_MAX)),
                        ctx.shutdown.wait(),
                    )
                    .await;
                    None
                })
                .await;
            match handshake {
                Some(Ok(tls)) => {
                    let (_, session) = tls.get_ref();
                    if let Some(cert) = session.peer_certificates().and_then(|c| c.first()) {
                        match super::tls::principal_of_certificate(cert) {
                            Some(principal) => *conn.principal.borrow_mut() = principal,
                            None => {
                                tracing::warn!(shard = %ctx.id, peer = %peer_addr, "client certificate subject unreadable; principal stays ANONYMOUS")
                            }
                        }
                    }
                    serve_frames(&ctx, tls, conn).await
                }
                Some(Err(e)) => {
                    tracing::debug!(shard = %ctx.id, peer = %peer_addr, listener = %endpoint.name, error = %e, "TLS handshake failed");
                    true
                }
                None => {
                    tracing::debug!(shard = %ctx.id, peer = %peer_addr, listener = %endpoint.name, "TLS handshake timed out");
                    true
                }
            }
        }
    };
    ctx.connections_active.set(ctx.connections_active.get() - 1);
    ctx.with_metrics(|m| {
        m.connections_active -= 1;
        if closed_on_error {
            m.connections_closed_on_error += 1;
        }
    });
}

/// Serves Kafka frames on `stream` until it closes; returns whether it closed on an error.
async fn serve_frames<S>(ctx: &ShardHandle, stream: S, conn: ConnInfo) -> bool
where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let ctx = ctx.clone();
    let peer_addr = conn.peer_addr;
    let (mut reader, mut writer) = futures_lite::io::split(stream);
    let (queue_tx, queue_rx) =
        local_channel::new_bounded::<Queued>(CONNECTION_INFLIGHT_REQUESTS_MAX);
    let writer_done = super::sync::Event::new();
    let writer_ctx = ctx.clone();
    let writer_conn = conn.clone();
    let writer_done_set = writer_done.clone();
    let writer_task = glommio::spawn_local(async move {
        let mut closed_on_error = false;
        while let Some(item) = queue_rx.recv().await {
            let outcome = match item {
                Queued::Handler {
                    task,
                    api,
                    started,
                    _permit,
                } => {
                    let outcome = task.await;
                    let micros = started.elapsed().as_micros() as u64;
                    writer_ctx.with_metrics(|m| m.record_request(api, micros));
                    outcome
                }
                Queued::Ready(outcome, _permit) => outcome,
            };
            match outcome {
                Outcome::Respond(frame) => {
                    if writer.write_all(&frame).await.is_err() {
                        break;
                    }
                    writer_ctx.with_metrics(|m| m.bytes_out += frame.len() as u64);
                }
                Outcome::NoResponse => {}
                Outcome::Close(reason) => {
                    tracing::info!(shard = %writer_ctx.id, peer = %peer_addr, %reason, "closing connection");
                    closed_on_error = true;
                    break;
                }
            }
        }
        // Every request of the connection is answered (or the socket failed): its share
        // sessions close now, before the socket's own close, so that a client that dropped the
        // connection and reconnected at once finds the old session closed (and its records
        // released) as early as possible, as Kafka does when it processes the disconnect.
        crate::server::share_api::connection_closed(&writer_ctx, &writer_conn).await;
        let _ = writer.close().await;
        writer_done_set.set();
        closed_on_error
    });

    let mut decoder = FrameDecoder::new(REQUEST_FRAME_BYTES_MAX);
    let mut chunk = vec![0u8; SOCKET_READ_CHUNK_BYTES];
    // The permit for the frame being assembled, reserved once its size is known.
    let mut reserved: Option<StaticPermit> = None;
    'connection: loop {
        loop {
            let size = match decoder.next_frame_bytes() {
                Ok(size) => size,
                Err(e) => {
                    tracing::info!(shard = %ctx.id, peer = %peer_addr, error = %e, "closing connection");
                    let _ = queue_tx
                        .send(Queued::Ready(Outcome::Close(e.to_string()), None))
                        .await;
                    break 'connection;
                }
            };
            let Some(size) = size else { break };
            if reserved.is_none() {
                let permit = futures_lite::future::or(
                    async {
                        ctx.request_bytes
                            .acquire_static_permit(size.max(1) as u64)
                            .await
                            .ok()
                    },
                    async {
                        writer_done.wait().await;
                        None
                    },
                )
                .await;
                match permit {
                    Some(p) => reserved = Some(p),
                    None => break 'connection,
                }
            }
            let frame = match decoder.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(_) => unreachable!("the size was validated above"),
            };
            let permit = reserved.take().expect("reserved above");
            let item = match parse_frame(frame) {
                Inbound::Request(request) => {
                    let api = request.spec.name;
                    let handler_ctx = ctx.clone();
                    let handler_conn = conn.clone();
                    let task = glommio::spawn_local(async move {
                        dispatch(&handler_ctx, &handler_conn, &request).await
                    });
                    Queued::Handler {
                        task,
                        api,
                        started: Instant::now(),
                        _permit: permit,
                    }
                }
                Inbound::Unsupported {
                    api_key,
                    api_version,
                    correlation_id,
                } => Queued::Ready(
                    Outcome::Respond(Inbound::unsupported_frame(
                        api_key,
                        api_version,
                        correlation_id,
                    )),
                    Some(permit),
                ),
                Inbound::Reject(reject) => {
                    let _ = queue_tx
                        .send(Queued::Ready(
                            Outcome::Close(reject.to_string()),
                            Some(permit),
                        ))
                        .await;
                    break 'connection;
                }
            };
            if queue_tx.send(item).await.is_err() {
                break 'connection;
            }
        }
        let read = futures_lite::future::or(async { Some(reader.read(&mut chunk).await) }, async {
            futures_lite::future::or(ctx.shutdown.wait(), writer_done.wait()).await;
            None
        })
        .await;
        match read {
            Some(Ok(0)) | Some(Err(_)) | None => break,
            Some(Ok(n)) => {
                decoder.extend(&chunk[..n]);
                ctx.with_metrics(|m| m.bytes_in += n as u64);
            }
        }
    }
    drop(reserved);
    drop(queue_tx);
    writer_task.await
}
