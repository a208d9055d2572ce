//! Remote-cache benchmark: cold `kart fetch` of many blobs from nginx on loopback, at
//! `--jobs 1` and the default, against one `curl` process fetching the same URLs one
//! after another over a reused connection, measured in the same run; at loopback speed
//! and through a proxy of this program's own adding 20 ms of round-trip latency. Also
//! no-op push and fetch, and where kart's time goes (sha256, zstd, fsync), measured
//! in-process on the same blobs. Prints figures; asserts nothing.
//!
//!     kart-bench-remote [--blobs 500] [--kart target/release/kart]
//!     kart-bench-remote --s3 [--rounds 3] [--blobs 500] [--kart target/release/kart]
//!     kart-bench-remote --reapi [--blobs 500] [--kart target/release/kart]
//!
//! `--reapi` instead compares the HTTP remote (nginx) with a Remote Execution API
//! server (BuildGrid, as `scripts/install-buildgrid` installs it), both on loopback:
//! a cold `kart push` of the blobs from a store, a no-op push, and a cold `kart fetch`
//! into an empty store, each at loopback speed and through the 20 ms proxy.
//!
//! `--s3` measures only a cold fetch of the whole set into an empty store, in the same
//! run, from the HTTP remote (nginx), from the S3 remote against the same nginx (its
//! path-style GETs land on the same files: kart's S3 client, object_store with
//! signing, against the HTTP client on one server), and from the S3 remote against
//! moto (a real S3 API, in Python); each round runs the three, starting with the next
//! one each time. It also prints the CPU time of each kart process.
//!
//! Needs nginx (Debian's nginx-light) and curl; `--s3` also moto (`scripts/test`
//! installs it under `.toolchain/moto`; run from the repository root); `--reapi` also
//! BuildGrid.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

use kart_testkit::moto::Moto;
use kart_testkit::nginx::Nginx;

/// Cubin-like bytes of `size`: 16-byte "instructions" drawn from a small pool, with
/// some noise, so they compress about as well as real cubins (3–4×).
fn cubin_like(size: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let pool: Vec<[u8; 16]> = (0..512)
        .map(|_| {
            let a = next().to_le_bytes();
            let b = next().to_le_bytes();
            let mut x = [0u8; 16];
            x[..8].copy_from_slice(&a);
            x[8..].copy_from_slice(&b);
            x
        })
        .collect();
    let mut out = Vec::with_capacity(size + 16);
    while out.len() < size {
        let r = next();
        let mut ins = pool[(r % 512) as usize];
        if r % 4 == 0 {
            ins[(r >> 20) as usize % 16] = (r >> 32) as u8;
        }
        out.extend_from_slice(&ins);
    }
    out.truncate(size);
    out
}

/// A loopback TCP proxy that delays every chunk by `one_way` in each direction
/// (so a request/response round trip costs 2 × `one_way`) without limiting
/// throughput: chunks are stamped on arrival and released at stamp + delay.
fn start_delay_proxy(upstream: u16, one_way: Duration) -> Res<u16> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                continue;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            for (from, to) in [
                (client.try_clone(), server.try_clone()),
                (server.try_clone(), client.try_clone()),
            ] {
                let (Ok(mut from), Ok(mut to)) = (from, to) else {
                    continue;
                };
                let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 256 << 10];
                    loop {
                        match from.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                if tx
                                    .send((Instant::now() + one_way, buf[..n].to_vec()))
                                    .is_err()
                                {
                                    break;
                                }
                            }
                        }
                    }
                });
                std::thread::spawn(move || {
                    for (due, chunk) in rx {
                        let now = Instant::now();
                        if due > now {
                            std::thread::sleep(due - now);
                        }
                        if to.write_all(&chunk).is_err() {
                            break;
                        }
                    }
                    let _ = to.shutdown(std::net::Shutdown::Write);
                });
            }
        }
    });
    Ok(port)
}

/// A project folder whose kart.lock names `blobs` (synthetic artifacts).
fn write_project(dir: &Path, blobs: &[(String, Vec<u8>)]) -> Res<()> {
    std::fs::create_dir_all(dir.join("kernels"))?;
    std::fs::write(dir.join("kart.toml"), "[project]\ntargets = [\"sm_90\"]\n")?;
    let mut lock = String::from("version = 1\n");
    let mut sorted: Vec<(usize, &(String, Vec<u8>))> = blobs.iter().enumerate().collect();
    sorted.sort_by_key(|(i, _)| *i);
    for (i, (digest, bytes)) in sorted {
        lock.push_str(&format!(
            "\n[[artifact]]\nkernel = \"synthetic\"\ntarget = \"sm_90\"\nkind = \"cubin\"\nkey = \"{}\"\ndigest = \"{digest}\"\nsize = {}\nnvcc = \"13.0.88\"\n\n[artifact.config]\nI = {i}\n\n[[artifact.entries]]\nname = \"k\"\nregisters = 32\nshared_bytes = 0\nstack_bytes = 0\nspill_store_bytes = 0\nspill_load_bytes = 0\n",
            kart::digest::sha256_hex(format!("key {i}").as_bytes()),
            bytes.len()
        ));
    }
    std::fs::write(dir.join("kart.lock"), lock)?;
    Ok(())
}

fn run_kart(kart: &Path, dir: &Path, args: &[&str]) -> Res<Duration> {
    run_kart_env(kart, dir, args, &[])
}

/// The object-store variables a run may read: none but those given.
const CLOUD_VARS: [&str; 12] = [
    "KART_REMOTE_TOKEN",
    "KART_REMOTE_ANONYMOUS",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ALLOW_HTTP",
];

fn run_kart_env(kart: &Path, dir: &Path, args: &[&str], env: &[(&str, String)]) -> Res<Duration> {
    let mut cmd = Command::new(kart);
    cmd.arg("-C").arg(dir).args(args);
    for var in CLOUD_VARS {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let t = Instant::now();
    let out = cmd.output()?;
    let elapsed = t.elapsed();
    if !out.status.success() {
        return Err(format!(
            "kart {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(elapsed)
}

fn run_curl(urls: &[String], out_dir: &Path) -> Res<Duration> {
    let config = out_dir.join("curl.conf");
    let mut text = String::new();
    for (i, u) in urls.iter().enumerate() {
        text.push_str(&format!(
            "url = \"{u}\"\noutput = \"{}\"\n",
            out_dir.join(format!("b{i}")).display()
        ));
    }
    std::fs::write(&config, text)?;
    let t = Instant::now();
    let status = Command::new("curl")
        .args(["-sS", "--fail", "-K"])
        .arg(&config)
        .status()?;
    let elapsed = t.elapsed();
    if !status.success() {
        return Err("curl failed".into());
    }
    Ok(elapsed)
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let count: usize = arg("--blobs").map_or(Ok(500), |v| v.parse())?;
    let kart = PathBuf::from(arg("--kart").unwrap_or_else(|| "target/release/kart".into()));
    if !kart.is_file() {
        return Err(format!("no kart binary at {} (pass --kart)", kart.display()).into());
    }
    let s3 = args.iter().any(|a| a == "--s3");
    let rounds: usize = arg("--rounds").map_or(Ok(3), |v| v.parse())?.max(1);

    // Sizes spread log-uniformly from 8 KiB to 1 MiB, as a tuned grid's cubins are.
    let blobs: Vec<(String, Vec<u8>)> = (0..count)
        .map(|i| {
            let f = (i as f64 * 0.618_033_988_75).fract();
            let size = (8192f64 * (128f64).powf(f)) as usize;
            let bytes = cubin_like(size, i as u64 + 1);
            (kart::digest::sha256_hex(&bytes), bytes)
        })
        .collect();
    let total: u64 = blobs.iter().map(|(_, b)| b.len() as u64).sum();
    if args.iter().any(|a| a == "--reapi") {
        return compare_reapi(&kart, &blobs, total);
    }
    println!(
        "{count} synthetic blobs, {:.1} MB ({} B to {} B)",
        total as f64 / 1e6,
        blobs.iter().map(|(_, b)| b.len()).min().unwrap_or(0),
        blobs.iter().map(|(_, b)| b.len()).max().unwrap_or(0)
    );
    if s3 {
        return s3_comparison(&kart, &blobs, rounds);
    }
    let nginx = Nginx::try_start(false)?;
    std::fs::create_dir_all(nginx.www().join("kart/cas"))?;
    std::fs::create_dir_all(nginx.www().join("kart/ac"))?;
    for (d, b) in &blobs {
        std::fs::write(nginx.www().join("kart/cas").join(d), b)?;
    }
    let proxy = start_delay_proxy(nginx.port, Duration::from_millis(10))?;
    let mb = total as f64 / 1e6;

    println!(
        "\n{:22} {:>10} {:>9} {:>10} {:>9} {:>10} {:>9}",
        "", "curl 1by1", "MB/s", "kart -j1", "MB/s", "kart -j16", "MB/s"
    );
    let mut figures = Vec::new();
    for (label, port) in [("loopback", nginx.port), ("loopback + 20 ms RTT", proxy)] {
        let base = format!("http://127.0.0.1:{port}/kart");
        let urls: Vec<String> = blobs
            .iter()
            .map(|(d, _)| format!("{base}/cas/{d}"))
            .collect();
        let curl_dir = tempfile::tempdir()?;
        let curl = run_curl(&urls, curl_dir.path())?;
        let mut kart_times = Vec::new();
        for jobs in ["1", "16"] {
            let project = tempfile::tempdir()?;
            write_project(project.path(), &blobs)?;
            let t = run_kart(
                &kart,
                project.path(),
                &["-q", "fetch", "--remote", &base, "--jobs", jobs],
            )?;
            kart_times.push(t);
        }
        println!(
            "{label:22} {:>9.2}s {:>9.1} {:>9.2}s {:>9.1} {:>9.2}s {:>9.1}   curl / kart -j16: {:.2}",
            curl.as_secs_f64(),
            mb / curl.as_secs_f64(),
            kart_times[0].as_secs_f64(),
            mb / kart_times[0].as_secs_f64(),
            kart_times[1].as_secs_f64(),
            mb / kart_times[1].as_secs_f64(),
            curl.as_secs_f64() / kart_times[1].as_secs_f64()
        );
        figures.push((label, curl, kart_times));
    }

    // No-op fetch and push: everything already in place.
    let project = tempfile::tempdir()?;
    write_project(project.path(), &blobs)?;
    let base = format!("http://127.0.0.1:{}/kart", nginx.port);
    let slow = format!("http://127.0.0.1:{proxy}/kart");
    run_kart(&kart, project.path(), &["-q", "fetch", "--remote", &base])?;
    let noop_fetch = run_kart(&kart, project.path(), &["-q", "fetch", "--remote", &base])?;
    let noop_push = run_kart(&kart, project.path(), &["-q", "push", "--remote", &base])?;
    let noop_push_slow = run_kart(&kart, project.path(), &["-q", "push", "--remote", &slow])?;
    println!(
        "\nno-op fetch (all {count} present): {:.3} s; no-op push (HEAD each): {:.3} s at loopback, {:.3} s at 20 ms RTT",
        noop_fetch.as_secs_f64(),
        noop_push.as_secs_f64(),
        noop_push_slow.as_secs_f64()
    );

    // Where kart's time goes, in-process on the same blobs (one thread).
    let t = Instant::now();
    for (_, b) in &blobs {
        std::hint::black_box(kart::digest::sha256_hex(b));
    }
    let hash = t.elapsed();
    let t = Instant::now();
    let mut compressed = 0usize;
    for (_, b) in &blobs {
        if b.len() > kart::store::RAW_BLOB_MAX {
            compressed += zstd::bulk::compress(b, 3)?.len();
        }
    }
    let zstd_time = t.elapsed();
    let store_dir = tempfile::tempdir()?;
    let store = kart::store::Store::open(
        store_dir.path(),
        kart::store::LockMode::Shared,
        Duration::from_secs(5),
    )?;
    let t = Instant::now();
    for (d, b) in &blobs {
        store.put_named_blob(d, b)?;
    }
    let store_time = t.elapsed();
    println!(
        "in-process, one thread, all {count} blobs: sha256 {:.2} s ({:.0} MB/s); zstd level 3 of those above 64 KiB {:.2} s ({:.0} MB/s, {:.1} MB out); storing (zstd + temp file + fsync + rename) {:.2} s",
        hash.as_secs_f64(),
        mb / hash.as_secs_f64(),
        zstd_time.as_secs_f64(),
        mb / zstd_time.as_secs_f64(),
        compressed as f64 / 1e6,
        store_time.as_secs_f64()
    );
    let _ = figures;

    // The repository's own artifacts (from the current folder's store), pushed and
    // fetched cold.
    if Path::new("kart.lock").is_file() {
        let base = format!("http://127.0.0.1:{}/repo", nginx.port);
        run_kart(&kart, Path::new("."), &["-q", "push", "--remote", &base])?;
        let copy = tempfile::tempdir()?;
        std::fs::copy("kart.lock", copy.path().join("kart.lock"))?;
        std::fs::copy("kart.toml", copy.path().join("kart.toml"))?;
        std::fs::create_dir_all(copy.path().join("kernels"))?;
        let lock_text = std::fs::read_to_string("kart.lock")?;
        let n = lock_text.matches("[[artifact]]").count();
        let t = run_kart(&kart, copy.path(), &["-q", "fetch", "--remote", &base])?;
        println!(
            "repository lock ({n} artifacts): cold fetch {:.3} s at loopback",
            t.as_secs_f64()
        );
    }
    Ok(())
}

/// CPU time (user and system) of every finished child process so far.
fn children_cpu() -> Duration {
    // SAFETY: getrusage writes one rusage struct, which lives on this stack.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// One way to fetch: its label, the remote URL, the environment it needs.
type Run = (&'static str, String, Vec<(&'static str, String)>);

/// Cold fetches of every blob into an empty store from the HTTP remote, the S3 remote
/// on the same nginx, and the S3 remote on moto, `rounds` times in turn.
fn s3_comparison(kart: &Path, blobs: &[(String, Vec<u8>)], rounds: usize) -> Res<()> {
    let mb = blobs.iter().map(|(_, b)| b.len() as u64).sum::<u64>() as f64 / 1e6;
    let nginx = Nginx::try_start(false)?;
    std::fs::create_dir_all(nginx.www().join("kart/cas"))?;
    for (d, b) in blobs {
        std::fs::write(nginx.www().join("kart/cas").join(d), b)?;
    }
    let moto = Moto::try_start(&std::env::current_dir()?, "kart")?;
    let t = Instant::now();
    for (d, b) in blobs {
        moto.put_object(&format!("cas/{d}"), b)?;
    }
    println!(
        "moto: {} objects uploaded in {:.2} s",
        blobs.len(),
        t.elapsed().as_secs_f64()
    );
    let s3_env = |endpoint: String| {
        vec![
            (
                "AWS_ACCESS_KEY_ID",
                kart_testkit::moto::ACCESS_KEY.to_string(),
            ),
            (
                "AWS_SECRET_ACCESS_KEY",
                kart_testkit::moto::SECRET_KEY.to_string(),
            ),
            ("AWS_REGION", kart_testkit::moto::REGION.to_string()),
            ("AWS_ENDPOINT_URL", endpoint),
        ]
    };
    // Bucket `kart`, no prefix: path-style GETs of /kart/cas/<sha256>, nginx's files.
    let runs: [Run; 3] = [
        ("HTTP remote, nginx", nginx.url("kart"), vec![]),
        (
            "S3 remote, nginx",
            "s3://kart".into(),
            s3_env(format!("http://127.0.0.1:{}", nginx.port)),
        ),
        (
            "S3 remote, moto",
            "s3://kart".into(),
            s3_env(moto.endpoint()),
        ),
    ];
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); runs.len()];
    let mut cpus: Vec<Vec<Duration>> = vec![Vec::new(); runs.len()];
    for round in 0..rounds {
        // Each round starts with another of them: none always runs right after the
        // same one (the page cache and the disk's writeback carry over).
        for k in 0..runs.len() {
            let i = (round + k) % runs.len();
            let (label, url, env) = &runs[i];
            let project = tempfile::tempdir()?;
            write_project(project.path(), blobs)?;
            let cpu = children_cpu();
            let t = run_kart_env(kart, project.path(), &["-q", "fetch", "--remote", url], env)?;
            let cpu = children_cpu().saturating_sub(cpu);
            println!(
                "round {}: {label:20} {:.3} s ({:.0} MB/s), kart's CPU {:.3} s",
                round + 1,
                t.as_secs_f64(),
                mb / t.as_secs_f64(),
                cpu.as_secs_f64()
            );
            times[i].push(t);
            cpus[i].push(cpu);
        }
    }
    println!(
        "\ncold fetch of {} blobs ({mb:.1} MB), kart -j16, median of {rounds}:",
        blobs.len()
    );
    let median = |v: &[Duration]| {
        let mut v = v.to_vec();
        v.sort();
        v[v.len() / 2]
    };
    let http = median(&times[0]);
    for (((label, _, _), t), cpu) in runs.iter().zip(&times).zip(&cpus) {
        let m = median(t);
        println!(
            "{label:20} {:.3} s  {:6.0} MB/s  {:.2}x the HTTP remote's time; kart's CPU {:.3} s",
            m.as_secs_f64(),
            mb / m.as_secs_f64(),
            m.as_secs_f64() / http.as_secs_f64(),
            median(cpu).as_secs_f64()
        );
    }
    Ok(())
}

/// Push and fetch through nginx (HTTP) and BuildGrid (gRPC), at loopback speed and with
/// 20 ms of round trip: the figures of `bench/results/reapi-cache.md`.
fn compare_reapi(kart: &Path, blobs: &[(String, Vec<u8>)], total: u64) -> Res<()> {
    let repo = std::env::current_dir()?;
    let nginx = Nginx::try_start(false)?;
    let grid = kart_testkit::buildgrid::BuildGrid::try_start_cache(&repo)?;
    let mb = total as f64 / 1e6;
    println!(
        "{} synthetic blobs, {mb:.1} MB; nginx on port {}, BuildGrid {} on port {}",
        blobs.len(),
        nginx.port,
        kart_testkit::buildgrid::VERSION,
        grid.port
    );
    println!(
        "\n{:40} {:>10} {:>9} {:>10} {:>10} {:>9}",
        "", "push", "MB/s", "no-op push", "fetch", "MB/s"
    );
    let rounds = [("loopback", false), ("loopback + 20 ms RTT", true)];
    for (round, (label, delay)) in rounds.into_iter().enumerate() {
        // Every push starts cold: each round has a path (an instance) of its own.
        let instance = ["", kart_testkit::buildgrid::INSTANCE][round];
        for (name, port) in [
            ("HTTP (nginx)", nginx.port),
            ("REAPI (BuildGrid)", grid.port),
        ] {
            let port = if delay {
                start_delay_proxy(port, Duration::from_millis(10))?
            } else {
                port
            };
            let url = if name.starts_with("HTTP") {
                format!("http://127.0.0.1:{port}/kart/{round}")
            } else {
                format!("grpc://127.0.0.1:{port}/{instance}")
            };
            let source = tempfile::tempdir()?;
            write_project(source.path(), blobs)?;
            let store = kart::store::Store::open(
                &source.path().join("artifacts"),
                kart::store::LockMode::Shared,
                Duration::from_secs(5),
            )?;
            for (d, b) in blobs {
                store.put_named_blob(d, b)?;
            }
            drop(store);
            let push = run_kart(kart, source.path(), &["-q", "push", "--remote", &url])?;
            let noop = run_kart(kart, source.path(), &["-q", "push", "--remote", &url])?;
            let target = tempfile::tempdir()?;
            write_project(target.path(), blobs)?;
            let fetch = run_kart(kart, target.path(), &["-q", "fetch", "--remote", &url])?;
            println!(
                "{:40} {:>9.2}s {:>9.1} {:>9.3}s {:>9.2}s {:>9.1}",
                format!("{label}: {name}"),
                push.as_secs_f64(),
                mb / push.as_secs_f64(),
                noop.as_secs_f64(),
                fetch.as_secs_f64(),
                mb / fetch.as_secs_f64()
            );
        }
    }
    Ok(())
}
