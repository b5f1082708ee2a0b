//! Encoding primitives of the generated message codecs (`protocol::generated`).
//!
//! What: the Kafka wire encoding of the primitive field types (big-endian integers, boolean,
//! UUID, strings, bytes/records, arrays, the tagged-field section), for flexible versions
//! (compact lengths: unsigned varint of `len + 1`, 0 = null) and non-flexible ones (INT16 string
//! lengths, INT32 array and bytes lengths, -1 = null). The code under `generated/` is written by
//! `tools/protocol-gen.rs` from Kafka's JSON message specs and calls only these functions.
//!
//! Why here and not the `kafka-protocol` crate: its primitive encoders are `pub(crate)`.
//!
//! Writing goes through [`Out`], implemented by a byte sink (encode) and a counter
//! (compute_size), so one field walk serves both and they cannot disagree.
//!
//! Safety on input: reading never panics and never reserves more elements than bytes remain
//! (every element takes at least one byte), so a small buffer cannot make it allocate much even
//! without the structural guard (`guard.rs`). Truncated input, bad UTF-8, a null where the
//! version allows none, and over-long varints are typed errors ([`WireError`]).

use bytes::{Buf, BufMut, Bytes};
use kafka_protocol::protocol::buf::ByteBuf;
use std::fmt;
use uuid::Uuid;

/// Why a message could not be decoded or encoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireError {
    /// The message has no such version.
    UnsupportedVersion { message: &'static str, version: i16 },
    /// A field set to a non-default value does not exist in the version being written, and it
    /// is not ignorable (Kafka's generated code refuses it the same way).
    FieldNotInVersion { what: &'static str, version: i16 },
    /// The input ended inside `what`.
    Truncated {
        what: &'static str,
        need: usize,
        have: usize,
    },
    /// An unsigned varint longer than 5 bytes or above `u32::MAX`.
    BadVarint { what: &'static str },
    /// A null where the field (at this version) is not nullable.
    UnexpectedNull { what: &'static str },
    /// A string that is not UTF-8.
    BadUtf8 { what: &'static str },
    /// A string, bytes or array too long to encode, or a negative non-null length on input.
    TooLong { what: &'static str, len: usize },
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::UnsupportedVersion { message, version } => {
                write!(f, "{message} has no version {version}")
            }
            WireError::FieldNotInVersion { what, version } => {
                write!(f, "{what} is set but does not exist in version {version}")
            }
            WireError::Truncated { what, need, have } => {
                write!(
                    f,
                    "input ends inside {what}: need {need} bytes, have {have}"
                )
            }
            WireError::BadVarint { what } => write!(f, "malformed unsigned varint in {what}"),
            WireError::UnexpectedNull { what } => write!(f, "null {what} is not allowed"),
            WireError::BadUtf8 { what } => write!(f, "{what} is not UTF-8"),
            WireError::TooLong { what, len } => write!(f, "{what} of {len} is too long"),
        }
    }
}

impl std::error::Error for WireError {}

// ---------------------------------------------------------------------------------------------
// Writing

/// Where a field walk writes: bytes, or only their count.
pub trait Out {
    fn raw(&mut self, bytes: &[u8]);
}

/// Writes into a `BufMut`.
pub struct Sink<'a, B: BufMut>(pub &'a mut B);

impl<B: BufMut> Out for Sink<'_, B> {
    fn raw(&mut self, bytes: &[u8]) {
        self.0.put_slice(bytes);
    }
}

/// Counts bytes (compute_size).
pub struct Counter(pub usize);

impl Out for Counter {
    fn raw(&mut self, bytes: &[u8]) {
        self.0 += bytes.len();
    }
}

/// A structure of a generated message: its field walk (write) and reader, per version.
pub trait Wire: Sized {
    fn write<O: Out>(&self, o: &mut O, version: i16) -> Result<(), WireError>;
    fn read<B: ByteBuf>(b: &mut B, version: i16) -> Result<Self, WireError>;
}

pub fn put_uvarint<O: Out>(o: &mut O, mut value: u32) {
    let mut buf = [0u8; 5];
    let mut n = 0;
    while value >= 0x80 {
        buf[n] = (value as u8) | 0x80;
        value >>= 7;
        n += 1;
    }
    buf[n] = value as u8;
    o.raw(&buf[..=n]);
}

/// A length prefix: compact (`len + 1` as a varint) or classic (INT16 for strings, INT32
/// otherwise); `None` writes null.
fn put_len<O: Out>(
    o: &mut O,
    what: &'static str,
    len: Option<usize>,
    flex: bool,
    short: bool,
) -> Result<(), WireError> {
    let too_long = |len| WireError::TooLong { what, len };
    match (len, flex) {
        (None, true) => put_uvarint(o, 0),
        (Some(len), true) => put_uvarint(
            o,
            u32::try_from(len)
                .ok()
                .and_then(|n| n.checked_add(1))
                .ok_or(too_long(len))?,
        ),
        (None, false) if short => o.raw(&(-1i16).to_be_bytes()),
        (None, false) => o.raw(&(-1i32).to_be_bytes()),
        (Some(len), false) if short => {
            o.raw(&i16::try_from(len).map_err(|_| too_long(len))?.to_be_bytes())
        }
        (Some(len), false) => o.raw(&i32::try_from(len).map_err(|_| too_long(len))?.to_be_bytes()),
    }
    Ok(())
}

pub fn w_bool<O: Out>(o: &mut O, v: bool) {
    o.raw(&[u8::from(v)]);
}

pub fn w_i8<O: Out>(o: &mut O, v: i8) {
    o.raw(&v.to_be_bytes());
}

pub fn w_i16<O: Out>(o: &mut O, v: i16) {
    o.raw(&v.to_be_bytes());
}

pub fn w_i32<O: Out>(o: &mut O, v: i32) {
    o.raw(&v.to_be_bytes());
}

pub fn w_i64<O: Out>(o: &mut O, v: i64) {
    o.raw(&v.to_be_bytes());
}

pub fn w_uuid<O: Out>(o: &mut O, v: &Uuid) {
    o.raw(v.as_bytes());
}

pub fn w_nullable_str<O: Out>(
    o: &mut O,
    what: &'static str,
    v: Option<&str>,
    flex: bool,
) -> Result<(), WireError> {
    put_len(o, what, v.map(str::len), flex, true)?;
    if let Some(s) = v {
        o.raw(s.as_bytes());
    }
    Ok(())
}

pub fn w_str<O: Out>(o: &mut O, what: &'static str, v: &str, flex: bool) -> Result<(), WireError> {
    w_nullable_str(o, what, Some(v), flex)
}

pub fn w_nullable_bytes<O: Out>(
    o: &mut O,
    what: &'static str,
    v: Option<&Bytes>,
    flex: bool,
) -> Result<(), WireError> {
    put_len(o, what, v.map(Bytes::len), flex, false)?;
    if let Some(bytes) = v {
        o.raw(bytes);
    }
    Ok(())
}

pub fn w_bytes<O: Out>(
    o: &mut O,
    what: &'static str,
    v: &Bytes,
    flex: bool,
) -> Result<(), WireError> {
    w_nullable_bytes(o, what, Some(v), flex)
}

/// An array: its length (null for `None`), then each element through `each`.
pub fn w_nullable_array<O: Out, T>(
    o: &mut O,
    what: &'static str,
    items: Option<&[T]>,
    flex: bool,
    mut each: impl FnMut(&mut O, &T) -> Result<(), WireError>,
) -> Result<(), WireError> {
    put_len(o, what, items.map(<[T]>::len), flex, false)?;
    for item in items.unwrap_or_default() {
        each(o, item)?;
    }
    Ok(())
}

pub fn w_array<O: Out, T>(
    o: &mut O,
    what: &'static str,
    items: &[T],
    flex: bool,
    each: impl FnMut(&mut O, &T) -> Result<(), WireError>,
) -> Result<(), WireError> {
    w_nullable_array(o, what, Some(items), flex, each)
}

/// The tagged-field section of a structure we write: no tagged fields.
pub fn w_no_tags<O: Out>(o: &mut O) {
    put_uvarint(o, 0);
}

/// Refuses a field set to a non-default value in a version that does not have it (unless the
/// spec marks it ignorable, where the generated code does not call this).
pub fn absent(is_default: bool, what: &'static str, version: i16) -> Result<(), WireError> {
    if is_default {
        Ok(())
    } else {
        Err(WireError::FieldNotInVersion { what, version })
    }
}

// ---------------------------------------------------------------------------------------------
// Reading

fn truncated(what: &'static str, need: usize, have: usize) -> WireError {
    WireError::Truncated { what, need, have }
}

pub fn r_uvarint<B: Buf>(b: &mut B, what: &'static str) -> Result<u32, WireError> {
    let mut value: u32 = 0;
    for i in 0..5 {
        let byte = b.try_get_u8().map_err(|_| truncated(what, 1, 0))?;
        if i == 4 && byte > 0x0f {
            return Err(WireError::BadVarint { what });
        }
        value |= u32::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(WireError::BadVarint { what })
}

pub fn r_bool<B: Buf>(b: &mut B, what: &'static str) -> Result<bool, WireError> {
    b.try_get_u8()
        .map(|x| x != 0)
        .map_err(|e| truncated(what, e.requested, e.available))
}

pub fn r_i8<B: Buf>(b: &mut B, what: &'static str) -> Result<i8, WireError> {
    b.try_get_i8()
        .map_err(|e| truncated(what, e.requested, e.available))
}

pub fn r_i16<B: Buf>(b: &mut B, what: &'static str) -> Result<i16, WireError> {
    b.try_get_i16()
        .map_err(|e| truncated(what, e.requested, e.available))
}

pub fn r_i32<B: Buf>(b: &mut B, what: &'static str) -> Result<i32, WireError> {
    b.try_get_i32()
        .map_err(|e| truncated(what, e.requested, e.available))
}

pub fn r_i64<B: Buf>(b: &mut B, what: &'static str) -> Result<i64, WireError> {
    b.try_get_i64()
        .map_err(|e| truncated(what, e.requested, e.available))
}

pub fn r_uuid<B: Buf>(b: &mut B, what: &'static str) -> Result<Uuid, WireError> {
    let mut bytes = [0u8; 16];
    b.try_copy_to_slice(&mut bytes)
        .map_err(|e| truncated(what, e.requested, e.available))?;
    Ok(Uuid::from_bytes(bytes))
}

/// A length prefix (see `put_len`); `None` for null.
fn r_len<B: Buf>(
    b: &mut B,
    what: &'static str,
    flex: bool,
    short: bool,
) -> Result<Option<usize>, WireError> {
    let n = if flex {
        return Ok(r_uvarint(b, what)?.checked_sub(1).map(|n| n as usize));
    } else if short {
        i32::from(r_i16(b, what)?)
    } else {
        r_i32(b, what)?
    };
    match n {
        -1 => Ok(None),
        n if n < 0 => Err(WireError::TooLong {
            what,
            len: n.unsigned_abs() as usize,
        }),
        n => Ok(Some(n as usize)),
    }
}

/// `len` bytes, refused if fewer remain.
fn r_exact<B: ByteBuf>(b: &mut B, what: &'static str, len: usize) -> Result<Bytes, WireError> {
    if len > b.remaining() {
        return Err(truncated(what, len, b.remaining()));
    }
    Ok(b.copy_to_bytes(len))
}

pub fn r_nullable_str<B: ByteBuf>(
    b: &mut B,
    what: &'static str,
    flex: bool,
) -> Result<Option<String>, WireError> {
    let Some(len) = r_len(b, what, flex, true)? else {
        return Ok(None);
    };
    let bytes = r_exact(b, what, len)?;
    String::from_utf8(bytes.to_vec())
        .map(Some)
        .map_err(|_| WireError::BadUtf8 { what })
}

pub fn r_nullable_bytes<B: ByteBuf>(
    b: &mut B,
    what: &'static str,
    flex: bool,
) -> Result<Option<Bytes>, WireError> {
    match r_len(b, what, flex, false)? {
        None => Ok(None),
        Some(len) => r_exact(b, what, len).map(Some),
    }
}

/// An array: its length (`None` for null), then `count` elements read by `each`. Refused if
/// more elements are announced than bytes remain, so the reservation is bounded by the input.
pub fn r_nullable_array<B: ByteBuf, T>(
    b: &mut B,
    what: &'static str,
    flex: bool,
    mut each: impl FnMut(&mut B) -> Result<T, WireError>,
) -> Result<Option<Vec<T>>, WireError> {
    let Some(count) = r_len(b, what, flex, false)? else {
        return Ok(None);
    };
    if count > b.remaining() {
        return Err(truncated(what, count, b.remaining()));
    }
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        out.push(each(b)?);
    }
    Ok(Some(out))
}

/// A value that must not be null at this version.
pub fn non_null<T>(v: Option<T>, what: &'static str) -> Result<T, WireError> {
    v.ok_or(WireError::UnexpectedNull { what })
}

/// Skips a tagged-field section: count, then (tag, size, `size` bytes) per field. The
/// generated messages know no tagged field, so every one is skipped.
pub fn r_skip_tags<B: Buf>(b: &mut B) -> Result<(), WireError> {
    let count = r_uvarint(b, "tagged fields")?;
    for _ in 0..count {
        let _tag = r_uvarint(b, "tagged field tag")?;
        let size = r_uvarint(b, "tagged field size")? as usize;
        if size > b.remaining() {
            return Err(truncated("tagged field", size, b.remaining()));
        }
        b.advance(size);
    }
    Ok(())
}
