//! The package index (PyPI's JSON simple API, PEP 691): which wheel file of a pinned
//! `name==version` fits this machine, where it is and its sha256; and a download that
//! streams to a file, hashes as it goes and keeps nothing that does not match.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::error::{Error, IoContext, Result};

/// The index kart asks, unless `KART_INDEX_URL` names another (a mirror speaking the
/// same JSON simple API).
pub const DEFAULT_INDEX: &str = "https://pypi.org/simple";

/// One wheel file of a release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WheelFile {
    /// `nvidia_cuda_nvcc-13.0.88-py3-none-manylinux2014_x86_64….whl`.
    pub filename: String,
    /// Where to download it.
    pub url: String,
    /// Its sha256, as the index gives it (or as kart pins it).
    pub sha256: String,
    /// Its size in bytes, when the index says.
    pub size: Option<u64>,
}

#[derive(Deserialize)]
struct Project {
    files: Vec<File>,
}

#[derive(Deserialize)]
struct File {
    filename: String,
    url: String,
    hashes: std::collections::BTreeMap<String, String>,
    size: Option<u64>,
    #[serde(default)]
    yanked: serde_json::Value,
}

/// The platform tag fragment a wheel must carry on this machine (`x86_64`,
/// `aarch64`), or an error on a platform no nvcc wheel exists for.
pub fn machine_tag() -> Result<&'static str> {
    match (std::env::consts::OS, std::env::consts::ARCH) {
        ("linux", "x86_64") => Ok("x86_64"),
        ("linux", "aarch64") => Ok("aarch64"),
        (os, arch) => Err(Error::environment(
            format!("kart installs nvcc wheels on Linux x86_64 and aarch64, not {os} {arch}"),
            "install the CUDA toolkit and pass --nvcc (or set KART_NVCC)",
        )),
    }
}

/// The most an index's answer for one project may be: PyPI's page of every release of
/// `nvidia-cuda-nvcc` is well under 1 MiB.
const MAX_INDEX_BYTES: u64 = 64 << 20;

/// The most a wheel may be when the index does not state its size (the largest CUDA
/// toolkit wheels are under 1 GiB).
const MAX_WHEEL_BYTES: u64 = 4 << 30;

/// The slowest transfer kart waits for: a request's whole deadline is the stall clock
/// plus its size at this rate, so a server that keeps a transfer barely alive is given
/// up at its deadline, not never.
const MIN_BYTES_PER_SECOND: u64 = 1 << 20;

/// How long a transfer may move nothing (`KART_INSTALL_STALL_TIMEOUT`, seconds).
fn stall_clock() -> Duration {
    std::env::var("KART_INSTALL_STALL_TIMEOUT")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .filter(|&s| s > 0)
        .map_or(Duration::from_secs(60), Duration::from_secs)
}

/// Reads `response`'s body into `sink`, refusing more than `limit` bytes (announced or
/// sent), a stall of `stall`, and any transfer not done `stall` plus `limit` at
/// [`MIN_BYTES_PER_SECOND`] after it started. Returns the bytes read.
async fn read_bounded(
    response: &mut reqwest::Response,
    limit: u64,
    stall: Duration,
    mut sink: impl FnMut(&[u8]) -> std::result::Result<(), String>,
) -> std::result::Result<u64, String> {
    if let Some(announced) = response.content_length()
        && announced > limit
    {
        return Err(format!(
            "the answer announces {announced} bytes, more than the {limit} expected"
        ));
    }
    let whole = stall + Duration::from_secs(limit / MIN_BYTES_PER_SECOND);
    let deadline = tokio::time::Instant::now() + whole;
    let mut done = 0u64;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match tokio::time::timeout(stall.min(left), response.chunk()).await {
            Err(_) if left <= stall => {
                return Err(format!(
                    "{done} bytes in {} s: slower than {} KiB/s, given up at its deadline",
                    whole.as_secs(),
                    MIN_BYTES_PER_SECOND >> 10
                ));
            }
            Err(_) => return Err(format!("the transfer stalled for {} s", stall.as_secs())),
            Ok(Err(e)) => return Err(e.without_url().to_string()),
            Ok(Ok(None)) => return Ok(done),
            Ok(Ok(Some(chunk))) => {
                done += chunk.len() as u64;
                if done > limit {
                    return Err(format!(
                        "the answer sent more than the {limit} bytes expected"
                    ));
                }
                sink(&chunk)?;
            }
        }
    }
}

/// A blocking HTTP client for the index and its files.
pub struct Index {
    base: String,
    client: reqwest::Client,
    runtime: tokio::runtime::Runtime,
}

impl Index {
    /// The index of `KART_INDEX_URL`, else PyPI.
    pub fn from_env() -> Result<Index> {
        let base = std::env::var("KART_INDEX_URL")
            .ok()
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| DEFAULT_INDEX.to_string());
        let fail = |e: String| Error::environment(format!("cannot start an HTTP client: {e}"), "");
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(15))
            .user_agent(concat!("kart/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| fail(e.to_string()))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| fail(e.to_string()))?;
        Ok(Index {
            base: base.trim_end_matches('/').to_string(),
            client,
            runtime,
        })
    }

    fn error(&self, url: &str, message: String) -> Error {
        Error::environment(
            format!("package index: {url}: {message}"),
            "check the network (or KART_INDEX_URL), then run `kart toolchain install` again",
        )
    }

    /// The wheel of `name==version` for this machine (a Linux wheel of its
    /// architecture, or a pure-Python one).
    pub fn find_wheel(&self, name: &str, version: &str) -> Result<WheelFile> {
        let tag = machine_tag()?;
        let url = format!("{}/{}/", self.base, normalize(name));
        let body = self.runtime.block_on(async {
            let stall = stall_clock();
            let mut response = tokio::time::timeout(
                stall,
                self.client
                    .get(&url)
                    .header("Accept", "application/vnd.pypi.simple.v1+json")
                    .send(),
            )
            .await
            .map_err(|_| format!("no answer within {} s", stall.as_secs()))?
            .map_err(|e| e.without_url().to_string())?;
            if !response.status().is_success() {
                return Err(format!("answered {}", response.status()));
            }
            let mut body = Vec::new();
            read_bounded(&mut response, MAX_INDEX_BYTES, stall, |chunk| {
                body.extend_from_slice(chunk);
                Ok(())
            })
            .await?;
            Ok(body)
        });
        let body = body.map_err(|m| self.error(&url, m))?;
        pick_wheel(&body, name, version, tag)
            .map_err(|why| self.error(&url, why))?
            .ok_or_else(|| {
                let versions = wheel_versions(&body, name, tag, version);
                Error::environment(
                    format!("the index has no Linux {tag} wheel of `{name}=={version}` (at {url})"),
                    if versions.is_empty() {
                        "check the pin's spelling on the index: it has no wheel of that name for this machine".to_string()
                    } else {
                        format!(
                            "versions of `{name}` the index has for this machine: {}; pin one of them",
                            versions.join(", ")
                        )
                    },
                )
            })
    }

    /// Downloads `wheel` to `dest`, checking its sha256; `progress` gets the bytes so far.
    /// At most the size the index states is read, a transfer that moves nothing for the
    /// stall clock (60 s) is given up, and so is one not done by its deadline (the stall
    /// clock plus its size at 1 MiB/s): a stalled download holds the home's lock no
    /// longer. Nothing is left at `dest` unless the bytes match.
    pub fn download(&self, wheel: &WheelFile, dest: &Path, progress: &dyn Fn(u64)) -> Result<()> {
        let folder = dest.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(folder).at("create", folder)?;
        let mut part = tempfile::Builder::new()
            .prefix(kart_runtime::store::fsutil::TEMP_PREFIX)
            .tempfile_in(folder)
            .at("create a temporary file in", folder)?;
        // The index's stated size bounds the download; its sha256 decides it.
        let limit = wheel.size.unwrap_or(MAX_WHEEL_BYTES);
        let result: std::result::Result<String, String> = self.runtime.block_on(async {
            let stall = stall_clock();
            let mut response = tokio::time::timeout(stall, self.client.get(&wheel.url).send())
                .await
                .map_err(|_| format!("no answer within {} s", stall.as_secs()))?
                .map_err(|e| e.without_url().to_string())?;
            if !response.status().is_success() {
                return Err(format!("answered {}", response.status()));
            }
            let mut hasher = Sha256::new();
            let mut done = 0u64;
            read_bounded(&mut response, limit, stall, |chunk| {
                hasher.update(chunk);
                part.write_all(chunk).map_err(|e| e.to_string())?;
                done += chunk.len() as u64;
                progress(done);
                Ok(())
            })
            .await?;
            Ok(format!("{:x}", hasher.finalize()))
        });
        let got = result.map_err(|m| self.error(&wheel.url, m))?;
        if got != wheel.sha256 {
            return Err(Error::environment(
                format!(
                    "`{}` downloaded with sha256 {got}, but {} was expected: nothing was installed",
                    wheel.filename, wheel.sha256
                ),
                "a proxy or mirror changed the file; run `kart toolchain install` again, or check KART_INDEX_URL",
            ));
        }
        part.as_file().sync_all().at("sync", dest)?;
        part.persist(dest)
            .map_err(|e| e.error)
            .at("rename to", dest)?;
        Ok(())
    }
}

/// Of a project page of the JSON simple API (`body`, from the network), the wheel of
/// `name==version` for machine `tag` (a Linux wheel of it, or a pure-Python one) with a
/// well-formed sha256: `None` when there is none, an error when the page is not JSON of
/// the API.
pub fn pick_wheel(
    body: &[u8],
    name: &str,
    version: &str,
    tag: &str,
) -> std::result::Result<Option<WheelFile>, String> {
    let project: Project =
        serde_json::from_slice(body).map_err(|e| format!("not the JSON simple API ({e})"))?;
    let wanted = format!("{}-{version}-", wheel_name(name));
    Ok(project
        .files
        .into_iter()
        .filter(|f| {
            f.filename.to_lowercase().starts_with(&wanted)
                && (f.filename.ends_with("-any.whl")
                    || (f.filename.ends_with(".whl")
                        && f.filename.contains("linux")
                        && f.filename.contains(tag)))
                && matches!(
                    f.yanked,
                    serde_json::Value::Null | serde_json::Value::Bool(false)
                )
        })
        .find_map(|f| {
            let sha256 = f.hashes.get("sha256")?.to_lowercase();
            crate::digest::is_sha256_hex(&sha256).then_some(WheelFile {
                filename: f.filename,
                url: f.url,
                sha256,
                size: f.size,
            })
        }))
}

/// The versions of `name` that a project page (`body`) has a wheel of for machine `tag`
/// (as [`pick_wheel`] takes them), each once, in version order (`13.2` before `13.10`),
/// at most 20: those nearest the refused `pinned` version (sharing its longest leading
/// components that any version shares: `13.0.0.19` for a pin of `13.0`), then the newest.
/// An index page lists files by name, so the newest by the page's order would leave out
/// the release that matches the pinned nvcc.
pub fn wheel_versions(body: &[u8], name: &str, tag: &str, pinned: &str) -> Vec<String> {
    const SHOWN: usize = 20;
    let Ok(project) = serde_json::from_slice::<Project>(body) else {
        return Vec::new();
    };
    let prefix = format!("{}-", wheel_name(name));
    let mut versions: Vec<String> = Vec::new();
    for f in &project.files {
        let lower = f.filename.to_lowercase();
        let fits = lower.ends_with("-any.whl")
            || (lower.ends_with(".whl") && lower.contains("linux") && lower.contains(tag));
        let Some(rest) = lower.strip_prefix(&prefix) else {
            continue;
        };
        let Some(version) = rest.split('-').next() else {
            continue;
        };
        if fits && !version.is_empty() && !versions.iter().any(|v| v == version) {
            versions.push(version.to_string());
        }
    }
    versions.sort_by(|a, b| version_order(a, b));
    let parts: Vec<&str> = pinned.split('.').collect();
    let near: Vec<&String> = (1..=parts.len())
        .rev()
        .map(|n| parts[..n].join("."))
        .map(|lead| {
            let dotted = format!("{lead}.");
            versions
                .iter()
                .filter(|v| **v == lead || v.starts_with(&dotted))
                .collect::<Vec<_>>()
        })
        .find(|found| !found.is_empty())
        .unwrap_or_default();
    let mut kept: Vec<String> = near
        .iter()
        .rev()
        .take(SHOWN)
        .map(|v| v.to_string())
        .collect();
    for v in versions.iter().rev() {
        if kept.len() >= SHOWN {
            break;
        }
        if !kept.contains(v) {
            kept.push(v.clone());
        }
    }
    kept.sort_by(|a, b| version_order(a, b));
    kept
}

/// Dotted versions compared component by component, numerically where both are
/// numbers (`13.2` before `13.10`), else as text (`13.4.46rc1`).
fn version_order(a: &str, b: &str) -> std::cmp::Ordering {
    let (mut x, mut y) = (a.split('.'), b.split('.'));
    loop {
        match (x.next(), y.next()) {
            (None, None) => return std::cmp::Ordering::Equal,
            (None, Some(_)) => return std::cmp::Ordering::Less,
            (Some(_), None) => return std::cmp::Ordering::Greater,
            (Some(p), Some(q)) => {
                let order = match (p.parse::<u64>(), q.parse::<u64>()) {
                    (Ok(m), Ok(n)) => m.cmp(&n),
                    _ => p.cmp(q),
                };
                if order != std::cmp::Ordering::Equal {
                    return order;
                }
            }
        }
    }
}

/// A project name as the simple API spells it (PEP 503).
fn normalize(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('-') {
                out.push('-');
            }
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// A project name as wheel files spell it (`nvidia_cuda_nvcc`).
fn wheel_name(name: &str) -> String {
    normalize(name).replace('-', "_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_spelled_as_the_index_and_wheels_spell_them() {
        assert_eq!(normalize("NVIDIA_cuda.nvcc"), "nvidia-cuda-nvcc");
        assert_eq!(wheel_name("nvidia-cuda-nvcc"), "nvidia_cuda_nvcc");
    }
}
