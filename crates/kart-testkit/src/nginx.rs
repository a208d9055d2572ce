//! A real HTTP cache server for the remote tests, the benchmarks and the campaigns:
//! Debian's nginx-light (WebDAV PUT) on a free loopback port, rooted in a temp folder,
//! stopped when dropped. `scripts/test` installs it.
//!
//! Locations: `/kart/` stores anything (GET/HEAD/PUT) and answers 503 while the file
//! `fail` exists in the server folder (a server failing for a while); `/auth/` needs
//! `Authorization: Bearer s3cret-token`; `/forbidden/` answers 403; `/moved/` answers a
//! redirect to another host.

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The bearer token `/auth/` wants.
pub const TOKEN: &str = "s3cret-token";

/// A running nginx; stopped on drop.
pub struct Nginx {
    child: Child,
    dir: tempfile::TempDir,
    /// Its loopback port.
    pub port: u16,
}

/// The installed nginx binary, if any.
pub fn binary() -> Option<PathBuf> {
    ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

/// Whether nginx is installed.
pub fn available() -> bool {
    binary().is_some()
}

impl Nginx {
    /// Starts nginx, logging every request; panics when it cannot (a test's setup).
    pub fn start() -> Nginx {
        Nginx::try_start(true).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts nginx; `access_log` off for benchmarks, where writing a log line per
    /// request would be part of what is measured.
    pub fn try_start(access_log: bool) -> Result<Nginx, String> {
        let binary = binary()
            .ok_or("nginx is not installed: run scripts/test, or `apt-get install nginx-light`")?;
        let io = |what: &str, e: std::io::Error| format!("nginx harness: cannot {what}: {e}");
        for _ in 0..5 {
            let dir = tempfile::Builder::new()
                .prefix("kart-nginx-")
                .tempdir()
                .map_err(|e| io("create a temp folder", e))?;
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map_err(|e| io("find a free port", e))?
                .port();
            let d = dir.path().display();
            for folder in ["www/kart", "www/auth"] {
                std::fs::create_dir_all(dir.path().join(folder))
                    .map_err(|e| io("create the served folder", e))?;
            }
            let log = if access_log {
                format!("{d}/access.log")
            } else {
                "off".to_string()
            };
            let conf = format!(
                r#"daemon off;
master_process off;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 1024; }}
http {{
  access_log {log};
  keepalive_requests 100000;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  client_max_body_size 0;
  server {{
    listen 127.0.0.1:{port};
    root {d}/www;
    location /forbidden/ {{ return 403; }}
    location /moved/ {{ return 302 http://example.invalid/; }}
    location /auth/ {{
      if ($http_authorization != "Bearer {TOKEN}") {{ return 401; }}
      dav_methods PUT;
      create_full_put_path on;
    }}
    location / {{
      if (-f {d}/fail) {{ return 503; }}
      dav_methods PUT;
      create_full_put_path on;
    }}
  }}
}}
"#
            );
            std::fs::write(dir.path().join("nginx.conf"), conf)
                .map_err(|e| io("write nginx.conf", e))?;
            let mut child = Command::new(&binary)
                .arg("-c")
                .arg(dir.path().join("nginx.conf"))
                .arg("-p")
                .arg(dir.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| io("start nginx", e))?;
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(10) {
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return Ok(Nginx { child, dir, port });
                }
                if let Ok(Some(_)) = child.try_wait() {
                    break; // the port was taken in between: try another
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        Err("nginx did not start on loopback (five tries)".into())
    }

    /// `http://127.0.0.1:PORT/{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}/{path}", self.port)
    }

    /// The served folder.
    pub fn www(&self) -> PathBuf {
        self.dir.path().join("www")
    }

    /// While this file exists, `/kart/` answers 503.
    pub fn fail_flag(&self) -> PathBuf {
        self.dir.path().join("fail")
    }

    /// The access log so far.
    pub fn access_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("access.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
