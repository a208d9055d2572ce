//! A real HTTP cache server for the remote tests: Debian's nginx-light (WebDAV PUT) on a
//! free loopback port, rooted in a temp folder, stopped when dropped. `scripts/setup`
//! installs it.
//!
//! Locations: `/kart/` stores anything (GET/HEAD/PUT) and answers 503 while the file
//! `fail` exists in the server folder (a server failing for a while); `/auth/` needs
//! `Authorization: Bearer s3cret-token`; `/forbidden/` answers 403; `/moved/` answers a
//! redirect to another host.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const TOKEN: &str = "s3cret-token";

pub struct Nginx {
    child: Child,
    dir: tempfile::TempDir,
    pub port: u16,
}

fn nginx_binary() -> PathBuf {
    for candidate in ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"] {
        if Path::new(candidate).is_file() {
            return candidate.into();
        }
    }
    panic!("nginx is not installed: run scripts/setup (it installs Debian's nginx-light)");
}

impl Nginx {
    pub fn start() -> Nginx {
        let binary = nginx_binary();
        for _ in 0..5 {
            let dir = tempfile::Builder::new()
                .prefix("kart-nginx-")
                .tempdir()
                .unwrap();
            let port = TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let d = dir.path().display();
            std::fs::create_dir_all(dir.path().join("www/kart")).unwrap();
            std::fs::create_dir_all(dir.path().join("www/auth")).unwrap();
            let conf = format!(
                r#"daemon off;
master_process off;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 512; }}
http {{
  access_log {d}/access.log;
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
            std::fs::write(dir.path().join("nginx.conf"), conf).unwrap();
            let mut child = Command::new(&binary)
                .arg("-c")
                .arg(dir.path().join("nginx.conf"))
                .arg("-p")
                .arg(dir.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(10) {
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return Nginx { child, dir, port };
                }
                if let Ok(Some(_)) = child.try_wait() {
                    break; // the port was taken in between: try another
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("nginx did not start on loopback");
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
