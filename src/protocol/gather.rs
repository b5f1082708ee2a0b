//! Response frames in pieces: the encoded fields in buffers of their own, the record payloads
//! as the `Bytes` the log handed out, so a Fetch or ShareFetch response reaches the socket
//! without its records being copied into a frame (the runtime writes the pieces with one
//! `sendmsg`; a TLS connection encrypts from them, the one copy encryption makes anyway).
//!
//! How: [`encode_response_gathered`] runs the message's own encoder (the `kafka-protocol`
//! crate's, or a generated one) into a [`GatherBuf`], a `BufMut` that copies every slice it is
//! given except the registered payloads. Both encoders write a `bytes` / `records` field with
//! one `put_slice` of the field's own `Bytes`; a slice with the address and length of a
//! registered payload is therefore that payload, and the buffer closes its current piece and
//! takes a clone of the `Bytes` (a reference count, no copy) instead. A slice that merely has a
//! payload's address and length is the same memory, so the pieces always concatenate to exactly
//! what the plain encoder writes (`codec::encode_response`); the tests compare the two for
//! Fetch and ShareFetch responses of every served version with random contents.
//!
//! Payloads shorter than [`RESPONSE_GATHER_PAYLOAD_BYTES_MIN`] are copied: an iovec of its own
//! costs more than copying them. Invariant of a [`GatheredFrame`]: no empty piece, and `len` is
//! the sum of the pieces' lengths (size prefix included).

use super::apis::ApiSpec;
use super::codec::EncodeError;
use super::framing::SIZE_PREFIX_BYTES;
use crate::constants::RESPONSE_GATHER_PAYLOAD_BYTES_MIN;
use bytes::buf::UninitSlice;
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::ResponseHeader;
use kafka_protocol::protocol::buf::ByteBufMut;
use kafka_protocol::protocol::Encodable;
use std::fmt;
use std::ops::Range;

/// A response frame (size prefix included) as a list of pieces to write in order.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct GatheredFrame {
    pieces: Vec<Bytes>,
    len: usize,
}

impl fmt::Debug for GatheredFrame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GatheredFrame")
            .field("pieces", &self.pieces.len())
            .field("len", &self.len)
            .finish()
    }
}

impl GatheredFrame {
    /// Bytes of the whole frame.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The pieces, in order; none is empty.
    pub fn pieces(&self) -> &[Bytes] {
        &self.pieces
    }

    /// The frame in one buffer (one copy; for a response that is decoded again, and tests).
    pub fn to_bytes(&self) -> Bytes {
        match self.pieces.as_slice() {
            [] => Bytes::new(),
            [one] => one.clone(),
            pieces => {
                let mut out = BytesMut::with_capacity(self.len);
                for piece in pieces {
                    out.extend_from_slice(piece);
                }
                out.freeze()
            }
        }
    }

    fn push(&mut self, piece: Bytes) {
        if !piece.is_empty() {
            self.len += piece.len();
            self.pieces.push(piece);
        }
    }
}

/// A `BufMut` for the encoders that gathers registered payloads instead of copying them.
pub struct GatherBuf {
    /// The piece being written.
    head: BytesMut,
    /// Bytes of the frame before `head`.
    closed_bytes: usize,
    frame: GatheredFrame,
    /// Payloads to gather, keyed by (address, length), sorted.
    payloads: Vec<(usize, usize, Bytes)>,
}

impl GatherBuf {
    /// A buffer gathering `payloads` (those of at least `RESPONSE_GATHER_PAYLOAD_BYTES_MIN`
    /// bytes), with `head_capacity` bytes reserved for the encoded fields.
    pub fn new<'a>(payloads: impl IntoIterator<Item = &'a Bytes>, head_capacity: usize) -> Self {
        let mut payloads: Vec<(usize, usize, Bytes)> = payloads
            .into_iter()
            .filter(|p| p.len() >= RESPONSE_GATHER_PAYLOAD_BYTES_MIN)
            .map(|p| (p.as_ptr() as usize, p.len(), p.clone()))
            .collect();
        payloads.sort_by_key(|(address, len, _)| (*address, *len));
        GatherBuf {
            head: BytesMut::with_capacity(head_capacity),
            closed_bytes: 0,
            frame: GatheredFrame::default(),
            payloads,
        }
    }

    /// Bytes of the payloads this buffer would gather.
    pub fn payload_bytes(&self) -> usize {
        self.payloads.iter().map(|(_, len, _)| len).sum()
    }

    fn payload(&self, src: &[u8]) -> Option<Bytes> {
        let key = (src.as_ptr() as usize, src.len());
        self.payloads
            .binary_search_by_key(&key, |(address, len, _)| (*address, *len))
            .ok()
            .map(|i| self.payloads[i].2.clone())
    }

    /// The frame written so far.
    pub fn finish(mut self) -> GatheredFrame {
        let head = self.head.split().freeze();
        self.frame.push(head);
        self.frame
    }
}

// SAFETY: every method delegates to the `BytesMut` of the current piece, whose `BufMut`
// implementation upholds the trait's contract (`chunk_mut` is writable memory of the buffer,
// `advance_mut` only past bytes initialised through it).
unsafe impl BufMut for GatherBuf {
    fn remaining_mut(&self) -> usize {
        self.head.remaining_mut()
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        // SAFETY: the caller initialised `cnt` bytes of `chunk_mut`, which is `head`'s.
        unsafe { self.head.advance_mut(cnt) }
    }

    fn chunk_mut(&mut self) -> &mut UninitSlice {
        self.head.chunk_mut()
    }

    fn put_slice(&mut self, src: &[u8]) {
        if src.len() >= RESPONSE_GATHER_PAYLOAD_BYTES_MIN {
            if let Some(payload) = self.payload(src) {
                let head = self.head.split().freeze();
                self.closed_bytes += head.len() + payload.len();
                self.frame.push(head);
                self.frame.push(payload);
                return;
            }
        }
        self.head.extend_from_slice(src);
    }
}

impl ByteBufMut for GatherBuf {
    fn offset(&self) -> usize {
        self.closed_bytes + self.head.len()
    }

    fn seek(&mut self, offset: usize) {
        assert!(
            offset >= self.closed_bytes,
            "an encoder seeks back before a gathered payload"
        );
        self.head.resize(offset - self.closed_bytes, 0);
    }

    fn range(&mut self, r: Range<usize>) -> &mut [u8] {
        assert!(
            r.start >= self.closed_bytes,
            "an encoder edits bytes before a gathered payload"
        );
        &mut self.head[r.start - self.closed_bytes..r.end - self.closed_bytes]
    }
}

/// [`super::codec::encode_response`] with `payloads` (the response's record fields) left in
/// their own `Bytes`: the same bytes, in pieces.
pub fn encode_response_gathered<'a, T: Encodable>(
    spec: &ApiSpec,
    version: i16,
    correlation_id: i32,
    body: &T,
    payloads: impl IntoIterator<Item = &'a Bytes>,
) -> Result<GatheredFrame, EncodeError> {
    let err = |e: &dyn fmt::Display| EncodeError {
        api: spec.name,
        version,
        reason: e.to_string(),
    };
    let mut header = ResponseHeader::default();
    header.correlation_id = correlation_id;
    let header_version = spec.response_header_version(version);
    let size = header.compute_size(header_version).map_err(|e| err(&e))?
        + body.compute_size(version).map_err(|e| err(&e))?;
    let size_prefix = i32::try_from(size).map_err(|_| EncodeError {
        api: spec.name,
        version,
        reason: format!("response of {size} bytes is too large"),
    })?;
    let mut out = GatherBuf::new(payloads, 0);
    let fields = (SIZE_PREFIX_BYTES + size).saturating_sub(out.payload_bytes());
    out.head.reserve(fields);
    out.put_i32(size_prefix);
    header
        .encode(&mut out, header_version)
        .map_err(|e| err(&e))?;
    body.encode(&mut out, version).map_err(|e| err(&e))?;
    let frame = out.finish();
    assert_eq!(
        frame.len(),
        SIZE_PREFIX_BYTES + size,
        "compute_size disagrees with encode"
    );
    assert!(frame.pieces().iter().all(|p| !p.is_empty()));
    Ok(frame)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::apis::{api_spec, FETCH, SHARE_FETCH};
    use crate::protocol::codec::encode_response;
    use crate::protocol::generated::share_fetch_response as sfr;
    use crate::protocol::generated::ShareFetchResponse;
    use kafka_protocol::messages::{fetch_response, FetchResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;
    use rand::{rngs::SmallRng, Rng, SeedableRng};

    /// A payload of random length: often empty or below the gathering threshold, often above.
    fn payload(rng: &mut SmallRng) -> Bytes {
        let len = match rng.gen_range(0..4) {
            0 => 0,
            1 => rng.gen_range(1..RESPONSE_GATHER_PAYLOAD_BYTES_MIN),
            _ => rng.gen_range(
                RESPONSE_GATHER_PAYLOAD_BYTES_MIN..4 * RESPONSE_GATHER_PAYLOAD_BYTES_MIN,
            ),
        };
        let bytes: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        // Sometimes a slice in the middle of a larger buffer, as the log hands them out.
        if rng.gen_bool(0.5) {
            let mut wide = vec![0u8; 7];
            wide.extend_from_slice(&bytes);
            wide.extend_from_slice(&[1, 2, 3]);
            Bytes::from(wide).slice(7..7 + len)
        } else {
            Bytes::from(bytes)
        }
    }

    fn text(rng: &mut SmallRng) -> String {
        (0..rng.gen_range(0..12))
            .map(|_| rng.gen_range(b'a'..=b'z') as char)
            .collect()
    }

    fn random_fetch(rng: &mut SmallRng, version: i16) -> FetchResponse {
        let mut response = FetchResponse::default();
        response.throttle_time_ms = rng.gen_range(0..100);
        if version >= 7 {
            response.error_code = rng.gen_range(0..3);
            response.session_id = 0;
        }
        let shared = payload(rng);
        for _ in 0..rng.gen_range(0..4) {
            let mut topic = fetch_response::FetchableTopicResponse::default();
            if version >= 13 {
                topic.topic_id = uuid::Uuid::from_u128(rng.gen());
            } else {
                topic.topic = TopicName(StrBytes::from_string(text(rng)));
            }
            for index in 0..rng.gen_range(0..5) {
                let mut p = fetch_response::PartitionData::default();
                p.partition_index = index;
                p.error_code = rng.gen_range(0..2);
                p.high_watermark = rng.gen_range(0..1 << 40);
                p.last_stable_offset = rng.gen_range(-1..1 << 40);
                if version >= 5 {
                    p.log_start_offset = rng.gen_range(0..1 << 20);
                }
                if rng.gen_bool(0.5) {
                    p.aborted_transactions = Some(
                        (0..rng.gen_range(0..3))
                            .map(|_| {
                                let mut t = fetch_response::AbortedTransaction::default();
                                t.producer_id = rng.gen_range(0..1000i64).into();
                                t.first_offset = rng.gen_range(0..1000);
                                t
                            })
                            .collect(),
                    );
                }
                // The same payload twice in one response must be gathered twice.
                p.records = Some(if rng.gen_bool(0.2) {
                    shared.clone()
                } else {
                    payload(rng)
                });
                topic.partitions.push(p);
            }
            response.responses.push(topic);
        }
        response
    }

    fn random_share_fetch(rng: &mut SmallRng) -> ShareFetchResponse {
        let mut response = ShareFetchResponse::default();
        response.error_code = rng.gen_range(0..2);
        response.error_message = rng.gen_bool(0.3).then(|| text(rng));
        response.acquisition_lock_timeout_ms = rng.gen_range(0..60_000);
        for _ in 0..rng.gen_range(0..4) {
            let mut topic = sfr::ShareFetchableTopicResponse::default();
            topic.topic_id = uuid::Uuid::from_u128(rng.gen());
            for index in 0..rng.gen_range(0..5) {
                let mut p = sfr::PartitionData::default();
                p.partition_index = index;
                p.error_code = rng.gen_range(0..2);
                p.error_message = rng.gen_bool(0.2).then(|| text(rng));
                p.acknowledge_error_code = rng.gen_range(0..2);
                p.current_leader.leader_id = 1;
                p.records = Some(payload(rng));
                p.acquired_records = (0..rng.gen_range(0..4))
                    .map(|i| sfr::AcquiredRecords {
                        first_offset: i * 10,
                        last_offset: i * 10 + 9,
                        delivery_count: rng.gen_range(1..5),
                    })
                    .collect();
                topic.partitions.push(p);
            }
            response.responses.push(topic);
        }
        response.node_endpoints = vec![sfr::NodeEndpoint {
            node_id: 1,
            host: "127.0.0.1".into(),
            port: 9092,
            rack: None,
        }];
        response
    }

    fn fetch_payloads(r: &FetchResponse) -> Vec<&Bytes> {
        r.responses
            .iter()
            .flat_map(|t| t.partitions.iter().filter_map(|p| p.records.as_ref()))
            .collect()
    }

    fn share_payloads(r: &ShareFetchResponse) -> Vec<&Bytes> {
        r.responses
            .iter()
            .flat_map(|t| t.partitions.iter().filter_map(|p| p.records.as_ref()))
            .collect()
    }

    /// The gathered frame equals the plain encoder's, and holds every large payload as the
    /// very `Bytes` it was given (no copy).
    fn check(plain: &Bytes, gathered: &GatheredFrame, payloads: &[&Bytes]) {
        assert_eq!(gathered.len(), plain.len());
        assert_eq!(&gathered.to_bytes(), plain);
        assert!(gathered.pieces().iter().all(|p| !p.is_empty()));
        let large = payloads
            .iter()
            .filter(|p| p.len() >= RESPONSE_GATHER_PAYLOAD_BYTES_MIN)
            .count();
        let shared = gathered
            .pieces()
            .iter()
            .filter(|piece| {
                payloads
                    .iter()
                    .any(|p| p.as_ptr() == piece.as_ptr() && p.len() == piece.len())
            })
            .count();
        assert_eq!(shared, large, "every large payload is gathered, not copied");
    }

    #[test]
    fn fetch_responses_of_every_version_are_byte_identical() {
        let seed: u64 = rand::random();
        println!("seed {seed}");
        let mut rng = SmallRng::seed_from_u64(seed);
        let spec = api_spec(FETCH).expect("Fetch is served");
        for version in spec.min_version..=spec.max_version {
            for _ in 0..50 {
                let response = random_fetch(&mut rng, version);
                let correlation_id = rng.gen();
                let plain = encode_response(spec, version, correlation_id, &response).unwrap();
                let payloads = fetch_payloads(&response);
                let gathered = encode_response_gathered(
                    spec,
                    version,
                    correlation_id,
                    &response,
                    payloads.iter().copied(),
                )
                .unwrap();
                check(&plain, &gathered, &payloads);
            }
        }
    }

    #[test]
    fn share_fetch_responses_of_every_version_are_byte_identical() {
        let seed: u64 = rand::random();
        println!("seed {seed}");
        let mut rng = SmallRng::seed_from_u64(seed);
        let spec = api_spec(SHARE_FETCH).expect("ShareFetch is served");
        for version in spec.min_version..=spec.max_version {
            for _ in 0..100 {
                let response = random_share_fetch(&mut rng);
                let correlation_id = rng.gen();
                let plain = encode_response(spec, version, correlation_id, &response).unwrap();
                let payloads = share_payloads(&response);
                let gathered = encode_response_gathered(
                    spec,
                    version,
                    correlation_id,
                    &response,
                    payloads.iter().copied(),
                )
                .unwrap();
                check(&plain, &gathered, &payloads);
            }
        }
    }

    /// Not a test: what the copy into the frame cost (`cargo test --release --lib
    /// encode_cost -- --ignored --nocapture`). A ShareFetch answer of 4 partitions × 1 MiB.
    #[test]
    #[ignore]
    fn encode_cost() {
        let spec = api_spec(SHARE_FETCH).unwrap();
        let payloads: Vec<Bytes> = (0..4u8).map(|i| Bytes::from(vec![i; 1 << 20])).collect();
        let mut response = ShareFetchResponse::default();
        let mut topic = sfr::ShareFetchableTopicResponse::default();
        for (i, p) in payloads.iter().enumerate() {
            let mut part = sfr::PartitionData::default();
            part.partition_index = i as i32;
            part.records = Some(p.clone());
            part.acquired_records = vec![sfr::AcquiredRecords::default(); 4];
            topic.partitions.push(part);
        }
        response.responses.push(topic);
        let rounds = 200;
        let started = std::time::Instant::now();
        for _ in 0..rounds {
            std::hint::black_box(encode_response(spec, 2, 1, &response).unwrap());
        }
        let plain = started.elapsed() / rounds;
        let started = std::time::Instant::now();
        for _ in 0..rounds {
            std::hint::black_box(
                encode_response_gathered(spec, 2, 1, &response, &payloads).unwrap(),
            );
        }
        let gathered = started.elapsed() / rounds;
        println!(
            "4 MiB ShareFetch answer: plain encode {plain:?}, gathered {gathered:?} \
             (per 1 KiB record: {:.3} µs vs {:.3} µs)",
            plain.as_secs_f64() * 1e6 / 4096.0,
            gathered.as_secs_f64() * 1e6 / 4096.0
        );
    }

    #[test]
    fn unregistered_bytes_and_small_payloads_are_copied() {
        let spec = api_spec(SHARE_FETCH).unwrap();
        let big = Bytes::from(vec![7u8; 3 * RESPONSE_GATHER_PAYLOAD_BYTES_MIN]);
        let mut response = ShareFetchResponse::default();
        let mut topic = sfr::ShareFetchableTopicResponse::default();
        let mut p = sfr::PartitionData::default();
        p.records = Some(big.clone());
        topic.partitions.push(p);
        response.responses.push(topic);
        let plain = encode_response(spec, 2, 5, &response).unwrap();
        // Nothing registered: one piece, a copy.
        let copied = encode_response_gathered(spec, 2, 5, &response, []).unwrap();
        assert_eq!(copied.pieces().len(), 1);
        assert_eq!(copied.to_bytes(), plain);
        // Registered: the fields before, the payload itself, the fields after.
        let gathered = encode_response_gathered(spec, 2, 5, &response, [&big]).unwrap();
        assert_eq!(gathered.pieces().len(), 3);
        assert_eq!(gathered.pieces()[1].as_ptr(), big.as_ptr());
        assert_eq!(gathered.to_bytes(), plain);
    }
}
