//! Remote caches: where artifacts go beyond one machine. Each kind of server is one
//! [`Storage`](crate::store::Storage) in a file of its own: `http` (bazel-remote's HTTP layout, nginx
//! WebDAV), `folder` (a shared folder), `s3` (S3 and S3-compatible object stores, GCS,
//! Azure), [`reapi`] (a Remote Execution API server, over the gRPC client [`grpc`]), and
//! [`layered`] puts the local store in front of any of them. [`Remote`] is an opened one
//! with what the project says it may
//! do (trusted, read-only); [`transfer`] copies blobs and entries between two storages
//! (`kart fetch`, `kart push`, the build's `--push`); [`probe`] is `kart doctor`'s look
//! at a remote and an executor. The HTTP, folder and object-store backends keep the
//! same layout of named objects and share one `Storage` implementation over it
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
mod opened;
pub mod probe;
pub mod reapi;
mod s3;
mod settings;
pub mod transfer;

pub use opened::Remote;
pub use s3::ALLOW_HTTP_ENV;
pub use settings::{
    ANONYMOUS_ENV, MIN_PROGRESS_BYTES, REMOTE_ENV, RemoteSettings, TOKEN_ENV, TOKEN_URL_ENV,
    Timeouts, anonymous_from_env, strip_credentials, token_allowed,
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Storage;

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
