//! The remote cache against a real nginx (WebDAV) on loopback: push, fetch, trust,
//! integrity, retries, refusals, degradation, crashes, sharded builds, tokens.

use std::time::{Duration, Instant};

use crate::harness::{TestProject, lock_digests, stderr, stdout, text};
use kart_testkit::nginx::{Nginx, TOKEN};

const GRID: &str = "[params]\nA = [1, 2, 3]\nB = [16, 32]\n";
const GRID_BODY: &str = "out[threadIdx.x] = A * 1000 + B;";

/// The same small project every time (so keys and locks agree across copies), with a
/// `[remote]` pointing at `url`.
fn project(url: &str, trusted: bool) -> TestProject {
    let p = TestProject::new(&["sm_80", "sm_90"]);
    p.kernel("grid", GRID_BODY, GRID);
    let toml = p.read("kart.toml");
    p.write(
        "kart.toml",
        &format!("{toml}\n[remote]\nurl = \"{url}\"\ntrusted = {trusted}\n"),
    );
    p
}

/// A fresh project (empty store) holding `built`'s kart.lock, its remote at `url`.
fn with_lock_of(built: &TestProject, url: &str, trusted: bool) -> TestProject {
    let p = project(url, trusted);
    std::fs::copy(built.root().join("kart.lock"), p.root().join("kart.lock")).unwrap();
    p
}

fn has_blob(p: &TestProject, digest: &str) -> bool {
    let dir = p.root().join("artifacts/v1/blobs").join(&digest[..2]);
    dir.join(digest).is_file() || dir.join(format!("{digest}.zst")).is_file()
}

#[test]
fn push_then_fetch_gives_identical_blobs_and_a_second_push_uploads_nothing() {
    let server = Nginx::start();
    let url = server.url("kart");
    let built = project(&url, true);
    built.ok(&["build"]);
    let out = built.ok(&["push"]);
    assert!(stderr(&out).contains("12 blobs uploaded"), "{}", text(&out));
    let out = built.ok(&["push"]);
    assert!(
        stderr(&out).contains("0 blobs uploaded")
            && stderr(&out).contains("0 action entries uploaded"),
        "{}",
        text(&out)
    );

    let fresh = with_lock_of(&built, &url, true);
    let out = fresh.ok(&["fetch"]);
    assert!(
        stderr(&out).contains("12 downloaded and verified"),
        "{}",
        text(&out)
    );
    assert_eq!(
        fresh.blobs(),
        built.blobs(),
        "fetched blobs differ from the built ones"
    );
    fresh.ok(&["verify"]);
    // Everything is here: a build compiles nothing.
    let out = fresh.ok(&["build", "--no-remote"]);
    assert_eq!(fresh.compiles(), 0, "{}", text(&out));
    assert_eq!(fresh.read("kart.lock"), built.read("kart.lock"));
}

#[test]
fn altered_or_truncated_blobs_on_the_server_are_refused_and_not_stored() {
    let server = Nginx::start();
    let url = server.url("kart");
    let built = project(&url, true);
    built.ok(&["build"]);
    built.ok(&["push"]);
    let digests = lock_digests(&built);
    let cas = server.www().join("kart/cas");
    let mut altered = std::fs::read(cas.join(&digests[0])).unwrap();
    altered[100] ^= 1;
    std::fs::write(cas.join(&digests[0]), altered).unwrap();
    let full = std::fs::read(cas.join(&digests[1])).unwrap();
    std::fs::write(cas.join(&digests[1]), &full[..full.len() / 2]).unwrap();

    let fresh = with_lock_of(&built, &url, true);
    let out = fresh.kart(&["fetch"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("for blob {}", digests[0])) && err.contains("hashing to"),
        "{err}"
    );
    assert!(
        err.contains(&format!("bytes for blob {}", digests[1])),
        "{err}"
    );
    assert!(!has_blob(&fresh, &digests[0]) && !has_blob(&fresh, &digests[1]));
    assert!(stderr(&out).contains("10 downloaded"), "{}", text(&out));
}

#[test]
fn a_server_failing_for_a_while_is_retried_and_the_fetch_succeeds() {
    let server = Nginx::start();
    let url = server.url("kart");
    let built = project(&url, true);
    built.ok(&["build"]);
    built.ok(&["push"]);
    let fresh = with_lock_of(&built, &url, true);
    std::fs::write(server.fail_flag(), "").unwrap();
    let flag = server.fail_flag();
    let healer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        std::fs::remove_file(flag).unwrap();
    });
    let out = fresh.kart(&["fetch"]);
    healer.join().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        server.access_log().contains("\" 503 "),
        "the server never failed"
    );
    fresh.ok(&["verify"]);
}

#[test]
fn refusals_fail_at_once_with_the_url_and_status() {
    let server = Nginx::start();
    let built = project(&server.url("kart"), true);
    built.ok(&["build"]);
    for (path, want) in [
        ("forbidden", "403 Forbidden"),
        ("moved", "kart does not follow redirects"),
        ("empty", "the remote lacks 12 blobs"),
    ] {
        let fresh = with_lock_of(&built, &server.url(path), true);
        let t = Instant::now();
        let out = fresh.kart(&["fetch"]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert!(stderr(&out).contains(want), "{path}: {}", text(&out));
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "{path}: a refusal must not be retried ({:?})",
            t.elapsed()
        );
        assert!(
            !stderr(&out).contains("example.invalid/") || path == "moved",
            "{}",
            text(&out)
        );
        assert!(fresh.blobs().is_empty());
    }
}

#[test]
fn a_dead_remote_makes_build_compile_locally_and_fetch_fail_cleanly() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let p = project(&format!("http://127.0.0.1:{port}/kart"), true);
    let out = p.ok(&["build"]);
    assert_eq!(p.compiles(), 12, "{}", text(&out));
    assert_eq!(
        stderr(&out).matches("compiling locally").count(),
        1,
        "say it once: {}",
        text(&out)
    );
    std::fs::remove_dir_all(p.root().join("artifacts")).unwrap();
    let out = p.kart(&["fetch"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(stderr(&out).contains("failed 6 times"), "{}", text(&out));
    assert!(p.blobs().is_empty(), "a failed fetch stored something");
}

#[test]
fn a_fetch_killed_before_a_rename_leaves_no_partial_blob_and_a_rerun_completes() {
    let server = Nginx::start();
    let url = server.url("kart");
    let built = project(&url, true);
    built.ok(&["build"]);
    built.ok(&["push"]);
    let digest = lock_digests(&built)[3].clone();
    let fresh = with_lock_of(&built, &url, true);
    // Abort (as kill -9 would) with the blob's temp file written and synced, before
    // its rename.
    let out = fresh.kart_env(
        &["fetch", "--jobs", "1"],
        &[(
            "KART_FAILPOINT",
            &format!("write-atomic.before-rename:{digest}"),
        )],
    );
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        !has_blob(&fresh, &digest),
        "a blob landed without its rename"
    );
    let temps = |p: &TestProject| {
        walk(&p.root().join("artifacts"))
            .into_iter()
            .filter(|f| f.contains(".tmp-kart-"))
            .count()
    };
    assert_eq!(temps(&fresh), 1, "the killed write left its temp file");
    fresh.ok(&["fetch"]);
    assert_eq!(temps(&fresh), 0, "the next open swept the leftover");
    fresh.ok(&["verify"]);
    assert_eq!(fresh.blobs(), built.blobs());
}

fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = e.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path.to_string_lossy().into_owned());
        }
    }
    out
}

#[test]
fn four_shards_pushed_concurrently_merge_into_the_single_machine_lock() {
    let server = Nginx::start();
    let url = server.url("kart");
    let single = project(&url, true);
    single.ok(&["build", "--no-remote"]);

    let shards: Vec<TestProject> = (0..4).map(|_| project(&url, true)).collect();
    std::thread::scope(|scope| {
        for (i, shard) in shards.iter().enumerate() {
            scope.spawn(move || {
                let n = format!("{}/4", i + 1);
                shard.ok(&["build", "--shard", &n, "--push", "--jobs", "1"]);
            });
        }
    });
    let compiled: usize = shards.iter().map(TestProject::compiles).sum();
    assert_eq!(compiled, 12, "the shards split the grid without overlap");

    let merge = project(&url, true);
    let out = merge.ok(&["build"]);
    assert_eq!(merge.compiles(), 0, "the merge compiled: {}", text(&out));
    assert_eq!(
        merge.read("kart.lock"),
        single.read("kart.lock"),
        "merged lock differs from a single-machine build"
    );
    merge.ok(&["verify"]);
    assert_eq!(merge.blobs().len(), 12);

    // A merge job that only writes the lock downloads no blob.
    let lock_only = project(&url, true);
    lock_only.ok(&["build", "--entries-only"]);
    assert_eq!(lock_only.compiles(), 0);
    assert_eq!(lock_only.read("kart.lock"), single.read("kart.lock"));
    assert!(
        lock_only.blobs().is_empty(),
        "--entries-only downloaded blobs"
    );
}

#[test]
fn an_untrusted_remote_supplies_only_blobs_the_lock_names() {
    let server = Nginx::start();
    let url = server.url("kart");
    let built = project(&url, true);
    built.ok(&["build"]);
    built.ok(&["push"]);

    // No lock: the untrusted remote's entries are ignored, everything is compiled.
    let fresh = project(&url, false);
    fresh.ok(&["build"]);
    assert_eq!(fresh.compiles(), 12);

    // With the lock: its digests are taken from the remote, nothing is compiled.
    let locked = with_lock_of(&built, &url, false);
    let out = locked.ok(&["build"]);
    assert_eq!(locked.compiles(), 0, "{}", text(&out));
    assert_eq!(locked.read("kart.lock"), built.read("kart.lock"));
    locked.ok(&["verify"]);
}

#[test]
fn the_token_is_sent_and_never_printed() {
    let server = Nginx::start();
    let url = server.url("auth/kart");
    let p = project(&url, true);
    p.ok(&["build", "--no-remote"]);
    let wrong = "wr0ng-t0ken-value";
    // The token goes to the URL given with it (KART_REMOTE here).
    let out = p.kart_env(
        &["push"],
        &[("KART_REMOTE_TOKEN", wrong), ("KART_REMOTE", &url)],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(stderr(&out).contains("401"), "{}", text(&out));
    assert!(!text(&out).contains(wrong), "token printed: {}", text(&out));
    let out = p.kart_env(
        &["push"],
        &[("KART_REMOTE_TOKEN", TOKEN), ("KART_REMOTE", &url)],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(!text(&out).contains(TOKEN), "token printed: {}", text(&out));
    // A URL only kart.toml names does not get it (a cloned project chooses that URL)...
    let out = p.kart_env(&["push"], &[("KART_REMOTE_TOKEN", TOKEN)]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("KART_REMOTE_TOKEN is not sent") && stderr(&out).contains("401"),
        "{}",
        text(&out)
    );
    // ...unless KART_REMOTE_TOKEN_URL names it.
    let out = p.kart_env(
        &["push"],
        &[
            ("KART_REMOTE_TOKEN", TOKEN),
            ("KART_REMOTE_TOKEN_URL", &url),
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    // Credentials in the URL are not printed either.
    let with_user = url.replace("http://", "http://alice:pa55word@");
    let out = p.kart_env(
        &["push", "--remote", &with_user],
        &[("KART_REMOTE_TOKEN", wrong)],
    );
    assert!(!text(&out).contains("pa55word"), "{}", text(&out));
    // A read-only remote is never written.
    let out = p.kart_env(
        &["push", "--read-only"],
        &[("KART_REMOTE_TOKEN", TOKEN), ("KART_REMOTE", &url)],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(stderr(&out).contains("read-only"), "{}", text(&out));
}

/// A server that dies in the middle of every response: it announces the whole blob,
/// sends half and closes the connection. (A stand-in of the test's own: nginx cannot be
/// stopped at a chosen byte.)
#[test]
fn a_remote_dying_mid_transfer_is_retried_then_fails_and_stores_nothing() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let served = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = served.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let body = vec![7u8; 3000];
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3000\r\n\r\n");
            let _ = stream.write_all(&body[..1500]);
            // Dropping the stream closes it mid-body.
        }
    });
    let built = project(&format!("http://127.0.0.1:{port}/kart"), true);
    built.ok(&["build", "--no-remote"]);
    let fresh = with_lock_of(&built, &format!("http://127.0.0.1:{port}/kart"), true);
    let out = fresh.kart(&["fetch", "--jobs", "1"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("failed 6 times") && stderr(&out).contains("broke off"),
        "{}",
        text(&out)
    );
    assert!(
        served.load(std::sync::atomic::Ordering::SeqCst) >= 6,
        "not retried"
    );
    assert!(fresh.blobs().is_empty(), "a cut-short blob was stored");
}

/// A server announcing an enormous body is refused at the header, before any byte of
/// it is read. (A stand-in server of the test's own, as above.)
#[test]
fn an_enormous_content_length_is_refused_before_reading() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            let _ =
                stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10000000000000\r\n\r\nxxxx");
        }
    });
    let built = project(&format!("http://127.0.0.1:{port}/kart"), true);
    built.ok(&["build", "--no-remote"]);
    let fresh = with_lock_of(&built, &format!("http://127.0.0.1:{port}/kart"), true);
    let t = Instant::now();
    let out = fresh.kart(&["fetch", "--jobs", "1"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("announces 10000000000000 bytes"),
        "{}",
        text(&out)
    );
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(fresh.blobs().is_empty());
}

/// A server of the test's own (nginx cannot be made to hang on purpose): it accepts
/// every connection, then either says nothing (`trickle = false`) or sends headers
/// and then one byte a second. Connections are held open until
/// the test ends. The trickled body has no length (it ends when the connection
/// closes), so only the stall clock can stop it.
fn slow_server(trickle: bool) -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request);
                if trickle {
                    let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
                    for _ in 0..600 {
                        if stream.write_all(b"x").is_err() {
                            return;
                        }
                        std::thread::sleep(Duration::from_secs(1));
                    }
                } else {
                    std::thread::sleep(Duration::from_secs(600));
                }
            });
        }
    });
    port
}

/// The time a local build of the test project takes here, for comparison.
fn local_build_time() -> Duration {
    let p = project("http://127.0.0.1:9/kart", true);
    let t = Instant::now();
    p.ok(&["build", "--no-remote"]);
    t.elapsed()
}

fn a_slow_remote_costs_seconds(trickle: bool, expect: &str) {
    let local = local_build_time();
    let url = format!("http://127.0.0.1:{}/kart", slow_server(trickle));
    let p = project(&url, true);
    // The default clocks (3 s connect, 5 s first byte, 5 s stall): a single
    // whole-request timeout once made this take minutes.
    let t = Instant::now();
    let out = p.ok(&["build"]);
    let took = t.elapsed();
    assert_eq!(p.compiles(), 12, "{}", text(&out));
    let err = stderr(&out);
    assert_eq!(
        err.matches("compiling locally").count(),
        1,
        "say it once: {err}"
    );
    assert!(
        err.contains(expect)
            && err.contains("compiling locally")
            && err.contains(&format!("{url}/ac/"))
            && err.contains("stops waiting on this remote"),
        "{err}"
    );
    assert!(
        took < local + Duration::from_secs(20),
        "a slow remote cost {took:?} against {local:?} for a local build: {err}"
    );

    // fetch gives up just as fast and names what it did not fetch.
    std::fs::remove_dir_all(p.root().join("artifacts")).unwrap();
    let t = Instant::now();
    let out = p.kart(&["fetch", "--first-byte-timeout", "1", "--stall-timeout", "1"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(t.elapsed() < Duration::from_secs(20), "{}", text(&out));
    let err = stderr(&out);
    let expect = expect.replace("5 s", "1 s");
    assert!(
        err.contains(&expect) && err.contains("12 blobs of kart.lock were not fetched"),
        "{err}"
    );
    assert!(p.blobs().is_empty(), "a slow fetch stored something");
}

#[test]
fn a_silent_remote_costs_one_timeout_and_the_build_compiles_locally() {
    a_slow_remote_costs_seconds(false, "no answer within 5 s");
}

#[test]
fn a_remote_sending_a_byte_a_second_is_a_stalled_transfer() {
    a_slow_remote_costs_seconds(true, "the transfer stalled");
}

#[test]
fn remote_timeouts_are_read_from_kart_toml_and_checked() {
    let url = format!("http://127.0.0.1:{}/kart", slow_server(false));
    let p = project(&url, false);
    let toml = p.read("kart.toml");
    p.write(
        "kart.toml",
        &format!("{toml}first_byte_timeout = 1.5\nstall_timeout = 2\nconnect_timeout = 2\ngive_up_after = 10\n"),
    );
    p.ok(&["build", "--no-remote"]);
    std::fs::remove_dir_all(p.root().join("artifacts")).unwrap();
    let out = p.kart(&["fetch", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("no answer within 1.5 s"),
        "{}",
        text(&out)
    );
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["remote"], url.as_str());
    assert_eq!(report["not_fetched"].as_array().unwrap().len(), 12);
    assert!(
        report["remote_error"]
            .as_str()
            .unwrap()
            .contains("timed out")
    );

    p.write("kart.toml", &format!("{toml}stall_timeout = 0\n"));
    let out = p.kart(&["fetch"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        stderr(&out).contains("kart.toml:") && stderr(&out).contains("`stall_timeout` must be"),
        "{}",
        text(&out)
    );
    let out = p.kart(&["fetch", "--connect-timeout", "-1"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}
