//! The broker's SCRAM credentials on disk: `<data>/scram-credentials.json`
//! (schemas/FORMAT.md, "SCRAM credentials"), loaded at startup and replaced atomically
//! (temporary file, fsync, rename, directory fsync) on every AlterUserScramCredentials before
//! it is acknowledged. One instance is shared by every shard; a change is visible to every
//! shard's next authentication at once.
//!
//! Writes are serialized by a mutex and made with blocking file calls on the calling shard's
//! thread: alterations are rare administrative requests and the file is small.

use crate::security::scram::ScramCredentials;
use crate::server::CredentialAdmin;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

/// The credentials file's name in the data directory.
pub const CREDENTIALS_FILE: &str = "scram-credentials.json";

pub struct SharedCredentials {
    current: RwLock<Arc<ScramCredentials>>,
    /// Held while a change is written (one writer at a time).
    writer: Mutex<()>,
    dir: PathBuf,
}

impl SharedCredentials {
    /// Reads the file in `data_dir` (none: no credentials); a damaged file is an error.
    pub fn load(data_dir: &Path) -> Result<SharedCredentials, String> {
        let path = data_dir.join(CREDENTIALS_FILE);
        let creds = match std::fs::read_to_string(&path) {
            Ok(text) => ScramCredentials::from_file_text(&text)
                .map_err(|e| format!("{}: {e}", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => ScramCredentials::default(),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        Ok(SharedCredentials {
            current: RwLock::new(Arc::new(creds)),
            writer: Mutex::new(()),
            dir: data_dir.to_path_buf(),
        })
    }

    fn persist(&self, creds: &ScramCredentials) -> std::io::Result<()> {
        let tmp = self.dir.join(format!("{CREDENTIALS_FILE}.tmp"));
        let path = self.dir.join(CREDENTIALS_FILE);
        {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(creds.to_file_text().as_bytes())?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &path)?;
        std::fs::File::open(&self.dir)?.sync_all()
    }
}

impl CredentialAdmin for SharedCredentials {
    fn snapshot(&self) -> Arc<ScramCredentials> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn update(&self, edit: &mut dyn FnMut(&mut ScramCredentials)) -> Result<(), String> {
        let _writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let mut next = (*self.snapshot()).clone();
        edit(&mut next);
        if next != *self.snapshot() {
            self.persist(&next).map_err(|e| e.to_string())?;
        }
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(next);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::sasl::Mechanism;
    use crate::security::scram::ScramCredential;

    #[test]
    fn survives_a_reload_and_refuses_damage() {
        let dir = tempfile::tempdir().unwrap();
        let shared = SharedCredentials::load(dir.path()).unwrap();
        assert!(shared.snapshot().is_empty());
        let m = Mechanism::ScramSha256;
        shared
            .update(&mut |c| c.insert("u", m, ScramCredential::from_password(m, "p", b"s", 4096)))
            .unwrap();
        let again = SharedCredentials::load(dir.path()).unwrap();
        assert_eq!(*again.snapshot(), *shared.snapshot());
        assert!(!dir.path().join(format!("{CREDENTIALS_FILE}.tmp")).exists());
        std::fs::write(dir.path().join(CREDENTIALS_FILE), "{\"version\": 1, \"cred").unwrap();
        assert!(SharedCredentials::load(dir.path()).is_err());
    }
}
