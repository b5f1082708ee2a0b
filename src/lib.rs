//! Lockstep: a Kafka-wire-compatible broker whose reason to exist is share groups (KIP-932)
//! with transactional acknowledgements, the KIP draft "transactional acknowledgements for share
//! groups" (KAFKA-19883). A streaming framework's workers acknowledge records *inside a
//! transaction*; the records become LOCKED; the framework's coordinator prepares the
//! transaction with its checkpoint, then commits (LOCKED → ACKNOWLEDGED) or aborts (LOCKED →
//! AVAILABLE, redelivered without using a delivery attempt).
//!
//! This page is the architecture: how the crate is laid out, who owns what, how a request
//! travels, what "durable" means and why the main decisions were taken. The README is for
//! users; byte-level formats and the recovery rule are in `schemas/FORMAT.md`; each module's
//! own `//!` docs give its invariants.
//!
//! # Layout
//!
//! The layering, top to bottom (nothing imports upward; the shard core imports neither
//! `server` nor `runtime`):
//!
//! ```text
//! runtime (glommio: executors, listeners, mesh, io_uring)     implements server::Bus, shard::ShardIo
//!   └ server (request handlers, async over Bus; Kafka error codes chosen here)
//!       └ shard (the runtime-free shard core: state, journal group commit, op execution)
//!           └ share · share_txn · producer_txn · group (synchronous state machines)
//!               └ log · journal (partition logs, state journal)
//!                   └ storage (frames, block memory, files and their crash double)
//! ```
//!
//! - [`constants`]: every limit and default, units in the names, compile-time checks of how
//!   they relate. [`config`] (and [`config::file`]): validated configuration (flags, Kafka-style
//!   `server.properties`, topic, broker and group configs).
//! - [`model`]: newtypes and the ownership functions (which shard owns a partition, a group).
//! - [`storage`]: the segment header and CRC frames shared by logs and journal, the recovery scan
//!   rule, block memory for segment tails, files (real, and `SimStorage`, an in-memory crash
//!   double that keeps written and synced bytes apart), memory maps.
//! - [`log`]: segmented partition logs of Kafka record batches: append, read, sparse index,
//!   roll, retention, the log-start checkpoint, recovery; [`log::group_commit`], the I/O-free
//!   flush bookkeeping shared with the journal.
//! - [`journal`]: the per-shard state journal: FlatBuffers entries (`schemas/journal.fbs`),
//!   chunked snapshots, compaction, recovery, and the decoder `lockstep-inspect` uses.
//! - [`share`]: KIP-932 record states (one transition table), offset runs, `SharePartition`,
//!   durable snapshots and deltas; [`share::fetch`], the pure ShareFetch rules.
//! - [`share_txn`]: share-transaction states (one transition table) and a group's transactions.
//! - [`producer_txn`]: producer transactions: the coordinator state machine, the partition side (open
//!   transactions, last stable offset, aborted-transaction index, control records), share
//!   records locked by a producer transaction.
//! - [`group`]: consumer groups (the classic state machine, committed offsets);
//!   [`group::kip848`]: the KIP-848 consumer-group state machine and its assignors.
//! - [`security`]: [`security::authz`], Kafka's ACL model (StandardAuthorizer's rules), pure;
//!   [`security::sasl`], [`security::scram`]: the SASL exchange (PLAIN, SCRAM) and
//!   SCRAM-SHA-256/512; [`security::conn_limits`]: broker-wide
//!   connection limits.
//! - [`protocol`]: the Kafka wire codec on the `kafka-protocol` crate, a structural pre-check
//!   of request bodies, codecs generated from JSON message specs ([`protocol::generated`]), and
//!   gathered response encoding ([`protocol::gather`]).
//! - [`shard`]: the shard core, generic over [`shard::ShardIo`] (call another shard, sleep,
//!   spawn, write a flush, read ahead, the clock, the fatal path); [`shard::exec`], what every
//!   op does on its shard; [`shard::share_txn`], every share-transaction step that waits or talks to
//!   another shard.
//! - [`server`]: request handlers, one file per API family, `async` over [`server::Bus`]; the
//!   ACL hook ([`server::authorize`]) runs before each; [`server::codes`] maps typed errors to
//!   Kafka codes.
//! - [`runtime`]: the only module that touches glommio: executors, SO_REUSEPORT listeners, the
//!   channel mesh, the io_uring storage engine ([`runtime::files`]), TLS, signals, the fatal
//!   path ([`runtime::fatal`]), the broker's global allocator ([`runtime::huge_chunks`]).
//! - [`metrics`]: per-shard counters and histograms, Prometheus text.
//! - [`client`]: a small blocking Rust Kafka client (admin, producer, transactional producer,
//!   share consumer, share transactions) for tests, tools and benches. The Java API and the
//!   Flink source live in `src/client/java/` (one Maven build).
//!
//! # Shard model
//!
//! One glommio executor per shard (`--shards N`, default one per core), pinned to its core.
//! Every shard listens on every listener (SO_REUSEPORT) and accepts connections. A request is
//! decoded on the shard that owns the connection; each piece of it that touches a partition goes
//! over the channel mesh to the partition's shard, and responses on a connection keep request
//! order. A partition's shard is a pure function of topic name and partition, a group's (and a
//! transactional id's) a pure function of its name ([`model`]), so every shard computes the
//! same owner without asking.
//!
//! Each shard owns its partitions' logs and share-partition state, the coordinator state
//! (membership, share sessions, share and producer transactions, committed offsets) of the
//! groups and ids hashed to it, and writes its own journal: shards never contend for a file or
//! a lock. Because ownership depends on the shard count, the data directory records it and is
//! reopened with the same `--shards`. Topic metadata (names, ids, partition counts, configs,
//! ACLs) is small and known to every shard: shard 0 (the metadata controller) serialises
//! changes, persists them atomically (temp file, fsync, rename, directory fsync) and installs
//! them on every shard before answering.
//!
//! A shard's state, its journal's and logs' group commit, the execution of every op and the
//! share- and producer-transaction steps are the runtime-free core ([`shard`]). The runtime
//! supplies glommio's I/O; the deterministic simulations in `tests/` supply a seeded executor,
//! a virtual clock and the storage crash double, so they run the production code.
//!
//! # Data path
//!
//! **Produce.** The connection's shard validates every batch (magic v2, length, CRC-32C,
//! idempotent producer sequence) and sends each partition's batches to its shard, which appends
//! them to the active segment's in-memory tail and starts a flush if none is in flight.
//! `acks=all` is answered once the flush covering the batch completed; consumers see only
//! durable data (the high watermark is the durable end). `acks=1` waits for the same flush (the
//! write-behind tail would lose an earlier answer to a process kill); `acks=0` batches get a
//! flush started at once. Fetch long-polls on the partitions' shards until `min_bytes` or
//! `max_wait_ms`.
//!
//! **Share groups.** A heartbeat runs on the group's shard with Kafka 4.4's epoch rules (only
//! the heartbeating member moves to a new assignment; a member joining fences nobody). A
//! ShareFetch updates the member's share session there, then makes one call per partition shard
//! that applies the request's acknowledgements (answered once journalled durably), checks
//! MinBytes and acquires: one MaxRecords budget walked over the session's partitions in an
//! order rotated every session epoch, offsets acquired as runs, at most
//! `share.partition.max.record.locks` in flight; MaxRecords is soft (rounded up to the end of a
//! log batch) unless ShareAcquireMode is `record_limit`. Records whose delivery count reached
//! max(2, ⌈limit/2⌉) go out as Kafka 4.2+ sends them: in halved batches, a record on its last
//! attempt alone. The acknowledgements' journal flush starts at once and overlaps the read and
//! the acquisition. A session closed with epoch −1, or the loss of its connection, releases the
//! member's acquired records; lock expiry and session timeouts run every 200 ms. When the log
//! start moves (retention, DeleteRecords, a restart), each share partition archives what lies
//! below it.
//!
//! **Share transactions** (API keys 1000–1005, [`shard::share_txn`]). Every call goes to the group's
//! shard, the coordinator. A transactional acknowledgement registers its partitions there (the
//! transaction must be ONGOING, the member known); the coordinator locks the records on the
//! partitions' shards in parallel (ACQUIRED → LOCKED, a range transition indexed by
//! transaction). Prepare closes the transaction to new acknowledgements, waits for those in
//! flight, has every participant make its LOCKED ranges durable (`TransactionLocks` entries),
//! then makes the PREPARE record durable and answers. Commit and abort make the decision
//! durable, answer, then tell the participants, which apply it (LOCKED → ACKNOWLEDGED /
//! ARCHIVED, or → AVAILABLE without using a delivery attempt) and persist that lazily: after a
//! crash they ask the coordinator again. The broker aborts an ONGOING transaction past its
//! timeout and at restart, never a PREPARE one.
//!
//! **Producer transactions** ([`producer_txn`]). The coordinator lives on the shard the transactional
//! id hashes to, with Kafka's states; every change is a journal entry, answered once durable;
//! markers go out only after PrepareCommit / PrepareAbort is durable and are retried until every
//! participant answered (again after a restart). A partition rebuilds its open transactions,
//! last stable offset and aborted-transaction index at open from its newest producer snapshot
//! ([`shard::producer_snapshot`]) and the log past it. KIP-890 part 1: the
//! first transactional batch of a transaction in a partition is appended only once the
//! coordinator confirms the partition is in it. Because Lockstep handles a connection's
//! requests concurrently (Kafka one at a time), a partition refuses higher sequences while a
//! lower one awaits verification, so a later batch cannot overtake the first. TxnShareAcknowledge
//! (the KIP-1289 draft) locks share records in a producer transaction until its marker decides
//! them: the same LOCKED state and participant steps, another coordinator.
//!
//! **Consumer groups.** The classic protocol ([`group::classic`], one transition table) and
//! KIP-848 ([`group::kip848`]) on the group's shard; committed offsets are journal entries, answered
//! once durable; membership is not persisted.
//!
//! # Durability
//!
//! Two kinds of log share one frame format: the partition logs (one directory per
//! topic-partition, segments of record batches) and the state journal (one per shard:
//! share-partition state, share and producer transactions, committed offsets). Every frame has a
//! CRC-32 over header and payload. A *flush* makes everything appended before it durable;
//! appends that arrive while a flush is in flight share the next one (group commit). Anything
//! acknowledged as durable (an `acks=all` produce, a share acknowledgement, a prepare, a commit
//! or abort, an offset commit) is covered by a completed flush. A failed fsync or write poisons
//! the log or journal: it refuses further writes rather than pretend (the page cache may have
//! dropped the dirty pages), and the process takes the fatal path.
//!
//! **The storage engine** ([`runtime::files`]). The log and the journal decide what to write
//! (flush tickets of aligned blocks) in synchronous code; the runtime performs the writes through
//! io_uring:
//! - A flush writes the active segment's unwritten tail as block-aligned O_DIRECT writes from the
//!   tail's own memory (no copy; the partial last block is written again by the next flush).
//!   Active segments are preallocated (up to 16 MiB ahead), so a durable append changes no file
//!   size, and zeros are written ahead of the data (up to 256 KiB) so that later writes
//!   overwrite written blocks instead of converting unwritten extents.
//! - Once a durable checkpoint slot names the active segment, a flush's writes go together and
//!   are synced once, and each full 1 MiB tail chunk is written as soon as it fills (a
//!   write-behind); a flush begun while write-behinds are in flight syncs and declares durable
//!   only the batches below the first one still in flight (a prefix flush). A crash may then
//!   leave a hole with frames after it, always past the recorded durable position, which
//!   recovery cuts as a tail.
//! - A roll does not sync: the next flush seals the old segment (last bytes, cut, index,
//!   directory) before it writes the new one, so the request path waits for no sync and only the
//!   last segment can be torn.
//! - Removed segments' files are kept as spares (at most 8 per partition, deleted after 5 idle
//!   minutes) that rolls reuse: the disk rewrites written blocks about twice as fast as it fills
//!   never-written ones. Recovery tells a reused file's old frames from the new ones by their
//!   offsets, which only grow.
//! - Full tail chunks come from 2 MiB huge pages ([`runtime::huge_chunks`]): a virtio disk
//!   takes at most 254 memory runs per request, so a 1 MiB write from 4 KiB pages took two or
//!   three requests. glibc's mmap and trim thresholds are raised at start so that per-flush
//!   buffers stay mapped instead of faulting in again on every flush.
//! - glommio submits queued I/O only between runs of its task queues; the doorbell
//!   ([`runtime::kick`], a loopback UDP socket on the latency ring) ends the current run so that
//!   a flush's writes reach the kernel before the appenders it releases have all run. The flush
//!   loop yields once after releasing its waiters, so the next flush carries what they appended.
//!
//! **The journal** ([`journal`]): preallocated segments memory-mapped *private*, so appends are
//! memcpys the kernel never writes back by itself; a flush writes the blocks covering the
//! unflushed bytes as one O_DIRECT + O_DSYNC write, and durable pages are handed back to the
//! kernel, so its resident memory is its unflushed tail. Its rolls are sealed by the next flush
//! too. Chunked snapshots let compaction delete old segments.
//!
//! Some of these choices can be switched off for measurement only, by environment variables read
//! at start: `LOCKSTEP_JOURNAL_FLUSH=fdatasync` (a shared map and fdatasync),
//! `LOCKSTEP_JOURNAL_ZEROS=off`, `LOCKSTEP_ENGINE_SYNC=fdatasync`,
//! `LOCKSTEP_ENGINE_MALLOC=default`, `LOCKSTEP_ENGINE_HUGEPAGES=off`,
//! `LOCKSTEP_LOG_WRITE_BEHIND=off`, `LOCKSTEP_IO_KICK=off`.
//!
//! **Recovery** cuts only a torn or corrupt *tail*: a bad frame with no valid frame after it. A
//! bad frame followed by a valid one is corruption in the middle, and the start stops with an
//! error naming the file and byte offset; a zero tail (preallocation) is a clean end. A
//! partition log records a lower bound of its active segment's durable position in its
//! log-start checkpoint, so damage a power loss leaves past it (pages written back out of
//! order) is cut as a tail, not refused. The log start advances only through that two-slot
//! checkpoint, durable before any segment below it is unlinked. Recovery reads the active
//! segment's written data whole, which is why `segment.bytes` defaults to 256 MiB. Share state
//! replays from snapshots and entries; ACQUIRED was never persisted (such records come back
//! AVAILABLE, as in Kafka); an ONGOING share transaction is aborted; a participant holding
//! locks of a transaction asks its coordinator, and PREPARE keeps them.
//!
//! **The data directory's identity** ([`shard::data_dir`]). `metadata.json` names the topics
//! the logs and journals belong to, and `meta.properties` the cluster. A start never replaces
//! them over existing data: with `metadata.json` lost, or the two files naming different
//! clusters, the broker refuses to start (exit 3, naming the file), and a partition directory no
//! topic names is renamed `<name>-stray`, never deleted. Only the directories of a topic whose
//! deletion is durable in `metadata.json` are removed.
//!
//! **One fatal path** ([`runtime::fatal`]). A poisoned partition log or journal, or a panic on a
//! shard thread, ends the whole process at once, before anyone waiting is answered, with one
//! line on stderr (`lockstep: fatal: <reason> on shard-N: <detail>`) and its own exit status:
//! 9 a shard panicked, 10 storage poisoned. A broker with one dead shard would be half alive
//! (calls to it would wait forever); a process that exits is restarted by its supervisor, and
//! recovery brings back exactly what was durable. No backtrace is printed: symbolizing one took
//! over a second on a loaded machine while the other shards went on answering.
//!
//! # Read path
//!
//! A read copies each batch payload once, from the segment's in-memory tail, the log's read
//! cache or the file, into the `Bytes` it returns; trimming, acquisition and the answer slice
//! them (a read's batch headers are parsed once, [`log::batch`]). Data written O_DIRECT is not
//! in the page cache, so before an op reads a log, the log lists the block-aligned parts its
//! read would take from files and the runtime reads them through io_uring into the log's read
//! cache (at most 2 MiB per log, 8 logs per shard besides the op's own); the op then plans again
//! (at most 3 rounds) and reads in the same synchronous section as the last fill. What is still
//! missing is read with `pread`, counted per log. After answering a ShareFetch, the shard reads
//! ahead what the member's next fetch will read, once the request's acknowledgements are durable
//! (a read sharing the disk with that flush slowed consumers). Answers are encoded in pieces
//! ([`protocol::gather`]): a records field of at least 1 KiB stays the read's `Bytes`, and a
//! plaintext connection writes the pieces with one `sendmsg` ([`runtime::frame_write`]), a TLS
//! connection with one vectored rustls write. Between disk and socket a record is copied once in
//! user space.
//!
//! # Decisions
//!
//! - **glommio stays inside [`runtime`]**: the state machines are synchronous, I/O-free code
//!   tested without a runtime, and glommio 0.9 is lightly maintained, so a later move stays
//!   possible. No invariant is held across an `.await`: state changes in synchronous sections.
//! - **Offsets are tracked as runs** (disjoint, coalesced intervals), never one entry per
//!   offset: acquiring, locking or committing 100 000 offsets is a handful of interval
//!   operations.
//! - **Transition tables**: record states, share-transaction states and classic group states
//!   each have one function that says which transitions are legal; every change goes through
//!   it.
//! - **Frames are 8-byte aligned**, so the scan for "is any valid frame after this bad one?"
//!   probes only aligned positions and a zero header is unambiguous. **The CRC does not cover
//!   the padding**, so a tail torn inside the padding loses nothing.
//! - **Block writes decided by synchronous code**: the log and the journal stay testable with
//!   the crash double (which tears block writes at 512-byte sectors and persists unsynced writes
//!   in any order); the runtime only performs the writes.
//! - **Full tail chunks from huge pages through the global allocator**: glommio's DMA buffers
//!   come from the global allocator and cannot wrap memory of ours, so the broker's
//!   `#[global_allocator]` serves exactly their 1 MiB, 4 KiB-aligned layout from huge-page
//!   regions (never unmapped, at most 512 MiB) and passes everything else to the system
//!   allocator.
//! - **Write-behinds are plain O_DIRECT writes** synced by the next flush, not O_DSYNC writes: a
//!   disk that emulates FUA with a cache flush would pay one per MiB. O_DSYNC for flushes
//!   against fdatasync was chosen by a probe. A shorter glommio task quota instead of the doorbell
//!   overlapped as well but hangs glommio 0.9.
//! - **The journal's map is private and its flushes are block writes**: an O_DIRECT write never
//!   races dirty pages of a shared map, the file holds only what a flush or clean close wrote, in
//!   order, and a torn flush is a torn tail within that flush's blocks.
//! - **Journal entries are FlatBuffers written by hand** on the `flatbuffers` crate's low-level
//!   API, exactly as flatc would write them (Debian's flatc is too old for the crate); a test
//!   checks every field slot against `schemas/journal.fbs`.
//! - **ACQUIRED is never persisted**, as in Kafka. **LOCKED is journalled as AVAILABLE, and the
//!   locks separately at prepare**: an ONGOING transaction is aborted at restart anyway, so only a
//!   prepared transaction's locks must be durable; the PREPARE record is written only after every
//!   participant's locks are, so no durable PREPARE lacks them.
//! - **Group configs live in `metadata.json`**, not the journal: every shard needs them, they
//!   change rarely, and the registry already has durable, atomic, all-shard updates.
//! - **Kafka error codes are chosen only where a response is encoded** ([`server::codes`]): the
//!   core, the controller and the coordinators answer typed errors that say what went wrong and
//!   carry the wire's message as data; several errors may share a code and one error may answer
//!   different codes by request version. Each mapping is tested against Kafka 4.4's numbers.
//! - **The Kafka codec is the `kafka-protocol` crate behind a structural pre-check**: the crate
//!   reserves arrays by their declared count, so a 20-byte request claiming 2³¹ elements would
//!   abort the process. **What the crate lacks is generated**: `lockstep-protocol-gen` generates
//!   newer messages from Kafka 4.4's own JSON specs (read from the kafka-clients jar, not copied)
//!   and keys 1000–1005 from `schemas/Share*.json`; a test regenerates them and fails on any
//!   difference.
//! - **Unknown API keys and unserved versions are answered** UNSUPPORTED_VERSION and the
//!   connection kept (Kafka 4.4 closes it), so a request pipelined behind is still answered.
//! - **A share group exists once named**: the transaction APIs never answer
//!   GROUP_ID_NOT_FOUND, so a framework's coordinator can begin a checkpoint's transaction before
//!   any worker joined.
//! - **Dead-letter copies have no ARCHIVING state**: a copy is made durable before the ARCHIVED
//!   state of the operation that archived the records is journalled, and the answer waits for both.
//!
//! # Where `unsafe` lives
//!
//! Ten files, each block with a `// SAFETY:` comment (and `unsafe_op_in_unsafe_fn` denied):
//!
//! | file | what | why |
//! | --- | --- | --- |
//! | `storage/mmap.rs` | memory maps of journal segments, `flock`, `fallocate`, `madvise` | the journal's private map |
//! | `storage/file.rs` | `lseek` `SEEK_DATA`/`SEEK_HOLE`, `fallocate` | recovery reads only written extents; preallocation |
//! | `storage/frame.rs` | SSE2 non-temporal stores | copying appended batches around the cache |
//! | `journal/entries.rs` | field reads of verified FlatBuffers tables, `Follow`/`Push` impls | as flatc's generated code |
//! | `protocol/gather.rs` | `BufMut` for the gathered response buffer | the codec writes into it without a copy |
//! | `runtime/huge_chunks.rs` | `GlobalAlloc`, `mmap` of huge-page regions, the free list | tail chunks in huge pages |
//! | `runtime/frame_write.rs` | `sendmsg` | one system call per gathered response |
//! | `runtime/files.rs` | `mallopt` | glibc thresholds for the engine's buffers |
//! | `runtime/mod.rs` | `flock` | one broker per data directory |
//! | `runtime/bench.rs` | `getrusage` | the benches' CPU figures |
//!
//! # Testing
//!
//! The state machines are tested against trivial models from printed seeds (`tests/*_model.rs`);
//! the shard core runs in deterministic simulations with crashes that drop unsynced bytes
//! (`tests/share_txn_sim.rs`, `tests/share_producer_txn_sim.rs`, `tests/read_ahead_sim.rs`); logs and
//! journals are SIGKILLed in real processes and corrupted byte by byte; the binary is tested
//! with real Kafka clients, most scenarios also against Apache Kafka 4.4 for parity.

pub mod client;
pub mod config;
pub mod constants;
pub mod group;
pub mod journal;
pub mod log;
pub mod metrics;
pub mod model;
pub mod producer_txn;
pub mod protocol;
pub mod runtime;
pub mod security;
pub mod server;
pub mod shard;
pub mod share;
pub mod share_txn;
pub mod storage;
