//! A Remote Execution API server as the remote cache (`grpc://`), against a real
//! BuildGrid on loopback (each test its own server, port and folders): push and fetch,
//! a trusted server standing in for every compile, blobs over the batch limit through
//! ByteStream, a dead server, and action results that disagree with their entries.

use std::time::{Duration, Instant};

use crate::harness::{TestProject, lock_digests, repo_root, skip, stderr, text};
use kart::remote::grpc::{Digest, GrpcClient, proto};
use kart::remote::reapi::{ARTIFACT_OUTPUT, action_of};
use kart::remote::{Remote, RemoteSettings};
use kart::store::Storage;
use kart_testkit::buildgrid::{self, BuildGrid, INSTANCE};

const GRID: &str = "[params]\nA = [1, 2, 3]\nB = [16, 32]\n";
const GRID_BODY: &str = "out[threadIdx.x] = A * 1000 + B;";

/// A BuildGrid of the test's own, or `None` (the test is recorded as skipped) where
/// `scripts/test` has not installed it.
fn server(test: &str) -> Option<BuildGrid> {
    if buildgrid::binary(&repo_root()).is_none() {
        skip(
            test,
            "BuildGrid is not installed (scripts/install-buildgrid installs it)",
        );
        return None;
    }
    Some(BuildGrid::start_cache(&repo_root()))
}

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

/// The keys kart.lock names, in its order.
fn lock_keys(p: &TestProject) -> Vec<String> {
    p.read("kart.lock")
        .lines()
        .filter_map(|l| l.strip_prefix("key = \""))
        .map(|d| d.trim_end_matches('"').to_string())
        .collect()
}

fn client(url: &str) -> GrpcClient {
    GrpcClient::open(&RemoteSettings::new(url), None).unwrap()
}

#[test]
fn push_then_fetch_through_a_reapi_server_gives_identical_blobs() {
    let Some(server) = server("push_then_fetch_through_a_reapi_server_gives_identical_blobs")
    else {
        return;
    };
    let url = server.url(INSTANCE);
    let built = project(&url, true);
    built.ok(&["build"]);
    let out = built.ok(&["push"]);
    assert!(
        stderr(&out).contains("12 blobs uploaded")
            && stderr(&out).contains("12 action entries uploaded"),
        "{}",
        text(&out)
    );
    let out = built.ok(&["push"]);
    assert!(
        stderr(&out).contains("0 blobs uploaded")
            && stderr(&out).contains("0 action entries uploaded"),
        "{}",
        text(&out)
    );

    let fresh = project(&url, true);
    std::fs::copy(
        built.root().join("kart.lock"),
        fresh.root().join("kart.lock"),
    )
    .unwrap();
    let out = fresh.ok(&["fetch"]);
    assert!(
        stderr(&out).contains("12 downloaded and verified"),
        "{}",
        text(&out)
    );
    assert_eq!(fresh.blobs(), built.blobs());
    fresh.ok(&["verify"]);

    // The other instance of the same server holds nothing of it.
    let other = project(&server.url(""), true);
    std::fs::copy(
        built.root().join("kart.lock"),
        other.root().join("kart.lock"),
    )
    .unwrap();
    let out = other.kart(&["fetch"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("the remote lacks 12 blobs"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_trusted_reapi_server_stands_in_for_every_compile() {
    let Some(server) = server("a_trusted_reapi_server_stands_in_for_every_compile") else {
        return;
    };
    // The server's default instance: no instance name in the URL.
    let url = server.url("");
    let built = project(&url, true);
    built.ok(&["build", "--push"]);
    assert_eq!(built.compiles(), 12);

    let clone = project(&url, true);
    let out = clone.ok(&["build"]);
    assert_eq!(clone.compiles(), 0, "{}", text(&out));
    assert!(
        stderr(&out).contains(
            "12 artifacts: 0 compiled, 0 from the store, 12 from the remote (12 blobs downloaded)"
        ),
        "{}",
        text(&out)
    );
    assert_eq!(clone.read("kart.lock"), built.read("kart.lock"));
    clone.ok(&["verify"]);
    // Entries only: the lock, no blob.
    let lock_only = project(&url, true);
    lock_only.ok(&["build", "--entries-only"]);
    assert_eq!(lock_only.compiles(), 0);
    assert_eq!(lock_only.read("kart.lock"), built.read("kart.lock"));
    assert!(lock_only.blobs().is_empty());
    // `--locked` checks the lock's digests against the server's entries.
    let out = lock_only.ok(&["build", "--locked"]);
    assert!(
        !stderr(&out).contains("unchecked"),
        "every digest is checked against the server's entries: {}",
        text(&out)
    );
}

#[test]
fn blobs_over_the_batch_limit_round_trip_through_bytestream() {
    let Some(server) = server("blobs_over_the_batch_limit_round_trip_through_bytestream") else {
        return;
    };
    let c = client(&server.url(INSTANCE));
    let caps = c.capabilities().unwrap();
    assert_eq!(caps.max_batch_bytes, buildgrid::MAX_BATCH_BYTES as u64);
    assert!(caps.action_cache_update);
    // 5 MiB and a bit, not a multiple of the chunk size, with content that shows a
    // misplaced chunk.
    let big: Vec<u8> = (0..(5 << 20) + 12_345u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let small = b"a small blob".to_vec();
    let empty: Vec<u8> = Vec::new();
    let [big_d, small_d, empty_d]: [Digest; 3] = c
        .write_blobs(&[&big, &small, &empty])
        .unwrap()
        .try_into()
        .unwrap();
    assert!(big_d.size > caps.max_batch_bytes);
    let absent_big = Digest::of(&vec![1u8; 6 << 20]);
    let absent_small = Digest::of(b"never written");
    let missing = c
        .find_missing(&[
            big_d.clone(),
            small_d.clone(),
            absent_big.clone(),
            absent_small.clone(),
        ])
        .unwrap();
    assert_eq!(missing, vec![absent_big.clone(), absent_small.clone()]);
    let read = c
        .read_blobs(&[
            small_d.clone(),
            big_d.clone(),
            absent_big,
            absent_small,
            empty_d,
        ])
        .unwrap();
    assert_eq!(
        read,
        vec![
            Some(small.clone()),
            Some(big.clone()),
            None,
            None,
            Some(Vec::new())
        ]
    );

    // A cache-only server refuses execution at once, saying so.
    let t = Instant::now();
    let err = c
        .execute(
            &small_d,
            &kart::remote::grpc::ExecuteOptions {
                skip_cache_lookup: false,
                timeout: Duration::from_secs(30),
            },
        )
        .unwrap_err();
    assert!(err.to_string().contains("Execute"), "{err}");
    assert!(t.elapsed() < Duration::from_secs(10), "{err}");

    // The same through the remote cache: a blob over the limit up and down again, each
    // checked; a question without a size is a miss.
    let remote = Remote::open(&RemoteSettings::new(server.url("")), None).unwrap();
    let bigger: Vec<u8> = big.iter().rev().copied().collect();
    let d = kart::digest::sha256_hex(&bigger);
    assert!(!remote.has_blob(&d, Some(bigger.len() as u64)).unwrap());
    Storage::put_blob(&remote, &d, &bigger).unwrap();
    assert!(remote.has_blob(&d, Some(bigger.len() as u64)).unwrap());
    assert_eq!(
        remote.get_blob(&d, Some(bigger.len() as u64)).unwrap(),
        Some(bigger.clone())
    );
    assert!(!remote.has_blob(&d, None).unwrap());
    assert_eq!(remote.get_blob(&d, None).unwrap(), None);
    // Bytes that are not the blob named are refused before anything is sent.
    assert!(Storage::put_blob(&remote, &d, &big).is_err());
    // A size that is not the blob's: the server has no such blob.
    assert_eq!(
        remote.get_blob(&d, Some(bigger.len() as u64 - 1)).unwrap(),
        None
    );
}

#[test]
fn a_dead_reapi_server_ends_in_a_local_build_with_one_warning() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("grpc://127.0.0.1:{port}/{INSTANCE}");
    let local = project("grpc://127.0.0.1:9", true);
    let t = Instant::now();
    local.ok(&["build", "--no-remote"]);
    let local_time = t.elapsed();

    let p = project(&url, true);
    let t = Instant::now();
    let out = p.ok(&["build"]);
    let took = t.elapsed();
    assert_eq!(p.compiles(), 12, "{}", text(&out));
    let err = stderr(&out);
    assert_eq!(
        err.matches("warning:").count(),
        1,
        "one warning: {}",
        text(&out)
    );
    assert!(
        err.contains("compiling locally") && err.contains(&url),
        "{}",
        text(&out)
    );
    assert!(
        took < local_time + Duration::from_secs(10),
        "a dead server cost {took:?} against {local_time:?} for a local build: {err}"
    );
    assert_eq!(p.read("kart.lock"), local.read("kart.lock"));

    std::fs::remove_dir_all(p.root().join("artifacts")).unwrap();
    let t = Instant::now();
    let out = p.kart(&["fetch"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("failed 6 times")
            && stderr(&out).contains("12 blobs of kart.lock were not fetched"),
        "{}",
        text(&out)
    );
    assert!(t.elapsed() < Duration::from_secs(15), "{}", text(&out));
    assert!(p.blobs().is_empty());
}

#[test]
fn an_action_result_disagreeing_with_its_entry_is_refused_and_never_overwritten() {
    let Some(server) =
        server("an_action_result_disagreeing_with_its_entry_is_refused_and_never_overwritten")
    else {
        return;
    };
    let url = server.url(INSTANCE);
    let built = project(&url, true);
    built.ok(&["build", "--push"]);
    let keys = lock_keys(&built);
    let digests = lock_digests(&built);

    // Plant: the first key's record names the second artifact's blob (in the CAS,
    // and a valid cubin), keeping its own entry.
    let c = client(&url);
    let ((action, _), _) = action_of(&keys[0]);
    let mut result = c.get_action_result(&action, &[]).unwrap().unwrap();
    let artifact = result
        .output_files
        .iter_mut()
        .find(|f| f.path == ARTIFACT_OUTPUT)
        .unwrap();
    assert_eq!(artifact.digest.as_ref().unwrap().hash, digests[0]);
    let other = built
        .read("kart.lock")
        .split("[[artifact]]")
        .filter(|a| a.contains(&digests[1]))
        .flat_map(|a| a.lines())
        .find_map(|l| l.strip_prefix("size = "))
        .unwrap()
        .parse::<i64>()
        .unwrap();
    artifact.digest = Some(proto::Digest {
        hash: digests[1].clone(),
        size_bytes: other,
    });
    let planted = result.clone();
    c.update_action_result(&action, &planted).unwrap();

    // Read directly: refused, naming both digests.
    let remote = Remote::open(&RemoteSettings::new(&url), None).unwrap();
    let err = remote.get_entry(&keys[0]).unwrap_err();
    assert!(
        err.to_string().contains(&digests[1])
            && err.to_string().contains(&digests[0])
            && err.to_string().contains("but its entry names"),
        "{err}"
    );
    assert!(remote.get_entry(&keys[1]).unwrap().is_some());

    // A trusted clone compiles that one artifact itself, with a warning, and gets the
    // same lock.
    let clone = project(&url, true);
    let out = clone.ok(&["build"]);
    assert_eq!(clone.compiles(), 1, "{}", text(&out));
    assert!(
        stderr(&out).contains("but its entry names"),
        "{}",
        text(&out)
    );
    assert_eq!(clone.read("kart.lock"), built.read("kart.lock"));

    // Writes never replace a record: neither a push nor a direct write.
    let out = built.ok(&["push"]);
    assert!(
        stderr(&out).contains("0 action entries uploaded"),
        "{}",
        text(&out)
    );
    let entry = built_entry(&built, &keys[0]);
    Storage::put_entry(&remote, &entry).unwrap();
    assert_eq!(c.get_action_result(&action, &[]).unwrap(), Some(planted));
}

/// The action entry of `key` in `p`'s store.
fn built_entry(p: &TestProject, key: &str) -> kart::store::ActionEntry {
    let path = p
        .root()
        .join("artifacts/v1/actions")
        .join(&key[..2])
        .join(format!("{key}.json"));
    kart::store::ActionEntry::parse(&std::fs::read(path).unwrap(), key)
        .unwrap()
        .unwrap()
}

#[test]
fn doctor_says_whether_the_remote_answers_and_whether_the_executor_executes() {
    let Some(server) =
        server("doctor_says_whether_the_remote_answers_and_whether_the_executor_executes")
    else {
        return;
    };
    let url = server.url(INSTANCE);
    let p = project(&url, false);
    let toml = p.read("kart.toml");
    p.write(
        "kart.toml",
        &format!("{toml}\n[executor]\nurl = \"{url}\"\n"),
    );
    let out = p.kart(&["doctor"]);
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(0), "{shown}");
    assert!(
        shown.contains(&format!("remote cache: {url} answers")),
        "{shown}"
    );
    // A cache-only BuildGrid stores blobs but offers no execution.
    assert!(
        shown.contains(&format!(
            "executor: {url}: the server stores blobs but does not execute"
        )),
        "{shown}"
    );
    assert!(shown.contains("next: the executor cannot run"), "{shown}");
    let out = p.kart(&["doctor", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report["remote"]["answer"]["Ok"].is_u64(), "{report}");
    assert!(report["executor"]["answer"]["Err"].is_string(), "{report}");

    // Nothing listens on port 9: the probe says so within its budget, and doctor still
    // reports the rest.
    p.write(
        "kart.toml",
        &format!("{toml}\n[remote]\nurl = \"http://127.0.0.1:9/cache\"\n")
            .replace(&format!("[remote]\nurl = \"{url}\"\ntrusted = false\n"), ""),
    );
    let start = Instant::now();
    let out = p.kart(&["doctor"]);
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(0), "{shown}");
    assert!(start.elapsed() < Duration::from_secs(30), "{shown}");
    assert!(
        shown.contains("remote cache: http://127.0.0.1:9/cache: "),
        "{shown}"
    );
    assert!(
        shown.contains("next: the remote cache did not answer"),
        "{shown}"
    );
    assert!(shown.contains("kart.lock:"), "{shown}");
}
