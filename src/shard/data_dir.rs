//! The data directory's identity and the start-up checks that keep a start from losing data.
//!
//! A data directory holds `metadata.json` (the topic registry: which topics and partitions
//! exist), `meta.properties` (the cluster id, as Kafka's file of that name), the partition logs
//! under `logs/` and the state journals under `journal/`. The logs and journals mean nothing
//! without the registry, so a start that cannot read the registry must not start a new, empty
//! cluster on top of them: Kafka refuses a data directory whose `meta.properties` does not
//! match, and so does Lockstep ([`open_registry`]):
//!
//! | `metadata.json` | `meta.properties` | data under `logs/`, `journal/` | start |
//! | --- | --- | --- | --- |
//! | present | same cluster id | any | yes |
//! | present | missing | any | yes; `meta.properties` written (a directory from before it existed) |
//! | present | other cluster id | any | refused: the two files come from different clusters |
//! | missing | present | any | refused: the registry was lost |
//! | missing | missing | some | refused: data without the registry that names it |
//! | missing | missing | none | a new cluster: both files written |
//!
//! Partition directories that the registry does not name ([`set_aside_unknown_logs`]) are never
//! deleted at start: those of a topic whose deletion is durable in the registry (its id in
//! [`TopicRegistry::deleted_topic_ids`], written in the same atomic replace as the deletion) are
//! removed, since the shards' removal of them was interrupted; any other is renamed to
//! `<name>-stray` and reported, for the operator to inspect or delete (as Kafka does with stray
//! logs). A name already ending in `-stray` is left where it is.

use super::registry::{cluster_id_from, random_uuid, write_atomic, RegistryError, TopicRegistry};
use super::state::{parse_partition_dir, JOURNAL_DIR, LOGS_DIR};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// The data directory's identity file (Kafka's name and `key=value` form).
pub const META_PROPERTIES_FILE: &str = "meta.properties";
/// Format version written into [`META_PROPERTIES_FILE`].
pub const META_PROPERTIES_VERSION: u32 = 1;
/// Suffix of a partition directory set aside at start.
pub const STRAY_SUFFIX: &str = "-stray";

/// Why the data directory cannot be used; each message names the file and what to do.
#[derive(Debug)]
pub enum DataDirError {
    Io {
        path: PathBuf,
        error: io::Error,
    },
    Registry(RegistryError),
    /// `meta.properties` cannot be parsed.
    BadMetaProperties {
        path: PathBuf,
        reason: String,
    },
    /// `metadata.json` and `meta.properties` name different clusters.
    ClusterIdMismatch {
        metadata: PathBuf,
        registry_id: String,
        meta_id: String,
    },
    /// `metadata.json` is missing but `meta.properties` says this directory belongs to a cluster.
    MetadataMissing {
        metadata: PathBuf,
        cluster_id: String,
    },
    /// `metadata.json` is missing but partition or journal data exists.
    DataWithoutMetadata {
        metadata: PathBuf,
        found: PathBuf,
    },
}

impl fmt::Display for DataDirError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DataDirError::Io { path, error } => write!(f, "{}: {error}", path.display()),
            DataDirError::Registry(e) => write!(f, "{e}"),
            DataDirError::BadMetaProperties { path, reason } => write!(
                f,
                "{}: {reason}; restore the file from a backup (it holds cluster.id, the id in {})",
                path.display(),
                super::registry::METADATA_FILE
            ),
            DataDirError::ClusterIdMismatch {
                metadata,
                registry_id,
                meta_id,
            } => write!(
                f,
                "{} belongs to cluster {registry_id} but {META_PROPERTIES_FILE} beside it to cluster \
                 {meta_id}; refusing to start: restore the matching file, or move the directory away \
                 to start an empty broker",
                metadata.display()
            ),
            DataDirError::MetadataMissing {
                metadata,
                cluster_id,
            } => write!(
                f,
                "{} is missing but {META_PROPERTIES_FILE} says this directory belongs to cluster \
                 {cluster_id}; refusing to start: restore {} from a backup, or move the directory \
                 away to start an empty broker",
                metadata.display(),
                super::registry::METADATA_FILE
            ),
            DataDirError::DataWithoutMetadata { metadata, found } => write!(
                f,
                "{} is missing but {} holds data; refusing to start: restore {} from a backup, or \
                 move the directory away to start an empty broker",
                metadata.display(),
                found.display(),
                super::registry::METADATA_FILE
            ),
        }
    }
}

impl std::error::Error for DataDirError {}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> DataDirError + '_ {
    move |error| DataDirError::Io {
        path: path.to_path_buf(),
        error,
    }
}

/// Reads the cluster id from `meta.properties` (`None` if the file does not exist).
pub fn read_cluster_id(data_dir: &Path) -> Result<Option<String>, DataDirError> {
    let path = data_dir.join(META_PROPERTIES_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(DataDirError::Io { path, error }),
    };
    let bad = |reason: String| DataDirError::BadMetaProperties {
        path: path.clone(),
        reason,
    };
    let mut cluster_id = None;
    let mut version = None;
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            return Err(bad(format!("line {}: expected key=value", number + 1)));
        };
        match key.trim() {
            "cluster.id" => cluster_id = Some(value.trim().to_string()),
            "version" => version = Some(value.trim().to_string()),
            _ => {}
        }
    }
    if let Some(v) = version {
        if v != META_PROPERTIES_VERSION.to_string() {
            return Err(bad(format!("version {v} is not supported")));
        }
    }
    match cluster_id {
        Some(id) if !id.is_empty() => Ok(Some(id)),
        _ => Err(bad("no cluster.id".into())),
    }
}

/// Writes `meta.properties` durably (temp file, fsync, rename, directory fsync).
pub fn write_cluster_id(data_dir: &Path, cluster_id: &str) -> Result<(), DataDirError> {
    let text = format!(
        "# Written by Lockstep when this data directory was first used; do not edit.\n\
         version={META_PROPERTIES_VERSION}\ncluster.id={cluster_id}\n"
    );
    write_atomic(data_dir, META_PROPERTIES_FILE, text.as_bytes())
        .map_err(io_err(&data_dir.join(META_PROPERTIES_FILE)))
}

/// The first file or directory under `logs/` or a shard journal directory, if any: data that only
/// a registry can make sense of. (`journal/shards`, the shard count, is not data.)
fn first_data(data_dir: &Path) -> Result<Option<PathBuf>, DataDirError> {
    let first_entry = |dir: &Path| -> Result<Option<PathBuf>, DataDirError> {
        match std::fs::read_dir(dir) {
            Ok(mut entries) => match entries.next() {
                Some(entry) => Ok(Some(entry.map_err(io_err(dir))?.path())),
                None => Ok(None),
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(DataDirError::Io {
                path: dir.to_path_buf(),
                error,
            }),
        }
    };
    if let Some(found) = first_entry(&data_dir.join(LOGS_DIR))? {
        return Ok(Some(found));
    }
    let journals = data_dir.join(JOURNAL_DIR);
    let shard_dirs = match std::fs::read_dir(&journals) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => {
            return Err(DataDirError::Io {
                path: journals,
                error,
            })
        }
    };
    for entry in shard_dirs {
        let path = entry.map_err(io_err(&journals))?.path();
        if path.is_dir() {
            if let Some(found) = first_entry(&path)? {
                return Ok(Some(found));
            }
        }
    }
    Ok(None)
}

/// Loads the registry of `data_dir` after checking it against `meta.properties` and the data
/// beside it (the table in the module docs); creates a new cluster only in an empty directory.
pub fn open_registry(data_dir: &Path) -> Result<TopicRegistry, DataDirError> {
    std::fs::create_dir_all(data_dir).map_err(io_err(data_dir))?;
    let metadata = data_dir.join(super::registry::METADATA_FILE);
    let registry = TopicRegistry::load(data_dir).map_err(DataDirError::Registry)?;
    let meta_id = read_cluster_id(data_dir)?;
    match (registry, meta_id) {
        (Some(registry), Some(meta_id)) if meta_id != registry.cluster_id => {
            Err(DataDirError::ClusterIdMismatch {
                metadata,
                registry_id: registry.cluster_id,
                meta_id,
            })
        }
        (Some(registry), Some(_)) => Ok(registry),
        (Some(registry), None) => {
            write_cluster_id(data_dir, &registry.cluster_id)?;
            Ok(registry)
        }
        (None, Some(cluster_id)) => Err(DataDirError::MetadataMissing {
            metadata,
            cluster_id,
        }),
        (None, None) => {
            if let Some(found) = first_data(data_dir)? {
                return Err(DataDirError::DataWithoutMetadata { metadata, found });
            }
            let id = random_uuid().map_err(io_err(data_dir))?;
            let registry = TopicRegistry::new(cluster_id_from(id));
            // The registry first: a crash between the two writes leaves the case a start
            // repairs (registry without meta.properties), never meta.properties alone.
            registry.store(data_dir).map_err(io_err(&metadata))?;
            write_cluster_id(data_dir, &registry.cluster_id)?;
            tracing::info!(data_dir = %data_dir.display(), cluster_id = %registry.cluster_id, "new data directory");
            Ok(registry)
        }
    }
}

/// What [`set_aside_unknown_logs`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct UnknownLogs {
    /// Directories of topics whose deletion was durable, removed.
    pub removed: Vec<PathBuf>,
    /// Directories no partition of the registry names, renamed: (from, to).
    pub set_aside: Vec<(PathBuf, PathBuf)>,
    /// Directories set aside by an earlier start, still there.
    pub strays: Vec<PathBuf>,
}

/// Handles the partition directories that belong to no partition of `registry` (module docs).
/// Run once at start, before any shard opens its logs. The caller clears the registry's
/// deleted-topic ids afterwards ([`TopicRegistry::forget_deleted_topics`]).
pub fn set_aside_unknown_logs(
    data_dir: &Path,
    registry: &TopicRegistry,
) -> Result<UnknownLogs, DataDirError> {
    let logs = data_dir.join(LOGS_DIR);
    let mut done = UnknownLogs::default();
    let entries = match std::fs::read_dir(&logs) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(done),
        Err(error) => return Err(DataDirError::Io { path: logs, error }),
    };
    let mut names: Vec<_> = entries
        .map(|e| e.map(|e| e.file_name()))
        .collect::<io::Result<_>>()
        .map_err(io_err(&logs))?;
    names.sort();
    for name in names {
        let path = logs.join(&name);
        let Some(text) = name.to_str() else {
            done.set_aside
                .push((path.clone(), set_aside(&logs, &path)?));
            continue;
        };
        if text.ends_with(STRAY_SUFFIX) {
            done.strays.push(path);
            continue;
        }
        let key = parse_partition_dir(text);
        let known = key.is_some_and(|key| {
            registry
                .topic_by_id(&key.topic_id)
                .is_some_and(|t| key.partition < t.partitions)
        });
        if known {
            continue;
        }
        if key.is_some_and(|key| registry.deleted_topic_ids.contains(&key.topic_id)) {
            remove(&path)?;
            done.removed.push(path);
        } else {
            done.set_aside
                .push((path.clone(), set_aside(&logs, &path)?));
        }
    }
    if !done.removed.is_empty() || !done.set_aside.is_empty() {
        std::fs::File::open(&logs)
            .and_then(|dir| dir.sync_all())
            .map_err(io_err(&logs))?;
    }
    Ok(done)
}

fn remove(path: &Path) -> Result<(), DataDirError> {
    let result = if path.is_dir() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    };
    result.map_err(io_err(path))
}

/// Renames `path` to `<name>-stray` (or `<name>-<n>-stray` if that exists) inside `logs`.
fn set_aside(logs: &Path, path: &Path) -> Result<PathBuf, DataDirError> {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let mut target = logs.join(format!("{name}{STRAY_SUFFIX}"));
    let mut n = 1;
    while target.exists() {
        n += 1;
        target = logs.join(format!("{name}-{n}{STRAY_SUFFIX}"));
    }
    std::fs::rename(path, &target).map_err(io_err(path))?;
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ShardId;
    use crate::shard::registry::METADATA_FILE;
    use crate::shard::state::{journal_dir, partition_dir};
    use uuid::Uuid;

    fn new_dir() -> (tempfile::TempDir, TopicRegistry) {
        let tmp = tempfile::tempdir().unwrap();
        let registry = open_registry(tmp.path()).unwrap();
        (tmp, registry)
    }

    #[test]
    fn an_empty_directory_becomes_a_new_cluster_and_reopens_as_the_same() {
        let (tmp, registry) = new_dir();
        assert_eq!(
            read_cluster_id(tmp.path()).unwrap().as_deref(),
            Some(registry.cluster_id.as_str())
        );
        assert_eq!(
            open_registry(tmp.path()).unwrap().cluster_id,
            registry.cluster_id
        );
    }

    #[test]
    fn a_missing_metadata_file_is_refused_not_replaced() {
        let (tmp, registry) = new_dir();
        std::fs::remove_file(tmp.path().join(METADATA_FILE)).unwrap();
        let e = open_registry(tmp.path()).unwrap_err();
        assert!(
            matches!(&e, DataDirError::MetadataMissing { cluster_id, .. } if *cluster_id == registry.cluster_id)
        );
        let text = e.to_string();
        assert!(
            text.contains(METADATA_FILE) && text.contains("restore"),
            "{text}"
        );
        // Nothing was written: the directory still has no registry.
        assert!(!tmp.path().join(METADATA_FILE).exists());
    }

    #[test]
    fn data_without_either_file_is_refused() {
        for make in ["log", "journal"] {
            let tmp = tempfile::tempdir().unwrap();
            let found = if make == "log" {
                let dir = partition_dir(tmp.path(), Uuid::from_u128(5), 0);
                std::fs::create_dir_all(&dir).unwrap();
                dir
            } else {
                let dir = journal_dir(tmp.path(), ShardId(1));
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(dir.join("region-0"), b"x").unwrap();
                dir.join("region-0")
            };
            let e = open_registry(tmp.path()).unwrap_err();
            assert!(
                matches!(&e, DataDirError::DataWithoutMetadata { found: f, .. } if *f == found),
                "{make}: {e}"
            );
            assert!(!tmp.path().join(METADATA_FILE).exists());
            assert!(!tmp.path().join(META_PROPERTIES_FILE).exists());
        }
        // An empty journal directory (or just the shard count) is not data.
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(journal_dir(tmp.path(), ShardId(0))).unwrap();
        std::fs::write(tmp.path().join(JOURNAL_DIR).join("shards"), "2\n").unwrap();
        open_registry(tmp.path()).unwrap();
    }

    #[test]
    fn another_clusters_meta_properties_is_refused() {
        let (tmp, registry) = new_dir();
        write_cluster_id(tmp.path(), "AAAAAAAAAAAAAAAAAAAAAA").unwrap();
        let e = open_registry(tmp.path()).unwrap_err();
        assert!(matches!(e, DataDirError::ClusterIdMismatch { .. }), "{e}");
        assert!(e.to_string().contains(&registry.cluster_id));
        std::fs::write(tmp.path().join(META_PROPERTIES_FILE), "version=1\n").unwrap();
        assert!(matches!(
            open_registry(tmp.path()).unwrap_err(),
            DataDirError::BadMetaProperties { .. }
        ));
    }

    #[test]
    fn a_directory_from_before_meta_properties_gets_one() {
        let (tmp, registry) = new_dir();
        std::fs::remove_file(tmp.path().join(META_PROPERTIES_FILE)).unwrap();
        std::fs::create_dir_all(partition_dir(tmp.path(), Uuid::from_u128(5), 0)).unwrap();
        assert_eq!(
            open_registry(tmp.path()).unwrap().cluster_id,
            registry.cluster_id
        );
        assert_eq!(
            read_cluster_id(tmp.path()).unwrap(),
            Some(registry.cluster_id)
        );
    }

    #[test]
    fn unknown_partition_directories_are_set_aside_and_deleted_topics_removed() {
        let (tmp, mut registry) = new_dir();
        let (kept, gone) = (Uuid::from_u128(0xa), Uuid::from_u128(0xb));
        registry.create_topic("kept", kept, 2, &[]).unwrap();
        registry.create_topic("gone", gone, 1, &[]).unwrap();
        registry.delete_topic("gone").unwrap();
        let stranger = Uuid::from_u128(0xfeed);
        let dirs = [
            (kept, 0),
            (kept, 1),
            (kept, 2), // beyond the topic's partitions
            (gone, 0),
            (stranger, 0),
        ];
        for (id, p) in dirs {
            let dir = partition_dir(tmp.path(), id, p);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("00000000000000000000.log"), b"records").unwrap();
        }
        std::fs::write(tmp.path().join(LOGS_DIR).join("notes.txt"), b"mine").unwrap();
        let done = set_aside_unknown_logs(tmp.path(), &registry).unwrap();
        assert_eq!(done.removed, vec![partition_dir(tmp.path(), gone, 0)]);
        assert_eq!(done.set_aside.len(), 3, "{done:?}");
        for (from, to) in &done.set_aside {
            assert!(!from.exists());
            assert!(to.to_string_lossy().ends_with(STRAY_SUFFIX));
            assert!(to.exists(), "{}", to.display());
        }
        let stray = tmp
            .path()
            .join(LOGS_DIR)
            .join(format!("{}-0{STRAY_SUFFIX}", stranger.simple()));
        assert_eq!(
            std::fs::read(stray.join("00000000000000000000.log")).unwrap(),
            b"records"
        );
        assert!(partition_dir(tmp.path(), kept, 0).exists());
        assert!(partition_dir(tmp.path(), kept, 1).exists());
        // A second start leaves the strays where they are and reports them.
        let again = set_aside_unknown_logs(tmp.path(), &registry).unwrap();
        assert!(again.removed.is_empty() && again.set_aside.is_empty());
        assert_eq!(again.strays.len(), 3);
        // A directory of the same name appearing again is set aside beside the first.
        std::fs::create_dir_all(partition_dir(tmp.path(), stranger, 0)).unwrap();
        let third = set_aside_unknown_logs(tmp.path(), &registry).unwrap();
        assert_eq!(third.set_aside.len(), 1);
        assert!(third.set_aside[0]
            .1
            .ends_with(format!("{}-0-2{STRAY_SUFFIX}", stranger.simple())));
    }
}
