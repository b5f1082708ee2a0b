//! The state one shard owns: its partitions (log + idempotent-producer state) and its copy of
//! the topic registry. Synchronous and I/O-bounded (page-cache reads and writes through the
//! log's `Storage`); the runtime drives flushes and waits.
//!
//! Ownership: partition `p` of topic `t` lives in the `ShardState` of
//! `model::partition_shard(t, p, shard_count)` and nowhere else. Only operations executed on
//! this shard touch it, so no locks are needed.
//!
//! On-disk layout: `{data_dir}/logs/{topic_id}-{partition}/` (topic id in simple hex form), so
//! a deleted and re-created topic of the same name never meets the old data. Directories that
//! belong to no partition of the registry are handled at start by [`super::data_dir`].
//!
//! Visibility: the high watermark of a partition is its **durable** end offset. Fetch and
//! ListOffsets(latest) never expose records that a crash could still take away; the runtime
//! flushes as soon as anything is written (group commit), so this costs one fsync of latency.

use super::ops::{
    DeleteRecordsError, DeletedRecords, FetchError, FetchOp, FetchedPartition, ListOffsetsError,
    ListOffsetsOp, ListedOffset, MarkerError, PartitionError, PartitionRef, ProduceError,
    ProduceOp, ProduceResult, DELETE_RECORDS_HIGH_WATERMARK,
};
use super::producer_snapshot::{self, ProducerSnapshotFile};
use super::producer_state::{BatchRecord, ProducerSnapshot, ProducerStates, SequenceCheck};
use super::registry::TopicRegistry;
use super::share_state::ShareState;
use crate::config::TopicSettings;
use crate::constants::{
    PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS, PRODUCER_ID_EXPIRATION_MS_DEFAULT,
    PRODUCER_REBUILD_READ_BYTES,
};
use crate::log::batch::{self, BATCH_HEADER_BYTES};
use crate::log::{
    FlushTicket, LogConfig, LogError, LogErrorKind, PartitionLog, RecoveryReport, WriteBehind,
};
use crate::model::{partition_shard, ShardId, TopicPartition};
use crate::producer_txn::partition::{
    control_record, control_type, marker_outcome, MarkerAction, TxnPartition, Verification,
};
use crate::producer_txn::TxnMarker;
use crate::storage::file::Storage;
use bytes::Bytes;
use std::collections::HashMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use uuid::Uuid;

/// Directory under the data directory that holds the partition logs.
pub const LOGS_DIR: &str = "logs";
/// Directory (under the data dir) of the shards' state journals.
pub const JOURNAL_DIR: &str = "journal";
/// File in [`JOURNAL_DIR`] naming the shard count the journals were written with.
const JOURNAL_SHARDS_FILE: &str = "shards";

/// Directory of shard `shard`'s state journal.
pub fn journal_dir(data_dir: &Path, shard: ShardId) -> PathBuf {
    data_dir
        .join(JOURNAL_DIR)
        .join(format!("shard-{}", shard.index()))
}

/// Share state is journalled by the shard that owns it, and ownership is a function of the
/// shard count, so a data dir must be reopened with the shard count that wrote it. Records
/// the count on first use; refuses a different one with an error that says what to do.
pub fn check_journal_shards(data_dir: &Path, shards: usize) -> io::Result<()> {
    let dir = data_dir.join(JOURNAL_DIR);
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(JOURNAL_SHARDS_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let recorded: usize = text.trim().parse().map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: expected a shard count, found {text:?}", path.display()),
                )
            })?;
            if recorded != shards {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{}: the share-group state of this data dir was written by {recorded} shards; \
                         start with --shards {recorded}",
                        path.display()
                    ),
                ));
            }
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let tmp = dir.join(format!("{JOURNAL_SHARDS_FILE}.tmp"));
            std::fs::write(&tmp, format!("{shards}\n"))?;
            std::fs::File::open(&tmp)?.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            std::fs::File::open(&dir)?.sync_all()?;
            Ok(())
        }
        Err(e) => Err(e),
    }
}
/// Attributes of a transaction marker batch: transactional (bit 4) and control (bit 5).
const CONTROL_BATCH_ATTRIBUTES: i16 = 0x30;

/// The offset after the last whole batch of `records` (`None` if there is none).
fn last_batch_end(records: &[u8]) -> Option<i64> {
    let mut at = 0;
    let mut end = None;
    while at + BATCH_HEADER_BYTES <= records.len() {
        let Ok(header) = batch::parse_header(&records[at..]) else {
            break;
        };
        end = Some(header.base_offset + i64::from(header.last_offset_delta) + 1);
        at += header.total_bytes();
    }
    end
}

/// ListOffsets special timestamps.
pub const LATEST_TIMESTAMP: i64 = -1;
pub const EARLIEST_TIMESTAMP: i64 = -2;
pub const MAX_TIMESTAMP: i64 = -3;
pub const EARLIEST_LOCAL_TIMESTAMP: i64 = -4;
pub const LATEST_TIERED_TIMESTAMP: i64 = -5;

/// Directory of one partition's log.
pub fn partition_dir(data_dir: &Path, topic_id: Uuid, partition: i32) -> PathBuf {
    data_dir
        .join(LOGS_DIR)
        .join(format!("{}-{partition}", topic_id.simple()))
}

/// Parses a partition directory name back into its key.
pub fn parse_partition_dir(name: &str) -> Option<TopicPartition> {
    let (id, partition) = name.rsplit_once('-')?;
    let topic_id = Uuid::try_parse(id).ok()?;
    let partition: i32 = partition.parse().ok()?;
    (partition >= 0).then_some(TopicPartition {
        topic_id,
        partition,
    })
}

/// A partition this shard owns.
pub struct Partition<S: Storage> {
    pub topic: String,
    pub topic_id: Uuid,
    pub partition: i32,
    pub log: PartitionLog<S>,
    pub producers: ProducerStates,
    /// Open transactions, last stable offset and aborted-transaction index (`crate::producer_txn`).
    pub txns: TxnPartition,
    pub settings: TopicSettings,
    /// The offset of the newest producer snapshot written or loaded (0: none). A new one is
    /// written once the active segment starts past it (a roll).
    snapshot_offset: u64,
}

impl<S: Storage> Partition<S> {
    /// Writes a producer snapshot at the log end (`crate::shard::producer_snapshot`). A failure
    /// is logged: the log still holds the state, a start only replays more of it.
    fn write_snapshot(&mut self, storage: &S) {
        let offset = self.log.log_end_offset();
        let snapshot = ProducerSnapshotFile::of(offset, &self.producers, &self.txns);
        if let Err(error) = producer_snapshot::write(storage, self.log.dir(), &snapshot) {
            tracing::warn!(topic = %self.topic, partition = self.partition, dir = %self.log.dir().display(), %error, "cannot write a producer snapshot; the next start replays the log from an older one");
        }
        self.snapshot_offset = offset;
    }

    /// A producer snapshot once a roll started a segment past the newest one, so a start
    /// replays at most about a segment.
    fn snapshot_if_rolled(&mut self, storage: &S) {
        if self.log.active_base_offset() > self.snapshot_offset && !self.log.is_poisoned() {
            self.write_snapshot(storage);
        }
    }

    /// The offset below which records are durable and visible to consumers.
    pub fn high_watermark(&self) -> i64 {
        self.log.durable_end_offset() as i64
    }

    /// The offset below which records are durable and no transaction is undecided: what a
    /// read_committed consumer may read.
    pub fn last_stable_offset(&self) -> i64 {
        self.txns.last_stable_offset(self.high_watermark())
    }

    /// The end of what a reader of the given isolation may read.
    pub fn readable_end(&self, read_committed: bool) -> i64 {
        if read_committed {
            self.last_stable_offset()
        } else {
            self.high_watermark()
        }
    }
}

/// Why a shard could not open its partitions.
#[derive(Debug)]
pub struct OpenError {
    pub partition: String,
    pub error: LogError,
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot open partition {}: {}",
            self.partition, self.error
        )
    }
}

impl std::error::Error for OpenError {}

/// What a produce did, for the runtime.
#[derive(Debug)]
pub struct ProduceApplied {
    pub result: ProduceResult,
    /// For a success: the durable end offset that covers the batch (acks=all waits for it).
    pub durable_target: Option<(TopicPartition, u64)>,
}

/// The state of one shard.
pub struct ShardState<S: Storage + Clone> {
    pub id: ShardId,
    pub shard_count: usize,
    pub data_dir: PathBuf,
    storage: S,
    registry: Arc<TopicRegistry>,
    partitions: HashMap<TopicPartition, Partition<S>>,
    /// Share groups coordinated here and share partitions of the partitions owned here.
    pub share: ShareState,
    /// Consumer groups coordinated here and their committed offsets (`crate::group`).
    pub groups: crate::group::ConsumerGroups,
    /// The producer-transaction coordinator of the transactional ids this shard owns.
    pub ptxn: crate::producer_txn::coordinator::TxnCoordinator,
    /// Partitions whose logs hold read-ahead bytes, least recently filled first
    /// (`shard::read_ahead`).
    pub(super) read_cached: std::collections::VecDeque<TopicPartition>,
    /// `producer.id.expiration.ms`: idle producers are forgotten after this long.
    pub producer_id_expiration_ms: i64,
    /// When housekeeping last looked for expired producers.
    producers_checked_ms: u64,
}

fn log_config(settings: &TopicSettings) -> LogConfig {
    LogConfig {
        segment_bytes: settings.segment_bytes,
        segment_ms: settings.segment_ms,
        retention_bytes: settings.retention_bytes,
        retention_ms: settings.retention_ms,
        ..LogConfig::default()
    }
}

/// Producer state and transaction state of a log: those of `snapshot` (if any) and the batch
/// headers past it replayed (for a control batch, its one record's type too).
fn rebuild_producers<S: Storage>(
    log: &PartitionLog<S>,
    snapshot: Option<ProducerSnapshotFile>,
) -> Result<(ProducerStates, TxnPartition), LogError> {
    let mut offset = log.log_start_offset();
    let (mut states, mut txns) = match snapshot {
        Some(snapshot) => {
            assert!(snapshot.offset <= log.log_end_offset());
            offset = offset.max(snapshot.offset);
            snapshot.into_states()
        }
        None => (ProducerStates::new(), TxnPartition::new()),
    };
    txns.move_log_start(log.log_start_offset() as i64);
    let end = log.log_end_offset();
    while offset < end {
        let read = log.read(offset, PRODUCER_REBUILD_READ_BYTES)?;
        assert!(
            read.next_offset > offset,
            "a read below the end makes progress"
        );
        let batches = batch::split_batches(&read.records).map_err(|e| LogError::Corrupt {
            path: log.dir().to_path_buf(),
            position: offset,
            reason: format!("stored batches do not split: {e}"),
        })?;
        for bytes in batches {
            let header = batch::parse_header(bytes).map_err(|e| LogError::Corrupt {
                path: log.dir().to_path_buf(),
                position: offset,
                reason: e.to_string(),
            })?;
            if header.is_control() {
                let outcome = control_type(bytes).and_then(marker_outcome);
                if let Some(outcome) = outcome.filter(|_| header.producer_id >= 0) {
                    states.record_marker(
                        header.producer_id,
                        header.producer_epoch,
                        header.max_timestamp,
                    );
                    txns.record_marker(header.producer_id, outcome, header.base_offset);
                }
                continue;
            }
            txns.record_data(
                header.producer_id,
                header.producer_epoch,
                header.is_transactional(),
                header.base_offset,
            );
            if header.producer_id >= 0 && header.base_sequence >= 0 {
                let base = header.base_offset;
                states.record(
                    header.producer_id,
                    header.producer_epoch,
                    BatchRecord {
                        first_sequence: header.base_sequence,
                        last_sequence: wrap_sequence(
                            header.base_sequence,
                            header.last_offset_delta,
                        ),
                        base_offset: base,
                        last_offset: base + i64::from(header.last_offset_delta),
                        max_timestamp: header.max_timestamp,
                    },
                );
            }
        }
        offset = read.next_offset;
    }
    txns.advance(log.durable_end_offset() as i64);
    Ok((states, txns))
}

/// `base + delta` in Kafka's wrapping sequence space.
pub fn wrap_sequence(base: i32, delta: i32) -> i32 {
    let sum = i64::from(base) + i64::from(delta);
    (sum % (i64::from(i32::MAX) + 1)) as i32
}

impl<S: Storage + Clone> ShardState<S> {
    /// Opens every partition of `registry` this shard owns (recovering its log and rebuilding
    /// its producer state).
    pub fn open(
        id: ShardId,
        shard_count: usize,
        data_dir: &Path,
        storage: S,
        registry: Arc<TopicRegistry>,
        now_ms: u64,
    ) -> Result<(ShardState<S>, Vec<RecoveryReport>), OpenError> {
        assert!(id.index() < shard_count);
        let mut state = ShardState {
            id,
            shard_count,
            data_dir: data_dir.to_path_buf(),
            storage,
            registry: Arc::new(TopicRegistry::new(registry.cluster_id.clone())),
            partitions: HashMap::new(),
            share: ShareState::default(),
            groups: crate::group::ConsumerGroups::default(),
            ptxn: crate::producer_txn::coordinator::TxnCoordinator::default(),
            read_cached: std::collections::VecDeque::new(),
            producer_id_expiration_ms: PRODUCER_ID_EXPIRATION_MS_DEFAULT,
            producers_checked_ms: now_ms,
        };
        let (reports, mut failures) = state.install_registry(registry, now_ms);
        match failures.is_empty() {
            true => Ok((state, reports)),
            false => Err(failures.swap_remove(0)),
        }
    }

    pub fn registry(&self) -> &Arc<TopicRegistry> {
        &self.registry
    }

    /// After a restart, over the partitions just opened: the state the shard's journal holds
    /// (share state, consumer groups, producer transactions), for the topics that still exist;
    /// then each share partition learns its log's start again (not journalled with it). The
    /// runtime and the deterministic simulation (`tests/share_producer_txn_sim.rs`) both restart so.
    pub fn restore_journal(
        &mut self,
        recovered: &crate::journal::Recovered,
        ptxn: crate::producer_txn::coordinator::CoordConfig,
        now_ms: u64,
    ) -> Result<(), String> {
        let registry = self.registry.clone();
        self.share =
            ShareState::restore(recovered, &registry, now_ms).map_err(|e| e.to_string())?;
        self.share.retain_topics(&registry);
        self.groups = crate::group::ConsumerGroups::restore(recovered, now_ms);
        self.groups.retain_topics(&|t| registry.topic(t).is_some());
        self.ptxn = crate::producer_txn::coordinator::TxnCoordinator::restore(recovered, ptxn);
        self.share_apply_log_starts();
        Ok(())
    }

    pub fn owns(&self, topic: &str, partition: i32) -> bool {
        partition >= 0 && partition_shard(topic, partition, self.shard_count) == self.id
    }

    pub fn partition(&self, key: &TopicPartition) -> Option<&Partition<S>> {
        self.partitions.get(key)
    }

    pub fn partition_mut(&mut self, key: &TopicPartition) -> Option<&mut Partition<S>> {
        self.partitions.get_mut(key)
    }

    pub fn partition_keys(&self) -> Vec<TopicPartition> {
        let mut keys: Vec<_> = self.partitions.keys().copied().collect();
        keys.sort();
        keys
    }

    pub fn partitions(&self) -> impl Iterator<Item = &Partition<S>> {
        self.partitions.values()
    }

    fn open_partition(
        &self,
        topic: &str,
        topic_id: Uuid,
        partition: i32,
        settings: TopicSettings,
        now_ms: u64,
    ) -> Result<(Partition<S>, RecoveryReport), OpenError> {
        let dir = partition_dir(&self.data_dir, topic_id, partition);
        let wrap = |error| OpenError {
            partition: format!("{topic}-{partition} ({})", dir.display()),
            error,
        };
        let (log, report) =
            PartitionLog::open(self.storage.clone(), &dir, log_config(&settings), now_ms)
                .map_err(wrap)?;
        let loaded = producer_snapshot::load(&self.storage, &dir, log.log_end_offset()).map_err(
            |source| {
                wrap(LogError::Io {
                    op: "load producer snapshots",
                    path: dir.clone(),
                    source,
                })
            },
        )?;
        for (file, reason) in &loaded.unreadable {
            tracing::warn!(dir = %dir.display(), %file, %reason, "skipping an unreadable producer snapshot; replaying the log from an older one");
        }
        let snapshot_offset = loaded.snapshot.as_ref().map_or(0, |s| s.offset);
        let (producers, txns) = rebuild_producers(&log, loaded.snapshot).map_err(wrap)?;
        Ok((
            Partition {
                topic: topic.to_string(),
                topic_id,
                partition,
                log,
                producers,
                txns,
                settings,
                snapshot_offset,
            },
            report,
        ))
    }

    /// Installs a new registry snapshot: opens partitions this shard now owns, drops (and
    /// deletes the files of) partitions whose topic is gone, and updates the settings of the
    /// others. `max.message.bytes` applies at once; segment and retention settings are given to
    /// the log when it is opened, so they apply from the next start (the log has no live
    /// reconfiguration).
    ///
    /// A partition that fails to open is reported and left closed (requests for it get
    /// KAFKA_STORAGE_ERROR); the others open and the registry is installed regardless.
    pub fn install_registry(
        &mut self,
        registry: Arc<TopicRegistry>,
        now_ms: u64,
    ) -> (Vec<RecoveryReport>, Vec<OpenError>) {
        let mut reports = Vec::new();
        let mut failures = Vec::new();
        self.share.dlq.refresh(&registry);
        let gone: Vec<TopicPartition> = self
            .partitions
            .keys()
            .filter(|key| {
                registry
                    .topic_by_id(&key.topic_id)
                    .is_none_or(|t| key.partition >= t.partitions)
            })
            .copied()
            .collect();
        for key in gone {
            let partition = self.partitions.remove(&key).expect("listed above");
            let dir = partition.log.dir().to_path_buf();
            drop(partition);
            if let Err(e) = remove_log_dir(&self.storage, &dir) {
                tracing::warn!(dir = %dir.display(), error = %e, "could not remove a deleted partition's files; they go at the next start");
            }
        }
        for topic in registry.topics.values() {
            let (settings, errors) =
                TopicSettings::resolve(&topic.configs, &registry.broker_configs);
            for e in errors {
                tracing::warn!(topic = %topic.name, error = %e, "topic config");
            }
            for partition in 0..topic.partitions {
                let key = TopicPartition {
                    topic_id: topic.id,
                    partition,
                };
                if let Some(open) = self.partitions.get_mut(&key) {
                    if open.settings != settings {
                        tracing::info!(topic = %topic.name, partition, "topic settings changed; segment and retention settings apply from the next start");
                        open.settings = settings;
                    }
                    continue;
                }
                if !self.owns(&topic.name, partition) {
                    continue;
                }
                match self.open_partition(&topic.name, topic.id, partition, settings, now_ms) {
                    Ok((opened, report)) => {
                        self.partitions.insert(key, opened);
                        reports.push(report);
                    }
                    Err(e) => failures.push(e),
                }
            }
        }
        assert!(
            registry.version >= self.registry.version,
            "registry versions only grow"
        );
        self.registry = registry;
        self.share.retain_topics(&self.registry);
        (reports, failures)
    }

    /// The partition an operation names, or why there is none: a partition the registry has
    /// but that failed to open is unavailable, anything else is unknown.
    pub(crate) fn lookup(&self, r: &PartitionRef) -> Result<&Partition<S>, PartitionError> {
        match self.partitions.get(&r.key()) {
            Some(p) if p.topic == r.topic => Ok(p),
            _ => Err(self.missing(r)),
        }
    }

    fn missing(&self, r: &PartitionRef) -> PartitionError {
        let known = self
            .registry
            .topic_by_id(&r.topic_id)
            .is_some_and(|t| t.name == r.topic && r.partition >= 0 && r.partition < t.partitions);
        if known && self.owns(&r.topic, r.partition) {
            PartitionError::Unavailable
        } else {
            PartitionError::Unknown
        }
    }

    /// Validates and appends one produced batch (see the module docs of `producer_state`).
    pub fn produce(&mut self, op: &ProduceOp, now_ms: u64) -> ProduceApplied {
        let fail = |error: ProduceError, message: String| ProduceApplied {
            result: ProduceResult::error(error, message),
            durable_target: None,
        };
        let key = op.partition.key();
        let missing = ProduceError::Partition(self.missing(&op.partition));
        let Some(partition) = self
            .partitions
            .get_mut(&key)
            .filter(|p| p.topic == op.partition.topic)
        else {
            return fail(
                missing,
                format!(
                    "{}-{} is not available on this broker",
                    op.partition.topic, op.partition.partition
                ),
            );
        };
        let records = &op.records[..];
        if records.len() as u64 > partition.settings.max_message_bytes {
            return fail(
                ProduceError::Log(LogErrorKind::TooLarge),
                format!(
                    "batch of {} bytes exceeds max.message.bytes {}",
                    records.len(),
                    partition.settings.max_message_bytes
                ),
            );
        }
        let header = match batch::validate(records) {
            Ok(header) => header,
            Err(e) => {
                return fail(
                    ProduceError::Log(LogError::InvalidBatch(e).kind()),
                    format!("invalid record batch: {e}"),
                )
            }
        };
        if header.is_control() {
            return fail(
                ProduceError::ControlBatch,
                "clients may not write control batches".into(),
            );
        }
        if header.is_transactional() && header.producer_id < 0 {
            return fail(
                ProduceError::NoProducerId,
                "a transactional batch needs a producer id".into(),
            );
        }
        if let Err(e) = partition
            .txns
            .check_data(header.producer_id, header.is_transactional())
        {
            return fail(ProduceError::Txn(e), e.to_string());
        }
        if header.is_transactional() {
            match partition.txns.check_verified(
                header.producer_id,
                header.producer_epoch,
                header.base_sequence,
                op.verification_guard,
            ) {
                Ok(Verification::Verified) => {}
                Ok(Verification::Needed { guard }) => {
                    return ProduceApplied {
                        result: ProduceResult::verify(guard),
                        durable_target: None,
                    }
                }
                Err(e) => return fail(ProduceError::Txn(e), e.to_string()),
            }
        }
        let last_sequence = wrap_sequence(header.base_sequence, header.last_offset_delta);
        let idempotent = header.producer_id >= 0;
        if idempotent && header.base_sequence < 0 {
            return fail(
                ProduceError::NoSequence,
                "a batch with a producer id needs a base sequence".into(),
            );
        }
        let log_start_offset = partition.log.log_start_offset() as i64;
        match partition.producers.check(
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
            last_sequence,
        ) {
            Err(e) => return fail(ProduceError::Producer(e), e.to_string()),
            Ok(SequenceCheck::Duplicate {
                base_offset,
                last_offset,
            }) => {
                return ProduceApplied {
                    result: ProduceResult::appended(base_offset, log_start_offset),
                    durable_target: Some((key, last_offset as u64 + 1)),
                }
            }
            Ok(SequenceCheck::Append) => {}
        }
        let info = match partition.log.append(records, now_ms) {
            Ok(info) => info,
            Err(e) => return fail(ProduceError::Log(e.kind()), e.to_string()),
        };
        partition.producers.record(
            header.producer_id,
            header.producer_epoch,
            BatchRecord {
                first_sequence: header.base_sequence,
                last_sequence,
                base_offset: info.base_offset as i64,
                last_offset: info.last_offset as i64,
                max_timestamp: header.max_timestamp,
            },
        );
        partition.txns.record_data(
            header.producer_id,
            header.producer_epoch,
            header.is_transactional(),
            info.base_offset as i64,
        );
        partition.snapshot_if_rolled(&self.storage);
        ProduceApplied {
            result: ProduceResult::appended(info.base_offset as i64, log_start_offset),
            durable_target: Some((key, info.last_offset + 1)),
        }
    }

    /// Reads the partitions of a fetch, in order, up to the op's byte budget; only durable
    /// batches are returned.
    pub fn fetch(&self, op: &FetchOp) -> Vec<FetchedPartition> {
        let mut budget = op.max_bytes;
        let mut any_records = false;
        op.partitions
            .iter()
            .map(|want| {
                let partition = match self.lookup(&want.partition) {
                    Ok(p) => p,
                    Err(e) => return FetchedPartition::error(FetchError::Partition(e)),
                };
                let hw = partition.high_watermark();
                let lso = partition.last_stable_offset();
                // What this reader may see: below the high watermark, or the LSO.
                let end = if op.read_committed { lso } else { hw };
                let start = partition.log.log_start_offset() as i64;
                let mut out = FetchedPartition {
                    error: None,
                    high_watermark: hw,
                    last_stable_offset: lso,
                    log_start_offset: start,
                    records: Bytes::new(),
                    aborted: Vec::new(),
                };
                if want.fetch_offset < start || want.fetch_offset > hw {
                    out.error = Some(FetchError::Log(LogErrorKind::OffsetOutOfRange));
                    return out;
                }
                let limit = want.max_bytes.min(budget);
                if want.fetch_offset >= end || (limit == 0 && any_records) {
                    return out;
                }
                // With nothing returned yet, read at least one batch even past the budget.
                let ask = if any_records { limit } else { limit.max(1) };
                match partition.log.read(want.fetch_offset as u64, ask) {
                    Ok(read) => {
                        let kept = trim_to(&read.records, end);
                        let len = kept.len();
                        if op.read_committed && len > 0 {
                            let upper = last_batch_end(kept).unwrap_or(want.fetch_offset);
                            out.aborted = partition.txns.aborted_in(want.fetch_offset, upper);
                        }
                        budget = budget.saturating_sub(len);
                        any_records |= len > 0;
                        let mut records = Bytes::from(read.records);
                        records.truncate(len);
                        out.records = records;
                    }
                    Err(e) => {
                        tracing::error!(topic = %partition.topic, partition = partition.partition, error = %e, "fetch read failed");
                        out.error = Some(FetchError::Log(e.kind()));
                    }
                }
                out
            })
            .collect()
    }

    /// Whether any of the partitions has durable data at or past the given offset (or an
    /// error a fetch would report at once).
    pub fn has_data(&self, partitions: &[(PartitionRef, i64)], read_committed: bool) -> bool {
        partitions.iter().any(|(r, offset)| match self.lookup(r) {
            Ok(p) => {
                let hw = p.high_watermark();
                p.readable_end(read_committed) > *offset
                    || *offset > hw
                    || *offset < p.log.log_start_offset() as i64
            }
            Err(_) => true,
        })
    }

    /// Answers ListOffsets for partitions this shard owns.
    pub fn list_offsets(&self, op: &ListOffsetsOp) -> Vec<Result<ListedOffset, ListOffsetsError>> {
        op.partitions
            .iter()
            .map(|(r, timestamp)| {
                let partition = self.lookup(r).map_err(ListOffsetsError::Partition)?;
                let fail = |e: LogError| Err(ListOffsetsError::Log(e.kind()));
                // read_committed: nothing at or past the last stable offset is found.
                let hw = partition.readable_end(op.read_committed);
                let start = partition.log.log_start_offset() as i64;
                let found = |offset: i64, timestamp: i64| Ok(ListedOffset { timestamp, offset });
                match *timestamp {
                    LATEST_TIMESTAMP | LATEST_TIERED_TIMESTAMP => found(hw, -1),
                    EARLIEST_TIMESTAMP | EARLIEST_LOCAL_TIMESTAMP => found(start, -1),
                    MAX_TIMESTAMP => match max_timestamp_offset(partition, hw) {
                        Ok(Some((offset, ts))) => found(offset, ts),
                        Ok(None) => Ok(ListedOffset::NONE),
                        Err(e) => fail(e),
                    },
                    ts if ts >= 0 => match partition.log.offset_for_timestamp(ts) {
                        Ok(Some((offset, found_ts))) if (offset as i64) < hw => {
                            found(offset as i64, found_ts)
                        }
                        Ok(_) => Ok(ListedOffset::NONE),
                        Err(e) => fail(e),
                    },
                    _ => Err(ListOffsetsError::UnknownTimestamp),
                }
            })
            .collect()
    }

    /// DescribeProducers: the idempotent producers of each partition this shard owns (or why
    /// it cannot answer for one).
    pub fn describe_producers(
        &self,
        partitions: &[PartitionRef],
    ) -> Vec<Result<Vec<ProducerSnapshot>, PartitionError>> {
        partitions
            .iter()
            .map(|r| {
                self.lookup(r).map(|p| {
                    let mut producers = p.producers.snapshot();
                    for producer in &mut producers {
                        producer.current_txn_start_offset =
                            p.txns.open_txn_start(producer.producer_id).unwrap_or(-1);
                    }
                    producers
                })
            })
            .collect()
    }

    /// Ends `marker`'s transaction in partition `r` (WriteTxnMarkers): appends the control
    /// batch when [`TxnPartition::marker_action`] says so and updates the producer and
    /// transaction state. Returns the durable end offset that covers the marker (`None`:
    /// nothing written), or why not.
    pub fn write_txn_marker(
        &mut self,
        marker: &TxnMarker,
        r: &PartitionRef,
        now_ms: u64,
    ) -> Result<Option<(TopicPartition, u64)>, MarkerError> {
        let key = r.key();
        let missing = self.missing(r);
        let Some(partition) = self.partitions.get_mut(&key).filter(|p| p.topic == r.topic) else {
            return Err(MarkerError::Partition(missing));
        };
        let hw = partition.high_watermark();
        partition.txns.advance(hw);
        // Aborted entries wholly below the log start (retention, DeleteRecords) are forgotten
        // here, where entries are added, so the index stays bounded by the retained log.
        partition
            .txns
            .move_log_start(partition.log.log_start_offset() as i64);
        let known = partition.producers.epoch(marker.producer_id);
        let action = partition
            .txns
            .marker_action(marker.producer_id, marker.producer_epoch, known)
            .map_err(|e| {
                tracing::warn!(topic = %r.topic, partition = r.partition, error = %e, "transaction marker refused");
                MarkerError::Refused(e)
            })?;
        partition.txns.clear_guard(marker.producer_id);
        if action == MarkerAction::Skip {
            return Ok(None);
        }
        let (key_bytes, value_bytes) = control_record(marker.outcome, marker.coordinator_epoch);
        let now = i64::try_from(now_ms).unwrap_or(i64::MAX);
        let mut builder = batch::BatchBuilder::new(now);
        builder.producer_id = marker.producer_id;
        builder.producer_epoch = marker.producer_epoch;
        builder.attributes = CONTROL_BATCH_ATTRIBUTES;
        builder.record(now, Some(&key_bytes), Some(&value_bytes));
        let bytes = builder.build();
        let info = partition
            .log
            .append(&bytes, now_ms)
            .map_err(|e| MarkerError::NotAppended(e.kind()))?;
        partition
            .producers
            .record_marker(marker.producer_id, marker.producer_epoch, now);
        partition
            .txns
            .record_marker(marker.producer_id, marker.outcome, info.base_offset as i64);
        partition.snapshot_if_rolled(&self.storage);
        Ok(Some((key, info.last_offset + 1)))
    }

    /// DeleteRecords on one partition this shard owns: moves the log start to `offset` (-1: the
    /// high watermark), as Kafka: an offset below 0 or past the high watermark is
    /// OFFSET_OUT_OF_RANGE, one at or below the log start changes nothing. The share groups'
    /// state of the partition follows the new log start ([`Self::share_log_start_moved`]).
    /// The new start is durable after the partition's next flush (the caller starts it and
    /// waits for [`PartitionLog::durable_log_start_offset`]).
    pub fn delete_records(&mut self, r: &PartitionRef, offset: i64) -> DeletedRecords {
        let key = r.key();
        let missing = self.missing(r);
        let Some(partition) = self.partitions.get_mut(&key).filter(|p| p.topic == r.topic) else {
            return Err(DeleteRecordsError::Partition(missing));
        };
        let hw = partition.high_watermark();
        let target = if offset == DELETE_RECORDS_HIGH_WATERMARK {
            hw
        } else {
            offset
        };
        if target < 0 || target > hw {
            return Err(DeleteRecordsError::Log(LogErrorKind::OffsetOutOfRange));
        }
        let before = partition.log.log_start_offset() as i64;
        let start = match partition.log.delete_records_before(target as u64) {
            Ok(start) => start as i64,
            Err(e) => {
                tracing::error!(topic = %r.topic, partition = r.partition, error = %e, "DeleteRecords failed");
                return Err(DeleteRecordsError::Log(e.kind()));
            }
        };
        if start > before {
            self.share_log_start_moved(key, start);
        }
        Ok(start)
    }

    /// Whether the partition's log start offset `start` is durable; `Err`: the log cannot be
    /// made durable (poisoned) or the partition is gone.
    pub fn log_start_durable(
        &self,
        key: &TopicPartition,
        start: i64,
    ) -> Result<bool, DeleteRecordsError> {
        match self.partitions.get(key) {
            None => Err(DeleteRecordsError::Partition(PartitionError::Unknown)),
            Some(p) if p.log.is_poisoned() => Err(DeleteRecordsError::NotDurable),
            Some(p) => Ok(p.log.durable_log_start_offset() as i64 >= start),
        }
    }

    /// Starts a flush of one partition if it has unflushed writes.
    pub fn begin_flush(&mut self, key: &TopicPartition) -> Option<FlushTicket> {
        self.partitions.get_mut(key)?.log.begin_flush()
    }

    /// Full chunks of a partition's log tail to write ahead of its next flush
    /// ([`PartitionLog::take_write_behind`](crate::log::PartitionLog::take_write_behind)).
    pub fn take_write_behind(&mut self, key: &TopicPartition) -> Option<WriteBehind> {
        self.partitions.get_mut(key)?.log.take_write_behind()
    }

    /// Ends a write-behind; `None` if the partition was removed meanwhile.
    pub fn complete_write_behind(
        &mut self,
        key: &TopicPartition,
        write: WriteBehind,
        result: io::Result<()>,
    ) -> Option<Result<(), LogError>> {
        let partition = self.partitions.get_mut(key)?;
        Some(partition.log.complete_write_behind(write, result))
    }

    /// Ends a flush; returns the new durable end offset, or `None` if the partition was
    /// removed (its topic deleted) while the flush was in flight.
    pub fn complete_flush(
        &mut self,
        key: &TopicPartition,
        ticket: FlushTicket,
        result: io::Result<()>,
    ) -> Option<Result<u64, LogError>> {
        let partition = self.partitions.get_mut(key)?;
        Some(
            partition
                .log
                .complete_flush(ticket, result)
                .map(|()| partition.log.durable_end_offset()),
        )
    }

    /// The durable end offset of a partition and whether its log refuses writes.
    pub fn durability(&self, key: &TopicPartition) -> Option<(u64, bool)> {
        self.partitions
            .get(key)
            .map(|p| (p.log.durable_end_offset(), p.log.is_poisoned()))
    }

    /// A partition whose log is poisoned (the first found) and why: the runtime's fatal path.
    pub fn poisoned_log(&self) -> Option<(TopicPartition, String)> {
        self.partitions
            .iter()
            .find_map(|(k, p)| p.log.poison_cause().map(|c| (*k, c.to_string())))
    }

    /// Why `key`'s log is poisoned, if it is.
    pub fn log_poison(&self, key: &TopicPartition) -> Option<String> {
        self.partitions
            .get(key)
            .and_then(|p| p.log.poison_cause().map(str::to_string))
    }

    /// Whether any partition has writes not covered by a completed flush.
    pub fn unflushed(&self) -> Vec<TopicPartition> {
        let mut keys: Vec<TopicPartition> = self
            .partitions
            .iter()
            .filter(|(_, p)| {
                !p.log.is_poisoned()
                    && (p.log.durable_end_offset() < p.log.log_end_offset() || p.log.flush_due())
            })
            .map(|(k, _)| *k)
            .collect();
        keys.sort();
        keys
    }

    /// Rolls segments that are due and applies retention; returns partitions that now need a
    /// flush (a roll or removal changed files).
    pub fn housekeeping(&mut self, now_ms: u64) -> Vec<TopicPartition> {
        let mut touched = Vec::new();
        let mut moved_start = Vec::new();
        let expire = now_ms >= self.producers_checked_ms + PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS;
        if expire {
            self.producers_checked_ms = now_ms;
        }
        for (key, partition) in self.partitions.iter_mut() {
            if expire {
                let txns = &partition.txns;
                let forgotten = partition.producers.expire(
                    now_ms as i64,
                    self.producer_id_expiration_ms,
                    |producer_id| txns.open_txn_start(producer_id).is_some(),
                );
                if forgotten > 0 {
                    tracing::debug!(topic = %partition.topic, partition = partition.partition, forgotten, "expired idle producers");
                }
            }
            if partition.log.flush_in_flight() {
                continue;
            }
            let rolled = partition.log.roll_if_due(now_ms);
            let removed = partition.log.enforce_retention(now_ms);
            partition.snapshot_if_rolled(&self.storage);
            match (rolled, removed) {
                (Ok(rolled), Ok(removed)) => {
                    if rolled || !removed.is_empty() {
                        touched.push(*key);
                    }
                    if !removed.is_empty() {
                        moved_start.push(*key);
                    }
                }
                (Err(e), _) | (_, Err(e)) => {
                    tracing::error!(topic = %partition.topic, partition = partition.partition, error = %e, "log housekeeping failed");
                }
            }
        }
        // Retention moved these logs' start: share partitions archive what fell below it.
        for key in moved_start {
            if let Some(partition) = self.partitions.get(&key) {
                let start = partition.log.log_start_offset() as i64;
                self.share_log_start_moved(key, start);
            }
        }
        touched
    }

    /// At a clean shutdown, once every partition is flushed: a producer snapshot of each at its
    /// log end (so the next start replays nothing), then each log closed
    /// ([`PartitionLog::close`]). Returns the partitions whose log failed to close, with why.
    pub fn close_partitions(&mut self) -> Vec<(String, LogError)> {
        let mut failures = Vec::new();
        for (_, mut partition) in std::mem::take(&mut self.partitions) {
            if !partition.log.is_poisoned()
                && partition.log.log_end_offset() != partition.snapshot_offset
            {
                partition.write_snapshot(&self.storage);
            }
            let name = format!("{}-{}", partition.topic, partition.partition);
            if let Err(error) = partition.log.close() {
                failures.push((name, error));
            }
        }
        failures
    }
}

/// The offset and timestamp of the batch with the largest max timestamp below `hw`.
fn max_timestamp_offset<S: Storage>(
    partition: &Partition<S>,
    hw: i64,
) -> Result<Option<(i64, i64)>, LogError> {
    let log = &partition.log;
    let mut best: Option<(i64, i64)> = None;
    let mut offset = log.log_start_offset();
    while (offset as i64) < hw {
        let read = log.read(offset, PRODUCER_REBUILD_READ_BYTES)?;
        for bytes in batch::split_batches(&read.records).unwrap_or_default() {
            if let Ok(header) = batch::parse_header(bytes) {
                if header.base_offset < hw && best.is_none_or(|(_, ts)| header.max_timestamp > ts) {
                    best = Some((header.base_offset, header.max_timestamp));
                }
            }
        }
        if read.next_offset <= offset {
            break;
        }
        offset = read.next_offset;
    }
    Ok(best)
}

/// The prefix of `records` (whole batches) whose batches end at or below `hw`.
pub fn trim_to(records: &[u8], hw: i64) -> &[u8] {
    let mut end = 0;
    while end + BATCH_HEADER_BYTES <= records.len() {
        let Ok(header) = batch::parse_header(&records[end..]) else {
            break;
        };
        let batch_end = header.base_offset + i64::from(header.last_offset_delta) + 1;
        if batch_end > hw || end + header.total_bytes() > records.len() {
            break;
        }
        end += header.total_bytes();
    }
    &records[..end]
}

fn remove_log_dir<S: Storage>(storage: &S, dir: &Path) -> io::Result<()> {
    for name in storage.list(dir)? {
        storage.remove(&dir.join(name))?;
    }
    match std::fs::remove_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    if let Some(parent) = dir.parent() {
        if storage.exists(parent) {
            storage.sync_dir(parent)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::BatchBuilder;
    use crate::producer_txn::partition::TxnError;
    use crate::shard::ops::FetchPartitionOp;
    use crate::shard::producer_state::ProducerError;
    use crate::storage::file::SimStorage;

    fn registry(topics: &[(&str, u128, i32)]) -> Arc<TopicRegistry> {
        let mut r = TopicRegistry::new("c".into());
        for (name, id, partitions) in topics {
            r.create_topic(name, Uuid::from_u128(*id), *partitions, &[])
                .unwrap();
        }
        Arc::new(r)
    }

    fn pref(topic: &str, id: u128, partition: i32) -> PartitionRef {
        PartitionRef {
            topic: topic.into(),
            topic_id: Uuid::from_u128(id),
            partition,
        }
    }

    fn batch(pid: i64, epoch: i16, seq: i32, values: &[&[u8]]) -> Bytes {
        let mut b = BatchBuilder::new(1_000);
        b.producer_id = pid;
        b.producer_epoch = epoch;
        b.base_sequence = seq;
        for v in values {
            b.record(1_000, None, Some(v));
        }
        Bytes::from(b.build())
    }

    /// Produces `records`; a batch that needs a verification (KIP-890 part 1) is sent again
    /// with its guard, as the produce handler does once the coordinator confirms it.
    fn produce(
        state: &mut ShardState<SimStorage>,
        r: &PartitionRef,
        records: Bytes,
    ) -> ProduceApplied {
        let mut op = produce_op(r, records, None);
        let applied = state.produce(&op, 1_000);
        if applied.result.verification_guard.is_none() {
            return applied;
        }
        op.verification_guard = applied.result.verification_guard;
        state.produce(&op, 1_000)
    }

    /// An acks=all produce of `records` carrying `guard`.
    fn produce_op(r: &PartitionRef, records: Bytes, guard: Option<u64>) -> ProduceOp {
        ProduceOp {
            partition: r.clone(),
            records,
            acks: -1,
            timeout_ms: 1000,
            verification_guard: guard,
        }
    }

    fn flush(state: &mut ShardState<SimStorage>, key: &TopicPartition) {
        if let Some(ticket) = state.begin_flush(key) {
            // The runtime performs a ticket's block writes and syncs; here, the storage does.
            let synced = crate::log::sync_ticket(&state.storage, &ticket);
            state.complete_flush(key, ticket, synced).unwrap().unwrap();
        }
        assert!(!state.unflushed().contains(key));
    }

    fn open(
        storage: &SimStorage,
        reg: Arc<TopicRegistry>,
        shards: usize,
        id: u16,
    ) -> ShardState<SimStorage> {
        ShardState::open(
            ShardId(id),
            shards,
            Path::new("/data"),
            storage.clone(),
            reg,
            0,
        )
        .unwrap()
        .0
    }

    fn txn_batch(pid: i64, epoch: i16, seq: i32, values: &[&[u8]]) -> Bytes {
        let mut b = BatchBuilder::new(1_000);
        b.producer_id = pid;
        b.producer_epoch = epoch;
        b.base_sequence = seq;
        b.attributes = 0x10;
        for v in values {
            b.record(1_000, None, Some(v));
        }
        Bytes::from(b.build())
    }

    fn read(
        s: &ShardState<SimStorage>,
        r: &PartitionRef,
        read_committed: bool,
    ) -> FetchedPartition {
        s.fetch(&FetchOp {
            partitions: vec![FetchPartitionOp {
                partition: r.clone(),
                fetch_offset: 0,
                max_bytes: 1 << 20,
            }],
            max_bytes: 1 << 20,
            read_committed,
        })
        .remove(0)
    }

    fn marker(pid: i64, epoch: i16, outcome: crate::producer_txn::TxnOutcome) -> TxnMarker {
        TxnMarker {
            producer_id: pid,
            producer_epoch: epoch,
            outcome,
            coordinator_epoch: 3,
        }
    }

    /// KIP-890 part 1 with requests of one producer in flight together: both batches opening the
    /// producer's transaction ask for a verification; the later one, sent again with the guard
    /// before the earlier, is refused OUT_OF_ORDER_SEQUENCE_NUMBER and not appended (a producer
    /// without state here may start at any sequence), so the batches land in sequence order.
    #[test]
    fn a_verified_batch_does_not_overtake_an_earlier_one_being_verified() {
        let storage = SimStorage::new();
        let reg = registry(&[("t", 1, 1)]);
        let mut s = open(&storage, reg, 1, 0);
        let r = pref("t", 1, 0);
        let op = |records: Bytes, guard| produce_op(&r, records, guard);
        let first = txn_batch(7, 0, 0, &[b"a", b"b"]);
        let second = txn_batch(7, 0, 2, &[b"c"]);
        let guard = s
            .produce(&op(first.clone(), None), 1_000)
            .result
            .verification_guard;
        assert!(guard.is_some());
        assert_eq!(
            s.produce(&op(second.clone(), None), 1_000)
                .result
                .verification_guard,
            guard
        );
        let overtaking = s.produce(&op(second.clone(), guard), 1_000).result;
        assert_eq!(
            overtaking.error,
            Some(ProduceError::Txn(TxnError::EarlierBatchVerifying {
                producer_id: 7,
                sequence: 2,
                lowest_sequence: 0
            })),
            "{overtaking:?}"
        );
        assert_eq!(s.lookup(&r).unwrap().log.log_end_offset(), 0);
        let appended = s.produce(&op(first, guard), 1_000).result;
        assert_eq!((appended.error, appended.base_offset), (None, 0));
        let appended = s.produce(&op(second, guard), 1_000).result;
        assert_eq!((appended.error, appended.base_offset), (None, 2));
    }

    /// Transactional produce, markers, read_committed reads and ListOffsets, DescribeProducers'
    /// open transaction, and the same state rebuilt from the log after a reopen.
    #[test]
    fn transactions_hold_the_lso_and_aborted_ones_are_reported() {
        use crate::producer_txn::TxnOutcome::{Abort, Commit};
        let storage = SimStorage::new();
        let reg = registry(&[("t", 1, 1)]);
        let mut s = open(&storage, reg.clone(), 1, 0);
        let r = pref("t", 1, 0);
        let key = r.key();
        assert_eq!(
            produce(&mut s, &r, txn_batch(7, 0, 0, &[b"a", b"b"]))
                .result
                .error,
            None
        );
        assert_eq!(
            produce(&mut s, &r, batch(-1, -1, -1, &[b"p"])).result.error,
            None
        );
        assert_eq!(
            produce(&mut s, &r, txn_batch(8, 0, 0, &[b"c"]))
                .result
                .error,
            None
        );
        // A non-transactional batch of a producer inside a transaction: INVALID_TXN_STATE.
        assert_eq!(
            produce(&mut s, &r, batch(7, 0, 2, &[b"x"])).result.error,
            Some(ProduceError::Txn(TxnError::NotTransactional {
                producer_id: 7
            }))
        );
        // Control batches from clients: INVALID_RECORD.
        let mut control = BatchBuilder::new(1_000);
        control.attributes = 0x30;
        control.producer_id = 7;
        control.producer_epoch = 0;
        control.record(1_000, Some(&[0, 0, 0, 1]), Some(&[0, 0, 0, 0, 0, 0]));
        assert_eq!(
            produce(&mut s, &r, Bytes::from(control.build()))
                .result
                .error,
            Some(ProduceError::ControlBatch)
        );
        flush(&mut s, &key);
        let p = read(&s, &r, true);
        assert_eq!((p.high_watermark, p.last_stable_offset), (4, 0));
        assert!(p.records.is_empty());
        assert_eq!(read(&s, &r, false).records.len() > 0, true);
        let producers = &s.describe_producers(std::slice::from_ref(&r))[0]
            .as_ref()
            .unwrap()
            .clone();
        assert_eq!(
            producers
                .iter()
                .map(|p| (p.producer_id, p.current_txn_start_offset))
                .collect::<Vec<_>>(),
            vec![(7, 0), (8, 3)]
        );

        // Commit 7 (marker at 4), abort 8 (marker at 5): the LSO follows once durable.
        assert_eq!(
            s.write_txn_marker(&marker(7, 0, Commit), &r, 2_000),
            Ok(Some((key, 5)))
        );
        assert_eq!(
            s.write_txn_marker(&marker(7, 0, Commit), &r, 2_000),
            Ok(None),
            "idempotent"
        );
        assert_eq!(
            read(&s, &r, true).last_stable_offset,
            0,
            "marker not durable yet"
        );
        flush(&mut s, &key);
        assert_eq!(read(&s, &r, true).last_stable_offset, 3);
        assert_eq!(
            s.write_txn_marker(&marker(8, 0, Abort), &r, 2_000),
            Ok(Some((key, 6)))
        );
        // A stale marker for a producer with an open transaction is refused.
        assert_eq!(
            produce(&mut s, &r, txn_batch(9, 2, 0, &[b"d"]))
                .result
                .error,
            None
        );
        assert_eq!(
            s.write_txn_marker(&marker(9, 1, Commit), &r, 2_000),
            Err(MarkerError::Refused(
                crate::producer_txn::partition::TxnError::StaleMarker {
                    producer_id: 9,
                    epoch: 1,
                    current: 2,
                }
            ))
        );
        flush(&mut s, &key);
        let p = read(&s, &r, true);
        assert_eq!((p.high_watermark, p.last_stable_offset), (7, 6));
        let aborted: Vec<(i64, i64)> = p
            .aborted
            .iter()
            .map(|a| (a.producer_id, a.first_offset))
            .collect();
        assert_eq!(aborted, vec![(8, 3)]);
        let headers: Vec<(i64, bool)> = batch::split_batches(&p.records)
            .unwrap()
            .into_iter()
            .map(|b| {
                let h = batch::parse_header(b).unwrap();
                (h.base_offset, h.is_control())
            })
            .collect();
        assert_eq!(
            headers,
            vec![(0, false), (2, false), (3, false), (4, true), (5, true)]
        );
        let latest = |s: &ShardState<SimStorage>, read_committed| {
            s.list_offsets(&ListOffsetsOp {
                partitions: vec![(r.clone(), LATEST_TIMESTAMP)],
                read_committed,
            })[0]
                .unwrap()
                .offset
        };
        assert_eq!((latest(&s, true), latest(&s, false)), (6, 7));
        assert!(!s.has_data(&[(r.clone(), 6)], true));
        assert!(s.has_data(&[(r.clone(), 6)], false));
        // The marker's epoch fenced nothing (same epoch); a newer epoch marker fences epoch 2.
        assert_eq!(
            s.write_txn_marker(&marker(9, 3, Abort), &r, 2_000),
            Ok(Some((key, 8)))
        );
        assert_eq!(
            produce(&mut s, &r, txn_batch(9, 2, 1, &[b"z"]))
                .result
                .error,
            Some(ProduceError::Producer(ProducerError::StaleEpoch {
                producer_id: 9,
                epoch: 2,
                current: 3
            }))
        );
        flush(&mut s, &key);

        // Reopen: the same state, rebuilt from the log.
        drop(s);
        let s = open(&storage, reg, 1, 0);
        let p = read(&s, &r, true);
        assert_eq!((p.high_watermark, p.last_stable_offset), (8, 8));
        let aborted: Vec<(i64, i64)> = p
            .aborted
            .iter()
            .map(|a| (a.producer_id, a.first_offset))
            .collect();
        assert_eq!(aborted, vec![(8, 3), (9, 6)]);
        assert_eq!(s.partition(&key).unwrap().producers.epoch(9), Some(3));
    }

    /// Share-group admin on the partition's shard: alter journals a reset, describe reports the
    /// start offset and high watermark, delete journals a tombstone that replay honours.
    #[test]
    fn share_offsets_alter_describe_delete_and_replay() {
        use crate::journal::entries::Entry;
        use crate::journal::{Location, Recovered, RecoveredEntry};
        use crate::shard::share_state::ShareState;
        let storage = SimStorage::new();
        let mut s = open(&storage, registry(&[("t", 1, 1)]), 1, 0);
        let r = pref("t", 1, 0);
        let key = r.key();
        produce(&mut s, &r, batch(-1, -1, -1, &[b"a", b"b", b"c"]));
        flush(&mut s, &key);
        let none = s.share_offsets("g", Some(std::slice::from_ref(&r)));
        assert_eq!((none[0].start_offset, none[0].high_watermark), (-1, 3));
        assert!(s.share_offsets("g", None).is_empty());

        let altered = s.share_alter_offsets("g", &[(r.clone(), 1)]);
        assert_eq!(altered[0].error, None);
        let refused = s.share_alter_offsets("g", &[(r.clone(), -5)]);
        assert!(matches!(
            refused[0].error,
            Some(crate::shard::ops::SharePartitionError::Share(
                crate::share::ShareError::InvalidRequest { .. }
            ))
        ));
        let all = s.share_offsets("g", None);
        assert_eq!(all.len(), 1);
        assert_eq!(
            (all[0].partition, all[0].start_offset, all[0].high_watermark),
            (key, 1, 3)
        );
        assert!(s.share.groups_with_state().contains("g"));
        let mut journal = s.share.take_entries();
        assert!(
            matches!(&journal[0], Entry::SharePartitionSnapshot(st) if st.start_offset == Some(1))
        );

        let deleted = s.share_delete_offsets("g", &[Uuid::from_u128(1), Uuid::from_u128(9)]);
        assert!(deleted.iter().all(|d| d.error.is_none()));
        assert!(s.share_offsets("g", None).is_empty());
        assert!(s.share.groups_with_state().is_empty());
        let tombstone = s.share.take_entries();
        assert!(
            matches!(&tombstone[..], [Entry::SharePartitionSnapshot(st)] if st.start_offset.is_none())
        );
        journal.extend(tombstone);

        // Replay: the reset alone restores the state; with the tombstone after it, nothing.
        let recovered = |entries: &[Entry]| Recovered {
            entries: entries
                .iter()
                .enumerate()
                .map(|(seq, entry)| RecoveredEntry {
                    seq: seq as u64,
                    location: Location {
                        path: Arc::from(Path::new("/journal")),
                        position: 0,
                    },
                    entry: entry.clone(),
                })
                .collect(),
            ..Recovered::default()
        };
        let before_delete =
            ShareState::restore(&recovered(&journal[..1]), s.registry(), 0).unwrap();
        assert!(before_delete.groups_with_state().contains("g"));
        let after_delete = ShareState::restore(&recovered(&journal), s.registry(), 0).unwrap();
        assert!(after_delete.groups_with_state().is_empty());
    }

    /// The log start moving under a share group (DeleteRecords, retention) archives
    /// what falls below it and keeps the state above it: no stall on records in flight, no
    /// redelivery of records acknowledged above the new start.
    #[test]
    fn share_partition_follows_the_log_start() {
        use crate::shard::ops::{ShareAckOp, ShareFetchOp};
        use crate::shard::share_state::ShareKey;
        use crate::share::{AckBatch, AcknowledgeType, RecordState};
        let mut reg = TopicRegistry::new("c".into());
        reg.create_topic("t", Uuid::from_u128(1), 1, &[]).unwrap();
        reg.set_group_configs(
            "g",
            [(
                "share.auto.offset.reset".to_string(),
                "earliest".to_string(),
            )]
            .into_iter()
            .collect(),
        )
        .unwrap();
        let storage = SimStorage::new();
        let mut s = open(&storage, Arc::new(reg), 1, 0);
        let r = pref("t", 1, 0);
        let key = r.key();
        for i in 0..10u8 {
            produce(&mut s, &r, batch(-1, -1, -1, &[&[i]]));
        }
        flush(&mut s, &key);
        let fetch =
            |s: &mut ShardState<SimStorage>, member: &str, max: u32| -> Vec<(i64, i64, u16)> {
                let op = ShareFetchOp {
                    group_id: "g".into(),
                    member_id: member.into(),
                    partitions: vec![r.clone()],
                    max_records: max,
                    batch_size: 500,
                    partition_max_bytes: 1 << 20,
                    min_one_batch: true,
                    record_limit: false,
                    acquire_created: true,
                    acknowledge: None,
                    min_bytes: 0,
                    wait_durable: true,
                };
                let got = s.share_fetch(&op, 0);
                assert_eq!(got[0].error, None, "{:?}", got[0].error_message);
                got[0]
                    .acquired
                    .iter()
                    .map(|a| (a.first, a.last, a.delivery_count))
                    .collect()
            };
        let ack = |s: &mut ShardState<SimStorage>, member: &str, batches: Vec<AckBatch>| {
            let op = ShareAckOp {
                group_id: "g".into(),
                member_id: member.into(),
                partitions: vec![(r.clone(), batches)],
            };
            assert_eq!(s.share_acknowledge(&op, 0)[0].error, None);
        };
        let share_key = ShareKey {
            group_id: "g".into(),
            partition: key,
        };
        let record = |s: &ShardState<SimStorage>, offset: i64| {
            let (_, sp) = s
                .share
                .partitions()
                .find(|(k, _)| **k == share_key)
                .unwrap();
            sp.record(offset).map(|v| (v.state, v.delivery_count))
        };
        assert_eq!(fetch(&mut s, "m1", 4), vec![(0, 3, 1)]);
        assert_eq!(fetch(&mut s, "m2", 3), vec![(4, 6, 1)]);
        ack(
            &mut s,
            "m2",
            vec![
                AckBatch::new(4, 4, AcknowledgeType::Release),
                AckBatch::new(5, 5, AcknowledgeType::Accept),
                AckBatch::new(6, 6, AcknowledgeType::Release),
            ],
        );
        s.partition_mut(&key)
            .unwrap()
            .log
            .delete_records_before(6)
            .unwrap();
        assert_eq!(s.share_log_start_moved(key, 6), 1, "offset 4 was AVAILABLE");
        assert_eq!(record(&s, 2), Some((RecordState::Acquired, 1)));
        assert_eq!(record(&s, 4), Some((RecordState::Archived, 1)));
        assert_eq!(record(&s, 5), Some((RecordState::Acknowledged, 1)));
        // The next fetch starts at the log start: 6 again, then 7-9; nothing is stuck.
        assert_eq!(fetch(&mut s, "m3", 10), vec![(6, 6, 2), (7, 9, 1)]);
        // m1's records below the log start are archived when released, never redelivered.
        ack(
            &mut s,
            "m1",
            vec![AckBatch::new(0, 3, AcknowledgeType::Release)],
        );
        assert_eq!(s.share.start_offset(&share_key), Some(6));
        ack(
            &mut s,
            "m3",
            vec![AckBatch::new(6, 9, AcknowledgeType::Accept)],
        );
        assert_eq!(s.share.start_offset(&share_key), Some(10));

        // Nothing in flight, ACKNOWLEDGED above the new log start: kept, not delivered again.
        for i in 0..6u8 {
            produce(&mut s, &r, batch(-1, -1, -1, &[&[i]]));
        }
        flush(&mut s, &key);
        assert_eq!(fetch(&mut s, "m1", 10), vec![(10, 15, 1)]);
        ack(
            &mut s,
            "m1",
            vec![
                AckBatch::new(10, 12, AcknowledgeType::Release),
                AckBatch::new(13, 13, AcknowledgeType::Accept),
                AckBatch::new(14, 15, AcknowledgeType::Release),
            ],
        );
        s.partition_mut(&key)
            .unwrap()
            .log
            .delete_records_before(12)
            .unwrap();
        s.share_log_start_moved(key, 12);
        assert_eq!(fetch(&mut s, "m2", 10), vec![(12, 12, 2), (14, 15, 2)]);
        let entries = s.share.take_entries();
        assert!(!entries.is_empty(), "the moves are journalled");
    }

    /// DeleteRecords: Kafka's offset rules, the share group's start offset follows the new log
    /// start, the start is durable only after a flush, and a restart keeps it.
    #[test]
    fn delete_records_moves_the_log_start_and_the_share_state() {
        let storage = SimStorage::new();
        let reg = registry(&[("t", 1, 1)]);
        let mut s = open(&storage, reg.clone(), 1, 0);
        let r = pref("t", 1, 0);
        let key = r.key();
        for i in 0..5u8 {
            produce(&mut s, &r, batch(-1, -1, -1, &[&[i], &[i]]));
        }
        flush(&mut s, &key);
        assert_eq!(s.share_alter_offsets("g", &[(r.clone(), 2)])[0].error, None);
        let out_of_range = Err(DeleteRecordsError::Log(LogErrorKind::OffsetOutOfRange));
        assert_eq!(s.delete_records(&r, 11), out_of_range);
        assert_eq!(s.delete_records(&r, -2), out_of_range);
        assert_eq!(
            s.delete_records(&pref("t", 1, 1), 0),
            Err(DeleteRecordsError::Partition(PartitionError::Unknown))
        );
        assert_eq!(s.delete_records(&r, 6), Ok(6));
        assert_eq!(s.share_offsets("g", None)[0].start_offset, 6);
        assert_eq!(s.log_start_durable(&key, 6), Ok(false));
        // At or below the log start: nothing changes.
        assert_eq!(s.delete_records(&r, 3), Ok(6));
        flush(&mut s, &key);
        assert_eq!(s.log_start_durable(&key, 6), Ok(true));
        // -1: the high watermark.
        assert_eq!(s.delete_records(&r, DELETE_RECORDS_HIGH_WATERMARK), Ok(10));
        flush(&mut s, &key);
        drop(s);
        let s = open(&storage, reg, 1, 0);
        assert_eq!(s.lookup(&r).unwrap().log.log_start_offset(), 10);
        assert_eq!(s.log_start_durable(&key, 10), Ok(true));
        assert_eq!(
            s.log_start_durable(&pref("t", 1, 1).key(), 0),
            Err(DeleteRecordsError::Partition(PartitionError::Unknown))
        );
    }

    #[test]
    fn opens_only_owned_partitions() {
        let storage = SimStorage::new();
        let reg = registry(&[("t", 1, 8)]);
        let a = open(&storage, reg.clone(), 2, 0);
        let b = open(&storage, reg, 2, 1);
        assert_eq!(a.partition_keys().len() + b.partition_keys().len(), 8);
        assert_eq!(a.partition_keys().len(), 4);
        for key in a.partition_keys() {
            assert!(a.owns("t", key.partition));
            assert!(!b.owns("t", key.partition));
        }
    }

    #[test]
    fn produce_is_visible_only_once_durable() {
        let storage = SimStorage::new();
        let mut s = open(&storage, registry(&[("t", 1, 1)]), 1, 0);
        let r = pref("t", 1, 0);
        let key = r.key();
        let applied = produce(&mut s, &r, batch(-1, -1, -1, &[b"a", b"b"]));
        assert_eq!(applied.result.error, None);
        assert_eq!(applied.result.base_offset, 0);
        assert_eq!(applied.durable_target, Some((key, 2)));
        let fetch = FetchOp {
            partitions: vec![FetchPartitionOp {
                partition: r.clone(),
                fetch_offset: 0,
                max_bytes: 1 << 20,
            }],
            max_bytes: 1 << 20,
            read_committed: false,
        };
        let before = &s.fetch(&fetch)[0];
        assert_eq!(before.high_watermark, 0);
        assert!(before.records.is_empty());
        assert!(!s.has_data(&[(r.clone(), 0)], false));
        flush(&mut s, &key);
        let after = &s.fetch(&fetch)[0];
        assert_eq!(after.high_watermark, 2);
        assert_eq!(
            batch::parse_header(&after.records).unwrap().records_count,
            2
        );
        assert!(s.has_data(&[(r.clone(), 0)], false));
        let listed = s.list_offsets(&ListOffsetsOp {
            partitions: vec![
                (r.clone(), LATEST_TIMESTAMP),
                (r.clone(), EARLIEST_TIMESTAMP),
            ],
            read_committed: false,
        });
        assert_eq!(
            (listed[0], listed[1]),
            (
                Ok(ListedOffset {
                    timestamp: -1,
                    offset: 2
                }),
                Ok(ListedOffset {
                    timestamp: -1,
                    offset: 0
                })
            )
        );
        let refused = s.list_offsets(&ListOffsetsOp {
            partitions: vec![(r.clone(), -7), (pref("t", 1, 3), LATEST_TIMESTAMP)],
            read_committed: false,
        });
        assert_eq!(
            refused,
            vec![
                Err(ListOffsetsError::UnknownTimestamp),
                Err(ListOffsetsError::Partition(PartitionError::Unknown))
            ]
        );
    }

    #[test]
    fn invalid_batches_get_typed_errors_and_are_not_appended() {
        let storage = SimStorage::new();
        let mut s = open(&storage, registry(&[("t", 1, 1)]), 1, 0);
        let r = pref("t", 1, 0);
        let refused = |s: &mut ShardState<SimStorage>, r: &PartitionRef, records: Bytes| {
            let applied = produce(s, r, records);
            assert_eq!(applied.durable_target, None, "{applied:?}");
            assert_eq!(applied.result.base_offset, -1, "{applied:?}");
            assert!(applied.result.error_message.is_some(), "{applied:?}");
            applied.result.error
        };
        let mut bad = batch(-1, -1, -1, &[b"x"]).to_vec();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert_eq!(
            refused(&mut s, &r, Bytes::from(bad)),
            Some(ProduceError::Log(LogErrorKind::CrcMismatch))
        );
        assert_eq!(
            refused(&mut s, &r, Bytes::from_static(b"short")),
            Some(ProduceError::Log(LogErrorKind::InvalidBatch))
        );
        let unknown = Some(ProduceError::Partition(PartitionError::Unknown));
        let x = || batch(-1, -1, -1, &[b"x"]);
        assert_eq!(refused(&mut s, &pref("t", 2, 0), x()), unknown);
        assert_eq!(refused(&mut s, &pref("t", 1, 5), x()), unknown);
        let big = vec![0u8; 2 * 1024 * 1024];
        assert_eq!(
            refused(&mut s, &r, batch(-1, -1, -1, &[&big])),
            Some(ProduceError::Log(LogErrorKind::TooLarge))
        );
        // A producer id without a base sequence; a transactional batch without a producer id.
        assert_eq!(
            refused(&mut s, &r, batch(5, 0, -1, &[b"x"])),
            Some(ProduceError::NoSequence)
        );
        assert_eq!(
            refused(&mut s, &r, txn_batch(-1, 0, 0, &[b"x"])),
            Some(ProduceError::NoProducerId)
        );
        let key = r.key();
        assert_eq!(s.partition(&key).unwrap().log.log_end_offset(), 0);
    }

    #[test]
    fn idempotent_duplicates_answer_the_original_offset_and_survive_reopen() {
        let storage = SimStorage::new();
        let reg = registry(&[("t", 1, 1)]);
        let mut s = open(&storage, reg.clone(), 1, 0);
        let r = pref("t", 1, 0);
        let key = r.key();
        assert_eq!(
            produce(&mut s, &r, batch(5, 0, 0, &[b"a", b"b"]))
                .result
                .base_offset,
            0
        );
        assert_eq!(
            produce(&mut s, &r, batch(5, 0, 2, &[b"c"]))
                .result
                .base_offset,
            2
        );
        let dup = produce(&mut s, &r, batch(5, 0, 0, &[b"a", b"b"]));
        assert_eq!((dup.result.error, dup.result.base_offset), (None, 0));
        assert_eq!(
            produce(&mut s, &r, batch(5, 0, 9, &[b"z"])).result.error,
            Some(ProduceError::Producer(ProducerError::OutOfOrder {
                producer_id: 5,
                epoch: 0,
                first_sequence: 9,
                expected: 3
            }))
        );
        flush(&mut s, &key);
        drop(s);
        // Producer state is rebuilt from the log.
        let mut s = open(&storage, reg, 1, 0);
        let dup = produce(&mut s, &r, batch(5, 0, 2, &[b"c"]));
        assert_eq!((dup.result.error, dup.result.base_offset), (None, 2));
        assert_eq!(
            produce(&mut s, &r, batch(5, 0, 3, &[b"d"]))
                .result
                .base_offset,
            3
        );
        assert_eq!(
            produce(&mut s, &r, batch(5, 1, 0, &[b"e"]))
                .result
                .base_offset,
            4
        );
        assert_eq!(
            produce(&mut s, &r, batch(5, 0, 4, &[b"f"])).result.error,
            Some(ProduceError::Producer(ProducerError::StaleEpoch {
                producer_id: 5,
                epoch: 0,
                current: 1
            }))
        );
        assert_eq!(s.partition(&key).unwrap().log.log_end_offset(), 5);
    }

    #[test]
    fn fetch_budget_and_offsets_out_of_range() {
        let storage = SimStorage::new();
        let mut s = open(&storage, registry(&[("t", 1, 2)]), 1, 0);
        let (r0, r1) = (pref("t", 1, 0), pref("t", 1, 1));
        for _ in 0..3 {
            produce(&mut s, &r0, batch(-1, -1, -1, &[&[7u8; 100]]));
            produce(&mut s, &r1, batch(-1, -1, -1, &[&[8u8; 100]]));
        }
        flush(&mut s, &r0.key());
        flush(&mut s, &r1.key());
        let part = |r: &PartitionRef, offset| FetchPartitionOp {
            partition: r.clone(),
            fetch_offset: offset,
            max_bytes: 1 << 20,
        };
        // A budget of 1 byte still returns one batch of the first partition, nothing after.
        let got = s.fetch(&FetchOp {
            partitions: vec![part(&r0, 0), part(&r1, 0)],
            max_bytes: 1,
            read_committed: false,
        });
        assert_eq!(batch::split_batches(&got[0].records).unwrap().len(), 1);
        assert!(got[1].records.is_empty());
        let got = s.fetch(&FetchOp {
            partitions: vec![part(&r0, 4), part(&r0, 3), part(&r1, 1)],
            max_bytes: 1 << 20,
            read_committed: false,
        });
        assert_eq!(
            got[0].error,
            Some(FetchError::Log(LogErrorKind::OffsetOutOfRange))
        );
        assert_eq!(
            got[0].high_watermark, 3,
            "offsets are answered with the error"
        );
        assert!(got[1].records.is_empty() && got[1].error.is_none());
        let unknown = s.fetch(&FetchOp {
            partitions: vec![part(&pref("t", 1, 2), 0)],
            max_bytes: 1 << 20,
            read_committed: false,
        });
        assert_eq!(
            unknown,
            vec![FetchedPartition::error(FetchError::Partition(
                PartitionError::Unknown
            ))]
        );
        assert_eq!(batch::split_batches(&got[2].records).unwrap().len(), 2);
    }

    #[test]
    fn deleted_topics_lose_their_partitions() {
        let storage = SimStorage::new();
        let reg = registry(&[("t", 1, 2)]);
        let mut s = open(&storage, reg.clone(), 1, 0);
        let mut next = (*reg).clone();
        next.delete_topic("t").unwrap();
        next.version += 1;
        let (_, failures) = s.install_registry(Arc::new(next), 0);
        assert!(failures.is_empty());
        assert!(s.partition_keys().is_empty());
        assert_eq!(
            produce(&mut s, &pref("t", 1, 0), batch(-1, -1, -1, &[b"x"]))
                .result
                .error,
            Some(ProduceError::Partition(PartitionError::Unknown))
        );
    }

    #[test]
    fn max_message_bytes_changes_apply_at_once() {
        let storage = SimStorage::new();
        let reg = registry(&[("t", 1, 1)]);
        let mut s = open(&storage, reg.clone(), 1, 0);
        let r = pref("t", 1, 0);
        let mut next = (*reg).clone();
        next.set_topic_configs(
            "t",
            [("max.message.bytes".to_string(), "100".to_string())].into(),
        )
        .unwrap();
        next.version += 1;
        let (_, failures) = s.install_registry(Arc::new(next), 0);
        assert!(failures.is_empty());
        let big: &[u8] = &[0u8; 200];
        assert_eq!(
            produce(&mut s, &r, batch(-1, -1, -1, &[big])).result.error,
            Some(ProduceError::Log(LogErrorKind::TooLarge))
        );
        assert_eq!(
            produce(&mut s, &r, batch(-1, -1, -1, &[b"x"])).result.error,
            None
        );
    }

    #[test]
    fn trim_keeps_only_whole_batches_below_the_watermark() {
        let mut records = Vec::new();
        for base in [0i64, 2, 5] {
            let mut b = batch(-1, -1, -1, &[&b"a"[..]; 2]).to_vec();
            if base == 5 {
                b = batch(-1, -1, -1, &[&b"a"[..]; 3]).to_vec();
            }
            batch::set_base_offset(&mut b, base);
            records.extend_from_slice(&b);
        }
        assert_eq!(batch::split_batches(trim_to(&records, 8)).unwrap().len(), 3);
        assert_eq!(batch::split_batches(trim_to(&records, 7)).unwrap().len(), 2);
        assert_eq!(batch::split_batches(trim_to(&records, 4)).unwrap().len(), 2);
        assert!(trim_to(&records, 1).is_empty());
    }

    #[test]
    fn partition_dirs_round_trip() {
        let id = Uuid::from_u128(0xabc);
        let dir = partition_dir(Path::new("/d"), id, 7);
        let name = dir.file_name().unwrap().to_str().unwrap();
        assert_eq!(
            parse_partition_dir(name),
            Some(TopicPartition {
                topic_id: id,
                partition: 7
            })
        );
        assert_eq!(parse_partition_dir("junk"), None);
    }

    /// What a start rebuilds for each partition: producer entries and the durable transaction
    /// state.
    type Rebuilt = Vec<(
        TopicPartition,
        Vec<(i64, crate::shard::producer_state::ProducerEntry)>,
        (
            Vec<(i64, i64, i16)>,
            Vec<crate::producer_txn::partition::AbortedTxn>,
        ),
    )>;

    fn rebuilt(s: &ShardState<SimStorage>) -> Rebuilt {
        s.partition_keys()
            .into_iter()
            .map(|key| {
                let p = s.partition(&key).unwrap();
                let entries = p
                    .producers
                    .entries()
                    .into_iter()
                    .map(|(id, e)| (id, e.clone()))
                    .collect();
                (key, entries, p.txns.durable_parts())
            })
            .collect()
    }

    /// Producer snapshots against the trivial model, a replay of the whole log: idempotent and
    /// transactional producers (retries, commits, aborts, epoch bumps) on segments that roll
    /// every few batches (64 KiB records), through clean restarts, process kills and power losses at random
    /// points. After each start, the state rebuilt from the newest snapshot and the log past it equals the state a
    /// replay from the log start rebuilds; after a clean restart the snapshot is at the log end
    /// (nothing to replay).
    #[test]
    fn producer_snapshots_rebuild_what_a_full_replay_rebuilds() {
        use crate::producer_txn::TxnOutcome::{Abort, Commit};
        use rand::{rngs::SmallRng, Rng, SeedableRng};
        for seed in 0..8u64 {
            let mut rng = SmallRng::seed_from_u64(seed);
            let mut storage = SimStorage::new();
            let mut reg = TopicRegistry::new("c".into());
            reg.create_topic(
                "t",
                Uuid::from_u128(1),
                2,
                &[("segment.bytes".into(), Some("1048576".into()))],
            )
            .unwrap();
            let reg = Arc::new(reg);
            let mut s = open(&storage, reg.clone(), 1, 0);
            // Client view per producer id: (epoch, next sequence, last batch sent).
            let mut clients: HashMap<i64, (i16, i32, Option<(i32, usize)>)> =
                (1..=4).map(|pid| (pid, (0, 0, None))).collect();
            let value = vec![7u8; 64 << 10];
            for step in 0..250 {
                let partition = rng.gen_range(0..2);
                let r = pref("t", 1, partition);
                let pid = rng.gen_range(1..=4i64);
                let transactional = pid >= 3;
                let client = clients.get_mut(&pid).unwrap();
                match rng.gen_range(0..100) {
                    0..=54 => {
                        let n = rng.gen_range(1..=3usize);
                        let values: Vec<&[u8]> = (0..n).map(|_| &value[..]).collect();
                        let records = if transactional {
                            txn_batch(pid, client.0, client.1, &values)
                        } else {
                            batch(pid, client.0, client.1, &values)
                        };
                        if produce(&mut s, &r, records).result.error.is_none() {
                            client.2 = Some((client.1, n));
                            client.1 += n as i32;
                        }
                    }
                    55..=64 => {
                        if let Some((seq, n)) = client.2 {
                            let values: Vec<&[u8]> = (0..n).map(|_| &value[..]).collect();
                            let records = if transactional {
                                txn_batch(pid, client.0, seq, &values)
                            } else {
                                batch(pid, client.0, seq, &values)
                            };
                            let _ = produce(&mut s, &r, records);
                        }
                    }
                    65..=79 if transactional => {
                        let outcome = if rng.gen_bool(0.5) { Commit } else { Abort };
                        for p in 0..2 {
                            let _ = s.write_txn_marker(
                                &marker(pid, client.0, outcome),
                                &pref("t", 1, p),
                                1_000 + step,
                            );
                        }
                        if rng.gen_bool(0.3) {
                            *client = (client.0 + 1, 0, None);
                        }
                    }
                    80..=89 => {
                        for key in s.unflushed() {
                            flush(&mut s, &key);
                        }
                    }
                    90..=94 => {
                        for key in s.unflushed() {
                            flush(&mut s, &key);
                        }
                        let ends: Vec<(TopicPartition, u64, PathBuf)> = s
                            .partitions()
                            .map(|p| {
                                let key = TopicPartition {
                                    topic_id: p.topic_id,
                                    partition: p.partition,
                                };
                                (key, p.log.log_end_offset(), p.log.dir().to_path_buf())
                            })
                            .collect();
                        assert!(s.close_partitions().is_empty());
                        s = open(&storage, reg.clone(), 1, 0);
                        for (key, end, dir) in ends {
                            assert_eq!(s.partition(&key).unwrap().log.log_end_offset(), end);
                            if end > 0 {
                                let names = storage.list(&dir).unwrap();
                                assert!(
                                    names.contains(&crate::log::snapshot_file_name(end)),
                                    "seed {seed}: {names:?}"
                                );
                            }
                        }
                    }
                    _ => {
                        drop(s);
                        storage = storage.crash(seed * 1_000 + step);
                        s = open(&storage, reg.clone(), 1, 0);
                    }
                }
                if rng.gen_range(0..100) < 10 || step == 249 {
                    // A process kill (the unflushed tail is lost), a start from the snapshots,
                    // then one from the log alone: the same state.
                    drop(s);
                    s = open(&storage, reg.clone(), 1, 0);
                    let with_snapshots = rebuilt(&s);
                    drop(s);
                    for key in [0, 1].map(|p| pref("t", 1, p).key()) {
                        let dir = partition_dir(Path::new("/data"), key.topic_id, key.partition);
                        for name in storage.list(&dir).unwrap() {
                            if crate::log::parse_snapshot_name(&name).is_some() {
                                storage.remove(&dir.join(name)).unwrap();
                            }
                        }
                    }
                    s = open(&storage, reg.clone(), 1, 0);
                    assert_eq!(rebuilt(&s), with_snapshots, "seed {seed} step {step}");
                    // Clients carry on from what the broker kept.
                    for (pid, client) in clients.iter_mut() {
                        let known = s.partitions().filter_map(|p| p.producers.epoch(*pid)).max();
                        if let Some(epoch) = known {
                            if epoch > client.0 {
                                *client = (epoch, 0, None);
                            }
                        }
                    }
                }
            }
        }
    }
}
