//! Every limit and default of the broker, in one place, with units in the names.
//!
//! Relations between limits are checked at compile time at the bottom of this file.

/// Bytes in the fixed header at the start of every segment file (log or journal).
pub const SEGMENT_HEADER_BYTES: usize = 32;
/// Bytes in the fixed header of every frame.
pub const FRAME_HEADER_BYTES: usize = 24;
/// Frames start at multiples of this many bytes; the gap after a payload is zero padding.
pub const FRAME_ALIGN_BYTES: usize = 8;
/// Largest payload a single frame may carry (one record batch or one journal entry).
pub const FRAME_PAYLOAD_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Default size at which a partition log's active segment is rolled.
pub const LOG_SEGMENT_BYTES_DEFAULT: u64 = 256 * 1024 * 1024;
/// Default age at which a partition log's active segment is rolled (Kafka: `segment.ms`, 7 days).
pub const LOG_SEGMENT_MS_DEFAULT: u64 = 7 * 24 * 3600 * 1000;
/// At most this many data files of removed segments a partition log keeps, renamed, for its
/// next rolls (FORMAT.md §5, spare files): a new segment in a reused file writes blocks the
/// file system has written before, which a durable write fills faster than never-written ones
/// and without converting extents. Spares are made only from removed segments and used up
/// only by rolls, so the log and its spares never take more disk than the log alone took at
/// its largest.
pub const LOG_SEGMENT_SPARES_DEFAULT: usize = 8;
/// A spare no roll used for this long is deleted by the next retention pass (a log that is no
/// longer written gives its disk back).
pub const LOG_SEGMENT_SPARE_IDLE_MS: u64 = 5 * 60 * 1000;
/// A sparse index entry is written at least every this many bytes of segment.
pub const LOG_INDEX_INTERVAL_BYTES: u64 = 4096;

/// The DMA engine's block: log segment writes start and end at multiples of it (`O_DIRECT`
/// alignment; the partially filled last block is rewritten from memory by the next write).
pub const LOG_BLOCK_BYTES: u64 = 4096;
/// The active segment's file is preallocated (fallocate) this far ahead of its end, so that a
/// durable append changes no file size (capped by the segment size, rounded up to a block).
pub const LOG_PREALLOCATE_BYTES: u64 = 16 * 1024 * 1024;
/// Zeros written ahead of an active segment's data, at most this many bytes per flush, so
/// that its block writes overwrite written blocks: an `O_DIRECT` write into preallocated
/// (unwritten) extents makes the file system convert them, metadata every durable write then
/// has to sync, and io_uring hands such writes to its worker threads.
pub const LOG_ZERO_FILL_BYTES: u64 = 256 * 1024;
/// Recently written bytes of the active segment kept in memory after their write completed
/// (consumers at the tail read them without touching the disk).
pub const LOG_TAIL_CACHE_BYTES: u64 = 256 * 1024;
/// The active segment's tail is kept in chunks of block memory a flush hands to the engine
/// whole (no copy): a new chunk holds at least this many bytes (or the frame it is made for),
pub const LOG_TAIL_CHUNK_BYTES_MIN: u64 = 64 * 1024;
/// and at most this many, sized to twice what the previous chunk took (a busy log writes few,
/// large chunks; a quiet one keeps small ones).
pub const LOG_TAIL_CHUNK_BYTES_MAX: u64 = 1024 * 1024;
/// Most file bytes one read of a partition log asks the engine to read ahead (io_uring,
/// `O_DIRECT`) before it runs.
pub const LOG_READ_AHEAD_BYTES_MAX: u64 = 2 * 1024 * 1024;
/// Read ahead past a read's byte budget: its last batch may end past the budget.
pub const LOG_READ_AHEAD_SLACK_BYTES: u64 = 64 * 1024;
/// Most bytes read ahead a partition log keeps (the lowest chunks go first, never one the
/// current read needs: it may keep more until its next fill).
pub const LOG_READ_CACHE_BYTES_MAX: u64 = 2 * 1024 * 1024;
/// Partition logs of one shard that keep bytes read ahead at a time besides those of the op
/// filling them (the least recently filled drop theirs; an op over more logs keeps all of its
/// own until the next fill): at most this × [`LOG_READ_CACHE_BYTES_MAX`] per shard between ops.
pub const SHARD_READ_CACHE_LOGS_MAX: usize = 8;
/// Most times an op reads ahead before it runs: once for its plan, again for what a plan made
/// after the read still misses (a flush moved a tail past it meanwhile, a lock expiry made
/// records below it available); past that its reads take the rest with `pread`.
pub const READ_AHEAD_ROUNDS_MAX: usize = 3;
/// Open DMA file handles the engine keeps per shard (least recently written closed first).
pub const ENGINE_OPEN_FILES_MAX: usize = 256;

/// Size of each preallocated journal segment.
pub const JOURNAL_SEGMENT_BYTES_DEFAULT: u64 = 64 * 1024 * 1024;
/// A journal flush writes whole blocks of this size (`O_DIRECT`): the unsynced tail rounded
/// out to block boundaries, the partially filled last block rewritten from memory.
pub const JOURNAL_BLOCK_BYTES: u64 = LOG_BLOCK_BYTES;
/// Durable pages of the journal's private mapping are handed back to the kernel in steps of
/// this many bytes (one `madvise` per step, not per flush).
pub const JOURNAL_RELEASE_BYTES: usize = 1024 * 1024;
const _: () = assert!(JOURNAL_SEGMENT_BYTES_DEFAULT % JOURNAL_BLOCK_BYTES == 0);
const _: () = assert!(JOURNAL_RELEASE_BYTES % 4096 == 0);

const _: () = assert!(SEGMENT_HEADER_BYTES % FRAME_ALIGN_BYTES == 0);
const _: () = assert!(FRAME_HEADER_BYTES % FRAME_ALIGN_BYTES == 0);
const _: () = assert!(FRAME_PAYLOAD_BYTES_MAX <= u32::MAX as usize);
const _: () = assert!((FRAME_PAYLOAD_BYTES_MAX as u64) < JOURNAL_SEGMENT_BYTES_DEFAULT * 2);
const _: () = assert!(LOG_BLOCK_BYTES.is_power_of_two() && LOG_BLOCK_BYTES >= 512);
const _: () = assert!(LOG_PREALLOCATE_BYTES % LOG_BLOCK_BYTES == 0);
const _: () = assert!(LOG_ZERO_FILL_BYTES % LOG_BLOCK_BYTES == 0 && LOG_ZERO_FILL_BYTES > 0);
const _: () = assert!(LOG_TAIL_CACHE_BYTES % LOG_BLOCK_BYTES == 0 && LOG_TAIL_CACHE_BYTES > 0);
const _: () = assert!(LOG_TAIL_CHUNK_BYTES_MIN % LOG_BLOCK_BYTES == 0);
const _: () = assert!(LOG_TAIL_CHUNK_BYTES_MAX % LOG_BLOCK_BYTES == 0);
const _: () = assert!(LOG_TAIL_CHUNK_BYTES_MIN > LOG_BLOCK_BYTES);
const _: () = assert!(LOG_TAIL_CHUNK_BYTES_MIN <= LOG_TAIL_CHUNK_BYTES_MAX);
const _: () = assert!(LOG_READ_AHEAD_BYTES_MAX % LOG_BLOCK_BYTES == 0);
const _: () = assert!(LOG_READ_AHEAD_BYTES_MAX <= LOG_READ_CACHE_BYTES_MAX);

/// Full tail chunks ([`LOG_TAIL_CHUNK_BYTES_MAX`]) come from regions of this many bytes mapped
/// in transparent huge pages (`runtime::huge_chunks`),
pub const HUGE_CHUNKS_REGION_BYTES: usize = 32 * 1024 * 1024;
/// at most this many bytes of them (past it, the system allocator's small pages).
pub const HUGE_CHUNKS_BYTES_MAX: usize = 512 * 1024 * 1024;
const _: () = assert!(HUGE_CHUNKS_REGION_BYTES % LOG_TAIL_CHUNK_BYTES_MAX as usize == 0);

// ---- Broker: network, requests, shards ----

/// Default Kafka listener when `--listen` is not given.
pub const LISTEN_ADDR_DEFAULT: &str = "127.0.0.1:9092";
/// Longest a TLS handshake may take before the connection is closed (bounds what an
/// unauthenticated client holds).
pub const TLS_HANDSHAKE_MS_MAX: u64 = 10_000;
/// Default data directory when `--data-dir` is not given.
pub const DATA_DIR_DEFAULT: &str = "./data";
/// Most shards (executors) one broker runs; shard ids fit in a `u16`.
pub const SHARDS_MAX: usize = 256;
/// Largest Kafka request frame accepted (size prefix excluded), as Kafka's `socket.request.max.bytes`.
pub const REQUEST_FRAME_BYTES_MAX: usize = 100 * 1024 * 1024;
/// Largest response frame the broker builds (fetch responses are capped to fit).
pub const RESPONSE_FRAME_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Largest frame a connection may send before it has authenticated on a SASL listener
/// (Kafka's `sasl.server.max.receive.size` default); a larger one closes the connection.
pub const SASL_UNAUTHENTICATED_FRAME_BYTES_MAX: usize = 524_288;
/// Longest a SASL exchange may take, from the connection (after TLS) to authentication;
/// then the connection is closed (bounds what an unauthenticated client holds).
pub const SASL_AUTHENTICATION_MS_MAX: u64 = 30_000;
/// Delay before the answer to a failed authentication (Kafka's
/// `connection.failed.authentication.delay.ms` default), to slow password guessing.
pub const SASL_FAILED_AUTHENTICATION_DELAY_MS: u64 = 100;
/// Users (or credentials) one Describe/AlterUserScramCredentials request may name.
pub const SCRAM_REQUEST_USERS_MAX: usize = 10_000;
/// Requests read from one connection whose responses have not been written yet.
pub const CONNECTION_INFLIGHT_REQUESTS_MAX: usize = 32;
/// Open client connections per shard; further connections are accepted and closed at once.
pub const SHARD_CONNECTIONS_MAX: usize = 4096;
/// Bytes read from a socket in one read call while assembling a frame.
pub const SOCKET_READ_CHUNK_BYTES: usize = 64 * 1024;
/// Record payloads of a Fetch / ShareFetch response at least this long are written to the
/// socket from the log's own `Bytes` (`protocol::gather`); shorter ones are copied into the
/// frame (an iovec of their own costs more than the copy).
pub const RESPONSE_GATHER_PAYLOAD_BYTES_MIN: usize = 1024;
/// Pieces of a gathered response handed to one `sendmsg` (Linux's IOV_MAX is 1024).
pub const SOCKET_WRITE_IOVECS_MAX: usize = 256;
/// Messages queued on one cross-shard channel before senders wait.
pub const SHARD_MESH_CHANNEL_MESSAGES: usize = 1024;
/// glibc's `M_MMAP_THRESHOLD` for the broker process: allocations below it come from the
/// allocator's heaps instead of a fresh `mmap` each (a flush's block write and its DMA copy are
/// several MiB; mapped afresh per flush, every page of them faulted in again).
pub const ENGINE_MALLOC_MMAP_THRESHOLD_BYTES: usize = 256 * 1024 * 1024;
/// glibc's `M_TRIM_THRESHOLD`: free memory a heap keeps before returning its top to the kernel
/// (so the next flush's buffers reuse resident pages).
pub const ENGINE_MALLOC_TRIM_THRESHOLD_BYTES: usize = 64 * 1024 * 1024;
/// Memory the runtime may lock for io_uring buffers per shard (the machine's memlock limit is small).
pub const SHARD_IO_MEMORY_BYTES: usize = 512 * 1024;
/// Receives each executor's I/O doorbell keeps waiting (`runtime::kick`): one is re-armed only
/// after its task ran, so a kick in between finds another.
pub const DOORBELL_RECEIVES: usize = 4;
/// How often each shard polls the shutdown flag set by the signal handler.
pub const SHUTDOWN_POLL_MS: u64 = 50;
/// After a shutdown signal, how long in-flight requests may take before connections are dropped.
pub const SHUTDOWN_DRAIN_MS_MAX: u64 = 10_000;
/// How often each shard rolls and applies retention to its partition logs.
pub const LOG_HOUSEKEEPING_INTERVAL_MS: u64 = 30_000;

/// Process exit status when a shard panicked (a bug): the whole broker exits at once, so no
/// call waits on a dead shard and a supervisor's restart runs recovery (`runtime::fatal`).
pub const EXIT_SHARD_PANICKED: i32 = 9;
/// Process exit status when a partition log or a shard's state journal is poisoned (a failed
/// fsync or a failed journal append): nothing said about the disk can be trusted any more, so
/// the broker exits and recovery on restart reads what is durable (`runtime::fatal`).
pub const EXIT_STORAGE_POISONED: i32 = 10;

/// Kafka node id of this (single-node) broker.
pub const BROKER_NODE_ID: i32 = 0;
/// Topics one broker holds.
pub const TOPICS_MAX: usize = 10_000;
/// Ids of deleted topics the registry remembers until the next start removes what is left of
/// their directories (`shard::data_dir`); older ids are dropped (their directories, if any, are
/// then set aside at start, not deleted).
pub const DELETED_TOPIC_IDS_MAX: usize = 1_024;
/// Partitions one topic may have.
pub const TOPIC_PARTITIONS_MAX: i32 = 10_000;
/// Partitions over all topics of one broker (each holds open files).
pub const BROKER_PARTITIONS_MAX: usize = 20_000;
/// Kafka's limit on topic name length.
pub const TOPIC_NAME_BYTES_MAX: usize = 249;
/// Share groups with explicit configs (each is a few hundred bytes of metadata.json).
pub const GROUP_CONFIGS_MAX: usize = 10_000;
/// ACLs the authorizer holds (the registry keeps them; every shard has a copy). CreateAcls past
/// it answers INVALID_REQUEST naming the limit.
pub const ACLS_MAX: usize = 10_000;
/// Partitions a topic gets when CreateTopics asks for the default (-1); Kafka's `num.partitions`.
pub const TOPIC_PARTITIONS_DEFAULT: i32 = 1;
/// Producer ids reserved durably at a time; ids of a reserved block are never handed out twice.
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;
/// Batches remembered per producer and partition to answer retried (duplicate) batches, as Kafka.
pub const PRODUCER_BATCHES_REMEMBERED: usize = 5;
/// Producer snapshots kept per partition (the newest; an older one is the fallback when a power
/// loss tore the newest).
pub const PRODUCER_SNAPSHOTS_KEPT: usize = 2;
/// `producer.id.expiration.ms` default (Kafka's, 1 day): a producer idle this long, with no
/// transaction open, is forgotten by the partition.
pub const PRODUCER_ID_EXPIRATION_MS_DEFAULT: i64 = 86_400_000;
/// How often shards look for expired producers (Kafka's
/// `producer.id.expiration.check.interval.ms` default, 10 minutes).
pub const PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS: u64 = 600_000;
/// Largest record batch accepted by produce by default (Kafka `message.max.bytes`, 1 MiB + overhead).
pub const RECORD_BATCH_BYTES_MAX_DEFAULT: u64 = 1024 * 1024 + 12;

/// Bytes a fetch response may carry at most, whatever the client asks.
pub const FETCH_RESPONSE_BYTES_MAX: usize = 32 * 1024 * 1024;
/// Longest long-poll wait a fetch may ask for.
pub const FETCH_WAIT_MS_MAX: u64 = 60_000;
/// Longest a produce with acks=all waits for its durable flush before timing out is reported.
pub const PRODUCE_TIMEOUT_MS_MAX: u64 = 300_000;

/// Samples kept exactly by each latency histogram: values up to this many microseconds.
pub const METRICS_LATENCY_US_MAX: u64 = 60_000_000;
/// Significant figures kept by latency histograms.
pub const METRICS_HISTOGRAM_SIGFIG: u8 = 3;
/// Largest HTTP request the metrics endpoint reads before answering.
pub const METRICS_HTTP_REQUEST_BYTES_MAX: usize = 8 * 1024;
/// How often the process checks for a shutdown signal to turn `/ready` off and tell the service
/// manager it is stopping.
pub const STOP_WATCH_INTERVAL_MS: u64 = 50;

const _: () = assert!(REQUEST_FRAME_BYTES_MAX <= i32::MAX as usize);
const _: () = assert!(FETCH_RESPONSE_BYTES_MAX < RESPONSE_FRAME_BYTES_MAX);
const _: () = assert!(SHARDS_MAX <= u16::MAX as usize);
const _: () = assert!(SOCKET_WRITE_IOVECS_MAX > 0 && SOCKET_WRITE_IOVECS_MAX <= 1024);
const _: () = assert!(TOPIC_PARTITIONS_MAX as usize <= BROKER_PARTITIONS_MAX);
const _: () = assert!(PRODUCER_ID_BLOCK_SIZE > 0);

/// How long a transactional batch refused as out of order waits for an earlier batch of its
/// producer that is being verified (KIP-890 part 1, `server::produce`).
pub const PRODUCE_REORDER_WAIT_MS: i64 = 1_000;
/// How often such a batch is tried again meanwhile.
pub const PRODUCE_REORDER_RETRY_MS: u64 = 2;

/// The window over which `max.connection.creation.rate` is measured.
pub const CONNECTION_RATE_WINDOW_MS: u64 = 1000;
/// Kafka's bounds on SCRAM iterations (`ScramMechanism.minIterations`, `MAX_ITERATIONS`).
pub const SCRAM_ITERATIONS_MIN: i32 = 4096;
pub const SCRAM_ITERATIONS_MAX: i32 = 16384;

// ---- Partition log ----

/// Bytes in the fixed header of a partition-log index file (`{base_offset:020}.index`).
pub const LOG_INDEX_HEADER_BYTES: usize = 32;
/// Bytes in one sparse-index entry (offset, position, max timestamp before, frame CRC, CRC).
pub const LOG_INDEX_ENTRY_BYTES: usize = 32;
/// Smallest `segment_bytes` a partition log accepts: a header and one smallest frame.
pub const LOG_SEGMENT_BYTES_MIN: u64 = 1024;
/// Smallest `index_interval_bytes` a partition log accepts.
pub const LOG_INDEX_INTERVAL_BYTES_MIN: u64 = 64;
/// Bytes in the log-start-offset checkpoint file: two slots of 32 bytes, each in its own 4 KiB
/// page so a torn write of one never damages the other.
pub const LOG_CHECKPOINT_SLOT_BYTES: usize = 32;
/// Distance between the two checkpoint slots.
pub const LOG_CHECKPOINT_SLOT_STRIDE_BYTES: u64 = 4096;

const _: () = assert!(LOG_INDEX_HEADER_BYTES % FRAME_ALIGN_BYTES == 0);
const _: () = assert!(LOG_INDEX_ENTRY_BYTES % FRAME_ALIGN_BYTES == 0);
const _: () = assert!(LOG_SEGMENT_BYTES_MIN >= (SEGMENT_HEADER_BYTES + FRAME_HEADER_BYTES) as u64);
const _: () = assert!(LOG_INDEX_INTERVAL_BYTES >= LOG_INDEX_INTERVAL_BYTES_MIN);
const _: () = assert!(LOG_SEGMENT_BYTES_DEFAULT >= LOG_SEGMENT_BYTES_MIN);
const _: () = assert!(LOG_CHECKPOINT_SLOT_STRIDE_BYTES >= LOG_CHECKPOINT_SLOT_BYTES as u64);
// A checkpoint slot is written as one block of its own (an `O_DIRECT` write).
const _: () = assert!(LOG_CHECKPOINT_SLOT_STRIDE_BYTES == LOG_BLOCK_BYTES);

/// Bytes read at a time while rebuilding producer state from a log.
pub const PRODUCER_REBUILD_READ_BYTES: usize = 4 * 1024 * 1024;
/// The smallest `segment.bytes` a topic config may set (Kafka 4.x's lower bound).
pub const TOPIC_SEGMENT_BYTES_MIN: i64 = 1024 * 1024;

// ---- Share partitions and share transactions ----

/// Kafka `share.record.lock.duration.ms` default: how long an acquisition lock lasts.
pub const SHARE_RECORD_LOCK_DURATION_MS_DEFAULT: u64 = 30_000;
/// Smallest `share.record.lock.duration.ms` a group may set (Kafka's group-config minimum).
pub const SHARE_RECORD_LOCK_DURATION_MS_MIN: u64 = 1_000;
/// Largest `share.record.lock.duration.ms` a group may set (Kafka's group-config maximum).
pub const SHARE_RECORD_LOCK_DURATION_MS_MAX: u64 = 3_600_000;
/// Required prefix of share-group DLQ topic names (KIP-1191; Kafka's broker config
/// `errors.deadletterqueue.topic.name.prefix` default, which Lockstep does not make settable).
pub const SHARE_DLQ_TOPIC_NAME_PREFIX: &str = "dlq.";
/// How long a DLQ copy waits for its durable flush (Kafka's request timeout default).
pub const SHARE_DLQ_PRODUCE_TIMEOUT_MS: u64 = 30_000;
/// Kafka `share.delivery.count.limit` default: deliveries before a record is archived.
pub const SHARE_DELIVERY_COUNT_LIMIT_DEFAULT: u16 = 5;
/// Smallest `share.delivery.count.limit` (Kafka's minimum).
pub const SHARE_DELIVERY_COUNT_LIMIT_MIN: u16 = 2;
/// Largest `share.delivery.count.limit` (Kafka's maximum).
pub const SHARE_DELIVERY_COUNT_LIMIT_MAX: u16 = 10;
/// Smallest delivery count from which acquisition is throttled (Kafka 4.2+'s
/// `MINIMUM_THROTTLE_RECORDS_DELIVERY_LIMIT`): records delivered at least
/// max(this, ceil(`share.delivery.count.limit` / 2)) times are handed out in halved batches.
pub const SHARE_THROTTLE_DELIVERY_COUNT_MIN: u16 = 2;
/// Kafka `share.partition.max.record.locks` default: in-flight records (SPEO - SPSO + 1) cap.
pub const SHARE_PARTITION_MAX_RECORD_LOCKS_DEFAULT: u32 = 2_000;
/// Largest `share.partition.max.record.locks` Lockstep accepts (runs make large windows cheap).
pub const SHARE_PARTITION_MAX_RECORD_LOCKS_MAX: u32 = 10_000_000;
/// Kafka `share.transaction.timeout.ms` default: an ONGOING transaction older than this is aborted.
pub const SHARE_TRANSACTION_TIMEOUT_MS_DEFAULT: u64 = 60_000;
/// Largest transaction timeout a begin may ask for (as Kafka's `transaction.max.timeout.ms`).
pub const SHARE_TRANSACTION_TIMEOUT_MS_MAX: u64 = 900_000;
/// `share.transaction.max.pending` default: ONGOING + PREPARE transactions per group.
pub const SHARE_TRANSACTION_MAX_PENDING_DEFAULT: usize = 5;
/// Largest `share.transaction.max.pending` a group may set.
pub const SHARE_TRANSACTION_MAX_PENDING_MAX: usize = 1_000;
/// How long a COMMITTED or ABORTED transaction is remembered (for idempotent retries).
pub const SHARE_TRANSACTION_RETENTION_MS_DEFAULT: u64 = 3_600_000;
/// Finished transactions remembered per group at most; the oldest are forgotten first.
pub const SHARE_TRANSACTIONS_FINISHED_MAX: usize = 10_000;
/// Longest transaction id accepted, in bytes.
pub const SHARE_TRANSACTION_ID_BYTES_MAX: usize = 1_024;

/// Longest a prepare waits for acknowledgements into its transaction that are in flight.
pub const TXN_PREPARE_WAIT_MS: u64 = 30_000;
/// `transaction.max.timeout.ms` default (Kafka's): the longest producer-transaction timeout a
/// client may ask for.
pub const TXN_MAX_TIMEOUT_MS_DEFAULT: i32 = 900_000;
/// `transactional.id.expiration.ms` default (Kafka's, 7 days): an idle transactional id is
/// forgotten after this long.
pub const TXN_ID_EXPIRATION_MS_DEFAULT: i64 = 604_800_000;
/// First delay before a producer-transaction marker is sent again to a participant that failed;
/// doubles up to the max.
pub const TXN_MARKER_RETRY_BACKOFF_MS: i64 = 100;
pub const TXN_MARKER_RETRY_BACKOFF_MAX_MS: i64 = 5_000;
/// How often a shard looks for producer transactions past their timeout (Kafka's
/// `transaction.abort.timed.out.transaction.cleanup.interval.ms` is 10 s; shorter here).
pub const TXN_TIMEOUT_CHECK_INTERVAL_MS: u64 = 1_000;
/// Longest transactional id accepted, in bytes.
pub const TXN_TRANSACTIONAL_ID_BYTES_MAX: usize = 1_024;
const _: () = assert!(TXN_MARKER_RETRY_BACKOFF_MS > 0);
const _: () = assert!(TXN_MARKER_RETRY_BACKOFF_MS <= TXN_MARKER_RETRY_BACKOFF_MAX_MS);

/// How often a shard expires acquisition locks and share-member sessions.
pub const SHARE_HOUSEKEEPING_INTERVAL_MS: u64 = 200;
/// A shard writes a journal snapshot once this many entries follow the last one (then the
/// segments before it can be deleted).
pub const JOURNAL_SNAPSHOT_EVERY_ENTRIES: u64 = 100_000;
/// Most log bytes one ShareFetch reads from one partition (whole batches; at least one).
pub const SHARE_FETCH_READ_BYTES_MAX: usize = 1024 * 1024;
/// Longest a ShareFetch with nothing to hand out waits before it looks again for records
/// released, expired or aborted meanwhile (new data in the log wakes it at once).
pub const SHARE_FETCH_RECHECK_MS: u64 = 100;
/// How often DeleteRecords looks whether a moved log start is durable (its checkpoint slot
/// rides on the partition's next flush).
pub const DELETE_RECORDS_DURABLE_POLL_MS: u64 = 1;
/// How often a clean shutdown looks whether every partition's unflushed writes are durable.
pub const FLUSH_ALL_POLL_MS: u64 = 5;
/// Least time DeleteRecords waits for a moved log start to become durable, whatever the
/// request's timeout (Kafka answers a single-replica DeleteRecords without waiting).
pub const DELETE_RECORDS_WAIT_MS_MIN: u64 = 5_000;

/// Records handed out by one ShareFetch at most, whatever the client asks.
pub const SHARE_FETCH_RECORDS_MAX: u32 = 100_000;

// ---- Share-group membership and Kafka's broker-level bounds on group configs ----

/// Kafka `group.share.session.timeout.ms`: a member that does not heartbeat for this long is
/// removed (the group config `share.session.timeout.ms` overrides it).
pub const SHARE_SESSION_TIMEOUT_MS_DEFAULT: u64 = 45_000;
/// Kafka `group.share.min.session.timeout.ms`.
pub const SHARE_SESSION_TIMEOUT_MS_MIN: u64 = 45_000;
/// Kafka `group.share.max.session.timeout.ms`.
pub const SHARE_SESSION_TIMEOUT_MS_MAX: u64 = 60_000;
/// Kafka `group.share.heartbeat.interval.ms` (group config `share.heartbeat.interval.ms`).
pub const SHARE_HEARTBEAT_INTERVAL_MS_DEFAULT: u64 = 5_000;
/// Kafka `group.share.min.heartbeat.interval.ms`.
pub const SHARE_HEARTBEAT_INTERVAL_MS_MIN: u64 = 5_000;
/// Kafka `group.share.max.heartbeat.interval.ms`.
pub const SHARE_HEARTBEAT_INTERVAL_MS_MAX: u64 = 15_000;
/// The smallest `share.record.lock.duration.ms` Kafka's config definition parses (below it:
/// "Value must be at least 1000").
pub const SHARE_GROUP_RECORD_LOCK_DURATION_MS_FLOOR: u64 = 1_000;
/// Kafka `group.share.min.record.lock.duration.ms`: the group config's lower bound.
pub const SHARE_GROUP_RECORD_LOCK_DURATION_MS_MIN: u64 = 15_000;
/// Kafka `group.share.max.record.lock.duration.ms`: the group config's upper bound.
pub const SHARE_GROUP_RECORD_LOCK_DURATION_MS_MAX: u64 = 60_000;
/// Kafka's smallest `share.partition.max.record.locks` (config definition and
/// `group.share.partition.max.record.locks` bounds).
pub const SHARE_GROUP_PARTITION_MAX_RECORD_LOCKS_MIN: u32 = 100;
/// Kafka `group.share.max.partition.max.record.locks`: the group config's upper bound. Lockstep
/// lets a group in `share.acknowledgement.mode=transactional` go up to
/// [`SHARE_PARTITION_MAX_RECORD_LOCKS_MAX`] (its LOCKED records count until their checkpoint).
pub const SHARE_GROUP_PARTITION_MAX_RECORD_LOCKS_MAX: u32 = 4_000;
/// Kafka `group.share.max.share.sessions`: share sessions per broker.
pub const SHARE_SESSIONS_MAX: usize = 2_000;
/// Longest member id a ShareGroupHeartbeat may carry (a UUID string).
pub const SHARE_MEMBER_ID_BYTES_MAX: usize = 36;

const _: () = assert!(SHARE_SESSION_TIMEOUT_MS_MIN <= SHARE_SESSION_TIMEOUT_MS_DEFAULT);
const _: () = assert!(SHARE_SESSION_TIMEOUT_MS_DEFAULT <= SHARE_SESSION_TIMEOUT_MS_MAX);
const _: () = assert!(SHARE_HEARTBEAT_INTERVAL_MS_MIN <= SHARE_HEARTBEAT_INTERVAL_MS_DEFAULT);
const _: () = assert!(SHARE_HEARTBEAT_INTERVAL_MS_DEFAULT <= SHARE_HEARTBEAT_INTERVAL_MS_MAX);
// A session timeout above every heartbeat interval (Kafka refuses session <= interval).
const _: () = assert!(SHARE_HEARTBEAT_INTERVAL_MS_MAX < SHARE_SESSION_TIMEOUT_MS_MIN);
const _: () =
    assert!(SHARE_GROUP_RECORD_LOCK_DURATION_MS_FLOOR >= SHARE_RECORD_LOCK_DURATION_MS_MIN);
const _: () =
    assert!(SHARE_GROUP_RECORD_LOCK_DURATION_MS_MIN <= SHARE_RECORD_LOCK_DURATION_MS_DEFAULT);
const _: () =
    assert!(SHARE_RECORD_LOCK_DURATION_MS_DEFAULT <= SHARE_GROUP_RECORD_LOCK_DURATION_MS_MAX);
const _: () = assert!(SHARE_GROUP_RECORD_LOCK_DURATION_MS_MAX <= SHARE_RECORD_LOCK_DURATION_MS_MAX);
const _: () =
    assert!(SHARE_GROUP_PARTITION_MAX_RECORD_LOCKS_MIN <= SHARE_PARTITION_MAX_RECORD_LOCKS_DEFAULT);
const _: () =
    assert!(SHARE_PARTITION_MAX_RECORD_LOCKS_DEFAULT <= SHARE_GROUP_PARTITION_MAX_RECORD_LOCKS_MAX);
const _: () =
    assert!(SHARE_GROUP_PARTITION_MAX_RECORD_LOCKS_MAX <= SHARE_PARTITION_MAX_RECORD_LOCKS_MAX);

const _: () = assert!(SHARE_RECORD_LOCK_DURATION_MS_MIN > 0);
const _: () = assert!(SHARE_RECORD_LOCK_DURATION_MS_MIN <= SHARE_RECORD_LOCK_DURATION_MS_DEFAULT);
const _: () = assert!(SHARE_RECORD_LOCK_DURATION_MS_DEFAULT <= SHARE_RECORD_LOCK_DURATION_MS_MAX);
const _: () = assert!(SHARE_DELIVERY_COUNT_LIMIT_MIN >= 2);
const _: () = assert!(SHARE_DELIVERY_COUNT_LIMIT_MIN <= SHARE_DELIVERY_COUNT_LIMIT_DEFAULT);
const _: () = assert!(SHARE_DELIVERY_COUNT_LIMIT_DEFAULT <= SHARE_DELIVERY_COUNT_LIMIT_MAX);
const _: () =
    assert!(SHARE_PARTITION_MAX_RECORD_LOCKS_DEFAULT <= SHARE_PARTITION_MAX_RECORD_LOCKS_MAX);
const _: () = assert!(SHARE_TRANSACTION_TIMEOUT_MS_DEFAULT <= SHARE_TRANSACTION_TIMEOUT_MS_MAX);
const _: () = assert!(SHARE_TRANSACTION_MAX_PENDING_DEFAULT >= 1);
const _: () = assert!(SHARE_TRANSACTION_MAX_PENDING_DEFAULT <= SHARE_TRANSACTION_MAX_PENDING_MAX);

// ---- State journal ----

/// Smallest journal segment a journal accepts (tests use small segments to exercise rolls).
pub const JOURNAL_SEGMENT_BYTES_MIN: u64 = 4096;
/// Largest journal segment a journal accepts (one segment is mapped at a time).
pub const JOURNAL_SEGMENT_BYTES_MAX: u64 = 1024 * 1024 * 1024;
/// Largest payload of an ordinary (non-snapshot) journal entry; snapshots are chunked.
pub const JOURNAL_ENTRY_BYTES_MAX: usize = 16 * 1024 * 1024;
/// Default bytes of snapshot payload carried by one snapshot chunk entry.
pub const JOURNAL_SNAPSHOT_CHUNK_BYTES_DEFAULT: usize = 1024 * 1024;
/// Smallest snapshot chunk a journal accepts.
pub const JOURNAL_SNAPSHOT_CHUNK_BYTES_MIN: usize = 64;
/// Upper bound of what a snapshot chunk entry adds around its data (FlatBuffers root offset,
/// vtable, table, vector length, padding).
pub const JOURNAL_SNAPSHOT_CHUNK_OVERHEAD_BYTES_MAX: usize = 96;
/// Largest snapshot payload (the shard's whole share and transaction state).
pub const JOURNAL_SNAPSHOT_BYTES_MAX: u64 = 1024 * 1024 * 1024;

const _: () = assert!(JOURNAL_SEGMENT_BYTES_MIN % FRAME_ALIGN_BYTES as u64 == 0);
const _: () = assert!(JOURNAL_SEGMENT_BYTES_MIN <= JOURNAL_SEGMENT_BYTES_DEFAULT);
const _: () = assert!(JOURNAL_SEGMENT_BYTES_DEFAULT <= JOURNAL_SEGMENT_BYTES_MAX);
const _: () = assert!(JOURNAL_ENTRY_BYTES_MAX <= FRAME_PAYLOAD_BYTES_MAX);
const _: () = assert!(
    (SEGMENT_HEADER_BYTES + FRAME_HEADER_BYTES + JOURNAL_ENTRY_BYTES_MAX) as u64
        <= JOURNAL_SEGMENT_BYTES_DEFAULT
);
const _: () = assert!(
    (SEGMENT_HEADER_BYTES
        + FRAME_HEADER_BYTES
        + JOURNAL_SNAPSHOT_CHUNK_BYTES_DEFAULT
        + JOURNAL_SNAPSHOT_CHUNK_OVERHEAD_BYTES_MAX) as u64
        <= JOURNAL_SEGMENT_BYTES_DEFAULT
);
const _: () = assert!(
    (SEGMENT_HEADER_BYTES
        + FRAME_HEADER_BYTES
        + JOURNAL_SNAPSHOT_CHUNK_BYTES_MIN
        + JOURNAL_SNAPSHOT_CHUNK_OVERHEAD_BYTES_MAX) as u64
        <= JOURNAL_SEGMENT_BYTES_MIN
);
const _: () = assert!(
    JOURNAL_SNAPSHOT_BYTES_MAX <= u32::MAX as u64 * JOURNAL_SNAPSHOT_CHUNK_BYTES_MIN as u64
);
/// Bytes of requests one shard holds in memory at once (read and not yet answered), over all
/// its connections; a frame's size is reserved before its body is read.
pub const SHARD_INFLIGHT_REQUEST_BYTES_MAX: u64 = 512 * 1024 * 1024;
/// How often each shard publishes its log sizes to the metrics.
pub const METRICS_REFRESH_MS: u64 = 5_000;
const _: () = assert!(REQUEST_FRAME_BYTES_MAX as u64 <= SHARD_INFLIGHT_REQUEST_BYTES_MAX);
/// Partition entries one Produce, Fetch or ListOffsets request may name (no legitimate request
/// names more partitions than the broker holds); beyond it the connection is closed.
pub const REQUEST_PARTITIONS_MAX: usize = BROKER_PARTITIONS_MAX;
/// Topics, config resources or coordinator keys one request may name; beyond it the
/// connection is closed. Bounds how much a small request can make the broker build.
pub const REQUEST_ENTITIES_MAX: usize = TOPICS_MAX + 1;

// ---- Consumer groups (KIP-848) ----

/// Kafka's `group.consumer.heartbeat.interval.ms` default.
pub const CONSUMER_GROUP_HEARTBEAT_INTERVAL_MS: i32 = 5_000;
/// Kafka's `group.consumer.session.timeout.ms` default.
pub const CONSUMER_GROUP_SESSION_TIMEOUT_MS: u64 = 45_000;
/// Member id length limit (Kafka: 36-character UUIDs from clients; generous here).
pub const GROUP_MEMBER_ID_BYTES_MAX: usize = 255;

// ---- consumer groups (classic protocol and committed offsets) -------------------------------
/// Kafka's `group.min.session.timeout.ms` (default): JoinGroup below it is INVALID_SESSION_TIMEOUT.
pub const GROUP_MIN_SESSION_TIMEOUT_MS: u64 = 6_000;
/// Kafka's `group.max.session.timeout.ms` (default).
pub const GROUP_MAX_SESSION_TIMEOUT_MS: u64 = 1_800_000;
/// `group.initial.rebalance.delay.ms` default (Kafka's): how long the first rebalance of an empty
/// classic group waits for more members (extended while members keep arriving, up to the
/// rebalance timeout), so that consumers started together share the partitions from the first
/// generation. Tests that want the first member assigned at once set it to 0, as Kafka's own
/// test configurations do.
pub const GROUP_INITIAL_REBALANCE_DELAY_MS: u64 = 3_000;
/// Kafka's `offsets.retention.minutes` default (7 days), in ms: committed offsets of a group that
/// has been empty this long (or of a simple group, since their commit) expire.
pub const OFFSETS_RETENTION_MS: u64 = 7 * 24 * 3600 * 1000;
/// Kafka's `offset.metadata.max.bytes`: longer commit metadata is OFFSET_METADATA_TOO_LARGE.
pub const OFFSET_METADATA_BYTES_MAX: usize = 4096;
/// Members of one consumer group, classic or KIP-848 (Kafka's `group.max.size` and
/// `group.consumer.max.size` are unbounded; a bound keeps a join storm from growing a group
/// without limit): a join beyond it is GROUP_MAX_SIZE_REACHED.
pub const GROUP_MEMBERS_MAX: usize = 10_000;
/// Committed offsets one shard holds (over all its groups); beyond it commits are refused
/// (OFFSET_METADATA_TOO_LARGE is not right; Kafka has no such limit, Lockstep answers
/// UNKNOWN_SERVER_ERROR with a message).
pub const GROUP_OFFSETS_PER_SHARD_MAX: usize = 10_000_000;
/// Protocols (assignors) one JoinGroup may name, and bytes of one member's metadata or
/// assignment.
pub const GROUP_PROTOCOLS_MAX: usize = 64;
pub const GROUP_MEMBER_METADATA_BYTES_MAX: usize = 1024 * 1024;
/// How long an empty consumer group without committed offsets is kept (listed, described as
/// Empty) before it is forgotten: Kafka deletes such groups at its next offsets cleanup, every
/// `offsets.retention.check.interval.ms` (default 600 000).
pub const GROUP_EMPTY_KEEP_MS: u64 = 600_000;
/// How often a JoinGroup or SyncGroup that waits for the rebalance looks at the group again.
pub const GROUP_WAIT_POLL_MS: u64 = 10;
/// How long an answer to a waiting JoinGroup / SyncGroup is kept for its poller.
pub const GROUP_ANSWER_KEEP_MS: u64 = 60_000;
