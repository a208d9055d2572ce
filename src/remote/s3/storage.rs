//! The requests to an object store: each one under the remote's guard (deadline,
//! retries, budget, breaker), with object_store's own retries off, and writes that
//! never overwrite.

use std::sync::Arc;
use std::time::Duration;

use object_store::path::Path as ObjectPath;
use object_store::{
    ClientOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, RetryConfig,
};

use super::config::{
    CREDENTIAL_ENVS, Cloud, Env, REGION_ENVS, anonymous_write, object_prefix, s3_endpoint,
};
use super::stream::{
    Class, Stop, describe_http, first_byte, http_error, read_stream, redact, status_of,
};
use crate::error::{Error, RemoteFailure, Result};
use crate::remote::check::checked_name;
use crate::remote::guard::{Attempt, Guard};
use crate::remote::objects::ObjectRemote;
use crate::remote::settings::RemoteSettings;

/// A remote cache in an object store.
pub(in crate::remote) struct ObjectStorage {
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    shown: String,
    cloud: Cloud,
    anonymous: bool,
    runtime: tokio::runtime::Runtime,
    guard: Guard,
}

impl ObjectStorage {
    /// Opens the bucket `url` names (no request is made). Errors of configuration (a
    /// plain-http endpoint, a malformed one, credentials half set) are usage errors.
    pub(in crate::remote) fn open(
        settings: &RemoteSettings,
        url: &reqwest::Url,
        shown: String,
        env: Env<'_>,
    ) -> Result<ObjectStorage> {
        let bad = |why: String, hint: &str| {
            Error::usage(format!("remote `{shown}`: {why}"), Some(hint.to_string()))
        };
        let cloud = Cloud::of(url.scheme()).ok_or_else(|| {
            bad(
                format!("scheme `{}` is not an object store", url.scheme()),
                "use s3://, gs:// or az://",
            )
        })?;
        let bucket = url.host_str().unwrap_or("");
        if bucket.is_empty() {
            return Err(bad(
                "names no bucket".into(),
                "write s3://BUCKET/PREFIX (gs://BUCKET/PREFIX, az://CONTAINER/PREFIX)",
            ));
        }
        if !url.username().is_empty()
            || url.password().is_some()
            || url.query().is_some()
            || url.fragment().is_some()
        {
            return Err(bad(
                "holds credentials, a query or a fragment".into(),
                "credentials come from the environment (AWS_ACCESS_KEY_ID, …), never from the URL",
            ));
        }
        // The path as written: URL parsing would quietly resolve `a/../b` to `b`.
        let written = settings
            .url
            .split_once("://")
            .and_then(|(_, rest)| rest.find('/').map(|i| &rest[i..]))
            .unwrap_or("");
        let prefix = object_prefix(written).map_err(|why| {
            bad(
                format!("prefix `{written}`: {why}"),
                "use a prefix of plain segments, such as s3://bucket/kart/cache",
            )
        })?;
        if cloud != Cloud::S3 && (settings.endpoint.is_some() || settings.region.is_some()) {
            return Err(bad(
                "`endpoint` and `region` are settings of s3:// remotes".into(),
                "for gs:// and az:// the client's own environment variables (GOOGLE_*, AZURE_*) apply",
            ));
        }
        let retry = RetryConfig {
            max_retries: 0,
            retry_timeout: Duration::ZERO,
            ..RetryConfig::default()
        };
        let mut options = ClientOptions::new()
            .with_connect_timeout(settings.timeouts.connect)
            .with_timeout_disabled()
            .with_pool_max_idle_per_host(settings.jobs.max(1))
            .with_user_agent(reqwest::header::HeaderValue::from_static(concat!(
                "kart/",
                env!("CARGO_PKG_VERSION")
            )));
        let built: std::result::Result<Arc<dyn ObjectStore>, object_store::Error> = match cloud {
            Cloud::S3 => {
                let endpoint = s3_endpoint(settings, env).map_err(|(why, hint)| bad(why, &hint))?;
                let region = settings
                    .region
                    .clone()
                    .or_else(|| REGION_ENVS.iter().find_map(|k| env(k)))
                    .unwrap_or_else(|| "us-east-1".into());
                let mut builder = object_store::aws::AmazonS3Builder::new()
                    .with_bucket_name(bucket)
                    .with_region(region)
                    .with_retry(retry)
                    .with_skip_signature(settings.anonymous);
                if !settings.anonymous {
                    for name in CREDENTIAL_ENVS {
                        if let Some(value) = env(name)
                            && let Ok(key) = name.to_ascii_lowercase().parse()
                        {
                            builder = builder.with_config(key, value);
                        }
                    }
                }
                builder = match &endpoint {
                    // Path-style requests: a custom server (MinIO, Ceph, moto) rarely has
                    // a name per bucket.
                    Some(e) => {
                        options = options.with_allow_http(e.starts_with("http:"));
                        builder
                            .with_endpoint(e.trim_end_matches('/'))
                            .with_virtual_hosted_style_request(false)
                    }
                    // AWS itself: the bucket's own host name, except for a name with dots,
                    // which its wildcard certificate does not cover.
                    None => builder.with_virtual_hosted_style_request(!bucket.contains('.')),
                };
                builder
                    .with_client_options(options)
                    .build()
                    .map(|s| Arc::new(s) as Arc<dyn ObjectStore>)
            }
            Cloud::Gcs => object_store::gcp::GoogleCloudStorageBuilder::from_env()
                .with_url(format!("gs://{bucket}"))
                .with_retry(retry)
                .with_skip_signature(settings.anonymous)
                .with_client_options(options)
                .build()
                .map(|s| Arc::new(s) as Arc<dyn ObjectStore>),
            Cloud::Azure => object_store::azure::MicrosoftAzureBuilder::from_env()
                .with_url(format!("az://{bucket}"))
                .with_retry(retry)
                .with_skip_signature(settings.anonymous)
                .with_client_options(options)
                .build()
                .map(|s| Arc::new(s) as Arc<dyn ObjectStore>),
        };
        let store = built.map_err(|e| {
            bad(
                format!("cannot configure the client: {}", redact(&e.to_string())),
                &cloud.credentials_hint(false),
            )
        })?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("kart-objects")
            .enable_all()
            .build()
            .map_err(|e| {
                Error::environment(
                    format!("cannot start the object store's runtime: {e}"),
                    "check the process's thread limit (ulimit -u)",
                )
            })?;
        Ok(ObjectStorage {
            store,
            prefix,
            shown,
            cloud,
            anonymous: settings.anonymous,
            runtime,
            guard: Guard::new(
                settings,
                format!(
                    "check that the object store answers and the bucket exists{}; the timeouts are `[remote]` settings and flags (--connect-timeout, --first-byte-timeout, --stall-timeout)",
                    if cloud == Cloud::S3 {
                        " (the endpoint: `[remote] endpoint` or AWS_ENDPOINT_URL; the region: `[remote] region` or AWS_REGION)"
                    } else {
                        ""
                    }
                ),
            ),
        })
    }

    /// The object `kind/name` under the prefix, and its URL for messages.
    fn location(&self, kind: &str, name: &str) -> Result<(ObjectPath, String)> {
        let name = checked_name(name)?;
        Ok((
            self.prefix.clone().join(kind).join(name),
            format!("{}/{kind}/{name}", self.shown),
        ))
    }

    /// One request with the guard's retries, each attempt under its whole deadline
    /// (the first-byte and stall clocks and `bytes` at the slowest rate worth waiting
    /// for, or the run's budget left if that is sooner).
    fn call<T, F>(&self, what: &str, shown: &str, bytes: u64, attempt: impl Fn() -> F) -> Result<T>
    where
        F: std::future::Future<Output = Attempt<T>>,
    {
        let t = self.guard.timeouts;
        self.guard.run(what, shown, |left| {
            let deadline = t.deadline(bytes).min(left);
            self.runtime.block_on(async {
                match tokio::time::timeout(deadline, attempt()).await {
                    Ok(outcome) => outcome,
                    Err(_) => Attempt::TimedOut(format!(
                        "the whole request took over {:.1} s (its deadline: the first-byte and stall clocks, then {} bytes at {} KiB/s; or the run's remote budget)",
                        deadline.as_secs_f64(),
                        bytes,
                        t.min_rate / 1024
                    )),
                }
            })
        })
    }

    /// What an error of object_store means here.
    fn classify(&self, e: &object_store::Error, shown: &str) -> Class {
        use object_store::Error as E;
        let refused = |message: String, hint: String| Error::Remote {
            url: shown.to_string(),
            message,
            failure: RemoteFailure::Refused,
            hint: Some(hint),
        };
        let text = e.to_string();
        match e {
            // A bucket that does not exist is not a missing blob.
            E::NotFound { .. } if text.contains("NoSuchBucket") => Class::Fail(refused(
                "answered 404 NoSuchBucket: the bucket does not exist".into(),
                "create the bucket, or fix the remote URL (and the endpoint)".into(),
            )),
            E::NotFound { .. } => Class::Missing,
            E::AlreadyExists { .. } | E::Precondition { .. } | E::NotModified { .. } => {
                Class::Exists
            }
            E::PermissionDenied { .. } | E::Unauthenticated { .. } => {
                let status = if matches!(e, E::PermissionDenied { .. }) {
                    "403 Forbidden"
                } else {
                    "401 Unauthorized"
                };
                let unsigned = if self.anonymous {
                    " to an unsigned (anonymous) request"
                } else {
                    ""
                };
                Class::Fail(refused(
                    format!("answered {status}{unsigned}"),
                    self.cloud.credentials_hint(self.anonymous),
                ))
            }
            _ => {
                if let Some(http) = http_error(e) {
                    let why = describe_http(http);
                    return match http.kind() {
                        object_store::client::HttpErrorKind::Timeout => Class::TimedOut(why),
                        _ => Class::Retry(why),
                    };
                }
                match status_of(&text) {
                    Some(s) if s >= 500 || s == 408 || s == 429 => {
                        Class::Retry(format!("answered {s}"))
                    }
                    Some(s) if (300..400).contains(&s) => Class::Fail(refused(
                        format!("answered {s}, a redirect; kart does not follow redirects"),
                        "the region is probably wrong: set `[remote] region` or AWS_REGION to the bucket's".into(),
                    )),
                    Some(s) => Class::Fail(refused(format!("answered {s}"), self.cloud.credentials_hint(self.anonymous))),
                    None if text.contains("redirect") => Class::Fail(refused(
                        "answered a redirect; kart does not follow redirects".into(),
                        "the region is probably wrong: set `[remote] region` or AWS_REGION to the bucket's".into(),
                    )),
                    None if text.contains("error response") => {
                        Class::Retry("answered an error (InternalError or SlowDown)".into())
                    }
                    None => Class::Fail(refused(
                        redact(&text),
                        self.cloud.credentials_hint(self.anonymous),
                    )),
                }
            }
        }
    }
}

impl ObjectRemote for ObjectStorage {
    fn shown(&self) -> &str {
        &self.shown
    }

    fn exists(&self, kind: &str, name: &str) -> Result<bool> {
        let (path, shown) = self.location(kind, name)?;
        let t = self.guard.timeouts;
        self.call("HEAD", &shown, 0, || async {
            match first_byte(t, 0, self.store.head(&path)).await {
                Err(why) => Attempt::TimedOut(why),
                Ok(Ok(_)) => Attempt::Done(true),
                Ok(Err(e)) => match self.classify(&e, &shown) {
                    Class::Missing => Attempt::Done(false),
                    other => other.into_attempt(),
                },
            }
        })
    }

    fn read(&self, kind: &str, name: &str, limit: u64) -> Result<Option<Vec<u8>>> {
        let (path, shown) = self.location(kind, name)?;
        let t = self.guard.timeouts;
        self.call("GET", &shown, limit, || async {
            let result = match first_byte(t, 0, self.store.get(&path)).await {
                Err(why) => return Attempt::TimedOut(why),
                Ok(Ok(result)) => result,
                Ok(Err(e)) => {
                    return match self.classify(&e, &shown) {
                        Class::Missing => Attempt::Done(None),
                        other => other.into_attempt(),
                    };
                }
            };
            if result.meta.size > limit {
                return Attempt::Fail(Error::Remote {
                    url: shown.clone(),
                    message: format!(
                        "announces {} bytes, more than the {limit} expected",
                        result.meta.size
                    ),
                    failure: RemoteFailure::Corrupt,
                    hint: Some("nothing was stored".into()),
                });
            }
            // The announced size is at most the limit: room for it at once.
            let announced = result.meta.size;
            match read_stream(result.into_stream(), announced, limit, t.stall, &shown).await {
                Ok(bytes) => Attempt::Done(Some(bytes)),
                Err(Stop::Fail(e)) => Attempt::Fail(e),
                Err(Stop::Stalled(why)) => Attempt::TimedOut(why),
                Err(Stop::Broken(e)) => match self.classify(&e, &shown) {
                    Class::Retry(why) => Attempt::Retry(format!("the transfer broke off: {why}")),
                    other => other.into_attempt(),
                },
            }
        })
    }

    // A conditional create: an object that exists is left as it is, and that counts
    // as done.
    fn write(&self, kind: &str, name: &str, bytes: &[u8]) -> Result<()> {
        if self.anonymous {
            return Err(anonymous_write(&self.shown));
        }
        let (path, shown) = self.location(kind, name)?;
        let t = self.guard.timeouts;
        let size = bytes.len() as u64;
        let payload = PutPayload::from(bytes.to_vec());
        self.call("PUT", &shown, size, || async {
            let options = PutOptions::from(PutMode::Create);
            let put = self.store.put_opts(&path, payload.clone(), options);
            match first_byte(t, size, put).await {
                Err(why) => Attempt::TimedOut(why),
                Ok(Ok(_)) => Attempt::Done(()),
                Ok(Err(e)) => match self.classify(&e, &shown) {
                    Class::Exists => Attempt::Done(()),
                    Class::Missing => Attempt::Fail(Error::Remote {
                        url: shown.clone(),
                        message: "PUT answered 404 Not Found: the bucket does not exist".into(),
                        failure: RemoteFailure::Refused,
                        hint: Some("create the bucket, or fix the remote URL".into()),
                    }),
                    other => other.into_attempt(),
                },
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote::objects::Objects;
    use crate::store::Storage;
    use std::collections::BTreeMap;
    use std::time::Instant;

    fn open_with(
        url: &str,
        vars: &[(&str, &str)],
        edit: impl Fn(&mut RemoteSettings),
    ) -> Result<ObjectStorage> {
        let vars: BTreeMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let env = move |k: &str| vars.get(k).cloned();
        let mut settings = RemoteSettings::new(url);
        edit(&mut settings);
        let parsed = reqwest::Url::parse(url).unwrap();
        ObjectStorage::open(
            &settings,
            &parsed,
            crate::remote::settings::strip_credentials(url),
            &env,
        )
    }

    const KEYS: [(&str, &str); 2] = [
        ("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"),
        ("AWS_SECRET_ACCESS_KEY", "very-secret-key"),
    ];

    #[test]
    fn plain_http_endpoints_need_loopback_or_allow_http() {
        let far = [
            KEYS[0],
            KEYS[1],
            ("AWS_ENDPOINT_URL", "http://cache.example:9000"),
        ];
        let err = open_with("s3://b/p", &far, |_| {}).err().unwrap();
        assert_eq!(err.exit_code(), 2, "{err}");
        let text = format!("{err} {}", err.hint().unwrap_or_default());
        assert!(
            text.contains("AWS_ALLOW_HTTP=true") && text.contains("AWS_ENDPOINT_URL"),
            "{text}"
        );
        let allowed = [far[0], far[1], far[2], ("AWS_ALLOW_HTTP", "true")];
        assert!(open_with("s3://b/p", &allowed, |_| {}).is_ok());
        let local = [KEYS[0], KEYS[1], ("AWS_ENDPOINT_URL", "http://127.0.0.1:9")];
        assert!(open_with("s3://b/p", &local, |_| {}).is_ok());
        // kart.toml's endpoint comes first, and is checked the same way.
        let err = open_with("s3://b/p", &local, |s| {
            s.endpoint = Some("http://10.1.2.3:9000".into())
        })
        .err()
        .unwrap();
        assert!(err.to_string().contains("[remote] endpoint"), "{err}");
        let err = open_with("s3://b/p", &local, |s| s.endpoint = Some("ftp://x".into()))
            .err()
            .unwrap();
        assert_eq!(err.exit_code(), 2, "{err}");
    }

    #[test]
    fn urls_name_a_bucket_and_a_plain_prefix_and_no_credentials() {
        for url in [
            "s3:///p",
            "s3://user:pw@b/p",
            "s3://b/p?x=1",
            "s3://b/a/../c",
            "s3://b/a//c",
        ] {
            let err = open_with(url, &KEYS, |_| {})
                .err()
                .unwrap_or_else(|| panic!("{url} opened"));
            assert_eq!(err.exit_code(), 2, "{url}: {err}");
            assert!(!err.to_string().contains("pw@"), "{err}");
        }
        let s = open_with("s3://bucket/kart/cache/", &KEYS, |_| {}).unwrap();
        assert_eq!(
            s.location("cas", &"a".repeat(64)).unwrap().0.as_ref(),
            format!("kart/cache/cas/{}", "a".repeat(64))
        );
        let s = open_with("s3://bucket", &KEYS, |_| {}).unwrap();
        assert_eq!(
            s.location("ac", &"b".repeat(64)).unwrap().0.as_ref(),
            format!("ac/{}", "b".repeat(64))
        );
        assert!(s.location("cas", "../x").is_err());
        let err = open_with("gs://b/p", &[], |s| s.region = Some("eu".into()))
            .err()
            .unwrap();
        assert!(err.to_string().contains("settings of s3://"), "{err}");
    }

    #[test]
    fn an_anonymous_remote_refuses_writes_before_any_request() {
        // Port 9 on loopback: nothing listens, and nothing may be sent.
        let vars = [("AWS_ENDPOINT_URL", "http://127.0.0.1:9")];
        let s = Objects(open_with("s3://b/p", &vars, |s| s.anonymous = true).unwrap());
        let digest = crate::digest::sha256_hex(b"x");
        let t = Instant::now();
        let err = s.put_blob(&digest, b"x").unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(1));
        assert!(err.to_string().contains("anonymously"), "{err}");
        assert_eq!(err.exit_code(), 2);
    }

    /// A loopback server answering its connections in turn with `answers` (raw HTTP);
    /// an empty answer holds the connection open, silent. Returns its port and how
    /// many connections it took.
    fn serve(answers: Vec<&'static str>) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use std::io::{Read, Write};
        use std::sync::atomic::{AtomicUsize, Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let taken = std::sync::Arc::new(AtomicUsize::new(0));
        let count = taken.clone();
        std::thread::spawn(move || {
            let mut answers = answers.into_iter();
            for mut conn in listener.incoming().flatten() {
                count.fetch_add(1, Ordering::SeqCst);
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).is_ok_and(|n| n == 1) {
                    head.push(byte[0]);
                }
                match answers.next() {
                    Some("") | None => {
                        std::thread::sleep(Duration::from_secs(10));
                    }
                    Some(answer) => {
                        let _ = conn.write_all(answer.as_bytes());
                    }
                }
            }
        });
        (port, taken)
    }

    fn against(port: u16, edit: impl Fn(&mut RemoteSettings)) -> Objects<ObjectStorage> {
        let endpoint = format!("http://127.0.0.1:{port}");
        let vars = [KEYS[0], KEYS[1], ("AWS_ENDPOINT_URL", endpoint.as_str())];
        Objects(open_with("s3://bucket/kart", &vars, edit).unwrap())
    }

    const UNAVAILABLE: &str =
        "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

    #[test]
    fn server_errors_are_retried_by_the_guard_and_the_bytes_checked() {
        let ok = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\ncubin";
        let (port, taken) = serve(vec![UNAVAILABLE, UNAVAILABLE, ok]);
        let s = against(port, |_| {});
        let digest = crate::digest::sha256_hex(b"cubin");
        assert_eq!(s.get_blob(&digest, Some(5)).unwrap().unwrap(), b"cubin");
        // One request each: object_store's own retries are off.
        assert_eq!(taken.load(std::sync::atomic::Ordering::SeqCst), 3);

        // Bytes that are not the blob are refused, whatever the server says.
        let (port, _) = serve(vec![ok]);
        let err = against(port, |_| {})
            .get_blob(&crate::digest::sha256_hex(b"other"), None)
            .unwrap_err();
        assert!(err.to_string().contains("hashing to"), "{err}");
    }

    #[test]
    fn a_refusal_fails_at_once_and_names_the_credentials() {
        let forbidden = "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        let (port, taken) = serve(vec![forbidden, forbidden]);
        let s = against(port, |_| {});
        let err = s
            .get_blob(&crate::digest::sha256_hex(b"x"), None)
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::Remote {
                    failure: RemoteFailure::Refused,
                    ..
                }
            ),
            "{err}"
        );
        assert!(
            err.hint().unwrap_or_default().contains("AWS_ACCESS_KEY_ID"),
            "{err:?}"
        );
        let text = format!("{err} {err:?}");
        assert!(!text.contains("very-secret-key"), "{text}");
        assert_eq!(taken.load(std::sync::atomic::Ordering::SeqCst), 1);
        // A conditional write answered "exists" is done.
        let exists =
            "HTTP/1.1 412 Precondition Failed\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        let (port, _) = serve(vec![exists]);
        let digest = crate::digest::sha256_hex(b"x");
        against(port, |_| {}).put_blob(&digest, b"x").unwrap();
    }

    #[test]
    fn a_silent_server_costs_one_first_byte_clock_then_the_remote_is_given_up() {
        let (port, taken) = serve(vec![""]);
        let s = against(port, |s| {
            s.timeouts.first_byte = Duration::from_millis(300);
            s.timeouts.stall = Duration::from_millis(200);
        });
        let digest = crate::digest::sha256_hex(b"x");
        let t = Instant::now();
        let err = s.get_blob(&digest, None).unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        assert!(err.to_string().contains("no answer within 0.3 s"), "{err}");
        let t = Instant::now();
        let err = s.has_blob(&digest, None).unwrap_err();
        assert!(t.elapsed() < Duration::from_millis(100));
        assert!(err.to_string().contains("given up"), "{err}");
        assert_eq!(taken.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[test]
    fn errors_are_read_for_their_status_and_never_show_a_query() {
        assert_eq!(
            status_of(
                "Error performing GET x in 2ms - Server returned non-2xx status code: 503 Service Unavailable: <x/>"
            ),
            Some(503)
        );
        assert_eq!(status_of("no status here"), None);
        let text = redact("GET https://acct.blob.core.windows.net/c/x?sig=SECRET&se=1 failed");
        assert!(
            !text.contains("SECRET") && text.contains("windows.net/c/x?…"),
            "{text}"
        );
        assert!(redact(&"x".repeat(1000)).chars().count() <= 401);
    }
}
