//! The object-store remote against a real S3 server (moto) on loopback: push and fetch,
//! a tampered object, anonymous reads for pull requests, writes that never overwrite,
//! and the configuration errors. Each test starts its own server on its own port.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::harness::{TestProject, lock_digests, logging_nvcc, repo_root, stderr, stdout, text};
use kart::store::Storage;
use kart_testkit::moto::Moto;

/// Every variable an object-store remote reads: removed from each run, so that the
/// machine's own never reach a test, and set again where a test means to.
const CLOUD_VARS: [&str; 22] = [
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
    "AWS_ENDPOINT_URL_S3",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ALLOW_HTTP",
    "AWS_PROFILE",
    "KART_REMOTE",
    "KART_REMOTE_TOKEN",
    "KART_REMOTE_TOKEN_URL",
    "KART_REMOTE_ANONYMOUS",
    "HTTP_PROXY",
];

const GRID: &str = "[params]\nA = [1, 2]\n";
const GRID_BODY: &str = "out[threadIdx.x] = A;";
const BUCKET: &str = "kart-cache";

/// Runs kart in `dir` with the logging nvcc and exactly the object-store variables of
/// `env`.
fn kart(dir: &Path, args: &[&str], env: &[(&str, String)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kart"));
    cmd.args(args)
        .current_dir(dir)
        .env("KART_NVCC", logging_nvcc())
        .env_remove("NVCC_PREPEND_FLAGS")
        .env_remove("NVCC_APPEND_FLAGS")
        .env_remove("NVCC_CCBIN");
    for var in CLOUD_VARS {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// `env` with `KART_REMOTE` set to `url`.
fn with_remote(env: &[(&'static str, String)], url: &str) -> Vec<(&'static str, String)> {
    let mut env = env.to_vec();
    env.push(("KART_REMOTE", url.to_string()));
    env
}

fn ok(out: Output, what: &str) -> Output {
    assert!(out.status.success(), "{what} failed:\n{}", text(&out));
    out
}

/// A small built project (two artifacts).
fn built_project() -> TestProject {
    let p = TestProject::new(&["sm_90"]);
    p.kernel("grid", GRID_BODY, GRID);
    ok(kart(p.root(), &["build"], &[]), "build");
    p
}

/// A fresh project (empty store) with `built`'s kart.toml, kernels and kart.lock.
fn copy_of(built: &TestProject) -> TestProject {
    let p = TestProject::new(&["sm_90"]);
    p.kernel("grid", GRID_BODY, GRID);
    std::fs::copy(built.root().join("kart.toml"), p.root().join("kart.toml")).unwrap();
    std::fs::copy(built.root().join("kart.lock"), p.root().join("kart.lock")).unwrap();
    p
}

fn has_blob(p: &Path, digest: &str) -> bool {
    let dir = p.join("artifacts/v1/blobs").join(&digest[..2]);
    dir.join(digest).is_file() || dir.join(format!("{digest}.zst")).is_file()
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[test]
fn an_init_project_pushes_to_s3_and_a_copy_without_a_store_fetches_and_verifies() {
    let moto = Moto::start(&repo_root(), BUCKET);
    let remote = format!("s3://{BUCKET}/team/kart");
    let env = with_remote(&moto.env(), &remote);
    let tmp = tempfile::Builder::new()
        .prefix("kart-s3-init-")
        .tempdir()
        .unwrap();
    ok(kart(tmp.path(), &["init", "p"], &[]), "init");
    let dir = tmp.path().join("p");
    ok(kart(&dir, &["build"], &[]), "build");
    let out = ok(kart(&dir, &["push"], &env), "push");
    let artifacts = lock_artifacts(&dir);
    assert!(
        stderr(&out).contains(&format!("{artifacts} blobs uploaded")),
        "{}",
        text(&out)
    );
    // Everything is there: a second push uploads nothing.
    let out = ok(kart(&dir, &["push"], &env), "second push");
    assert!(stderr(&out).contains("0 blobs uploaded"), "{}", text(&out));

    let copy = tmp.path().join("copy");
    std::fs::create_dir_all(&copy).unwrap();
    std::fs::copy(dir.join("kart.toml"), copy.join("kart.toml")).unwrap();
    std::fs::copy(dir.join("kart.lock"), copy.join("kart.lock")).unwrap();
    copy_tree(&dir.join("kernels"), &copy.join("kernels"));
    let out = ok(kart(&copy, &["fetch"], &env), "fetch");
    assert!(
        stderr(&out).contains(&format!("{artifacts} downloaded and verified")),
        "{}",
        text(&out)
    );
    let out = ok(kart(&copy, &["verify"], &[]), "verify");
    let all = format!("{}{}", stdout(&out), stderr(&out));
    assert!(all.contains(" 0 locked blobs not in the store"), "{all}");
    // The layout is the HTTP remote's: {prefix}/cas/{sha256}, {prefix}/ac/{key}.
    let puts: Vec<String> = moto
        .requests()
        .into_iter()
        .filter(|l| l.contains("\"PUT /"))
        .collect();
    assert!(
        puts.iter()
            .any(|l| l.contains(&format!("/{BUCKET}/team/kart/cas/"))),
        "{puts:?}"
    );
    assert!(
        puts.iter()
            .any(|l| l.contains(&format!("/{BUCKET}/team/kart/ac/"))),
        "{puts:?}"
    );
}

fn lock_artifacts(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("kart.lock"))
        .unwrap()
        .matches("[[artifact]]")
        .count()
}

#[test]
fn a_tampered_object_in_the_bucket_is_refused_by_fetch_and_nothing_is_stored() {
    let moto = Moto::start(&repo_root(), BUCKET);
    let env = with_remote(&moto.env(), &format!("s3://{BUCKET}/kart"));
    let built = built_project();
    ok(kart(built.root(), &["push"], &env), "push");
    let digests = lock_digests(&built);
    assert_eq!(digests.len(), 2);
    // Behind kart's back, straight through the server's API.
    moto.put_object(&format!("kart/cas/{}", digests[0]), b"not the cubin")
        .unwrap();

    let fresh = copy_of(&built);
    let out = kart(fresh.root(), &["fetch"], &env);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("blob {}", digests[0])) && err.contains(BUCKET),
        "{err}"
    );
    assert!(
        !has_blob(fresh.root(), &digests[0]),
        "a tampered blob was stored"
    );
    assert!(has_blob(fresh.root(), &digests[1]), "{}", text(&out));
}

#[test]
fn anonymous_reads_are_unsigned_and_anonymous_writes_are_refused_before_any_request() {
    let moto = Moto::start(&repo_root(), BUCKET);
    let remote = format!("s3://{BUCKET}/kart");
    let built = built_project();
    ok(
        kart(built.root(), &["push"], &with_remote(&moto.env(), &remote)),
        "push",
    );
    // A pull request's job: the endpoint, no credentials at all.
    let anonymous = vec![
        ("AWS_ENDPOINT_URL", moto.endpoint()),
        ("AWS_REGION", kart_testkit::moto::REGION.to_string()),
        ("KART_REMOTE_ANONYMOUS", "1".to_string()),
        ("KART_REMOTE", remote.clone()),
    ];
    let fresh = copy_of(&built);
    // moto refuses unsigned reads of a bucket whose policy does not allow them (it
    // takes any signed request): this refusal shows the requests went unsigned.
    let t = Instant::now();
    let out = kart(fresh.root(), &["fetch"], &anonymous);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("403") && stderr(&out).contains("unsigned"),
        "{}",
        text(&out)
    );
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "a refusal is not retried"
    );
    assert!(fresh.blobs().is_empty());

    // A public cache: anyone may read.
    moto.allow_public_reads().unwrap();
    ok(
        kart(fresh.root(), &["fetch"], &anonymous),
        "anonymous fetch",
    );
    let out = ok(kart(fresh.root(), &["verify"], &[]), "verify");
    let all = format!("{}{}", stdout(&out), stderr(&out));
    assert!(all.contains(" 0 locked blobs not in the store"), "{all}");

    // Writes are refused before any request, from the variable or from kart.toml.
    let puts = |m: &Moto| {
        m.requests()
            .iter()
            .filter(|l| l.contains("\"PUT /"))
            .count()
    };
    let before = puts(&moto);
    let out = kart(built.root(), &["push"], &anonymous);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(stderr(&out).contains("read anonymously"), "{}", text(&out));
    assert!(
        stderr(&out).contains("KART_REMOTE_ANONYMOUS"),
        "{}",
        text(&out)
    );
    let toml = built.read("kart.toml");
    built.write(
        "kart.toml",
        &format!("{toml}\n[remote]\nurl = \"{remote}\"\nanonymous = true\n"),
    );
    let mut signed = moto.env();
    signed.push(("KART_REMOTE", remote.clone()));
    let out = kart(built.root(), &["push"], &signed);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(stderr(&out).contains("read anonymously"), "{}", text(&out));
    // KART_REMOTE_ANONYMOUS=0 turns kart.toml's off: signed again, and all is there.
    signed.push(("KART_REMOTE_ANONYMOUS", "0".to_string()));
    let out = ok(kart(built.root(), &["push"], &signed), "signed push");
    assert!(stderr(&out).contains("0 blobs uploaded"), "{}", text(&out));
    assert_eq!(puts(&moto), before, "an anonymous push sent a PUT");
}

#[test]
fn writes_never_overwrite_an_existing_object() {
    let moto = Moto::start(&repo_root(), BUCKET);
    let built = built_project();
    let key = built
        .read("kart.lock")
        .lines()
        .find_map(|l| l.strip_prefix("key = \""))
        .map(|k| k.trim_end_matches('"').to_string())
        .unwrap();
    let store = kart::store::Store::open(
        &built.root().join("artifacts"),
        kart::store::LockMode::Shared,
        Duration::from_secs(10),
    )
    .unwrap();
    let original = Storage::get_entry(&store, &key).unwrap().unwrap();
    let vars = moto.env();
    let env = move |name: &str| {
        vars.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.clone())
    };
    let settings = kart::remote::RemoteSettings::new(format!("s3://{BUCKET}/kart"));
    let remote = kart::remote::Remote::open_with_env(&settings, None, &env).unwrap();

    remote.put_entry(&original).unwrap();
    // The same key with other contents: accepted as already there, and left as it was.
    let mut other = original.clone();
    other.stderr = "a different entry under the same key".into();
    other.compile_ms = Some(original.compile_ms.unwrap_or(0) + 12345);
    remote.put_entry(&other).unwrap();
    let kept = remote.get_entry(&key).unwrap().unwrap();
    assert_eq!(kept.stderr, original.stderr);
    assert_eq!(kept.compile_ms, original.compile_ms);

    // A blob: a second put of the same bytes is done at once, and a put never replaces
    // what the bucket holds (a damaged object is removed by hand, then pushed again).
    let digest = original.digest.clone();
    let bytes = Storage::get_blob(&store, &digest, None).unwrap().unwrap();
    remote.put_blob(&digest, &bytes).unwrap();
    remote.put_blob(&digest, &bytes).unwrap();
    moto.put_object(&format!("kart/cas/{digest}"), b"damaged")
        .unwrap();
    remote.put_blob(&digest, &bytes).unwrap();
    let err = remote.get_blob(&digest, None).unwrap_err();
    assert!(err.to_string().contains("hashing to"), "{err}");
    // Conditional writes: every PUT after the first of each name was answered 412.
    let refused = moto
        .requests()
        .iter()
        .filter(|l| l.contains("\"PUT /") && l.contains("\" 412 "))
        .count();
    assert_eq!(refused, 3, "{:?}", moto.requests());
}

#[test]
fn a_plain_http_endpoint_off_this_machine_is_a_usage_error() {
    let p = TestProject::new(&["sm_90"]);
    p.kernel("grid", GRID_BODY, GRID);
    let far = vec![
        ("AWS_ACCESS_KEY_ID", "AKIDKART".to_string()),
        ("AWS_SECRET_ACCESS_KEY", "kart-very-secret".to_string()),
        ("AWS_SESSION_TOKEN", "kart-session-secret".to_string()),
        ("AWS_ENDPOINT_URL", "http://cache.example:9000".to_string()),
        ("KART_REMOTE", format!("s3://{BUCKET}/kart")),
    ];
    for command in ["fetch", "push"] {
        let out = kart(p.root(), &[command], &far);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        let err = stderr(&out);
        assert!(
            err.contains("plain http") && err.contains("AWS_ALLOW_HTTP=true"),
            "{err}"
        );
        assert!(
            !err.contains("very-secret") && !err.contains("session-secret"),
            "{err}"
        );
    }
    // kart.toml's endpoint is checked the same way, and named.
    let toml = p.read("kart.toml");
    p.write(
        "kart.toml",
        &format!(
            "{toml}\n[remote]\nurl = \"s3://{BUCKET}/kart\"\nendpoint = \"http://10.11.12.13:9000\"\nregion = \"eu-west-1\"\n"
        ),
    );
    let out = kart(p.root(), &["fetch"], &far[..3]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(stderr(&out).contains("[remote] endpoint"), "{}", text(&out));
}

#[test]
fn remote_keys_are_checked_and_unknown_ones_refused() {
    let p = TestProject::new(&["sm_90"]);
    p.kernel("grid", GRID_BODY, GRID);
    let toml = p.read("kart.toml");
    for (section, want) in [
        ("url = \"s3://b/p\"\nendpont = \"https://x\"\n", "endpont"),
        (
            "url = \"http://127.0.0.1:9/kart\"\nregion = \"eu-west-1\"\n",
            "`region` is a setting of s3:// remotes",
        ),
        (
            "url = \"s3://b/p\"\nendpoint = \"not a url\"\n",
            "is not an http(s) URL",
        ),
        (
            "url = \"file:///srv/kart-cache\"\nanonymous = true\n",
            "`anonymous = true` is a setting of object-store remotes",
        ),
    ] {
        p.write("kart.toml", &format!("{toml}\n[remote]\n{section}"));
        let out = kart(p.root(), &["ls"], &[]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(stderr(&out).contains(want), "{want}: {}", text(&out));
    }
    p.write("kart.toml", &toml);
    let out = kart(
        p.root(),
        &["fetch"],
        &[
            ("KART_REMOTE", "s3://b/p".to_string()),
            ("KART_REMOTE_ANONYMOUS", "maybe".to_string()),
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        stderr(&out).contains("KART_REMOTE_ANONYMOUS"),
        "{}",
        text(&out)
    );
}
