//! Remote caches: where artifacts go beyond one machine. Each kind of server is one
//! [`Storage`] in a file of its own: `http` (bazel-remote's HTTP layout, nginx
//! WebDAV), `folder` (a shared folder), `s3` (S3 and S3-compatible object stores, GCS,
//! Azure), [`reapi`] (a Remote Execution API server, over the gRPC client [`grpc`]), and
//! [`layered`] puts the local store in front of any of them. [`Remote`] is an opened one
//! with what the project says it may
//! do (trusted, read-only); [`transfer`] copies blobs and entries between two storages
//! (`kart fetch`, `kart push`, the build's `--push`); [`probe`] is `kart doctor`'s look
//! at a remote and an executor. The HTTP, folder and object-store backends keep the
//! same layout of named objects and share one [`Storage`] implementation over it
//! (`objects`).
//!
//! Nothing a remote sends is trusted: a blob is checked against the digest it was asked
//! for (and the size the lock gives) before anyone sees it, an action entry is
//! validated, every body is bounded, and every name is a validated hex digest, so no
//! answer can make kart write outside its store. Failures worth another try are retried
//! with backoff within a time bound; the first timeout gives the remote up for the rest
//! of the run, so a silent server costs one timeout, not one per artifact
//! (`guard`).

mod check;
pub mod exec;
mod folder;
pub mod grpc;
mod guard;
mod http;
pub mod layered;
pub mod merkle;
mod objects;
pub mod probe;
pub mod reapi;
mod s3;
mod settings;
pub mod transfer;

pub use s3::ALLOW_HTTP_ENV;
pub use settings::{
    ANONYMOUS_ENV, MIN_PROGRESS_BYTES, REMOTE_ENV, RemoteSettings, TOKEN_ENV, TOKEN_URL_ENV,
    Timeouts, anonymous_from_env, strip_credentials, token_allowed,
};

use crate::error::{Error, Result};
use crate::store::{ActionEntry, Storage};
use objects::Objects;

/// An opened remote cache: one [`Storage`] and what this run may do with it.
pub struct Remote {
    storage: Box<dyn Storage>,
    shown: String,
    /// Whether its action entries may stand in for compiling.
    pub trusted: bool,
    /// Never written to.
    pub read_only: bool,
    /// Read with unsigned requests (so never written to).
    pub anonymous: bool,
    /// Parallel transfers.
    pub jobs: usize,
}

impl std::fmt::Debug for Remote {
    // By hand: no credential may reach a log through `{:?}`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("url", &self.shown)
            .field("trusted", &self.trusted)
            .field("read_only", &self.read_only)
            .field("anonymous", &self.anonymous)
            .finish_non_exhaustive()
    }
}

impl Remote {
    /// Opens the remote `settings.url` names (no request is made). `token` is sent as a
    /// bearer token (an HTTP header, gRPC metadata); an object store's credentials come
    /// from the environment.
    pub fn open(settings: &RemoteSettings, token: Option<String>) -> Result<Remote> {
        Remote::open_with_env(settings, token, &s3::process_env)
    }

    /// [`Remote::open`], with an object store's variables (`AWS_ACCESS_KEY_ID`,
    /// `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, …) read through `env` rather than from
    /// the process environment (GCS and Azure read theirs from the process).
    pub fn open_with_env(
        settings: &RemoteSettings,
        token: Option<String>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Remote> {
        let bad = |why: String| {
            Error::usage(
                format!("remote URL `{}`: {why}", strip_credentials(&settings.url)),
                Some(
                    "use http://host:port/path, https://…, grpc://host:port/instance, grpcs://…, file:///absolute/folder or s3://bucket/prefix"
                        .into(),
                ),
            )
        };
        let url = reqwest::Url::parse(settings.url.trim_end_matches('/'))
            .map_err(|e| bad(e.to_string()))?;
        let base = url.as_str().trim_end_matches('/').to_string();
        let shown = strip_credentials(&base);
        let storage: Box<dyn Storage> = match url.scheme() {
            "http" | "https" => Box::new(Objects(
                http::HttpStorage::open(settings, base, shown.clone(), token).map_err(bad)?,
            )),
            "grpc" | "grpcs" => Box::new(reapi::ReapiStorage::open(settings, token)?),
            "file" => Box::new(Objects(folder::FolderStorage::open(
                settings,
                url.to_file_path()
                    .map_err(|()| bad("not an absolute local path".into()))?,
                shown.clone(),
            ))),
            "s3" | "gs" | "az" => Box::new(Objects(s3::ObjectStorage::open(
                settings,
                &url,
                shown.clone(),
                env,
            )?)),
            other => return Err(bad(format!("scheme `{other}` is not supported"))),
        };
        let anonymous = settings.anonymous && matches!(url.scheme(), "s3" | "gs" | "az");
        Ok(Remote {
            storage,
            shown,
            trusted: settings.trusted,
            read_only: settings.read_only || anonymous,
            anonymous,
            jobs: settings.jobs.max(1),
        })
    }

    /// The URL, without credentials or query (safe to print).
    pub fn url(&self) -> &str {
        &self.shown
    }

    /// A usage error, saying why, when this remote may not be written to.
    pub fn writable(&self) -> Result<()> {
        if self.anonymous {
            return Err(s3::anonymous_write(&self.shown));
        }
        if self.read_only {
            return Err(Error::usage(
                format!("remote {} is read-only", self.shown),
                Some("drop --read-only / `read_only = true` to write to it".into()),
            ));
        }
        Ok(())
    }
}

impl Storage for Remote {
    fn location(&self) -> String {
        self.shown.clone()
    }
    fn has_blob(&self, digest: &str, size: Option<u64>) -> Result<bool> {
        self.storage.has_blob(digest, size)
    }
    fn missing_blobs(&self, blobs: &[(&str, u64)]) -> Result<Vec<String>> {
        self.storage.missing_blobs(blobs)
    }
    fn get_blob(&self, digest: &str, size: Option<u64>) -> Result<Option<Vec<u8>>> {
        self.storage.get_blob(digest, size)
    }
    fn put_blob(&self, digest: &str, bytes: &[u8]) -> Result<()> {
        self.writable()?;
        self.storage.put_blob(digest, bytes)
    }
    fn has_entry(&self, key: &str) -> Result<bool> {
        self.storage.has_entry(key)
    }
    fn get_entry(&self, key: &str) -> Result<Option<ActionEntry>> {
        self.storage.get_entry(key)
    }
    fn put_entry(&self, entry: &ActionEntry) -> Result<()> {
        self.writable()?;
        self.storage.put_entry(entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_and_queries_never_show() {
        assert_eq!(
            strip_credentials("https://user:secret@cache.example:8443/kart?token=abc#x"),
            "https://cache.example:8443/kart"
        );
        let remote = Remote::open(
            &RemoteSettings::new("http://u:p@127.0.0.1:9/kart/"),
            Some("s3cr3t".into()),
        )
        .unwrap();
        assert_eq!(remote.url(), "http://127.0.0.1:9/kart");
        assert!(!format!("{remote:?}").contains("s3cr3t"));
    }

    #[test]
    fn bad_urls_and_names_are_usage_errors() {
        for url in ["ftp://host/x", "not a url", "file://relative"] {
            let err = Remote::open(&RemoteSettings::new(url), None).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{url}: {err}");
        }
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}", dir.path().display());
        let remote = Remote::open(&RemoteSettings::new(url), None).unwrap();
        assert!(remote.get_blob("../../etc/passwd", None).is_err());
    }

    #[test]
    fn object_stores_open_by_scheme_and_an_anonymous_one_is_read_only() {
        let env = |k: &str| match k {
            "AWS_ACCESS_KEY_ID" => Some("AKIDKART".to_string()),
            "AWS_SECRET_ACCESS_KEY" => Some("kart-very-secret".to_string()),
            "AWS_ENDPOINT_URL" => Some("http://127.0.0.1:9".to_string()),
            _ => None,
        };
        let mut settings = RemoteSettings::new("s3://bucket/kart/");
        let remote = Remote::open_with_env(&settings, None, &env).unwrap();
        assert_eq!(remote.url(), "s3://bucket/kart");
        assert!(!remote.read_only && remote.writable().is_ok());
        assert!(!format!("{remote:?}").contains("very-secret"));
        settings.anonymous = true;
        let remote = Remote::open_with_env(&settings, None, &env).unwrap();
        assert!(remote.read_only);
        let err = remote.writable().unwrap_err();
        assert!(err.to_string().contains("anonymously"), "{err}");
        // Anonymity is an object store's setting: an HTTP remote stays as it was.
        let mut http = RemoteSettings::new("http://127.0.0.1:9/kart");
        http.anonymous = true;
        assert!(!Remote::open(&http, None).unwrap().read_only);
    }

    #[test]
    fn the_anonymous_variable_is_one_or_zero() {
        assert_eq!(anonymous_from_env(None).unwrap(), None);
        assert_eq!(anonymous_from_env(Some("")).unwrap(), None);
        assert_eq!(anonymous_from_env(Some("1")).unwrap(), Some(true));
        assert_eq!(anonymous_from_env(Some("TRUE")).unwrap(), Some(true));
        assert_eq!(anonymous_from_env(Some("0")).unwrap(), Some(false));
        assert_eq!(
            anonymous_from_env(Some("maybe")).unwrap_err().exit_code(),
            2
        );
    }

    #[test]
    fn a_read_only_remote_refuses_every_write() {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = RemoteSettings::new(format!("file://{}", dir.path().display()));
        settings.read_only = true;
        let remote = Remote::open(&settings, None).unwrap();
        let digest = crate::digest::sha256_hex(b"x");
        let err = remote.put_blob(&digest, b"x").unwrap_err();
        assert!(err.to_string().contains("read-only"), "{err}");
        assert!(!dir.path().join("cas").exists());
    }
}
