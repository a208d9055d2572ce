//! [`Remote`]: an opened remote cache, the one [`Storage`] its URL's scheme names, with
//! what the project says this run may do with it (trusted, read-only, anonymous).

use crate::error::{Error, Result};
use crate::store::{ActionEntry, Storage};

use super::objects::Objects;
use super::settings::{RemoteSettings, strip_credentials};
use super::{folder, http, reapi, s3};

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
