//! The frame format shared by partition-log segments and journal segments.
//!
//! Normative description: `schemas/FORMAT.md`. In short (all integers little-endian):
//!
//! ```text
//! segment file = segment header (32 bytes) · frame* · (zero fill | torn tail)
//!
//! segment header
//!   0  8  magic      b"LKSTLOG\0" (partition log) | b"LKSTJNL\0" (state journal)
//!   8  2  version    1
//!  10  2  reserved   0
//!  12  4  reserved   0
//!  16  8  base_id    log: base offset of the segment; journal: first sequence number
//!  24  4  reserved   0
//!  28  4  crc        CRC-32 (IEEE) of bytes [0, 28)
//!
//! frame (starts at a multiple of 8)
//!   0  4  crc        CRC-32 (IEEE, crc32fast) of bytes [4, 24 + len): header rest + payload
//!   4  4  len        payload bytes, 1 ..= FRAME_PAYLOAD_BYTES_MAX
//!   8  8  id         log: base offset of the batch; journal: entry sequence number
//!  16  2  kind       log: 1 = Kafka record batch; journal: entry kind
//!  18  2  flags      0
//!  20  4  count      log: records in the batch; journal: 0
//!  24  len payload
//!      pad           zeros up to the next multiple of 8 (not covered by the CRC)
//! ```
//!
//! The recovery rule lives in [`scan`]: frames are read until the first position that does
//! not hold a valid frame. If nothing valid follows it, the rest is a *tail* (clean if all
//! zero, torn otherwise) and may be cut. If a valid frame follows, the bad frame is
//! corruption in the middle and is reported with its byte position, never cut. (The partition
//! log refines this for its active segment with a recorded durable position: see
//! `log::segment::scan_frames` and FORMAT.md §4 rule 2'.)

use crate::constants::{
    FRAME_ALIGN_BYTES, FRAME_HEADER_BYTES, FRAME_PAYLOAD_BYTES_MAX, SEGMENT_HEADER_BYTES,
};
use std::fmt;

/// Version written in every segment header.
pub const FORMAT_VERSION: u16 = 1;

/// What a segment file holds, told by its magic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentKind {
    Log,
    Journal,
}

impl SegmentKind {
    pub const fn magic(self) -> &'static [u8; 8] {
        match self {
            SegmentKind::Log => b"LKSTLOG\0",
            SegmentKind::Journal => b"LKSTJNL\0",
        }
    }

    pub fn from_magic(magic: &[u8]) -> Option<SegmentKind> {
        [SegmentKind::Log, SegmentKind::Journal]
            .into_iter()
            .find(|kind| kind.magic().as_slice() == magic)
    }
}

/// The decoded 32-byte header at the start of a segment file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    pub kind: SegmentKind,
    pub version: u16,
    pub base_id: u64,
}

/// Why a segment header could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeaderError {
    Short { have: usize },
    BadMagic,
    BadCrc { stored: u32, computed: u32 },
    UnsupportedVersion { version: u16 },
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeaderError::Short { have } => {
                write!(
                    f,
                    "segment header needs {SEGMENT_HEADER_BYTES} bytes, file has {have}"
                )
            }
            HeaderError::BadMagic => write!(f, "not a Lockstep segment (bad magic)"),
            HeaderError::BadCrc { stored, computed } => write!(
                f,
                "segment header CRC mismatch (stored {stored:#010x}, computed {computed:#010x})"
            ),
            HeaderError::UnsupportedVersion { version } => {
                write!(f, "segment format version {version} is not supported (this build reads {FORMAT_VERSION})")
            }
        }
    }
}

impl SegmentHeader {
    pub fn new(kind: SegmentKind, base_id: u64) -> SegmentHeader {
        SegmentHeader {
            kind,
            version: FORMAT_VERSION,
            base_id,
        }
    }

    pub fn encode(&self) -> [u8; SEGMENT_HEADER_BYTES] {
        let mut out = [0u8; SEGMENT_HEADER_BYTES];
        out[0..8].copy_from_slice(self.kind.magic());
        out[8..10].copy_from_slice(&self.version.to_le_bytes());
        out[16..24].copy_from_slice(&self.base_id.to_le_bytes());
        let crc = crc32fast::hash(&out[0..28]);
        out[28..32].copy_from_slice(&crc.to_le_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<SegmentHeader, HeaderError> {
        if bytes.len() < SEGMENT_HEADER_BYTES {
            return Err(HeaderError::Short { have: bytes.len() });
        }
        let kind = SegmentKind::from_magic(&bytes[0..8]).ok_or(HeaderError::BadMagic)?;
        let stored = u32_at(bytes, 28);
        let computed = crc32fast::hash(&bytes[0..28]);
        if stored != computed {
            return Err(HeaderError::BadCrc { stored, computed });
        }
        let version = u16::from_le_bytes([bytes[8], bytes[9]]);
        if version != FORMAT_VERSION {
            return Err(HeaderError::UnsupportedVersion { version });
        }
        Ok(SegmentHeader {
            kind,
            version,
            base_id: u64_at(bytes, 16),
        })
    }
}

/// The fields of a frame header other than CRC and length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameMeta {
    pub id: u64,
    pub kind: u16,
    pub count: u32,
}

/// A valid frame found in a byte slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    /// Byte position of the frame header in the segment.
    pub position: usize,
    pub meta: FrameMeta,
    pub crc: u32,
    pub payload: &'a [u8],
}

impl Frame<'_> {
    /// Bytes the frame occupies, padding included: the next frame starts here after it.
    pub fn total_bytes(&self) -> usize {
        frame_total_bytes(self.payload.len())
    }

    pub fn end(&self) -> usize {
        self.position + self.total_bytes()
    }
}

/// Bytes a frame with a payload of `payload_len` bytes occupies, padding included.
pub const fn frame_total_bytes(payload_len: usize) -> usize {
    let raw = FRAME_HEADER_BYTES + payload_len;
    raw.div_ceil(FRAME_ALIGN_BYTES) * FRAME_ALIGN_BYTES
}

/// Appends one frame (header, payload, zero padding) to `out`.
pub fn encode_frame(out: &mut Vec<u8>, meta: FrameMeta, payload: &[u8]) {
    let start = out.len();
    out.resize(start + frame_total_bytes(payload.len()), 0);
    encode_frame_into(&mut out[start..], meta, payload, &[]);
    debug_assert_eq!(
        decode_frame(out, start).map(|f| f.payload.len()),
        Ok(payload.len())
    );
}

/// Payloads at least this long are copied into a frame with non-temporal stores
/// ([`copy_streaming`]).
const STREAMING_COPY_BYTES_MIN: usize = 4096;

/// Encodes one frame into `out`, exactly [`frame_total_bytes`] of the payload long (the
/// padding is zeroed here). The payload is `payload` with its first `head.len()` bytes
/// replaced by `head` (the partition log sets a batch's base offset this way: the batch is
/// copied once, and the frame's CRC is computed from `head` and `payload`, which the caller
/// has just read, not from `out`).
pub fn encode_frame_into(out: &mut [u8], meta: FrameMeta, payload: &[u8], head: &[u8]) {
    assert!(
        !payload.is_empty(),
        "a frame carries at least one payload byte"
    );
    assert!(payload.len() <= FRAME_PAYLOAD_BYTES_MAX);
    assert!(head.len() <= payload.len(), "a head within the payload");
    assert_eq!(
        out.len(),
        frame_total_bytes(payload.len()),
        "a frame's room"
    );
    let (header, rest) = out.split_at_mut(FRAME_HEADER_BYTES);
    header[4..8].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    header[8..16].copy_from_slice(&meta.id.to_le_bytes());
    header[16..18].copy_from_slice(&meta.kind.to_le_bytes());
    header[18..20].copy_from_slice(&0u16.to_le_bytes());
    header[20..24].copy_from_slice(&meta.count.to_le_bytes());
    let (body, padding) = rest.split_at_mut(payload.len());
    let (body_head, body_rest) = body.split_at_mut(head.len());
    body_head.copy_from_slice(head);
    if body_rest.len() >= STREAMING_COPY_BYTES_MIN {
        copy_streaming(body_rest, &payload[head.len()..]);
    } else {
        body_rest.copy_from_slice(&payload[head.len()..]);
    }
    padding.fill(0);
    let mut crc = crc32fast::Hasher::new();
    crc.update(&header[4..]);
    crc.update(head);
    crc.update(&payload[head.len()..]);
    header[..4].copy_from_slice(&crc.finalize().to_le_bytes());
}

/// `dst.copy_from_slice(src)` with non-temporal stores where the target has them: the bytes
/// of a large frame go to the disk by DMA and are seldom read again soon, so writing them
/// around the cache saves reading each destination line into it first (and evicting what
/// the shard still uses). Measured on the development VM (AMD EPYC, 15 KiB payloads into
/// 48 MiB of buffers): 0.08 → 0.055 ms per MB. Public (hidden) for the benches' O_DIRECT
/// reference, which stores the data of each of its writes the way the log does
/// (`benches/common`).
#[doc(hidden)]
pub fn copy_streaming(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len());
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        const LANE: usize = 16;
        let len = dst.len();
        let head = (LANE - (dst.as_ptr() as usize % LANE)) % LANE;
        let head = head.min(len);
        let lanes = (len - head) / LANE;
        dst[..head].copy_from_slice(&src[..head]);
        // SAFETY: SSE2 is part of x86_64. Lane `i` reads `src[head + 16 i ..][..16]` and writes
        // `dst[head + 16 i ..][..16]`, both within the slices (`head + 16 lanes <= len`, the
        // two slices the same length); each store is to a 16-byte aligned address (`head`
        // aligns `dst`), as `_mm_stream_si128` requires; loads are unaligned. `dst` and `src`
        // do not overlap (a `&mut` and a `&`). The fence orders the streaming stores before
        // any later store, so the bytes are in memory before the buffer is handed to the disk.
        unsafe {
            let from = src.as_ptr().add(head);
            let to = dst.as_mut_ptr().add(head);
            for i in 0..lanes {
                let lane = _mm_loadu_si128(from.add(i * LANE) as *const __m128i);
                _mm_stream_si128(to.add(i * LANE) as *mut __m128i, lane);
            }
            _mm_sfence();
        }
        let done = head + lanes * LANE;
        dst[done..].copy_from_slice(&src[done..]);
    }
    #[cfg(not(target_arch = "x86_64"))]
    dst.copy_from_slice(src);
}

fn frame_crc(covered: &[u8]) -> u32 {
    crc32fast::hash(covered)
}

/// Why the bytes at a position are not a valid frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// The 24 header bytes are all zero: end of the written part of a preallocated segment.
    ZeroHeader,
    /// Fewer bytes remain than the header, or than the length field says.
    Truncated {
        need: usize,
        have: usize,
    },
    /// The length field is 0 or above the maximum.
    BadLength {
        len: u32,
    },
    /// The flags field is not 0.
    BadFlags {
        flags: u16,
    },
    BadCrc {
        stored: u32,
        computed: u32,
    },
    /// The position is not a multiple of the frame alignment.
    Misaligned,
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::ZeroHeader => write!(f, "zero header"),
            FrameError::Truncated { need, have } => {
                write!(f, "truncated frame (needs {need} bytes, {have} remain)")
            }
            FrameError::BadLength { len } => write!(f, "invalid frame length {len}"),
            FrameError::BadFlags { flags } => write!(f, "invalid frame flags {flags:#06x}"),
            FrameError::BadCrc { stored, computed } => write!(
                f,
                "frame CRC mismatch (stored {stored:#010x}, computed {computed:#010x})"
            ),
            FrameError::Misaligned => write!(f, "misaligned frame position"),
        }
    }
}

/// Decodes the frame at `position`, checking length, flags and CRC.
pub fn decode_frame(bytes: &[u8], position: usize) -> Result<Frame<'_>, FrameError> {
    if position % FRAME_ALIGN_BYTES != 0 {
        return Err(FrameError::Misaligned);
    }
    let have = bytes.len().saturating_sub(position);
    if have < FRAME_HEADER_BYTES {
        return Err(FrameError::Truncated {
            need: FRAME_HEADER_BYTES,
            have,
        });
    }
    let header = &bytes[position..position + FRAME_HEADER_BYTES];
    if header.iter().all(|&b| b == 0) {
        return Err(FrameError::ZeroHeader);
    }
    let stored = u32_at(header, 0);
    let len = u32_at(header, 4);
    if len == 0 || len as usize > FRAME_PAYLOAD_BYTES_MAX {
        return Err(FrameError::BadLength { len });
    }
    let flags = u16::from_le_bytes([header[18], header[19]]);
    if flags != 0 {
        return Err(FrameError::BadFlags { flags });
    }
    let need = FRAME_HEADER_BYTES + len as usize;
    if have < need {
        return Err(FrameError::Truncated { need, have });
    }
    let computed = frame_crc(&bytes[position + 4..position + need]);
    if stored != computed {
        return Err(FrameError::BadCrc { stored, computed });
    }
    Ok(Frame {
        position,
        meta: FrameMeta {
            id: u64_at(header, 8),
            kind: u16::from_le_bytes([header[16], header[17]]),
            count: u32_at(header, 20),
        },
        crc: stored,
        payload: &bytes[position + FRAME_HEADER_BYTES..position + need],
    })
}

/// How a scan of a segment's frames ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanEnd {
    /// Every byte after `valid_end` is zero (or there is none): nothing to cut.
    Clean { valid_end: usize },
    /// The bytes from `valid_end` on hold no valid frame and are not all zero: a torn or
    /// corrupt tail, `cut_bytes` long up to the last non-zero byte, that recovery truncates.
    TornTail {
        valid_end: usize,
        error: FrameError,
        cut_bytes: usize,
    },
    /// The frame at `position` is bad but a valid frame starts at `next_valid`: corruption in
    /// the middle. Recovery must stop with an error naming the file and `position`.
    Corrupt {
        position: usize,
        error: FrameError,
        next_valid: usize,
    },
}

impl ScanEnd {
    /// End of the last valid frame before the scan stopped.
    pub fn valid_end(&self) -> usize {
        match *self {
            ScanEnd::Clean { valid_end } | ScanEnd::TornTail { valid_end, .. } => valid_end,
            ScanEnd::Corrupt { position, .. } => position,
        }
    }
}

/// Iterates the valid frames of a segment's bytes from `start`; after the iterator is
/// exhausted, [`FrameScan::end`] tells how the scan ended.
pub struct FrameScan<'a> {
    bytes: &'a [u8],
    position: usize,
    end: Option<ScanEnd>,
}

/// Scans `bytes` (a whole segment image, header included) from `start` (usually
/// [`SEGMENT_HEADER_BYTES`]). See the module docs for the rule.
pub fn scan(bytes: &[u8], start: usize) -> FrameScan<'_> {
    assert!(start % FRAME_ALIGN_BYTES == 0);
    FrameScan {
        bytes,
        position: start,
        end: None,
    }
}

impl<'a> FrameScan<'a> {
    /// How the scan ended; `None` until the iterator has returned `None`.
    pub fn end(&self) -> Option<ScanEnd> {
        self.end
    }

    /// Consumes the rest of the scan and returns how it ended.
    pub fn finish(mut self) -> ScanEnd {
        for _ in self.by_ref() {}
        self.end.expect("scan finished")
    }
}

impl<'a> Iterator for FrameScan<'a> {
    type Item = Frame<'a>;

    fn next(&mut self) -> Option<Frame<'a>> {
        if self.end.is_some() {
            return None;
        }
        let position = self.position;
        if position >= self.bytes.len() {
            self.end = Some(ScanEnd::Clean {
                valid_end: position,
            });
            return None;
        }
        match decode_frame(self.bytes, position) {
            Ok(frame) => {
                self.position = frame.end().min(self.bytes.len());
                Some(frame)
            }
            Err(error) => {
                self.end = Some(classify_bad_frame(self.bytes, position, error));
                None
            }
        }
    }
}

fn classify_bad_frame(bytes: &[u8], position: usize, error: FrameError) -> ScanEnd {
    if let Some(next_valid) = next_valid_frame(bytes, position + FRAME_ALIGN_BYTES) {
        return ScanEnd::Corrupt {
            position,
            error,
            next_valid,
        };
    }
    match bytes[position..].iter().rposition(|&b| b != 0) {
        None => ScanEnd::Clean {
            valid_end: position,
        },
        Some(last_nonzero) => ScanEnd::TornTail {
            valid_end: position,
            error,
            cut_bytes: last_nonzero + 1,
        },
    }
}

/// The first aligned position at or after `from` that holds a valid frame.
pub fn next_valid_frame(bytes: &[u8], from: usize) -> Option<usize> {
    let mut position = from.div_ceil(FRAME_ALIGN_BYTES) * FRAME_ALIGN_BYTES;
    while position + FRAME_HEADER_BYTES <= bytes.len() {
        if decode_frame(bytes, position).is_ok() {
            return Some(position);
        }
        position += FRAME_ALIGN_BYTES;
    }
    None
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(frames: &[(u64, &[u8])]) -> Vec<u8> {
        let mut out = SegmentHeader::new(SegmentKind::Log, 0).encode().to_vec();
        for &(id, payload) in frames {
            encode_frame(
                &mut out,
                FrameMeta {
                    id,
                    kind: 1,
                    count: 1,
                },
                payload,
            );
        }
        out
    }

    #[test]
    fn header_round_trip_and_crc() {
        let header = SegmentHeader::new(SegmentKind::Journal, 42);
        let mut bytes = header.encode();
        assert_eq!(SegmentHeader::decode(&bytes), Ok(header));
        bytes[17] ^= 1;
        assert!(matches!(
            SegmentHeader::decode(&bytes),
            Err(HeaderError::BadCrc { .. })
        ));
        bytes[0] = b'X';
        assert_eq!(SegmentHeader::decode(&bytes), Err(HeaderError::BadMagic));
    }

    #[test]
    fn frames_round_trip_aligned() {
        let bytes = segment(&[(0, b"a"), (1, b"hello world, 123"), (17, &[7u8; 1000])]);
        let mut scan = scan(&bytes, SEGMENT_HEADER_BYTES);
        let frames: Vec<_> = scan.by_ref().collect();
        assert_eq!(frames.len(), 3);
        assert!(frames.iter().all(|f| f.position % FRAME_ALIGN_BYTES == 0));
        assert_eq!(frames[1].payload, b"hello world, 123");
        assert_eq!(frames[2].meta.id, 17);
        assert_eq!(
            scan.end(),
            Some(ScanEnd::Clean {
                valid_end: bytes.len()
            })
        );
    }

    #[test]
    fn a_head_replaces_the_payloads_first_bytes_at_any_length_and_alignment() {
        // Lengths around the streaming copy's threshold and its 16-byte lanes, into targets at
        // every 8-byte alignment modulo 16 (frames start at multiples of 8).
        let payload: Vec<u8> = (0..3 * STREAMING_COPY_BYTES_MIN).map(|i| i as u8).collect();
        let head = [0xee; 8];
        for len in [
            8,
            9,
            STREAMING_COPY_BYTES_MIN - 1,
            STREAMING_COPY_BYTES_MIN + 8,
            STREAMING_COPY_BYTES_MIN + 8 + 15,
            3 * STREAMING_COPY_BYTES_MIN,
        ] {
            for shift in [0, 8] {
                let payload = &payload[..len];
                let total = frame_total_bytes(len);
                let mut out = vec![0xffu8; shift + total];
                let meta = FrameMeta {
                    id: 5,
                    kind: 1,
                    count: 2,
                };
                encode_frame_into(&mut out[shift..], meta, payload, &head);
                let frame = decode_frame(&out, shift).expect("a valid frame");
                assert_eq!(frame.meta, meta);
                assert_eq!(&frame.payload[..8], &head);
                assert_eq!(
                    &frame.payload[8..],
                    &payload[8..],
                    "len {len} shift {shift}"
                );
                assert!(out[shift + FRAME_HEADER_BYTES + len..]
                    .iter()
                    .all(|&b| b == 0));
            }
        }
    }

    #[test]
    fn zero_fill_is_clean_end() {
        let mut bytes = segment(&[(0, b"abc")]);
        let end = bytes.len();
        bytes.resize(end + 4096, 0);
        assert_eq!(
            scan(&bytes, SEGMENT_HEADER_BYTES).finish(),
            ScanEnd::Clean { valid_end: end }
        );
    }

    #[test]
    fn torn_tail_is_cut_and_middle_corruption_is_reported() {
        let bytes = segment(&[(0, b"first"), (1, b"second"), (2, b"third")]);
        let frames: Vec<_> = scan(&bytes, SEGMENT_HEADER_BYTES)
            .map(|f| f.position)
            .collect();
        // Torn tail: the last frame is cut short.
        let torn = &bytes[..bytes.len() - 6];
        assert!(matches!(
            scan(torn, SEGMENT_HEADER_BYTES).finish(),
            ScanEnd::TornTail { valid_end, .. } if valid_end == frames[2]
        ));
        // Flipped byte in the last frame: also a tail.
        let mut tail = bytes.clone();
        tail[frames[2] + FRAME_HEADER_BYTES] ^= 0xff;
        assert!(matches!(
            scan(&tail, SEGMENT_HEADER_BYTES).finish(),
            ScanEnd::TornTail { valid_end, error: FrameError::BadCrc { .. }, .. } if valid_end == frames[2]
        ));
        // Flipped byte in the middle frame: corruption, a valid frame follows.
        let mut middle = bytes.clone();
        middle[frames[1] + FRAME_HEADER_BYTES + 1] ^= 0x01;
        assert_eq!(
            scan(&middle, SEGMENT_HEADER_BYTES).finish(),
            ScanEnd::Corrupt {
                position: frames[1],
                error: FrameError::BadCrc {
                    stored: u32_at(&bytes, frames[1]),
                    computed: crc32fast::hash(&middle[frames[1] + 4..frames[1] + 24 + 6]),
                },
                next_valid: frames[2],
            }
        );
    }

    #[test]
    fn every_single_byte_flip_is_detected() {
        let bytes = segment(&[(0, b"one"), (1, b"two two"), (2, b"three three three")]);
        let clean: Vec<_> = scan(&bytes, SEGMENT_HEADER_BYTES)
            .map(|f| f.payload.to_vec())
            .collect();
        for at in SEGMENT_HEADER_BYTES..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x40;
            let mut scan = scan(&damaged, SEGMENT_HEADER_BYTES);
            let seen: Vec<_> = scan.by_ref().map(|f| f.payload.to_vec()).collect();
            let padding = clean.iter().all(|_| true) && seen == clean;
            // A flip either lands in padding (all frames still read) or stops the scan.
            assert!(
                padding || seen.len() < clean.len(),
                "flip at {at} went unnoticed"
            );
            assert_eq!(&clean[..seen.len()], &seen[..]);
        }
    }
}
