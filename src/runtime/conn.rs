//! The Kafka listeners of one shard and their client connections.
//!
//! A TLS listener (SSL) runs the rustls handshake first (at most `TLS_HANDSHAKE_MS_MAX`; a
//! failed or slow handshake closes the connection and nothing else), takes the principal from
//! a client certificate if there is one, then serves frames over the TLS stream exactly as a
//! plaintext connection. Connections in their handshake count against `SHARD_CONNECTIONS_MAX`.
//!
//! Per connection, a reader (this task) turns bytes into frames and starts one handler task
//! per request; a writer task awaits the handlers **in request order** and writes their
//! responses, so responses keep request order whatever the handlers' durations. Fetch and
//! ShareFetch responses come in pieces whose records are the log's own bytes
//! (`frame_write`: one `sendmsg` on a plaintext connection, one vectored write into rustls).
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
//! A SASL listener (SASL_PLAINTEXT, SASL_SSL) runs the SASL exchange next (`sasl`'s state
//! machine; Kafka's `SaslServerAuthenticator`): one request at a time, frames of at most
//! `SASL_UNAUTHENTICATED_FRAME_BYTES_MAX`, only ApiVersions / SaslHandshake /
//! SaslAuthenticate (anything else closes the connection), raw size-prefixed tokens after a
//! SaslHandshake v0, at most `SASL_AUTHENTICATION_MS_MAX` in all; a failed authentication is
//! answered after `SASL_FAILED_AUTHENTICATION_DELAY_MS` and the connection closed. Once
//! authenticated the principal (`User:NAME`) is set and frames are served as usual.
//!
//! Before any of that, the broker-wide connection limits (`conn_limits`: `max.connections`,
//! per listener, per IP, creation rate) may refuse the connection: it is closed at once.
//!
//! An unknown API key, or a served key at a version this broker does not serve, is answered
//! in request order with UNSUPPORTED_VERSION (`protocol::unsupported`: ApiVersions gets Kafka's
//! v0 error body, a served key its response at the nearest served version, an unknown key a
//! v0 header and one INT16) and the connection stays open; Kafka 4.4 closes it instead for every
//! key but ApiVersions. A malformed request header, or a body that does not decode, gets no
//! response: the connection is closed after the responses to earlier requests are written
//! (Kafka's behaviour). Other connections are unaffected.

use super::shard_handle::ShardHandle;
use crate::config::file::SecurityProtocol;
use crate::constants::{
    CONNECTION_INFLIGHT_REQUESTS_MAX, REQUEST_FRAME_BYTES_MAX, SASL_AUTHENTICATION_MS_MAX,
    SASL_FAILED_AUTHENTICATION_DELAY_MS, SASL_UNAUTHENTICATED_FRAME_BYTES_MAX,
    SHARD_CONNECTIONS_MAX, SOCKET_READ_CHUNK_BYTES, TLS_HANDSHAKE_MS_MAX,
};
use crate::protocol::apis;
use crate::protocol::codec::{decode_body, parse_frame, Inbound, Request};
use crate::protocol::framing::{frame_with_size, FrameDecoder};
use crate::security::conn_limits::ConnectionLimits;
use crate::security::sasl::{Authenticators, Mechanism, PlainUsers, SaslConnection, Step};
use crate::server::dispatch::dispatch;
use crate::server::CredentialAdmin;
use crate::server::{ConnInfo, Outcome};
use futures_lite::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use glommio::channels::local_channel;
use glommio::net::{TcpListener, TcpStream};
use glommio::sync::StaticPermit;
use glommio::Task;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The SASL side of a SASL_PLAINTEXT / SASL_SSL listener.
pub struct SaslEndpoint {
    pub mechanisms: Vec<Mechanism>,
    pub plain: PlainUsers,
    pub credentials: Arc<super::credentials::SharedCredentials>,
}

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
    pub authorizer: Option<std::sync::Arc<crate::security::authz::AuthorizerConfig>>,
    /// Set for SASL_PLAINTEXT and SASL_SSL listeners.
    pub sasl: Option<SaslEndpoint>,
    /// The broker-wide connection limits (one instance for every shard and listener).
    pub limits: Arc<Mutex<ConnectionLimits>>,
}

/// A connection counted by the limits; uncounted when dropped.
struct LimitSlot {
    endpoint: Rc<Endpoint>,
    ip: std::net::IpAddr,
}

impl Drop for LimitSlot {
    fn drop(&mut self) {
        self.endpoint
            .limits
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .close(&self.endpoint.name, self.ip);
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
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
            ctx.0.shutdown.wait().await;
            None
        })
        .await;
        match accepted {
            None => break,
            Some(Ok(stream)) => {
                if ctx.0.connections_active.get() >= SHARD_CONNECTIONS_MAX {
                    tracing::warn!(shard = %ctx.id, "connection limit reached; closing a new connection");
                    drop(stream);
                    continue;
                }
                let Ok(peer) = stream.peer_addr() else {
                    continue;
                };
                let admitted = endpoint
                    .limits
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .try_open(&endpoint.name, peer.ip(), now_ms());
                if let Err(refusal) = admitted {
                    tracing::info!(shard = %ctx.id, peer = %peer, listener = %endpoint.name, %refusal, "connection refused");
                    ctx.with_metrics(|m| m.connections_closed_on_error += 1);
                    drop(stream);
                    continue;
                }
                let slot = LimitSlot {
                    endpoint: endpoint.clone(),
                    ip: peer.ip(),
                };
                let conn_ctx = ctx.clone();
                let conn_endpoint = endpoint.clone();
                glommio::spawn_local(async move {
                    let _slot = slot;
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
    ctx.0
        .connections_active
        .set(ctx.0.connections_active.get() + 1);
    ctx.with_metrics(|m| {
        m.connections_total += 1;
        m.connections_active += 1;
    });
    let mut conn = ConnInfo::new(endpoint.advertised.unwrap_or(local_addr), peer_addr);
    conn.authorizer = endpoint.authorizer.clone();
    let closed_on_error = match &endpoint.tls {
        None => {
            let plain_fd = Some(std::os::fd::AsRawFd::as_raw_fd(&stream));
            serve_authenticated(&ctx, stream, conn, &endpoint, plain_fd).await
        }
        Some(acceptor) => {
            let handshake =
                futures_lite::future::or(async { Some(acceptor.accept(stream).await) }, async {
                    futures_lite::future::or(
                        glommio::timer::sleep(Duration::from_millis(TLS_HANDSHAKE_MS_MAX)),
                        ctx.0.shutdown.wait(),
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
                    serve_authenticated(&ctx, tls, conn, &endpoint, None).await
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
    ctx.0
        .connections_active
        .set(ctx.0.connections_active.get() - 1);
    ctx.with_metrics(|m| {
        m.connections_active -= 1;
        if closed_on_error {
            m.connections_closed_on_error += 1;
        }
    });
}

/// Runs the SASL exchange if the listener has SASL, then serves frames; returns whether the
/// connection closed on an error. `plain_fd` is the socket of a plaintext `stream` (gathered
/// responses are written to it directly), `None` for TLS.
async fn serve_authenticated<S>(
    ctx: &ShardHandle,
    mut stream: S,
    conn: ConnInfo,
    endpoint: &Endpoint,
    plain_fd: Option<RawFd>,
) -> bool
where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let Some(sasl) = &endpoint.sasl else {
        return serve_frames(
            ctx,
            stream,
            conn,
            FrameDecoder::new(REQUEST_FRAME_BYTES_MAX),
            plain_fd,
        )
        .await;
    };
    let exchange = futures_lite::future::or(
        async { Some(sasl_exchange(ctx, &mut stream, &conn, sasl).await) },
        async {
            futures_lite::future::or(
                glommio::timer::sleep(Duration::from_millis(SASL_AUTHENTICATION_MS_MAX)),
                ctx.0.shutdown.wait(),
            )
            .await;
            None
        },
    )
    .await;
    match exchange {
        Some(Ok(decoder)) => serve_frames(ctx, stream, conn, decoder, plain_fd).await,
        Some(Err(reason)) => {
            tracing::info!(shard = %ctx.id, peer = %conn.peer_addr, listener = %endpoint.name, %reason, "SASL authentication ended the connection");
            let _ = stream.close().await;
            true
        }
        None => {
            tracing::info!(shard = %ctx.id, peer = %conn.peer_addr, listener = %endpoint.name, "SASL authentication timed out");
            let _ = stream.close().await;
            true
        }
    }
}

/// A fresh SCRAM server nonce: 18 random bytes, base64 (printable, no ',').
fn server_nonce() -> String {
    use base64::Engine;
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 18];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .expect("the system's random source works");
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// One request of the SASL exchange: the frame to answer with, and whether to close after it.
fn sasl_request(
    machine: &mut SaslConnection,
    request: &Request,
    auth: &Authenticators<'_>,
) -> Result<(bytes::Bytes, bool), String> {
    use kafka_protocol::messages::{
        SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
        SaslHandshakeResponse,
    };
    use kafka_protocol::protocol::StrBytes;
    let respond = |outcome: Outcome| match outcome {
        Outcome::Respond(frame) => Ok(frame),
        Outcome::RespondGathered(frame) => Ok(frame.to_bytes()),
        Outcome::Close(reason) => Err(reason),
        Outcome::NoResponse => Err("no response".to_string()),
    };
    match request.spec.key {
        apis::SASL_HANDSHAKE => {
            let decoded: SaslHandshakeRequest = decode_body(request).map_err(|e| e.to_string())?;
            match machine.on_handshake(decoded.mechanism.as_str(), request.api_version) {
                Step::Handshake { error, mechanisms } => {
                    let body = SaslHandshakeResponse::default()
                        .with_error_code(error)
                        .with_mechanisms(
                            mechanisms.into_iter().map(StrBytes::from_string).collect(),
                        );
                    Ok((respond(crate::server::respond(request, &body))?, error != 0))
                }
                Step::Close(reason) => Err(reason),
                other => unreachable!("a handshake answers {other:?}"),
            }
        }
        apis::SASL_AUTHENTICATE => {
            let decoded: SaslAuthenticateRequest =
                decode_body(request).map_err(|e| e.to_string())?;
            match machine.on_authenticate(&decoded.auth_bytes, auth) {
                Step::Authenticate {
                    error,
                    message,
                    auth_bytes,
                } => {
                    let body = SaslAuthenticateResponse::default()
                        .with_error_code(error)
                        .with_error_message(message.map(StrBytes::from_string))
                        .with_auth_bytes(auth_bytes.into());
                    Ok((respond(crate::server::respond(request, &body))?, error != 0))
                }
                Step::Close(reason) => Err(reason),
                other => unreachable!("an authentication answers {other:?}"),
            }
        }
        key => match machine.on_other(key) {
            Step::Dispatch => {
                debug_assert_eq!(key, apis::API_VERSIONS);
                Ok((
                    respond(crate::server::api_versions::handle(request))?,
                    false,
                ))
            }
            Step::Close(reason) => Err(reason),
            other => unreachable!("another request answers {other:?}"),
        },
    }
}

/// The SASL exchange of one connection, one frame at a time. Returns the decoder (which may
/// already hold the client's next requests) once the client is authenticated and its
/// principal set; an error (with the reason) when the connection must close.
async fn sasl_exchange<S>(
    ctx: &ShardHandle,
    stream: &mut S,
    conn: &ConnInfo,
    sasl: &SaslEndpoint,
) -> Result<FrameDecoder, String>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut machine = SaslConnection::new(sasl.mechanisms.clone());
    let mut decoder = FrameDecoder::new(SASL_UNAUTHENTICATED_FRAME_BYTES_MAX);
    let mut chunk = vec![0u8; SOCKET_READ_CHUNK_BYTES];
    loop {
        while let Some(frame) = decoder.next_frame().map_err(|e| e.to_string())? {
            let scram = sasl.credentials.snapshot();
            let nonce = server_nonce();
            let auth = Authenticators {
                plain: &sasl.plain,
                scram: &scram,
                server_nonce: &nonce,
            };
            let (answer, close_after) = if machine.expects_raw_token() {
                // After a SaslHandshake v0: a raw token in, a raw token out; a failure
                // closes the connection without an answer (Kafka's behaviour).
                match machine.on_authenticate(&frame, &auth) {
                    Step::Authenticate {
                        error: 0,
                        auth_bytes,
                        ..
                    } => (bytes::Bytes::from(frame_with_size(&auth_bytes)), false),
                    Step::Authenticate { message, .. } => {
                        return Err(message.unwrap_or_else(|| "authentication failed".into()))
                    }
                    Step::Close(reason) => return Err(reason),
                    other => unreachable!("a raw token answers {other:?}"),
                }
            } else {
                match parse_frame(frame) {
                    Inbound::Request(request) => sasl_request(&mut machine, &request, &auth)?,
                    Inbound::Unsupported {
                        api_key,
                        api_version,
                        correlation_id,
                    } if api_key == apis::API_VERSIONS && !machine.is_authenticated() => (
                        Inbound::unsupported_frame(api_key, api_version, correlation_id),
                        false,
                    ),
                    Inbound::Unsupported {
                        api_key,
                        api_version,
                        ..
                    } => {
                        return Err(format!(
                            "unsupported request (key {api_key} v{api_version}) during SASL authentication"
                        ))
                    }
                    Inbound::Reject(reject) => return Err(reject.to_string()),
                }
            };
            if close_after {
                glommio::timer::sleep(Duration::from_millis(SASL_FAILED_AUTHENTICATION_DELAY_MS))
                    .await;
            }
            stream.write_all(&answer).await.map_err(|e| e.to_string())?;
            stream.flush().await.map_err(|e| e.to_string())?;
            ctx.with_metrics(|m| m.bytes_out += answer.len() as u64);
            if close_after {
                return Err("authentication failed".to_string());
            }
            if let Some(principal) = machine.principal() {
                *conn.principal.borrow_mut() = principal.to_string();
                tracing::debug!(shard = %ctx.id, peer = %conn.peer_addr, %principal, "SASL authenticated");
                decoder.set_frame_bytes_max(REQUEST_FRAME_BYTES_MAX);
                return Ok(decoder);
            }
        }
        let n = stream.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("closed by the client".to_string());
        }
        decoder.extend(&chunk[..n]);
        ctx.with_metrics(|m| m.bytes_in += n as u64);
    }
}

/// Serves Kafka frames on `stream` until it closes; returns whether it closed on an error.
/// `decoder` may already hold bytes read (after a SASL exchange); `plain_fd` as in
/// [`serve_authenticated`].
async fn serve_frames<S>(
    ctx: &ShardHandle,
    stream: S,
    conn: ConnInfo,
    decoder: FrameDecoder,
    plain_fd: Option<RawFd>,
) -> bool
where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let ctx = ctx.clone();
    let peer_addr = conn.peer_addr;
    let (mut reader, mut writer) = super::frame_write::split(stream);
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
                Outcome::RespondGathered(frame) => {
                    let written =
                        super::frame_write::write_gathered(&mut writer, plain_fd, &frame).await;
                    if written.is_err() {
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

    let mut decoder = decoder;
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
                        ctx.0
                            .request_bytes
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
            futures_lite::future::or(ctx.0.shutdown.wait(), writer_done.wait()).await;
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
