//! A shared folder as a remote cache (`file:///path`): `cas/{sha256}` holds a blob's raw
//! bytes and `ac/{key}` an action entry, the HTTP layout on disk. A shared folder is
//! often a network mount where a read can hang for minutes, so every read runs under
//! the same deadlines and breaker as a request over the network.

use std::path::{Path, PathBuf};

use super::check::checked_name;
use super::guard::Guard;
use super::objects::ObjectRemote;
use super::settings::RemoteSettings;
use crate::error::{Error, IoContext, RemoteFailure, Result};
use crate::store::fsutil::write_atomic;

/// A remote cache in a folder.
pub(super) struct FolderStorage {
    root: PathBuf,
    shown: String,
    guard: Guard,
}

impl FolderStorage {
    /// The folder `root` (which need not exist yet: each request checks).
    pub(super) fn open(settings: &RemoteSettings, root: PathBuf, shown: String) -> FolderStorage {
        FolderStorage {
            root,
            shown,
            guard: Guard::new(
                settings,
                "check the shared folder's mount; the clocks are `[remote]` settings and flags (--first-byte-timeout, --stall-timeout)",
            ),
        }
    }

    fn path(&self, kind: &str, name: &str) -> Result<PathBuf> {
        Ok(self.root.join(kind).join(checked_name(name)?))
    }
}

impl ObjectRemote for FolderStorage {
    fn shown(&self) -> &str {
        &self.shown
    }

    fn exists(&self, kind: &str, name: &str) -> Result<bool> {
        let path = self.path(kind, name)?;
        let (root, shown) = (self.root.clone(), self.shown.clone());
        self.guard.bounded(&path.display().to_string(), 0, move || {
            check_folder(&root, &shown)?;
            Ok(path.is_file())
        })
    }

    /// The file `kind/name`, at most `limit` bytes; `Ok(None)` when there is none.
    fn read(&self, kind: &str, name: &str, limit: u64) -> Result<Option<Vec<u8>>> {
        let path = self.path(kind, name)?;
        let (root, shown) = (self.root.clone(), self.shown.clone());
        let url = path.display().to_string();
        self.guard.bounded(&url, limit, move || {
            check_folder(&root, &shown)?;
            let corrupt = |why: String| Error::Remote {
                url: path.display().to_string(),
                message: format!("sent a file {why}"),
                failure: RemoteFailure::Corrupt,
                hint: Some("nothing was stored".into()),
            };
            // Only a regular file: a FIFO would block the open, a device never end.
            let file = match kart_runtime::text::open_regular(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {
                    return Err(corrupt(format!("that is no file: {e}")));
                }
                Err(e) => return Err(e).at("read", &path),
            };
            crate::store::fsutil::read_bounded(file, limit)
                .map(Some)
                .map_err(corrupt)
        })
    }

    fn write(&self, kind: &str, name: &str, bytes: &[u8]) -> Result<()> {
        let path = self.path(kind, name)?;
        check_folder(&self.root, &self.shown)?;
        write_atomic(&path, bytes)
    }
}

fn check_folder(root: &Path, shown: &str) -> Result<()> {
    if root.is_dir() {
        Ok(())
    } else {
        Err(Error::Remote {
            url: shown.to_string(),
            message: "the folder does not exist".into(),
            failure: RemoteFailure::Unreachable,
            hint: Some("create it, or mount the shared folder".into()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::sha256_hex;
    use crate::remote::objects::Objects;
    use crate::store::Storage;
    use std::time::{Duration, Instant};

    fn folder(dir: &Path) -> Objects<FolderStorage> {
        let url = format!("file://{}", dir.display());
        Objects(FolderStorage::open(
            &RemoteSettings::new(&url),
            dir.to_path_buf(),
            url,
        ))
    }

    #[test]
    fn a_folder_remote_round_trips_and_checks_digests() {
        let dir = tempfile::tempdir().unwrap();
        let remote = folder(dir.path());
        let digest = sha256_hex(b"cubin");
        assert!(!remote.has_blob(&digest, None).unwrap());
        remote.put_blob(&digest, b"cubin").unwrap();
        assert!(
            remote.put_blob(&digest, b"CUBIN").is_err(),
            "misnamed bytes"
        );
        assert_eq!(
            remote.get_blob(&digest, Some(5)).unwrap().unwrap(),
            b"cubin"
        );
        std::fs::write(dir.path().join("cas").join(&digest), b"CUBIN").unwrap();
        let err = remote.get_blob(&digest, Some(5)).unwrap_err();
        assert!(err.to_string().contains("hashing to"), "{err}");
        let err = remote.get_blob(&digest, Some(4)).unwrap_err();
        assert!(err.to_string().contains("larger than 4 bytes"), "{err}");
        assert!(remote.get_blob("../../etc/passwd", None).is_err());
    }

    #[test]
    fn a_fifo_under_a_blob_name_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let remote = folder(dir.path());
        let digest = sha256_hex(b"x");
        std::fs::create_dir_all(dir.path().join("cas")).unwrap();
        let fifo = dir.path().join("cas").join(&digest);
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let start = Instant::now();
        let err = remote.get_blob(&digest, None).unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(2));
        assert!(
            err.to_string().contains("a FIFO, not a regular file"),
            "{err}"
        );
    }
}
