//! A read-only view of a Kafka record batch (magic v2), its validation, splitting a produce
//! payload into batches, rewriting the base offset, and a small builder.
//!
//! Layout (big-endian, as Kafka's `DefaultRecordBatch`):
//! ```text
//!  0  8 baseOffset            assigned by the log; not covered by the CRC
//!  8  4 batchLength           bytes after this field (the batch is 12 + batchLength bytes)
//! 12  4 partitionLeaderEpoch  not covered by the CRC
//! 16  1 magic                 2
//! 17  4 crc                   CRC-32C of bytes [21, end)
//! 21  2 attributes            compression (bits 0-2), timestamp type (3), transactional (4),
//!                             control (5), delete horizon (6)
//! 23  4 lastOffsetDelta
//! 27  8 baseTimestamp
//! 35  8 maxTimestamp
//! 43  8 producerId
//! 51  2 producerEpoch
//! 53  4 baseSequence
//! 57  4 recordsCount
//! 61    records
//! ```
//! Validation checks the structure the log relies on (length, magic, CRC, a record count
//! consistent with `lastOffsetDelta`); the records themselves are stored as sent. Errors are
//! typed so the broker can map them to Kafka error codes (`CORRUPT_MESSAGE`, ...).
//!
//! [`Batches`] carries bytes read from a log together with each batch's [`BatchSpan`] (where it
//! lies, its offsets and the header fields a share fetch looks at), parsed once when the read
//! returns; trimming, acquiring, filtering and answering then work on the spans and take slices
//! of the bytes, never parsing a header again.

use bytes::Bytes;
use std::fmt;

/// Bytes of the batch header before the first record.
pub const BATCH_HEADER_BYTES: usize = 61;
/// Bytes before `batchLength`'s counted region: `baseOffset` and `batchLength` themselves.
pub const BATCH_LOG_OVERHEAD_BYTES: usize = 12;
/// The only record-batch format the log stores.
pub const MAGIC_V2: i8 = 2;
const CRC_COVERED_FROM: usize = 21;

/// The decoded header of a record batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

impl BatchHeader {
    /// Total bytes of the batch: `12 + batchLength`.
    pub fn total_bytes(&self) -> usize {
        BATCH_LOG_OVERHEAD_BYTES + self.batch_length as usize
    }

    /// Compression codec id (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd).
    pub fn compression(&self) -> u8 {
        (self.attributes & 0x7) as u8
    }

    /// True if timestamps are the broker's append time (`LogAppendTime`).
    pub fn log_append_time(&self) -> bool {
        self.attributes & 0x8 != 0
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes & 0x10 != 0
    }

    pub fn is_control(&self) -> bool {
        self.attributes & 0x20 != 0
    }

    /// Offsets the batch occupies: `lastOffsetDelta + 1`.
    pub fn offset_count(&self) -> u32 {
        (self.last_offset_delta as u32).wrapping_add(1)
    }
}

/// Why bytes are not a valid record batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchError {
    /// Fewer bytes than a batch header, or than `batchLength` says.
    TooShort {
        need: usize,
        have: usize,
    },
    /// `batchLength` does not match the bytes given (too small to hold a header, or bytes
    /// left over after the batch).
    LengthMismatch {
        declared: i32,
        have: usize,
    },
    WrongMagic {
        magic: i8,
    },
    CrcMismatch {
        stored: u32,
        computed: u32,
    },
    /// `recordsCount` is not `lastOffsetDelta + 1`, or is not positive.
    RecordCountInconsistent {
        records_count: i32,
        last_offset_delta: i32,
    },
}

impl fmt::Display for BatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BatchError::TooShort { need, have } => {
                write!(f, "record batch too short: needs {need} bytes, has {have}")
            }
            BatchError::LengthMismatch { declared, have } => write!(
                f,
                "record batch length field {declared} does not match the {have} bytes given"
            ),
            BatchError::WrongMagic { magic } => {
                write!(f, "record batch magic {magic} is not supported (only 2)")
            }
            BatchError::CrcMismatch { stored, computed } => write!(
                f,
                "record batch CRC-32C mismatch (stored {stored:#010x}, computed {computed:#010x})"
            ),
            BatchError::RecordCountInconsistent {
                records_count,
                last_offset_delta,
            } => write!(
                f,
                "record batch holds {records_count} records but lastOffsetDelta is {last_offset_delta}"
            ),
        }
    }
}

impl std::error::Error for BatchError {}

/// A batch error at a byte position of a produce payload holding several batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitError {
    pub position: usize,
    pub error: BatchError,
}

impl fmt::Display for SplitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at byte {}: {}", self.position, self.error)
    }
}

impl std::error::Error for SplitError {}

fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn be_i64(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Decodes the header fields, checking only that the header is present and the magic is 2.
pub fn parse_header(bytes: &[u8]) -> Result<BatchHeader, BatchError> {
    if bytes.len() < BATCH_HEADER_BYTES {
        return Err(BatchError::TooShort {
            need: BATCH_HEADER_BYTES,
            have: bytes.len(),
        });
    }
    let magic = bytes[16] as i8;
    if magic != MAGIC_V2 {
        return Err(BatchError::WrongMagic { magic });
    }
    Ok(BatchHeader {
        base_offset: be_i64(bytes, 0),
        batch_length: be_i32(bytes, 8),
        partition_leader_epoch: be_i32(bytes, 12),
        magic,
        crc: be_i32(bytes, 17) as u32,
        attributes: be_i16(bytes, 21),
        last_offset_delta: be_i32(bytes, 23),
        base_timestamp: be_i64(bytes, 27),
        max_timestamp: be_i64(bytes, 35),
        producer_id: be_i64(bytes, 43),
        producer_epoch: be_i16(bytes, 51),
        base_sequence: be_i32(bytes, 53),
        records_count: be_i32(bytes, 57),
    })
}

/// Validates one whole batch (exactly `bytes`): header, length, magic, CRC-32C, counts.
pub fn validate(bytes: &[u8]) -> Result<BatchHeader, BatchError> {
    let header = parse_header(bytes)?;
    let declared = header.batch_length;
    if declared < (BATCH_HEADER_BYTES - BATCH_LOG_OVERHEAD_BYTES) as i32
        || header.total_bytes() != bytes.len()
    {
        return Err(BatchError::LengthMismatch {
            declared,
            have: bytes.len(),
        });
    }
    let computed = crc32c::crc32c(&bytes[CRC_COVERED_FROM..]);
    if computed != header.crc {
        return Err(BatchError::CrcMismatch {
            stored: header.crc,
            computed,
        });
    }
    if header.records_count <= 0
        || header.last_offset_delta < 0
        || header.records_count as i64 != header.last_offset_delta as i64 + 1
    {
        return Err(BatchError::RecordCountInconsistent {
            records_count: header.records_count,
            last_offset_delta: header.last_offset_delta,
        });
    }
    Ok(header)
}

/// Splits a produce payload (concatenated batches) into batches by their length fields,
/// without validating their contents. An empty payload gives no batches.
pub fn split_batches(payload: &[u8]) -> Result<Vec<&[u8]>, SplitError> {
    let mut batches = Vec::new();
    let mut position = 0;
    while position < payload.len() {
        let rest = &payload[position..];
        if rest.len() < BATCH_LOG_OVERHEAD_BYTES {
            return Err(SplitError {
                position,
                error: BatchError::TooShort {
                    need: BATCH_LOG_OVERHEAD_BYTES,
                    have: rest.len(),
                },
            });
        }
        let declared = be_i32(rest, 8);
        if declared < (BATCH_HEADER_BYTES - BATCH_LOG_OVERHEAD_BYTES) as i32 {
            return Err(SplitError {
                position,
                error: BatchError::LengthMismatch {
                    declared,
                    have: rest.len(),
                },
            });
        }
        let total = BATCH_LOG_OVERHEAD_BYTES + declared as usize;
        if rest.len() < total {
            return Err(SplitError {
                position,
                error: BatchError::TooShort {
                    need: total,
                    have: rest.len(),
                },
            });
        }
        batches.push(&rest[..total]);
        position += total;
    }
    Ok(batches)
}

/// Writes `base_offset` into the batch (the field is not covered by the CRC).
pub fn set_base_offset(batch: &mut [u8], base_offset: i64) {
    assert!(batch.len() >= BATCH_HEADER_BYTES, "not a record batch");
    batch[0..8].copy_from_slice(&base_offset_bytes(base_offset));
}

/// The bytes [`set_base_offset`] writes: a batch's first 8 (not covered by its CRC).
pub fn base_offset_bytes(base_offset: i64) -> [u8; 8] {
    base_offset.to_be_bytes()
}

/// Builds valid uncompressed magic-v2 batches, for tests and tools.
#[derive(Clone, Debug)]
pub struct BatchBuilder {
    pub base_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub attributes: i16,
    records: Vec<u8>,
    count: i32,
    max_timestamp: i64,
}

impl BatchBuilder {
    /// A non-idempotent batch (producer id -1) with timestamps from `base_timestamp`.
    pub fn new(base_timestamp: i64) -> BatchBuilder {
        BatchBuilder {
            base_timestamp,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            attributes: 0,
            records: Vec::new(),
            count: 0,
            max_timestamp: base_timestamp,
        }
    }

    /// Adds a record (no headers) at `timestamp`.
    pub fn record(&mut self, timestamp: i64, key: Option<&[u8]>, value: Option<&[u8]>) {
        let mut body = Vec::new();
        body.push(0u8); // attributes
        put_varlong(&mut body, timestamp - self.base_timestamp);
        put_varlong(&mut body, self.count as i64);
        for field in [key, value] {
            match field {
                Some(bytes) => {
                    put_varlong(&mut body, bytes.len() as i64);
                    body.extend_from_slice(bytes);
                }
                None => put_varlong(&mut body, -1),
            }
        }
        put_varlong(&mut body, 0); // headers
        put_varlong(&mut self.records, body.len() as i64);
        self.records.extend_from_slice(&body);
        self.count += 1;
        self.max_timestamp = self.max_timestamp.max(timestamp);
    }

    /// The batch bytes, with base offset 0 and a correct CRC.
    pub fn build(&self) -> Vec<u8> {
        assert!(self.count > 0, "a batch holds at least one record");
        let total = BATCH_HEADER_BYTES + self.records.len();
        let mut out = Vec::with_capacity(total);
        out.extend_from_slice(&0i64.to_be_bytes());
        out.extend_from_slice(&((total - BATCH_LOG_OVERHEAD_BYTES) as i32).to_be_bytes());
        out.extend_from_slice(&0i32.to_be_bytes()); // partition leader epoch
        out.push(MAGIC_V2 as u8);
        out.extend_from_slice(&[0u8; 4]); // crc, below
        out.extend_from_slice(&self.attributes.to_be_bytes());
        out.extend_from_slice(&(self.count - 1).to_be_bytes());
        out.extend_from_slice(&self.base_timestamp.to_be_bytes());
        out.extend_from_slice(&self.max_timestamp.to_be_bytes());
        out.extend_from_slice(&self.producer_id.to_be_bytes());
        out.extend_from_slice(&self.producer_epoch.to_be_bytes());
        out.extend_from_slice(&self.base_sequence.to_be_bytes());
        out.extend_from_slice(&self.count.to_be_bytes());
        out.extend_from_slice(&self.records);
        let crc = crc32c::crc32c(&out[CRC_COVERED_FROM..]);
        out[17..21].copy_from_slice(&crc.to_be_bytes());
        debug_assert!(validate(&out).is_ok());
        out
    }
}

/// Zig-zag varint, as Kafka's `ByteUtils.writeVarlong`.
fn put_varlong(out: &mut Vec<u8>, value: i64) {
    let mut v = ((value << 1) ^ (value >> 63)) as u64;
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// One record batch inside a [`Batches`]: where it lies and the header fields the read path
/// uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchSpan {
    /// Byte position of the batch in the bytes read.
    pub start: usize,
    /// Bytes of the batch (`12 + batchLength`).
    pub len: usize,
    pub base_offset: i64,
    /// `baseOffset + lastOffsetDelta`.
    pub last_offset: i64,
    pub attributes: i16,
    pub producer_id: i64,
}

impl BatchSpan {
    fn of(start: usize, header: &BatchHeader) -> BatchSpan {
        BatchSpan {
            start,
            len: header.total_bytes(),
            base_offset: header.base_offset,
            last_offset: header.base_offset + i64::from(header.last_offset_delta),
            attributes: header.attributes,
            producer_id: header.producer_id,
        }
    }

    /// Byte position after the batch.
    pub fn end(&self) -> usize {
        self.start + self.len
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes & 0x10 != 0
    }

    pub fn is_control(&self) -> bool {
        self.attributes & 0x20 != 0
    }
}

/// Whole record batches as read from a log, each batch's header parsed once ([`BatchSpan`]).
/// Invariant: the spans are contiguous, in order, from byte 0, and cover exactly `bytes`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batches {
    bytes: Bytes,
    spans: Vec<BatchSpan>,
}

impl Batches {
    /// The batches of `bytes` (concatenated whole batches, as a log read returns them), up to
    /// the first that does not parse or runs past the end (a log read never has one: its
    /// frames are checked).
    pub fn parse(bytes: Bytes) -> Batches {
        let mut spans = Vec::new();
        let mut end = 0;
        while end + BATCH_HEADER_BYTES <= bytes.len() {
            let Ok(header) = parse_header(&bytes[end..]) else {
                break;
            };
            if header.batch_length < (BATCH_HEADER_BYTES - BATCH_LOG_OVERHEAD_BYTES) as i32
                || end + header.total_bytes() > bytes.len()
            {
                break;
            }
            spans.push(BatchSpan::of(end, &header));
            end += header.total_bytes();
        }
        let mut bytes = bytes;
        bytes.truncate(end);
        Batches::checked(bytes, spans)
    }

    fn checked(bytes: Bytes, spans: Vec<BatchSpan>) -> Batches {
        debug_assert!(spans.windows(2).all(|w| w[0].end() == w[1].start));
        assert_eq!(spans.first().map_or(0, |s| s.start), 0);
        assert_eq!(spans.last().map_or(0, BatchSpan::end), bytes.len());
        Batches { bytes, spans }
    }

    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    pub fn spans(&self) -> &[BatchSpan] {
        &self.spans
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The first `count` batches (a slice of the bytes).
    pub fn prefix(mut self, count: usize) -> Batches {
        self.spans.truncate(count);
        let end = self.spans.last().map_or(0, BatchSpan::end);
        Batches::checked(self.bytes.slice(..end), self.spans)
    }

    /// The batches before the first that reaches `end_offset` (the high watermark or the last
    /// stable offset: every offset returned is below it).
    pub fn below(self, end_offset: i64) -> Batches {
        let count = self
            .spans
            .iter()
            .take_while(|s| s.last_offset < end_offset)
            .count();
        self.prefix(count)
    }

    /// The most batches, from the first, within `max_bytes`.
    pub fn fit(self, max_bytes: usize) -> Batches {
        let count = self
            .spans
            .iter()
            .take_while(|s| s.end() <= max_bytes)
            .count();
        self.prefix(count)
    }

    /// The bytes of the batches `keep` selects, as contiguous runs of the read's bytes
    /// (slices, no copy), in order.
    pub fn runs(&self, mut keep: impl FnMut(&BatchSpan) -> bool) -> Vec<Bytes> {
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for span in self.spans.iter().filter(|s| keep(s)) {
            match runs.last_mut() {
                Some(run) if run.1 == span.start => run.1 = span.end(),
                _ => runs.push((span.start, span.end())),
            }
        }
        runs.into_iter()
            .map(|(from, to)| self.bytes.slice(from..to))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(records: usize, ts: i64) -> Vec<u8> {
        let mut b = BatchBuilder::new(ts);
        for i in 0..records {
            b.record(
                ts + i as i64,
                Some(b"k"),
                Some(format!("value-{i}").as_bytes()),
            );
        }
        b.build()
    }

    #[test]
    fn builder_output_validates_and_decodes() {
        let bytes = batch(3, 1_000);
        let h = validate(&bytes).unwrap();
        assert_eq!(h.records_count, 3);
        assert_eq!(h.last_offset_delta, 2);
        assert_eq!(h.base_timestamp, 1_000);
        assert_eq!(h.max_timestamp, 1_002);
        assert_eq!(h.total_bytes(), bytes.len());
        assert_eq!(h.producer_id, -1);
        assert_eq!(h.offset_count(), 3);
        assert_eq!(h.compression(), 0);
    }

    /// One record, key "k", value "v", timestamp 0: the bytes worked out by hand from
    /// Kafka's record format documentation.
    #[test]
    fn known_bytes_decode() {
        let mut b = BatchBuilder::new(0);
        b.record(0, Some(b"k"), Some(b"v"));
        let bytes = b.build();
        // record: len=8 (zigzag 16), attrs 0, tsDelta 0, offDelta 0, keyLen 1 (2), 'k',
        // valLen 1 (2), 'v', headers 0.
        assert_eq!(&bytes[61..], &[16, 0, 0, 0, 2, b'k', 2, b'v', 0]);
        assert_eq!(
            i32::from_be_bytes(bytes[8..12].try_into().unwrap()),
            70 - 12
        );
        assert_eq!(bytes[16], 2);
    }

    #[test]
    fn every_error_is_detected() {
        let good = batch(2, 5);
        assert!(matches!(
            validate(&good[..40]),
            Err(BatchError::TooShort { need: 61, have: 40 })
        ));
        let mut longer = good.clone();
        longer.push(0);
        assert!(matches!(
            validate(&longer),
            Err(BatchError::LengthMismatch { .. })
        ));
        let mut magic = good.clone();
        magic[16] = 1;
        assert_eq!(validate(&magic), Err(BatchError::WrongMagic { magic: 1 }));
        let mut flipped = good.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert!(matches!(
            validate(&flipped),
            Err(BatchError::CrcMismatch { .. })
        ));
        // Count inconsistent with lastOffsetDelta (CRC recomputed so only the count is wrong).
        let mut count = good.clone();
        count[57..61].copy_from_slice(&5i32.to_be_bytes());
        let crc = crc32c::crc32c(&count[21..]);
        count[17..21].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(
            validate(&count),
            Err(BatchError::RecordCountInconsistent {
                records_count: 5,
                last_offset_delta: 1
            })
        );
    }

    #[test]
    fn base_offset_rewrite_keeps_the_crc_valid() {
        let mut bytes = batch(4, 9);
        set_base_offset(&mut bytes, 123_456_789);
        let h = validate(&bytes).unwrap();
        assert_eq!(h.base_offset, 123_456_789);
    }

    #[test]
    fn split_walks_concatenated_batches() {
        let a = batch(1, 0);
        let b = batch(7, 0);
        let mut payload = a.clone();
        payload.extend_from_slice(&b);
        let parts = split_batches(&payload).unwrap();
        assert_eq!(parts, vec![&a[..], &b[..]]);
        assert_eq!(split_batches(&[]).unwrap().len(), 0);
        let cut = &payload[..payload.len() - 3];
        assert_eq!(
            split_batches(cut).unwrap_err().position,
            a.len(),
            "the error names the batch that is cut"
        );
        let mut bad_len = payload.clone();
        bad_len[8..12].copy_from_slice(&3i32.to_be_bytes());
        assert!(matches!(
            split_batches(&bad_len),
            Err(SplitError {
                position: 0,
                error: BatchError::LengthMismatch { declared: 3, .. }
            })
        ));
    }

    #[test]
    fn garbage_never_panics() {
        let mut state = 0x1234_5678u64;
        for len in 0..300 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
                    (state >> 33) as u8
                })
                .collect();
            let _ = validate(&bytes);
            let _ = split_batches(&bytes);
            let _ = Batches::parse(Bytes::from(bytes));
        }
    }

    /// `Batches` against a model: the list of (base offset, records, bytes) it was built from.
    #[test]
    fn batches_parsed_once_agree_with_a_model() {
        use rand::{rngs::SmallRng, Rng, SeedableRng};
        let seed: u64 = rand::random();
        println!("seed {seed}");
        let mut rng = SmallRng::seed_from_u64(seed);
        for _ in 0..200 {
            let mut model: Vec<(i64, i64, usize, i16)> = Vec::new();
            let mut bytes = Vec::new();
            let mut offset = rng.gen_range(0..100i64);
            for _ in 0..rng.gen_range(0..8) {
                let mut b = BatchBuilder::new(0);
                b.attributes = [0, 0x10, 0x30][rng.gen_range(0..3)];
                let n = rng.gen_range(1..6);
                for _ in 0..n {
                    b.record(0, None, Some(&vec![1u8; rng.gen_range(0..40)]));
                }
                let mut one = b.build();
                set_base_offset(&mut one, offset);
                model.push((offset, offset + n as i64 - 1, one.len(), b.attributes));
                bytes.extend_from_slice(&one);
                offset += n as i64 + rng.gen_range(0..3);
            }
            // A torn tail is left out.
            let torn = rng.gen_bool(0.3);
            if torn {
                bytes.extend_from_slice(&[0, 0, 0]);
            }
            let batches = Batches::parse(Bytes::from(bytes.clone()));
            assert_eq!(batches.spans().len(), model.len());
            let mut start = 0;
            for (span, (first, last, len, attributes)) in batches.spans().iter().zip(&model) {
                assert_eq!((span.start, span.len), (start, *len));
                assert_eq!((span.base_offset, span.last_offset), (*first, *last));
                assert_eq!(span.is_control(), attributes & 0x20 != 0);
                assert_eq!(span.is_transactional(), attributes & 0x10 != 0);
                assert_eq!(span.producer_id, -1);
                start += len;
            }
            assert_eq!(batches.bytes().len(), start);
            assert_eq!(&batches.bytes()[..], &bytes[..start]);

            let hw = rng.gen_range(0..offset + 2);
            let below = batches.clone().below(hw);
            let want = model.iter().take_while(|m| m.1 < hw).count();
            assert_eq!(below.spans().len(), want);
            assert_eq!(
                below.bytes().len(),
                model[..want].iter().map(|m| m.2).sum::<usize>()
            );

            let max = rng.gen_range(0..start + 10);
            let fit = batches.clone().fit(max);
            let mut used = 0;
            let want = model
                .iter()
                .take_while(|m| {
                    used += m.2;
                    used <= max
                })
                .count();
            assert_eq!(fit.spans().len(), want);
            assert!(fit.bytes().len() <= max);

            let runs = batches.runs(|s| s.is_control());
            let control: Vec<u8> = batches
                .spans()
                .iter()
                .filter(|s| s.is_control())
                .flat_map(|s| batches.bytes()[s.start..s.end()].to_vec())
                .collect();
            assert_eq!(runs.concat(), control);
            for run in &runs {
                let at = run.as_ptr() as usize - batches.bytes().as_ptr() as usize;
                assert!(
                    at + run.len() <= batches.bytes().len(),
                    "a slice, not a copy"
                );
            }
        }
    }
}
