//! Which snapshot entries form a complete snapshot: the rule recovery and the inspector share.
//!
//! A snapshot is `SnapshotBegin` (seq B), `chunk_count` `SnapshotChunk`s (seqs B+1 ..,
//! indexes 0 ..), `SnapshotEnd`, with nothing in between (the journal writes them in one
//! synchronous call). The concatenated chunk data is the payload; it counts only if the end
//! marker's chunk count, size and CRC-32 match what was assembled.
//!
//! What a crash can explain is tolerated: a snapshot cut short at the end of the journal
//! (incomplete) or cut short and then followed by later entries (interrupted) is *abandoned*
//! and ignored. What compaction can explain is tolerated too: the journal may start in the
//! middle of an older snapshot whose begin was in a deleted segment; chunks and ends naming a
//! snapshot that begins before the journal's first sequence number are *orphans* and ignored.
//! What neither can explain (a chunk or end of a snapshot whose begin should be there, a wrong
//! index, a size or CRC mismatch) is a violation, reported as an error by the caller.
//!
//! Pure: no I/O. `L` is whatever the caller uses to say where an entry is.

use super::entries::{Entry, SnapshotBegin};

/// A complete snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assembled<L> {
    pub begin_seq: u64,
    pub end_seq: u64,
    pub begin_location: L,
    pub payload: Vec<u8>,
}

/// A snapshot that was started and never completed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Abandoned<L> {
    pub begin_seq: u64,
    pub begin_location: L,
    pub chunks_seen: u32,
    pub reason: String,
}

/// What one entry did to the assembly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step<L> {
    /// Not a snapshot entry. `abandoned`: the snapshot it interrupted, if one was open.
    Other { abandoned: Option<Abandoned<L>> },
    /// A snapshot entry that did not complete a snapshot. A begin may abandon an open one.
    Consumed { abandoned: Option<Abandoned<L>> },
    /// The end marker of a complete snapshot.
    Complete(Assembled<L>),
}

struct Partial<L> {
    begin_seq: u64,
    begin_location: L,
    begin: SnapshotBegin,
    next_index: u32,
    data: Vec<u8>,
}

/// Feeds entries in sequence order; see the module docs.
pub struct SnapshotAssembler<L> {
    open: Option<Partial<L>>,
    /// First sequence number of the journal: snapshots that begin before it were compacted.
    first_seq: u64,
}

impl<L> Default for SnapshotAssembler<L> {
    fn default() -> Self {
        SnapshotAssembler {
            open: None,
            first_seq: 0,
        }
    }
}

impl<L: Clone> SnapshotAssembler<L> {
    /// An assembler for a journal whose first entry is `first_seq`.
    pub fn new(first_seq: u64) -> SnapshotAssembler<L> {
        SnapshotAssembler {
            open: None,
            first_seq,
        }
    }

    /// True for a chunk or end, with no snapshot open, of a snapshot that began in a
    /// compacted (deleted) segment.
    fn is_orphan(&self, snapshot_seq: u64) -> bool {
        self.open.is_none() && snapshot_seq < self.first_seq
    }

    /// True while a snapshot's begin has been seen and its end has not.
    pub fn is_open(&self) -> bool {
        self.open.is_some()
    }

    /// Feeds entry `seq`. `Err` is a violation (see the module docs) with the reason.
    pub fn feed(&mut self, seq: u64, entry: &Entry, location: L) -> Result<Step<L>, String> {
        match entry {
            Entry::SnapshotBegin(begin) => {
                let abandoned = self.abandon(seq, "interrupted by a new snapshot");
                self.open = Some(Partial {
                    begin_seq: seq,
                    begin_location: location,
                    begin: *begin,
                    next_index: 0,
                    data: Vec::new(),
                });
                Ok(Step::Consumed { abandoned })
            }
            Entry::SnapshotChunk(chunk) => {
                if self.is_orphan(chunk.snapshot_seq) {
                    return Ok(Step::Consumed { abandoned: None });
                }
                let Some(open) = self.open.as_mut() else {
                    return Err(format!(
                        "chunk {} of snapshot {} without its begin",
                        chunk.index, chunk.snapshot_seq
                    ));
                };
                if chunk.snapshot_seq != open.begin_seq {
                    return Err(format!(
                        "chunk names snapshot {}, but snapshot {} is open",
                        chunk.snapshot_seq, open.begin_seq
                    ));
                }
                if chunk.index != open.next_index || chunk.index >= open.begin.chunk_count {
                    return Err(format!(
                        "chunk index {} where {} of {} was expected",
                        chunk.index, open.next_index, open.begin.chunk_count
                    ));
                }
                let have = open.data.len() as u64 + chunk.data.len() as u64;
                if have > open.begin.total_bytes {
                    return Err(format!(
                        "chunks hold {have} bytes, more than the {} announced",
                        open.begin.total_bytes
                    ));
                }
                open.data.extend_from_slice(&chunk.data);
                open.next_index += 1;
                Ok(Step::Consumed { abandoned: None })
            }
            Entry::SnapshotEnd(end) => {
                if self.is_orphan(end.snapshot_seq) {
                    return Ok(Step::Consumed { abandoned: None });
                }
                let Some(open) = self.open.take() else {
                    return Err(format!(
                        "end of snapshot {} without its begin",
                        end.snapshot_seq
                    ));
                };
                if end.snapshot_seq != open.begin_seq {
                    return Err(format!(
                        "end names snapshot {}, but snapshot {} is open",
                        end.snapshot_seq, open.begin_seq
                    ));
                }
                if end.chunk_count != open.begin.chunk_count || open.next_index != end.chunk_count {
                    return Err(format!(
                        "end says {} chunks, begin said {}, {} were read",
                        end.chunk_count, open.begin.chunk_count, open.next_index
                    ));
                }
                if end.total_bytes != open.begin.total_bytes
                    || open.data.len() as u64 != end.total_bytes
                {
                    return Err(format!(
                        "end says {} bytes, begin said {}, {} were read",
                        end.total_bytes,
                        open.begin.total_bytes,
                        open.data.len()
                    ));
                }
                let crc = crc32fast::hash(&open.data);
                if crc != end.crc32 {
                    return Err(format!(
                        "payload CRC {crc:#010x} differs from the recorded {:#010x}",
                        end.crc32
                    ));
                }
                Ok(Step::Complete(Assembled {
                    begin_seq: open.begin_seq,
                    end_seq: seq,
                    begin_location: open.begin_location,
                    payload: open.data,
                }))
            }
            _ => Ok(Step::Other {
                abandoned: self.abandon(seq, "interrupted by a later entry"),
            }),
        }
    }

    fn abandon(&mut self, seq: u64, why: &str) -> Option<Abandoned<L>> {
        self.open.take().map(|open| Abandoned {
            begin_seq: open.begin_seq,
            begin_location: open.begin_location,
            chunks_seen: open.next_index,
            reason: format!("{why} (entry {seq})"),
        })
    }

    /// Ends the assembly: a snapshot still open is incomplete.
    pub fn finish(mut self) -> Option<Abandoned<L>> {
        self.open.take().map(|open| Abandoned {
            begin_seq: open.begin_seq,
            begin_location: open.begin_location,
            chunks_seen: open.next_index,
            reason: "incomplete at the end of the journal".to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::entries::{SharePartitionState, SnapshotChunk, SnapshotEnd};

    fn begin(chunks: u32, total: u64) -> Entry {
        Entry::SnapshotBegin(SnapshotBegin {
            chunk_count: chunks,
            total_bytes: total,
        })
    }

    fn chunk(snapshot_seq: u64, index: u32, data: &[u8]) -> Entry {
        Entry::SnapshotChunk(SnapshotChunk {
            snapshot_seq,
            index,
            data: data.to_vec(),
        })
    }

    fn end(snapshot_seq: u64, chunks: u32, data: &[u8]) -> Entry {
        Entry::SnapshotEnd(SnapshotEnd {
            snapshot_seq,
            chunk_count: chunks,
            total_bytes: data.len() as u64,
            crc32: crc32fast::hash(data),
        })
    }

    #[test]
    fn complete_snapshot_assembles_in_order() {
        let mut a = SnapshotAssembler::new(0);
        assert!(matches!(
            a.feed(5, &begin(2, 5), ()),
            Ok(Step::Consumed { abandoned: None })
        ));
        a.feed(6, &chunk(5, 0, b"abc"), ()).unwrap();
        a.feed(7, &chunk(5, 1, b"de"), ()).unwrap();
        let Ok(Step::Complete(done)) = a.feed(8, &end(5, 2, b"abcde"), ()) else {
            panic!("not complete")
        };
        assert_eq!((done.begin_seq, done.end_seq), (5, 8));
        assert_eq!(done.payload, b"abcde");
        assert!(!a.is_open());
        assert_eq!(a.finish(), None);
    }

    #[test]
    fn crash_shapes_are_abandoned_not_errors() {
        // Interrupted by an ordinary entry: abandoned, and the entry is an ordinary one.
        let mut a = SnapshotAssembler::new(0);
        a.feed(0, &begin(2, 4), ()).unwrap();
        a.feed(1, &chunk(0, 0, b"ab"), ()).unwrap();
        let ordinary = Entry::SharePartitionUpdate(SharePartitionState {
            group_id: "g".into(),
            topic_id: [7; 16],
            partition: 0,
            start_offset: None,
            end_offset: None,
            state_epoch: 0,
            runs: vec![],
        });
        let Ok(Step::Other {
            abandoned: Some(gone),
        }) = a.feed(2, &ordinary, ())
        else {
            panic!("an ordinary entry abandons the open snapshot")
        };
        assert_eq!((gone.begin_seq, gone.chunks_seen), (0, 1));
        // Interrupted by a new snapshot.
        a.feed(3, &begin(2, 4), ()).unwrap();
        let Ok(Step::Consumed {
            abandoned: Some(gone),
        }) = a.feed(4, &begin(1, 1), ())
        else {
            panic!("a new begin abandons the open snapshot")
        };
        assert_eq!((gone.begin_seq, gone.chunks_seen), (3, 0));
        // Incomplete at the end.
        let gone = a.finish().expect("open snapshot is incomplete");
        assert_eq!(gone.begin_seq, 4);
    }

    #[test]
    fn violations_are_errors() {
        let mut a: SnapshotAssembler<()> = SnapshotAssembler::new(0);
        assert!(a.feed(3, &chunk(1, 0, b"x"), ()).is_err(), "stray chunk");
        assert!(a.feed(3, &end(1, 1, b"x"), ()).is_err(), "stray end");
        a.feed(4, &begin(2, 3), ()).unwrap();
        assert!(a.feed(5, &chunk(4, 1, b"x"), ()).is_err(), "wrong index");
        let mut a: SnapshotAssembler<()> = SnapshotAssembler::new(0);
        a.feed(4, &begin(1, 3), ()).unwrap();
        a.feed(5, &chunk(4, 0, b"xyz"), ()).unwrap();
        assert!(a.feed(6, &end(4, 1, b"xyw"), ()).is_err(), "CRC mismatch");
        let mut a: SnapshotAssembler<()> = SnapshotAssembler::new(0);
        a.feed(4, &begin(1, 2), ()).unwrap();
        assert!(
            a.feed(5, &chunk(4, 0, b"xyz"), ()).is_err(),
            "more bytes than announced"
        );
        let mut a: SnapshotAssembler<()> = SnapshotAssembler::new(0);
        a.feed(4, &begin(2, 3), ()).unwrap();
        a.feed(5, &chunk(4, 0, b"xyz"), ()).unwrap();
        assert!(a.feed(6, &end(4, 2, b"xyz"), ()).is_err(), "missing chunk");
    }

    #[test]
    fn compaction_orphans_are_ignored_only_before_the_first_seq() {
        // The journal starts at 10; snapshot 4 began in a deleted segment.
        let mut a: SnapshotAssembler<()> = SnapshotAssembler::new(10);
        assert_eq!(
            a.feed(10, &chunk(4, 3, b"x"), ()),
            Ok(Step::Consumed { abandoned: None })
        );
        assert_eq!(
            a.feed(11, &end(4, 4, b"xxxx"), ()),
            Ok(Step::Consumed { abandoned: None })
        );
        // A snapshot that began inside the journal must be whole.
        assert!(a.feed(12, &chunk(10, 0, b"x"), ()).is_err());
        // And an orphan cannot appear while another snapshot is open.
        a.feed(13, &begin(1, 1), ()).unwrap();
        assert!(a.feed(14, &chunk(4, 0, b"x"), ()).is_err());
    }
}
