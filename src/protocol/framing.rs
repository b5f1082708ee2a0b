//! Kafka frame assembly: a 4-byte big-endian size followed by that many bytes.
//!
//! [`FrameDecoder`] turns a byte stream into whole frames. Invariants:
//! - it never reserves memory for a frame's declared size up front: the buffer grows only with
//!   bytes that actually arrived, so a client that declares 100 MiB and sends 10 bytes costs
//!   10 bytes;
//! - a declared size above the maximum, or negative, is an error reported before any of the
//!   frame's body is buffered; the connection is then closed by the caller (Kafka does the same).
//!
//! Owned by one connection task; pure and synchronous.

use bytes::{Buf, Bytes, BytesMut};
use std::fmt;

/// Bytes of the size prefix in front of every request and response.
pub const SIZE_PREFIX_BYTES: usize = 4;

/// Why the byte stream cannot be framed any further.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// The size prefix is negative.
    NegativeSize { declared: i32 },
    /// The size prefix exceeds the maximum frame size.
    TooLarge { declared: usize, max: usize },
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::NegativeSize { declared } => {
                write!(f, "frame size prefix is negative ({declared})")
            }
            FrameError::TooLarge { declared, max } => {
                write!(
                    f,
                    "frame of {declared} bytes exceeds the maximum of {max} bytes"
                )
            }
        }
    }
}

impl std::error::Error for FrameError {}

/// Splits a byte stream into frames of at most `frame_bytes_max` bytes each.
#[derive(Debug)]
pub struct FrameDecoder {
    buffer: BytesMut,
    frame_bytes_max: usize,
}

impl FrameDecoder {
    pub fn new(frame_bytes_max: usize) -> FrameDecoder {
        assert!(frame_bytes_max > 0 && frame_bytes_max <= i32::MAX as usize);
        FrameDecoder {
            buffer: BytesMut::new(),
            frame_bytes_max,
        }
    }

    /// Changes the largest frame accepted from now on (bytes already buffered are kept).
    pub fn set_frame_bytes_max(&mut self, frame_bytes_max: usize) {
        assert!(frame_bytes_max > 0 && frame_bytes_max <= i32::MAX as usize);
        self.frame_bytes_max = frame_bytes_max;
    }

    /// Appends bytes read from the socket.
    pub fn extend(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// Bytes buffered and not yet returned as frames.
    pub fn buffered_bytes(&self) -> usize {
        self.buffer.len()
    }

    /// The declared size of the next frame, once its prefix has arrived (validated).
    pub fn next_frame_bytes(&self) -> Result<Option<usize>, FrameError> {
        if self.buffer.len() < SIZE_PREFIX_BYTES {
            return Ok(None);
        }
        let declared = i32::from_be_bytes([
            self.buffer[0],
            self.buffer[1],
            self.buffer[2],
            self.buffer[3],
        ]);
        let size = usize::try_from(declared).map_err(|_| FrameError::NegativeSize { declared })?;
        if size > self.frame_bytes_max {
            return Err(FrameError::TooLarge {
                declared: size,
                max: self.frame_bytes_max,
            });
        }
        Ok(Some(size))
    }

    /// The next whole frame (without its size prefix), if it has fully arrived.
    pub fn next_frame(&mut self) -> Result<Option<Bytes>, FrameError> {
        let Some(size) = self.next_frame_bytes()? else {
            return Ok(None);
        };
        if self.buffer.len() < SIZE_PREFIX_BYTES + size {
            return Ok(None);
        }
        self.buffer.advance(SIZE_PREFIX_BYTES);
        let frame = self.buffer.split_to(size).freeze();
        assert_eq!(frame.len(), size);
        Ok(Some(frame))
    }
}

/// Prepends the 4-byte size to `body`, producing a frame ready for the socket.
pub fn frame_with_size(body: &[u8]) -> Vec<u8> {
    let size = i32::try_from(body.len()).expect("response frames are bounded far below 2 GiB");
    let mut out = Vec::with_capacity(SIZE_PREFIX_BYTES + body.len());
    out.extend_from_slice(&size.to_be_bytes());
    out.extend_from_slice(body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::SmallRng, Rng, SeedableRng};

    #[test]
    fn frames_split_at_any_byte_boundary() {
        let seed: u64 = 0x5eed_f4a3;
        println!("seed {seed}");
        let mut rng = SmallRng::seed_from_u64(seed);
        let bodies: Vec<Vec<u8>> = (0..50)
            .map(|i| (0..rng.gen_range(0..300)).map(|j| (i + j) as u8).collect())
            .collect();
        let stream: Vec<u8> = bodies.iter().flat_map(|b| frame_with_size(b)).collect();
        let mut decoder = FrameDecoder::new(1000);
        let mut got = Vec::new();
        let mut pos = 0;
        while pos < stream.len() {
            let step = rng.gen_range(1..40).min(stream.len() - pos);
            decoder.extend(&stream[pos..pos + step]);
            pos += step;
            while let Some(frame) = decoder.next_frame().unwrap() {
                got.push(frame.to_vec());
            }
        }
        assert_eq!(got, bodies);
        assert_eq!(decoder.buffered_bytes(), 0);
    }

    #[test]
    fn oversized_and_negative_prefixes_are_refused_before_the_body() {
        let mut decoder = FrameDecoder::new(100);
        decoder.extend(&101i32.to_be_bytes());
        assert_eq!(
            decoder.next_frame(),
            Err(FrameError::TooLarge {
                declared: 101,
                max: 100
            })
        );
        let mut decoder = FrameDecoder::new(100);
        decoder.extend(&(-5i32).to_be_bytes());
        assert_eq!(
            decoder.next_frame(),
            Err(FrameError::NegativeSize { declared: -5 })
        );
    }

    #[test]
    fn a_declared_size_reserves_nothing() {
        let mut decoder = FrameDecoder::new(i32::MAX as usize);
        decoder.extend(&(i32::MAX).to_be_bytes());
        decoder.extend(b"abc");
        assert_eq!(decoder.next_frame(), Ok(None));
        assert!(decoder.buffer.capacity() < 1024 * 1024);
    }

    #[test]
    fn partial_prefix_waits() {
        let mut decoder = FrameDecoder::new(100);
        decoder.extend(&[0, 0]);
        assert_eq!(decoder.next_frame(), Ok(None));
        decoder.extend(&[0, 0]);
        assert_eq!(decoder.next_frame(), Ok(Some(Bytes::new())));
    }
}
