//! nginx (Debian's nginx-light, WebDAV PUT) on a free loopback port, rooted in a temp
//! folder, stopped when dropped: the real HTTP cache server of the benchmark and the
//! campaigns.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Whether an nginx binary is installed.
#[allow(dead_code)]
pub fn available() -> bool {
    binary().is_some()
}

fn binary() -> Option<&'static str> {
    ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|p| Path::new(p).is_file())
}

/// A running nginx; stopped on drop.
pub struct Nginx {
    child: std::process::Child,
    dir: tempfile::TempDir,
    /// Its loopback port.
    pub port: u16,
}

impl Nginx {
    /// Starts nginx (WebDAV PUT on `/`) rooted in a new temp folder.
    pub fn start() -> Res<Nginx> {
        let dir = tempfile::tempdir()?;
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let d = dir.path().display();
        std::fs::create_dir_all(dir.path().join("www/kart/cas"))?;
        std::fs::create_dir_all(dir.path().join("www/kart/ac"))?;
        std::fs::write(
            dir.path().join("nginx.conf"),
            format!(
                "daemon off; master_process off; pid {d}/nginx.pid; error_log {d}/error.log;\n\
                 events {{ worker_connections 1024; }}\n\
                 http {{ access_log off; client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;\n\
                 fastcgi_temp_path {d}/fcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
                 client_max_body_size 0; keepalive_requests 100000;\n\
                 server {{ listen 127.0.0.1:{port}; root {d}/www;\n\
                 location / {{ dav_methods PUT; create_full_put_path on; }} }} }}\n"
            ),
        )?;
        let nginx = binary().ok_or("nginx not found: apt-get install nginx-light")?;
        let child = Command::new(nginx)
            .arg("-c")
            .arg(dir.path().join("nginx.conf"))
            .arg("-p")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        for _ in 0..500 {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(Nginx { child, dir, port });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err("nginx did not start".into())
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Nginx {
    /// The folder it serves (`/` of its URLs).
    pub fn www(&self) -> PathBuf {
        self.dir.path().join("www")
    }
}
