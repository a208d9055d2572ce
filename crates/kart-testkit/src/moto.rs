//! A real S3 server for the object-store tests and benchmarks: moto's server
//! (`moto[server]` from PyPI, which `scripts/test` installs under the repository's
//! `.toolchain/moto`) on a free loopback port, with a bucket of its own, stopped when
//! dropped. Each server keeps its objects in memory and logs every request to a file in
//! its own temp folder.
//!
//! moto checks no signature: a request whose `Authorization` header names an access key
//! is taken as the account's, whatever its signature. One without (anonymous) is
//! refused unless the bucket's policy allows it ([`Moto::allow_public_reads`]).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The access key the tests sign with (moto takes any).
pub const ACCESS_KEY: &str = "kart-test-key";
/// The secret key the tests sign with.
pub const SECRET_KEY: &str = "kart-test-secret";
/// The region the tests name.
pub const REGION: &str = "us-east-1";

/// Where `scripts/test` installs moto, inside the repository at `repo`.
pub fn install_dir(repo: &Path) -> PathBuf {
    repo.join(".toolchain/moto")
}

/// Whether moto is installed for the repository at `repo`.
pub fn available(repo: &Path) -> bool {
    install_dir(repo).join("moto/server.py").is_file()
}

/// A running moto server; stopped on drop.
pub struct Moto {
    child: Child,
    dir: tempfile::TempDir,
    /// Its loopback port.
    pub port: u16,
    /// The bucket it was started with.
    pub bucket: String,
}

/// An HTTP answer: status and body.
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// The body.
    pub body: Vec<u8>,
}

impl Moto {
    /// Starts moto with a bucket `bucket`; panics when it cannot (a test's setup).
    pub fn start(repo: &Path, bucket: &str) -> Moto {
        Moto::try_start(repo, bucket).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts moto on a free loopback port, waits until it answers, and creates the
    /// bucket `bucket`.
    pub fn try_start(repo: &Path, bucket: &str) -> Result<Moto, String> {
        if !available(repo) {
            return Err(format!(
                "moto is not installed at {}: run scripts/test (it installs moto[server] there)",
                install_dir(repo).display()
            ));
        }
        let io = |what: &str, e: std::io::Error| format!("moto harness: cannot {what}: {e}");
        for _ in 0..5 {
            let dir = tempfile::Builder::new()
                .prefix("kart-moto-")
                .tempdir()
                .map_err(|e| io("create a temp folder", e))?;
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map_err(|e| io("find a free port", e))?
                .port();
            let log = std::fs::File::create(dir.path().join("moto.log"))
                .map_err(|e| io("create its log", e))?;
            let log2 = log.try_clone().map_err(|e| io("share its log", e))?;
            let mut child = Command::new("python3")
                .args(["-m", "moto.server", "-H", "127.0.0.1", "-p"])
                .arg(port.to_string())
                .env("PYTHONPATH", install_dir(repo))
                .env("PYTHONDONTWRITEBYTECODE", "1")
                .current_dir(dir.path())
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(log2)
                .spawn()
                .map_err(|e| io("start python3 -m moto.server", e))?;
            let start = Instant::now();
            let mut moto = None;
            while start.elapsed() < Duration::from_secs(30) {
                if let Ok(Some(_)) = child.try_wait() {
                    break; // the port was taken in between: try another
                }
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    moto = Some(Moto {
                        child,
                        dir,
                        port,
                        bucket: bucket.to_string(),
                    });
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let Some(moto) = moto else {
                continue;
            };
            let answer = moto.request("PUT", &format!("/{bucket}"), &[], &[])?;
            if answer.status != 200 {
                return Err(format!(
                    "moto did not create bucket {bucket}: status {}",
                    answer.status
                ));
            }
            return Ok(moto);
        }
        Err("moto did not start on loopback (five tries)".into())
    }

    /// `http://127.0.0.1:PORT`, for `AWS_ENDPOINT_URL`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The environment a kart process needs to reach this server with credentials.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY.to_string()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.to_string()),
            ("AWS_REGION", REGION.to_string()),
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_ALLOW_HTTP", "true".to_string()),
        ]
    }

    /// One request to the server as the bucket's owner (`path` starts with `/`): an
    /// `Authorization` header naming [`ACCESS_KEY`] with a signature moto does not
    /// check. This is how tests alter what the bucket holds behind kart's back.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Answer, String> {
        let fail = |e: std::io::Error| format!("moto harness: {method} {path}: {e}");
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).map_err(fail)?;
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(fail)?;
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\nAuthorization: AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/20260101/{REGION}/s3/aws4_request, SignedHeaders=host, Signature=00\r\n",
            self.port,
            body.len()
        );
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).map_err(fail)?;
        stream.write_all(body).map_err(fail)?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).map_err(fail)?;
        let split = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .ok_or_else(|| format!("moto harness: {method} {path}: no HTTP answer"))?;
        let head = String::from_utf8_lossy(&raw[..split]).into_owned();
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("moto harness: {method} {path}: bad status line {head:?}"))?;
        Ok(Answer {
            status,
            body: raw[split + 4..].to_vec(),
        })
    }

    /// Writes `bytes` at `key` of the bucket, replacing what is there.
    pub fn put_object(&self, key: &str, bytes: &[u8]) -> Result<(), String> {
        let answer = self.request("PUT", &format!("/{}/{key}", self.bucket), &[], bytes)?;
        match answer.status {
            200 => Ok(()),
            s => Err(format!("moto harness: PUT {key} answered {s}")),
        }
    }

    /// Lets anyone read the bucket's objects (a bucket policy), as a public cache for
    /// pull requests would.
    pub fn allow_public_reads(&self) -> Result<(), String> {
        let policy = format!(
            r#"{{"Version":"2012-10-17","Statement":[{{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::{}/*"}}]}}"#,
            self.bucket
        );
        let answer = self.request(
            "PUT",
            &format!("/{}?policy", self.bucket),
            &[],
            policy.as_bytes(),
        )?;
        match answer.status {
            200 | 204 => Ok(()),
            s => Err(format!("moto harness: PUT ?policy answered {s}")),
        }
    }

    /// The request lines moto logged so far (`"PUT /bucket/key HTTP/1.1" 200 -`).
    pub fn requests(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("moto.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(" HTTP/1.1\" "))
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
