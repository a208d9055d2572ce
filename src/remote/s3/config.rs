//! Which cloud a URL names, and the settings an object store takes from kart.toml and
//! the environment: the S3 endpoint (plain http only on loopback or when allowed), the
//! region, the credentials' variables, the prefix.

use object_store::path::Path as ObjectPath;

use crate::error::Error;
use crate::remote::settings::{ANONYMOUS_ENV, RemoteSettings, strip_credentials};

/// The environment variable that allows a plain `http://` endpoint that is not on
/// this machine (object_store's and the AWS tools' name for it).
pub const ALLOW_HTTP_ENV: &str = "AWS_ALLOW_HTTP";

/// Where an S3 endpoint may come from when kart.toml names none, first found wins.
pub(super) const ENDPOINT_ENVS: [&str; 3] =
    ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"];

/// Where an S3 region may come from when kart.toml names none, first found wins.
pub(super) const REGION_ENVS: [&str; 2] = ["AWS_REGION", "AWS_DEFAULT_REGION"];

/// The AWS variables handed to object_store's credential chain: static keys, then web
/// identity (OIDC, as GitHub Actions and EKS give it), then the container endpoints
/// (ECS, EKS Pod Identity); with none of them, the EC2 instance metadata service.
pub(super) const CREDENTIAL_ENVS: [&str; 10] = [
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "AWS_ROLE_SESSION_NAME",
    "AWS_ENDPOINT_URL_STS",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
];

/// Which service a URL names, for its builder and its hints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Cloud {
    S3,
    Gcs,
    Azure,
}

impl Cloud {
    pub(super) fn of(scheme: &str) -> Option<Cloud> {
        match scheme {
            "s3" => Some(Cloud::S3),
            "gs" => Some(Cloud::Gcs),
            "az" => Some(Cloud::Azure),
            _ => None,
        }
    }

    /// What to check when the service refuses a request.
    pub(super) fn credentials_hint(self, anonymous: bool) -> String {
        if anonymous {
            return format!(
                "the requests were sent unsigned ({} or `anonymous = true`): the bucket must allow \
                 anonymous reads of this prefix; or drop anonymous and set credentials",
                ANONYMOUS_ENV
            );
        }
        match self {
            Cloud::S3 => "check the AWS credentials in the environment (AWS_ACCESS_KEY_ID, \
                 AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN; or AWS_WEB_IDENTITY_TOKEN_FILE with \
                 AWS_ROLE_ARN) and the bucket's policy; reads of a public bucket need none \
                 with KART_REMOTE_ANONYMOUS=1"
                .into(),
            Cloud::Gcs => "check the Google credentials in the environment \
                 (GOOGLE_APPLICATION_CREDENTIALS or GOOGLE_SERVICE_ACCOUNT) and the bucket's \
                 permissions"
                .into(),
            Cloud::Azure => "check the Azure credentials in the environment \
                 (AZURE_STORAGE_ACCOUNT_NAME with AZURE_STORAGE_ACCOUNT_KEY, a SAS token, or a \
                 service principal) and the container's permissions"
                .into(),
        }
    }
}

/// How a variable of the environment is read: the process's in the product, a map in
/// tests (the process environment is shared by every test thread).
pub(in crate::remote) type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment, with empty values as unset.
pub(in crate::remote) fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// A truthy environment value, as object_store and the AWS tools read them.
pub(super) fn truthy(value: Option<String>) -> bool {
    value.is_some_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "1" | "true" | "yes" | "on"
        )
    })
}

/// Whether `host` is this machine.
pub(super) fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The prefix of a URL's path as an object path: plain segments only.
pub(super) fn object_prefix(path: &str) -> std::result::Result<ObjectPath, String> {
    let trimmed = path.trim_matches('/');
    for segment in trimmed.split('/').filter(|s| !s.is_empty()) {
        if segment == "." || segment == ".." || segment.contains('%') {
            return Err(format!("segment `{segment}` is not allowed"));
        }
    }
    if trimmed.contains("//") {
        return Err("it has an empty segment".into());
    }
    ObjectPath::parse(trimmed).map_err(|e| e.to_string())
}

/// The S3 endpoint to use, if not AWS's own: kart.toml's, else the environment's; a
/// plain-http one only on this machine or with `AWS_ALLOW_HTTP=true`. `Err` is a
/// message and a hint.
pub(super) fn s3_endpoint(
    settings: &RemoteSettings,
    env: Env<'_>,
) -> std::result::Result<Option<String>, (String, String)> {
    let (endpoint, from) = match &settings.endpoint {
        Some(e) => (e.clone(), "`[remote] endpoint`".to_string()),
        None => match ENDPOINT_ENVS.iter().find_map(|k| env(k).map(|v| (v, *k))) {
            Some((e, k)) => (e, k.to_string()),
            None => return Ok(None),
        },
    };
    let parsed = reqwest::Url::parse(&endpoint).map_err(|e| {
        (
            format!("endpoint `{endpoint}` ({from}) is not a URL: {e}"),
            "write it as https://host[:port]".to_string(),
        )
    })?;
    let shown = strip_credentials(&endpoint);
    if !parsed.username().is_empty() || parsed.password().is_some() || parsed.query().is_some() {
        return Err((
            format!("endpoint `{shown}` ({from}) holds credentials or a query"),
            "credentials come from the environment (AWS_ACCESS_KEY_ID, …); write the endpoint as https://host[:port]".into(),
        ));
    }
    match parsed.scheme() {
        "https" => {}
        "http" if is_loopback(parsed.host_str().unwrap_or("")) => {}
        "http" if truthy(env(ALLOW_HTTP_ENV)) => {}
        "http" => {
            return Err((
                format!(
                    "endpoint `{shown}` ({from}) is plain http: requests and the cached bytes would cross the network unencrypted"
                ),
                format!(
                    "use https, or set {ALLOW_HTTP_ENV}=true to allow plain http (plain http to this machine, 127.0.0.1 or localhost, needs nothing)"
                ),
            ));
        }
        other => {
            return Err((
                format!("endpoint `{shown}` ({from}) has scheme `{other}`"),
                "write it as https://host[:port]".into(),
            ));
        }
    }
    Ok(Some(endpoint))
}

/// The error of a write to a remote read anonymously.
pub(in crate::remote) fn anonymous_write(shown: &str) -> Error {
    Error::usage(
        format!(
            "remote {shown} is read-only: it is read anonymously (unsigned requests), which cannot write"
        ),
        Some(format!(
            "to push, unset {} (and `anonymous = true` in kart.toml's [remote]) and set credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a role)",
            ANONYMOUS_ENV
        )),
    )
}
