//! Every input bounded in place, size and time: no symlink leads kart's writes out of
//! the project, no file kart reads can block it or fill its memory, no text it prints
//! can drive the terminal, and `gc` deletes only what no project it knows needs.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::harness::{TestProject, stderr, text};

/// Every file and folder under `dir`, relative to it.
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let path = e.path();
            out.push(path.strip_prefix(dir).unwrap().display().to_string());
            if e.file_type().unwrap().is_dir() {
                stack.push(path);
            }
        }
    }
    out.sort();
    out
}

/// A project made by `kart init` in a temp folder.
fn init_project() -> TestProject {
    let p = TestProject::new(&["sm_90"]);
    std::fs::remove_file(p.root().join("kart.toml")).unwrap();
    p.ok(&["init", "."]);
    p
}

#[test]
fn a_store_behind_a_symlink_to_a_folder_outside_is_refused_before_it_exists() {
    let p = init_project();
    let outside = tempfile::Builder::new()
        .prefix("kart-outside-")
        .tempdir()
        .unwrap();
    std::os::unix::fs::symlink(outside.path(), p.root().join("link")).unwrap();
    let toml = p.read("kart.toml");
    p.write(
        "kart.toml",
        &toml.replace("store = \"artifacts\"", "store = \"link/newstore\""),
    );
    for args in [&["build", "smoke"][..], &["fetch"], &["gc"]] {
        let out = p.kart(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        let err = stderr(&out);
        assert!(
            err.contains("kart.toml:") && err.contains("`link/newstore` is outside the project"),
            "{args:?}: {}",
            text(&out)
        );
        assert!(err.contains("store_outside_project"), "{}", text(&out));
        assert_eq!(tree(outside.path()), Vec::<String>::new(), "{args:?}");
    }
    // The default store folder as a committed link to elsewhere is refused too.
    let without: Vec<&str> = toml.lines().filter(|l| !l.starts_with("store =")).collect();
    p.write("kart.toml", &without.join("\n"));
    std::fs::remove_dir_all(p.root().join("artifacts")).ok();
    std::os::unix::fs::symlink(outside.path(), p.root().join("artifacts")).unwrap();
    let out = p.kart(&["build", "smoke"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(stderr(&out).contains("through a symlink"), "{}", text(&out));
    assert_eq!(tree(outside.path()), Vec::<String>::new());
}

#[test]
fn kart_init_neither_reads_nor_writes_through_symlinks() {
    let outside = tempfile::Builder::new()
        .prefix("kart-outside-")
        .tempdir()
        .unwrap();
    let secret = outside.path().join("secret");
    std::fs::write(&secret, "token=hunter2\n").unwrap();
    std::fs::create_dir(outside.path().join("gh")).unwrap();
    let tmp = tempfile::Builder::new()
        .prefix("kart-init-")
        .tempdir()
        .unwrap();
    let dir = tmp.path().join("p");
    std::fs::create_dir(&dir).unwrap();
    std::os::unix::fs::symlink(&secret, dir.join(".gitignore")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("gh"), dir.join(".github")).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kart"))
        .args(["init", "p"])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = stderr(&out);
    assert!(
        err.contains("neither reads nor writes through symlinks")
            && err.contains("`.gitignore`")
            && err.contains("`.github`")
            && err.contains("nothing was written")
            && err.contains("replace each link"),
        "{}",
        text(&out)
    );
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "token=hunter2\n");
    assert_eq!(tree(&outside.path().join("gh")), Vec::<String>::new());
    assert_eq!(tree(&dir), [".github", ".gitignore"]);
}

/// Runs kart in the project, killing it if it runs past `limit`: returns its output and
/// how long it ran.
fn kart_within(
    p: &TestProject,
    args: &[&str],
    limit: Duration,
) -> (std::process::Output, Duration) {
    let start = Instant::now();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_kart"))
        .args(args)
        .current_dir(p.root())
        .env("KART_NVCC", crate::harness::logging_nvcc())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            child.kill().unwrap();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (out, start.elapsed())
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo(3) on a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "{path:?}");
}

#[test]
fn a_lock_that_is_a_fifo_a_device_or_huge_is_refused_at_once() {
    let p = TestProject::new(&["sm_90"]);
    p.kernel("k", "out[0] = 1;", "");
    let lock = p.root().join("kart.lock");
    mkfifo(&lock);
    let (out, took) = kart_within(&p, &["ls"], Duration::from_secs(5));
    eprintln!("kart.lock as a FIFO: {} ms", took.as_millis());
    assert_eq!(out.status.code(), Some(2), "{took:?} {}", text(&out));
    let err = stderr(&out);
    assert!(
        err.contains("kart.lock`: it is a FIFO, not a regular file")
            && err.contains("256 MiB")
            && err.contains("replace it with the file itself"),
        "{}",
        text(&out)
    );
    std::fs::remove_file(&lock).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &lock).unwrap();
    let (out, took) = kart_within(&p, &["ls"], Duration::from_secs(5));
    eprintln!("kart.lock as a link to /dev/zero: {} ms", took.as_millis());
    assert_eq!(out.status.code(), Some(2), "{took:?} {}", text(&out));
    assert!(
        stderr(&out).contains("a character device, not a regular file")
            && stderr(&out).contains("at most 256 MiB"),
        "{}",
        text(&out)
    );
    // A regular file over the limit: refused by its size, before a byte is read.
    std::fs::remove_file(&lock).unwrap();
    std::fs::File::create(&lock)
        .unwrap()
        .set_len(300 << 20)
        .unwrap();
    let (out, took) = kart_within(&p, &["ls"], Duration::from_secs(5));
    eprintln!("a 300 MiB kart.lock: {} ms", took.as_millis());
    assert_eq!(out.status.code(), Some(2), "{took:?} {}", text(&out));
    assert!(
        stderr(&out).contains(
            "it is 300 MiB; kart reads kart.lock only from a regular file of at most 256 MiB"
        ),
        "{}",
        text(&out)
    );
    // kart.attest as a FIFO: the same, with its own limit.
    std::fs::remove_file(&lock).unwrap();
    mkfifo(&p.root().join("kart.attest"));
    let (out, took) = kart_within(&p, &["ls"], Duration::from_secs(5));
    assert_eq!(out.status.code(), Some(2), "{took:?} {}", text(&out));
    assert!(
        stderr(&out).contains("kart.attest`: it is a FIFO, not a regular file; kart reads a sidecar (kart.tune, kart.attest) only from a regular file of at most 64 MiB"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_fifo_in_the_store_or_a_folder_remote_is_refused_not_waited_on() {
    let p = TestProject::new(&["sm_90"]);
    p.kernel("k", "out[0] = 1;", "");
    p.ok(&["build"]);
    let digest = crate::harness::lock_digests(&p)[0].clone();
    let blob = p
        .root()
        .join("artifacts/v1/blobs")
        .join(&digest[..2])
        .join(&digest);
    assert!(blob.is_file(), "{blob:?}");
    // A folder remote holding the good blob, then a FIFO under its name.
    let remote = tempfile::Builder::new()
        .prefix("kart-remote-")
        .tempdir()
        .unwrap();
    std::fs::create_dir_all(remote.path().join("cas")).unwrap();
    std::fs::create_dir_all(remote.path().join("ac")).unwrap();
    mkfifo(&remote.path().join("cas").join(&digest));
    std::fs::remove_file(&blob).unwrap();
    mkfifo(&blob);
    let (out, took) = kart_within(&p, &["verify"], Duration::from_secs(10));
    eprintln!("a FIFO in the store, verify: {} ms", took.as_millis());
    assert_eq!(out.status.code(), Some(1), "{took:?} {}", text(&out));
    assert!(
        crate::harness::text(&out).contains(&digest[..12]),
        "{}",
        text(&out)
    );
    // Quarantined: the blob's name is free again, and fetch goes to the remote.
    assert!(blob.symlink_metadata().is_err(), "{blob:?}");
    let url = format!("file://{}", remote.path().display());
    let (out, took) = kart_within(&p, &["fetch", "--remote", &url], Duration::from_secs(10));
    eprintln!("a FIFO in a folder remote, fetch: {} ms", took.as_millis());
    assert_eq!(out.status.code(), Some(1), "{took:?} {}", text(&out));
    assert!(
        stderr(&out).contains("a FIFO, not a regular file"),
        "{}",
        text(&out)
    );
    assert!(blob.symlink_metadata().is_err(), "nothing stored: {blob:?}");
}

#[test]
fn explain_shows_no_escape_code_or_bidi_control_of_a_forged_entry() {
    let p = TestProject::new(&["sm_90"]);
    p.kernel("k", "out[0] = 1;", "");
    p.ok(&["build"]);
    let lock = p.read("kart.lock");
    let key = lock
        .lines()
        .find_map(|l| l.strip_prefix("key = \""))
        .unwrap()
        .trim_end_matches('"')
        .to_string();
    let entry = p
        .root()
        .join("artifacts/v1/actions")
        .join(&key[..2])
        .join(format!("{key}.json"));
    // An entry as a remote could send it: its key's inputs hold a terminal title
    // sequence, a screen clear and a right-to-left override.
    let mut value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&entry).unwrap()).unwrap();
    let preimage = value["preimage"].as_array_mut().unwrap();
    preimage[0][1] = "\u{1b}]0;pwned\u{7}\u{1b}[2J evil\u{202e}txt.exe".into();
    preimage.push(serde_json::json!(["file \u{2066}hidden\u{2069}", "x"]));
    std::fs::write(&entry, serde_json::to_vec(&value).unwrap()).unwrap();
    // An edited source: explain compares the new key's inputs with the old entry's.
    p.kernel("k", "out[0] = 2;", "");
    let out = p.ok(&["explain", "k"]);
    let all = text(&out);
    assert!(
        !all.contains('\u{1b}') && !all.contains('\u{202e}') && !all.contains('\u{2066}'),
        "{all:?}"
    );
    assert!(all.contains("differs from kart.lock"), "{all}");
    // The forged entry was refused whole: none of its inputs is shown.
    assert!(all.contains("not in this store"), "{all}");
    assert!(!all.contains("pwned") && !all.contains("hidden"), "{all}");
}

/// Every blob file of the store at `store`.
fn blob_files(store: &Path) -> Vec<String> {
    let base = store.join("v1/blobs");
    let mut out: Vec<String> = tree(&base)
        .into_iter()
        .filter(|p| base.join(p).is_file())
        .collect();
    out.sort();
    out
}

#[test]
fn gc_refuses_a_lock_that_keeps_nothing_or_is_another_projects() {
    let p = TestProject::new(&["sm_90"]);
    p.kernel("k", "out[0] = 1;", "");
    p.ok(&["build"]);
    let store = p.root().join("artifacts");
    let before = blob_files(&store);
    assert_eq!(before.len(), 1);
    let lock = p.read("kart.lock");
    let version = lock.lines().find(|l| l.starts_with("version")).unwrap();
    p.write("kart.lock", &format!("{version}\n"));
    for args in [&["gc", "--dry-run"][..], &["gc"]] {
        let out = p.kart(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(
            stderr(&out).contains("names no artifact")
                && stderr(&out).contains("--all-unreferenced"),
            "{}",
            text(&out)
        );
        assert_eq!(blob_files(&store), before, "{args:?}");
    }
    // Another project's lock: it names none of this project's kernels.
    p.write(
        "kart.lock",
        &lock.replace("kernel = \"k\"", "kernel = \"other\""),
    );
    let out = p.kart(&["gc"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        stderr(&out).contains("names none of this project's kernels (it names other)"),
        "{}",
        text(&out)
    );
    assert_eq!(blob_files(&store), before);
    // Said in so many words, it empties the store.
    p.write("kart.lock", &format!("{version}\n"));
    let out = p.ok(&["gc", "--all-unreferenced"]);
    assert!(
        crate::harness::stdout(&out).contains("removed 1 blobs"),
        "{}",
        text(&out)
    );
    assert!(blob_files(&store).is_empty());
}

#[test]
fn gc_in_one_project_keeps_the_blobs_of_another_sharing_the_store() {
    let shared = tempfile::Builder::new()
        .prefix("kart-shared-store-")
        .tempdir()
        .unwrap();
    let store = shared.path().join("store");
    let project = |kernel: &str| {
        let p = TestProject::new(&["sm_90"]);
        let toml = p.read("kart.toml");
        p.write(
            "kart.toml",
            &toml.replace(
                "[project]\n",
                &format!(
                    "[project]\nstore = \"{}\"\nstore_outside_project = true\n",
                    store.display()
                ),
            ),
        );
        p.kernel(kernel, "out[0] = 1;", "");
        p.ok(&["build"]);
        p
    };
    let a = project("ka");
    let b = project("kb");
    assert_eq!(blob_files(&store).len(), 2);
    let out = a.ok(&["gc"]);
    let said = crate::harness::stdout(&out);
    assert!(said.contains("removed 0 blobs"), "{}", text(&out));
    assert!(said.contains("kept the blobs of"), "{}", text(&out));
    assert_eq!(blob_files(&store).len(), 2, "gc in a removed b's blob");
    // b's lock unreadable: gc stops rather than guess.
    let b_lock = b.read("kart.lock");
    b.write("kart.lock", "version = \"x\n");
    let out = a.kart(&["gc"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        stderr(&out).contains("shares this store, and its lock cannot be read"),
        "{}",
        text(&out)
    );
    assert_eq!(blob_files(&store).len(), 2);
    b.write("kart.lock", &b_lock);
    // b gone: its record is dropped, and its blob is no longer kept.
    drop(b);
    let out = a.ok(&["gc"]);
    let said = crate::harness::stdout(&out);
    assert!(
        said.contains("dropped the store's record of") && said.contains("removed 1 blobs"),
        "{}",
        text(&out)
    );
    assert_eq!(blob_files(&store).len(), 1);
}

/// Whether process `pid` is gone (or a zombie nobody reaped yet).
fn gone(pid: &str) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status.is_empty() || status.contains("State:\tZ")
}

#[test]
fn nvcc_and_its_children_die_with_a_killed_kart() {
    let p = TestProject::new(&["sm_90"]);
    // The source mentions MODE, so it is passed as -DMODE=…, which the wrapper watches.
    p.kernel(
        "k",
        "#ifdef MODE\nout[0] = 1;\n#endif",
        "[params]\nMODE = [\"hang\"]\n",
    );
    let pids = p.root().join("pids");
    let mut kart = std::process::Command::new(env!("CARGO_BIN_EXE_kart"))
        .args(["build", "--timeout", "600"])
        .current_dir(p.root())
        .env("KART_NVCC", crate::harness::logging_nvcc())
        .env("KART_TEST_PIDS", &pids)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !std::fs::read_to_string(&pids).is_ok_and(|s| s.ends_with('\n')) {
        assert!(Instant::now() < deadline, "the hanging nvcc never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = std::fs::read_to_string(&pids).unwrap().trim().to_string();
    assert!(!gone(&pid));
    kart.kill().unwrap(); // SIGKILL: no handler of kart's runs.
    kart.wait().unwrap();
    let killed = Instant::now();
    while !gone(&pid) && killed.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    eprintln!(
        "nvcc's grandchild gone {} ms after kill -9 of kart",
        killed.elapsed().as_millis()
    );
    assert!(gone(&pid), "nvcc's grandchild {pid} outlived kart by 5 s");
}
