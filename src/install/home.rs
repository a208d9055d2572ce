//! kart's home: the per-user folder installs live in, and its lock.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, IoContext, Result};

/// The per-user folder installs live in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Home {
    /// Its root.
    pub root: PathBuf,
}

impl Home {
    /// `KART_HOME`, else `$XDG_CACHE_HOME/kart`, else `$HOME/.cache/kart`.
    pub fn from_env() -> Result<Home> {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let root = if let Some(home) = var("KART_HOME") {
            PathBuf::from(home)
        } else if let Some(cache) = var("XDG_CACHE_HOME") {
            PathBuf::from(cache).join("kart")
        } else if let Some(home) = var("HOME") {
            PathBuf::from(home).join(".cache/kart")
        } else {
            return Err(Error::environment(
                "no folder for kart's installs: KART_HOME, XDG_CACHE_HOME and HOME are unset",
                "set KART_HOME to a folder kart may write to",
            ));
        };
        Ok(Home { root })
    }

    pub(crate) fn toolchains(&self) -> PathBuf {
        self.root.join("toolchains")
    }

    pub(crate) fn libraries(&self) -> PathBuf {
        self.root.join("libraries")
    }

    /// The stat caches of toolkit fingerprints and library hashes
    /// ([`crate::toolchain::stamp`]): only a cache, removed by a gc.
    pub(crate) fn fingerprints(&self) -> PathBuf {
        self.root.join("fingerprints")
    }

    /// Holds the home for an install or a gc: one at a time, waiting up to `timeout`.
    pub(crate) fn lock(&self, timeout: Duration) -> Result<std::fs::File> {
        std::fs::create_dir_all(&self.root).at("create", &self.root)?;
        let path = self.root.join(".lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .at("open", &path)?;
        let start = std::time::Instant::now();
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(file),
                Err(std::fs::TryLockError::WouldBlock) if start.elapsed() < timeout => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(Error::StoreBusy { path });
                }
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(e).at("lock", &path);
                }
            }
        }
    }
}
