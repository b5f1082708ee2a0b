//! The durable log start offset of a partition: `log-start.checkpoint`.
//!
//! Retention and `DeleteRecords` advance the log start offset; segment files wholly below it
//! are unlinked only after the new start is durable, so a crash can never bring back a
//! partial prefix. The file has two slots, written alternately, each in its own 4 KiB page:
//! a torn write damages only the slot being written, and the other still holds the previous
//! durable value. A slot is written only when no flush is in flight, and a new generation
//! only when every slot written so far was covered by a completed flush, so the slot not being
//! written is always durable (see "Durable position" below).
//!
//! ```text
//! slot (at byte 0 and at byte LOG_CHECKPOINT_SLOT_STRIDE_BYTES), little-endian
//!   0  8  generation        1, 2, 3, ... (0 = never written); slot = generation % 2
//!   8  8  log_start_offset
//!  16  8  durable_base      base offset of the segment `durable_position` is in
//!  24  4  durable_position  a byte position of that segment below which everything was
//!                           synced (0 = not recorded: files written before this field)
//!  28  4  crc               CRC-32 (IEEE) of bytes [0, 28)
//! ```
//! Reading takes the valid slot with the highest generation; no valid slot means "no
//! checkpoint" (the log start is then the first segment's base offset).
//!
//! **Durable position** (FORMAT.md §4–5). After each completed flush the log writes a slot
//! holding the active segment's base offset and the byte size that flush's ticket covered.
//! That slot is not written at once: its 4 KiB block (the slot, then zeros) is a block write of
//! the *next* flush's ticket (`O_DIRECT`, durable when it completes; no extra sync on the write
//! path, no page-cache write to sync). Crash argument:
//! 1. Every value ever written is a true lower bound when it is written: the bytes below it
//!    were synced by a completed flush (or a seal, or recovery). Recovery only cuts past it,
//!    and a roll moves the active segment (the old base then names a sealed segment and is
//!    ignored), so the bound stays true as long as the slot exists.
//! 2. A new generation is written only when the other slot is durable (the checkpoint file
//!    is clean: every slot written so far was covered by a completed flush). While the newest
//!    slot is not yet synced, further writes rewrite *that* slot in place (same generation),
//!    so the other slot, durable, is never touched. A torn write thus damages only a slot
//!    whose older, durable neighbour still holds a valid (smaller) start and position.
//! 3. Whichever valid slot a crash leaves is therefore a valid lower bound; its log start is
//!    either the durable start or, for a slot not yet synced, a start that was about to
//!    become durable (segments below it are unlinked only after a flush covered it).

use crate::constants::{LOG_CHECKPOINT_SLOT_BYTES, LOG_CHECKPOINT_SLOT_STRIDE_BYTES};

/// File name of the checkpoint inside a partition directory.
pub const CHECKPOINT_FILE_NAME: &str = "log-start.checkpoint";

/// A decoded slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckpointSlot {
    pub generation: u64,
    pub log_start_offset: u64,
    /// `(segment base offset, byte position)` below which that segment was synced, if recorded.
    pub durable: Option<(u64, u32)>,
}

/// Byte position of the slot for `generation`.
pub fn slot_position(generation: u64) -> u64 {
    (generation % 2) * LOG_CHECKPOINT_SLOT_STRIDE_BYTES
}

pub fn encode_slot(slot: CheckpointSlot) -> [u8; LOG_CHECKPOINT_SLOT_BYTES] {
    assert!(slot.generation > 0, "generation 0 means never written");
    let mut out = [0u8; LOG_CHECKPOINT_SLOT_BYTES];
    out[0..8].copy_from_slice(&slot.generation.to_le_bytes());
    out[8..16].copy_from_slice(&slot.log_start_offset.to_le_bytes());
    if let Some((base, position)) = slot.durable {
        assert!(position > 0, "position 0 means not recorded");
        out[16..24].copy_from_slice(&base.to_le_bytes());
        out[24..28].copy_from_slice(&position.to_le_bytes());
    }
    let crc = crc32fast::hash(&out[0..28]);
    out[28..32].copy_from_slice(&crc.to_le_bytes());
    out
}

fn decode_slot(bytes: &[u8]) -> Option<CheckpointSlot> {
    if bytes.len() < LOG_CHECKPOINT_SLOT_BYTES {
        return None;
    }
    let stored = u32::from_le_bytes(bytes[28..32].try_into().expect("4 bytes"));
    if stored != crc32fast::hash(&bytes[0..28]) {
        return None;
    }
    let generation = u64::from_le_bytes(bytes[0..8].try_into().expect("8 bytes"));
    if generation == 0 {
        return None;
    }
    let durable_base = u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes"));
    let durable_position = u32::from_le_bytes(bytes[24..28].try_into().expect("4 bytes"));
    Some(CheckpointSlot {
        generation,
        log_start_offset: u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes")),
        durable: (durable_position != 0).then_some((durable_base, durable_position)),
    })
}

/// The newest valid slot of a checkpoint file's bytes, if any. A slot must sit where its
/// generation says, so a slot copied elsewhere is not taken.
pub fn decode_checkpoint(bytes: &[u8]) -> Option<CheckpointSlot> {
    [0u64, 1]
        .into_iter()
        .filter_map(|slot| {
            let at = (slot * LOG_CHECKPOINT_SLOT_STRIDE_BYTES) as usize;
            let found = decode_slot(bytes.get(at..)?)?;
            (slot_position(found.generation) == at as u64).then_some(found)
        })
        .max_by_key(|s| s.generation)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_with(slots: &[CheckpointSlot]) -> Vec<u8> {
        let mut bytes = vec![0u8; (LOG_CHECKPOINT_SLOT_STRIDE_BYTES as usize) * 2];
        for slot in slots {
            let at = slot_position(slot.generation) as usize;
            bytes[at..at + LOG_CHECKPOINT_SLOT_BYTES].copy_from_slice(&encode_slot(*slot));
        }
        bytes
    }

    #[test]
    fn newest_valid_slot_wins_and_a_torn_slot_falls_back() {
        let a = CheckpointSlot {
            generation: 5,
            log_start_offset: 100,
            durable: None,
        };
        let b = CheckpointSlot {
            generation: 6,
            log_start_offset: 250,
            durable: Some((240, 4096)),
        };
        let bytes = file_with(&[a, b]);
        assert_eq!(decode_checkpoint(&bytes), Some(b));
        // Tear the newer slot: the older one is still there.
        for at in 0..LOG_CHECKPOINT_SLOT_BYTES {
            let mut torn = bytes.clone();
            torn[at] ^= 0x01;
            assert_eq!(decode_checkpoint(&torn), Some(a), "flip at {at}");
        }
        assert_eq!(decode_checkpoint(&[]), None);
        assert_eq!(decode_checkpoint(&vec![0u8; 9000]), None);
        // Only the first slot written, file shorter than the second slot.
        let first = CheckpointSlot {
            generation: 2,
            log_start_offset: 7,
            durable: Some((7, 32)),
        };
        assert_eq!(decode_checkpoint(&encode_slot(first)), Some(first));
    }
}
