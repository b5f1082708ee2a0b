//! One blocking connection to one broker node: framing, request/response headers, correlation ids,
//! ApiVersions negotiation, and the error type of the whole client.
//!
//! Wire shape (Kafka's): every request and response is a frame `INT32 length | bytes`. A request is
//! `RequestHeader` (v1, or v2 with tagged fields when the API version is flexible) followed by the
//! body; a response is `ResponseHeader` (v0, or v1 when flexible; ApiVersions always v0) followed by
//! the body. One request is in flight at a time, so the response must carry the correlation id just
//! sent; anything else is a protocol error and the connection is dropped by the caller.
//!
//! Two ways to send:
//! - [`Connection::send`] for `kafka-protocol`'s own request types (`Request` trait: key and header
//!   versions come from the crate), with a version the caller picked, usually by
//!   [`Connection::negotiate`];
//! - [`Connection::send_custom`] / [`Connection::send_raw`] for anything else, e.g. Lockstep's API
//!   keys 1000–1005: the caller gives an [`ApiCall`] (key, version, header versions) and a body type
//!   that is only `Encodable` (request) and `Decodable` (response).
//!   (`kafka-protocol`'s traits return `anyhow::Result`; a crate that implements them for its own
//!   types needs `anyhow` as a direct dependency — it is already in `Cargo.lock`.)
//!
//! Invariants: a [`Connection`] that returned an I/O or protocol error is in an unknown framing
//! state and is marked broken ([`Connection::is_broken`]); callers reconnect instead of reusing it.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};

use bytes::{Bytes, BytesMut};
use kafka_protocol::error::ParseResponseErrorCode;
use kafka_protocol::messages::{
    ApiVersionsRequest, ApiVersionsResponse, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};

use super::limits;

// An old broker answers ApiVersions v3 with UNSUPPORTED_VERSION.
use super::code::UNSUPPORTED_VERSION;

/// What went wrong, in three kinds: the network, the bytes, or the broker said no.
#[derive(Debug)]
pub enum ClientError {
    /// Connect, read or write failed (including timeouts).
    Io { context: String, source: io::Error },
    /// The bytes on the wire made no sense (bad frame, wrong correlation id, undecodable body).
    Protocol(String),
    /// The broker answered with a Kafka error code.
    Kafka {
        code: i16,
        message: String,
        context: String,
    },
    /// The broker does not offer an API version this client implements.
    UnsupportedVersion {
        api_key: i16,
        client: (i16, i16),
        broker: Option<(i16, i16)>,
    },
    /// The operation could not finish before its deadline.
    Timeout(String),
    /// A caller mistake or a client-side limit (e.g. acknowledging a record that was not polled).
    InvalidArgument(String),
    /// A feature this client does not have yet.
    NotImplemented(String),
}

impl ClientError {
    /// A Kafka error from a response's error code and optional message.
    pub fn kafka(code: i16, message: Option<&StrBytes>, context: impl Into<String>) -> Self {
        let message = match message {
            Some(m) if !m.is_empty() => m.to_string(),
            _ => code
                .err()
                .map(|e| format!("{e:?}"))
                .unwrap_or_else(|| "unknown error code".to_string()),
        };
        ClientError::Kafka {
            code,
            message,
            context: context.into(),
        }
    }

    /// The Kafka error code, if the broker sent one.
    pub fn kafka_code(&self) -> Option<i16> {
        match self {
            ClientError::Kafka { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether the error leaves the connection's framing in an unknown state.
    fn breaks_connection(&self) -> bool {
        matches!(self, ClientError::Io { .. } | ClientError::Protocol(_))
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Io { context, source } => write!(f, "I/O error ({context}): {source}"),
            ClientError::Protocol(m) => write!(f, "protocol error: {m}"),
            ClientError::Kafka {
                code,
                message,
                context,
            } => write!(f, "Kafka error {code} ({context}): {message}"),
            ClientError::UnsupportedVersion {
                api_key,
                client,
                broker,
            } => write!(
                f,
                "API key {api_key}: client implements v{}-v{}, broker offers {}",
                client.0,
                client.1,
                match broker {
                    Some((lo, hi)) => format!("v{lo}-v{hi}"),
                    None => "nothing".to_string(),
                }
            ),
            ClientError::Timeout(m) => write!(f, "timed out: {m}"),
            ClientError::InvalidArgument(m) => write!(f, "invalid argument: {m}"),
            ClientError::NotImplemented(m) => write!(f, "not implemented: {m}"),
        }
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClientError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// The client's result type.
pub type Result<T> = std::result::Result<T, ClientError>;

/// Everything needed to frame a request whose types the `kafka-protocol` crate does not know:
/// the API key, the version of the body, and the header versions that go with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiCall {
    pub api_key: i16,
    pub version: i16,
    /// 1 for a non-flexible version, 2 for a flexible one.
    pub request_header_version: i16,
    /// 0 for a non-flexible version, 1 for a flexible one.
    pub response_header_version: i16,
}

impl ApiCall {
    /// A call on an API that is flexible at `version` (header v2 / v1), as every Lockstep API
    /// (keys 1000–1005) is from version 0.
    pub fn flexible(api_key: i16, version: i16) -> Self {
        ApiCall {
            api_key,
            version,
            request_header_version: 2,
            response_header_version: 1,
        }
    }

    /// A call on one of `kafka-protocol`'s request types, header versions taken from the crate.
    pub fn of<R: Request>(version: i16) -> Self {
        ApiCall {
            api_key: R::KEY,
            version,
            request_header_version: R::header_version(version),
            response_header_version: <R::Response as HeaderVersion>::header_version(version),
        }
    }
}

/// A blocking connection to one broker, with the API version ranges it advertised.
pub struct Connection {
    stream: TcpStream,
    addr: String,
    client_id: StrBytes,
    next_correlation_id: i32,
    /// API key → (min, max) version the broker supports.
    broker_versions: HashMap<i16, (i16, i16)>,
    broken: bool,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("addr", &self.addr)
            .field("broken", &self.broken)
            .finish()
    }
}

impl Connection {
    /// Connects to `addr` (`host:port`) and negotiates API versions (ApiVersions v3, falling back
    /// to v0 if the broker answers UNSUPPORTED_VERSION).
    pub fn connect(addr: &str, client_id: &str) -> Result<Connection> {
        let io = |source| ClientError::Io {
            context: format!("connect {addr}"),
            source,
        };
        let sock_addrs: Vec<_> = addr.to_socket_addrs().map_err(io)?.collect();
        let mut last_error = None;
        let mut stream = None;
        for sa in sock_addrs.iter().take(8) {
            match TcpStream::connect_timeout(sa, limits::CONNECT_TIMEOUT) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last_error = Some(e),
            }
        }
        let stream = match stream {
            Some(s) => s,
            None => {
                return Err(io(last_error.unwrap_or_else(|| {
                    io::Error::new(io::ErrorKind::NotFound, "no address resolved")
                })))
            }
        };
        stream
            .set_read_timeout(Some(limits::REQUEST_TIMEOUT))
            .map_err(io)?;
        stream
            .set_write_timeout(Some(limits::REQUEST_TIMEOUT))
            .map_err(io)?;
        stream.set_nodelay(true).map_err(io)?;
        let mut conn = Connection {
            stream,
            addr: addr.to_string(),
            client_id: StrBytes::from_string(client_id.to_string()),
            next_correlation_id: 1,
            broker_versions: HashMap::new(),
            broken: false,
        };
        conn.api_versions()?;
        Ok(conn)
    }

    fn api_versions(&mut self) -> Result<()> {
        let mut request = ApiVersionsRequest::default();
        request.client_software_name = StrBytes::from_static_str("lockstep-client");
        request.client_software_version = StrBytes::from_static_str(env!("CARGO_PKG_VERSION"));
        let mut response: ApiVersionsResponse = self.send(&request, 3)?;
        if response.error_code == UNSUPPORTED_VERSION {
            response = self.send(&request, 0)?;
        }
        if response.error_code != 0 {
            return Err(ClientError::kafka(
                response.error_code,
                None,
                format!("ApiVersions at {}", self.addr),
            ));
        }
        self.broker_versions = response
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect();
        Ok(())
    }

    /// The `host:port` this connection was opened to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Whether an I/O or protocol error left this connection unusable.
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// The version range the broker advertised for `api_key`, if any.
    pub fn broker_versions(&self, api_key: i16) -> Option<(i16, i16)> {
        self.broker_versions.get(&api_key).copied()
    }

    /// The highest version of `api_key` that both the broker and the client (`client_min..=
    /// client_max`) support.
    pub fn negotiate(&self, api_key: i16, client_min: i16, client_max: i16) -> Result<i16> {
        let broker = self.broker_versions(api_key);
        match broker {
            Some((lo, hi)) if lo.max(client_min) <= hi.min(client_max) => Ok(hi.min(client_max)),
            _ => Err(ClientError::UnsupportedVersion {
                api_key,
                client: (client_min, client_max),
                broker,
            }),
        }
    }

    /// Sends one of `kafka-protocol`'s requests at `version` and decodes its response.
    pub fn send<R: Request>(&mut self, request: &R, version: i16) -> Result<R::Response> {
        self.send_custom(ApiCall::of::<R>(version), request)
    }

    /// Negotiates the version of `R` within `client_min..=client_max`, sends, decodes; returns the
    /// version used beside the response.
    pub fn send_negotiated<R: Request>(
        &mut self,
        request: &R,
        client_min: i16,
        client_max: i16,
    ) -> Result<(i16, R::Response)> {
        let version = self.negotiate(R::KEY, client_min, client_max)?;
        Ok((version, self.send(request, version)?))
    }

    /// Sends any `Encodable` body framed as `call` says and decodes the response body as `Resp`.
    /// This is the path for API keys `kafka-protocol` does not know (Lockstep's 1000–1005).
    pub fn send_custom<Req: Encodable, Resp: Decodable>(
        &mut self,
        call: ApiCall,
        request: &Req,
    ) -> Result<Resp> {
        let mut body = BytesMut::new();
        request.encode(&mut body, call.version).map_err(|e| {
            ClientError::InvalidArgument(format!(
                "encode API {} v{}: {e}",
                call.api_key, call.version
            ))
        })?;
        let mut response = self.send_raw(call, &body)?;
        let decoded = Resp::decode(&mut response, call.version).map_err(|e| {
            ClientError::Protocol(format!(
                "decode response of API {} v{} from {}: {e}",
                call.api_key, call.version, self.addr
            ))
        });
        if decoded.is_err() {
            self.broken = true;
        }
        decoded
    }

    /// Sends an already encoded request body and returns the raw response body (the bytes after
    /// the response header). Marks the connection broken on I/O and protocol errors.
    pub fn send_raw(&mut self, call: ApiCall, body: &[u8]) -> Result<Bytes> {
        if self.broken {
            return Err(ClientError::Protocol(format!(
                "connection to {} is broken by an earlier error",
                self.addr
            )));
        }
        let result = self.exchange(call, body);
        if let Err(e) = &result {
            if e.breaks_connection() {
                self.broken = true;
            }
        }
        result
    }

    /// Sends `requests` at `version` one after the other without waiting for answers (as a
    /// client with several requests in flight does), then reads and decodes every answer, in
    /// request order. Marks the connection broken on I/O and protocol errors.
    pub fn send_pipelined<R: Request>(
        &mut self,
        requests: &[R],
        version: i16,
    ) -> Result<Vec<R::Response>> {
        if self.broken {
            return Err(ClientError::Protocol(format!(
                "connection to {} is broken by an earlier error",
                self.addr
            )));
        }
        let call = ApiCall::of::<R>(version);
        let result: Result<Vec<R::Response>> = (|| {
            let mut ids = Vec::with_capacity(requests.len());
            for request in requests {
                let mut body = BytesMut::new();
                request.encode(&mut body, version).map_err(|e| {
                    ClientError::InvalidArgument(format!("encode API {} v{version}: {e}", R::KEY))
                })?;
                ids.push(self.write_request(call, &body)?);
            }
            ids.into_iter()
                .map(|id| {
                    let mut response = self.read_response(call, id)?;
                    R::Response::decode(&mut response, version).map_err(|e| {
                        ClientError::Protocol(format!(
                            "decode response of API {} v{version} from {}: {e}",
                            R::KEY,
                            self.addr
                        ))
                    })
                })
                .collect()
        })();
        if result.is_err() {
            self.broken = true;
        }
        result
    }

    fn exchange(&mut self, call: ApiCall, body: &[u8]) -> Result<Bytes> {
        let correlation_id = self.write_request(call, body)?;
        self.read_response(call, correlation_id)
    }

    /// Frames and writes one request without waiting for its answer; returns its correlation id.
    fn write_request(&mut self, call: ApiCall, body: &[u8]) -> Result<i32> {
        if !(1..=2).contains(&call.request_header_version)
            || !(0..=1).contains(&call.response_header_version)
        {
            return Err(ClientError::InvalidArgument(format!(
                "header versions {}/{} (request must be 1 or 2, response 0 or 1)",
                call.request_header_version, call.response_header_version
            )));
        }
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1).max(1);

        let mut header = RequestHeader::default();
        header.request_api_key = call.api_key;
        header.request_api_version = call.version;
        header.correlation_id = correlation_id;
        header.client_id = Some(self.client_id.clone());
        let mut frame = BytesMut::with_capacity(64 + body.len());
        frame.extend_from_slice(&[0u8; 4]);
        header
            .encode(&mut frame, call.request_header_version)
            .map_err(|e| ClientError::InvalidArgument(format!("encode request header: {e}")))?;
        frame.extend_from_slice(body);
        let len = i32::try_from(frame.len() - 4)
            .map_err(|_| ClientError::InvalidArgument("request larger than 2 GiB".to_string()))?;
        frame[..4].copy_from_slice(&len.to_be_bytes());

        self.stream
            .write_all(&frame)
            .map_err(|e| io_error(&self.addr, call, "send", e))?;
        Ok(correlation_id)
    }

    /// Reads the answer to the request written with `correlation_id`.
    fn read_response(&mut self, call: ApiCall, correlation_id: i32) -> Result<Bytes> {
        let mut len_bytes = [0u8; 4];
        self.stream
            .read_exact(&mut len_bytes)
            .map_err(|e| io_error(&self.addr, call, "receive", e))?;
        let len = i32::from_be_bytes(len_bytes);
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l <= limits::RESPONSE_FRAME_BYTES_MAX)
            .ok_or_else(|| {
                ClientError::Protocol(format!(
                    "response frame length {len} from {} (max {})",
                    self.addr,
                    limits::RESPONSE_FRAME_BYTES_MAX
                ))
            })?;
        let mut payload = vec![0u8; len];
        self.stream
            .read_exact(&mut payload)
            .map_err(|e| io_error(&self.addr, call, "receive", e))?;
        let mut payload = Bytes::from(payload);
        let response_header = ResponseHeader::decode(&mut payload, call.response_header_version)
            .map_err(|e| ClientError::Protocol(format!("response header: {e}")))?;
        if response_header.correlation_id != correlation_id {
            return Err(ClientError::Protocol(format!(
                "correlation id {} in response, {} expected (API {} at {})",
                response_header.correlation_id, correlation_id, call.api_key, self.addr
            )));
        }
        Ok(payload)
    }
}

/// An I/O error of `what` (send, receive) for `call` on the connection to `addr`.
fn io_error(addr: &str, call: ApiCall, what: &str, source: std::io::Error) -> ClientError {
    ClientError::Io {
        context: format!("{what} API {} v{} at {addr}", call.api_key, call.version),
        source,
    }
}

/// Lazily opened connections to the nodes of a cluster, keyed by node id, plus the bootstrap one.
/// A broken connection is dropped and reopened on next use.
#[derive(Debug)]
pub struct NodePool {
    client_id: String,
    bootstrap: String,
    addrs: HashMap<i32, String>,
    conns: HashMap<i32, Connection>,
    bootstrap_conn: Option<Connection>,
}

impl NodePool {
    /// A pool that knows only the bootstrap address; it connects at first use.
    pub fn new(bootstrap: &str, client_id: &str) -> Self {
        NodePool {
            client_id: client_id.to_string(),
            bootstrap: bootstrap.to_string(),
            addrs: HashMap::new(),
            conns: HashMap::new(),
            bootstrap_conn: None,
        }
    }

    /// Records (or updates) the address of a node, e.g. from Metadata or FindCoordinator.
    pub fn set_addr(&mut self, node_id: i32, addr: String) {
        if self.addrs.get(&node_id) != Some(&addr) {
            self.conns.remove(&node_id);
            self.addrs.insert(node_id, addr);
        }
    }

    /// The known address of a node.
    pub fn addr(&self, node_id: i32) -> Option<&str> {
        self.addrs.get(&node_id).map(String::as_str)
    }

    /// The connection to the bootstrap address (any broker will do for metadata).
    pub fn bootstrap(&mut self) -> Result<&mut Connection> {
        if self
            .bootstrap_conn
            .as_ref()
            .is_some_and(Connection::is_broken)
        {
            self.bootstrap_conn = None;
        }
        if self.bootstrap_conn.is_none() {
            self.bootstrap_conn = Some(Connection::connect(&self.bootstrap, &self.client_id)?);
        }
        Ok(self.bootstrap_conn.as_mut().expect("set above"))
    }

    /// The connection to node `node_id`, opened if needed.
    pub fn node(&mut self, node_id: i32) -> Result<&mut Connection> {
        if self.conns.get(&node_id).is_some_and(Connection::is_broken) {
            self.conns.remove(&node_id);
        }
        if !self.conns.contains_key(&node_id) {
            let addr = self.addrs.get(&node_id).ok_or_else(|| {
                ClientError::InvalidArgument(format!("no address known for node {node_id}"))
            })?;
            let conn = Connection::connect(addr, &self.client_id)?;
            self.conns.insert(node_id, conn);
        }
        Ok(self.conns.get_mut(&node_id).expect("inserted above"))
    }
}

#[cfg(test)]
mod tests {
    //! A fake broker on a loopback socket: proves the framing of the custom path (header v2 out,
    //! header v1 back, body passed through untouched) and that bad frames become errors.
    use super::*;
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    use std::net::TcpListener;
    use std::thread;

    /// What the fake answers to the request after ApiVersions.
    #[derive(Clone, Copy)]
    enum Reply {
        Echo,
        WrongCorrelation,
        NegativeLength,
    }

    fn read_frame(s: &mut TcpStream) -> Vec<u8> {
        let mut len = [0u8; 4];
        s.read_exact(&mut len).unwrap();
        let mut buf = vec![0u8; i32::from_be_bytes(len) as usize];
        s.read_exact(&mut buf).unwrap();
        buf
    }

    fn write_frame(s: &mut TcpStream, payload: &[u8]) {
        s.write_all(&(payload.len() as i32).to_be_bytes()).unwrap();
        s.write_all(payload).unwrap();
    }

    fn fake_broker(reply: Reply) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            // ApiVersions v3: header v2 in, header v0 out.
            let req = read_frame(&mut s);
            assert_eq!(&req[..4], &[0, 18, 0, 3]);
            let mut response = ApiVersionsResponse::default();
            for (key, lo, hi) in [(18, 0, 4), (1000, 0, 0)] {
                let mut v = ApiVersion::default();
                v.api_key = key;
                v.min_version = lo;
                v.max_version = hi;
                response.api_keys.push(v);
            }
            let mut out = BytesMut::new();
            out.extend_from_slice(&req[4..8]);
            response.encode(&mut out, 3).unwrap();
            write_frame(&mut s, &out);
            // The custom call: key 1000 v0 with header v2 = key, version, correlation, client
            // id (INT16 length + bytes), empty tagged fields, then the body.
            let req = read_frame(&mut s);
            assert_eq!(&req[..4], &[0x03, 0xe8, 0, 0]);
            let id_len = i16::from_be_bytes([req[8], req[9]]) as usize;
            assert_eq!(req[10 + id_len], 0, "tagged fields of header v2");
            let body = &req[11 + id_len..];
            let mut out = Vec::new();
            match reply {
                Reply::Echo => {
                    out.extend_from_slice(&req[4..8]);
                    out.push(0); // response header v1: empty tagged fields
                    out.extend_from_slice(body);
                    write_frame(&mut s, &out);
                }
                Reply::WrongCorrelation => {
                    out.extend_from_slice(&12345i32.to_be_bytes());
                    out.push(0);
                    write_frame(&mut s, &out);
                }
                Reply::NegativeLength => s.write_all(&(-1i32).to_be_bytes()).unwrap(),
            }
        });
        addr
    }

    #[test]
    fn custom_api_round_trip_with_flexible_headers() {
        let addr = fake_broker(Reply::Echo);
        let mut c = Connection::connect(&addr, "test").unwrap();
        assert_eq!(c.broker_versions(1000), Some((0, 0)));
        assert_eq!(c.negotiate(1000, 0, 3).unwrap(), 0);
        assert_eq!(c.negotiate(18, 0, 3).unwrap(), 3);
        assert!(matches!(
            c.negotiate(78, 1, 1),
            Err(ClientError::UnsupportedVersion { api_key: 78, .. })
        ));
        let body = c
            .send_raw(ApiCall::flexible(1000, 0), b"opaque body")
            .unwrap();
        assert_eq!(&body[..], b"opaque body");
        assert!(!c.is_broken());
    }

    #[test]
    fn wrong_correlation_id_and_bad_length_are_protocol_errors() {
        for reply in [Reply::WrongCorrelation, Reply::NegativeLength] {
            let addr = fake_broker(reply);
            let mut c = Connection::connect(&addr, "test").unwrap();
            let e = c.send_raw(ApiCall::flexible(1000, 0), b"x").unwrap_err();
            assert!(matches!(e, ClientError::Protocol(_)), "{e}");
            assert!(c.is_broken());
            // A broken connection refuses further use instead of misreading frames.
            assert!(c.send_raw(ApiCall::flexible(1000, 0), b"x").is_err());
        }
    }
}
