//! The lock as a trust root: reproducible builds in any folder, digests bound to their
//! keys, hostile locks, entries and remotes refused, secrets and time bounded. Real nvcc,
//! nginx or a small server of the test's own on loopback.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::harness::{TestProject, lock_digests, repo_root, stderr, stdout, text};
use kart_testkit::nginx::Nginx;

const GRID: &str = "[params]\nA = [1, 2]\nB = [16]\n";
const GRID_BODY: &str = "out[threadIdx.x] = A * 1000 + B;";

fn grid_project() -> TestProject {
    let p = TestProject::new(&["sm_90"]);
    p.kernel("grid", GRID_BODY, GRID);
    p
}

/// The lock with the first `from` replaced by `to` (panics if absent: the test would
/// prove nothing).
fn edit_lock(p: &TestProject, from: &str, to: &str) {
    let lock = p.read("kart.lock");
    assert!(lock.contains(from), "`{from}` not in the lock:\n{lock}");
    p.write("kart.lock", &lock.replacen(from, to, 1));
}

/// A template kernel over libcu++, whose cubin holds internal-linkage symbols named
/// after the unit's module id (the names that once made every build differ).
fn libcudacxx_template_project() -> TestProject {
    let p = TestProject::new(&["sm_90"]);
    p.write(
        "kernels/pairs/pairs.cu",
        r#"#include <cuda/std/utility>
template <int BM>
__global__ void pairs(int *x) {
  auto p = cuda::std::make_pair(BM, 1);
  x[threadIdx.x] = p.first + p.second;
}
"#,
    );
    p.write(
        "kernels/pairs/kernel.toml",
        "name = \"pairs\"\nsources = [\"pairs.cu\"]\nentry = [\"pairs<BM>\"]\n[params]\nBM = [64]\n",
    );
    p
}

#[test]
fn a_template_unit_gives_the_same_bytes_in_two_folders() {
    let a = libcudacxx_template_project();
    let b = libcudacxx_template_project();
    a.ok(&["build"]);
    b.ok(&["build"]);
    let blobs = a.blobs();
    assert_eq!(blobs.len(), 1);
    // The case that matters: the cubin names internal symbols after its module id.
    let internal = blobs[0].1.windows(10).any(|w| w == b"_INTERNAL_");
    assert!(internal, "the cubin has no internal-linkage symbol to test");
    assert_eq!(lock_digests(&a), lock_digests(&b));
    assert_eq!(a.read("kart.lock"), b.read("kart.lock"));
    // And again in the same folder, after the store is gone: the same digest.
    std::fs::remove_dir_all(a.root().join("artifacts")).unwrap();
    let out = a.ok(&["verify", "--rebuild", "all"]);
    assert!(
        stdout(&out).contains("rebuilt 1 artifacts") && stdout(&out).contains("0 differ"),
        "{}",
        text(&out)
    );
}

/// Copies `rel` (a file or folder) of the repository into `p`.
fn copy_from_repo(p: &TestProject, rel: &str) {
    let status = std::process::Command::new("cp")
        .arg("-r")
        .arg(repo_root().join(rel))
        .arg(p.root().join(rel).parent().unwrap())
        .status()
        .unwrap();
    assert!(status.success(), "cp {rel}");
}

/// A project holding the repository's `cute_gemm` and its pinned CUTLASS headers.
pub(crate) fn cute_project() -> TestProject {
    let p = TestProject::new(&["sm_90a"]);
    std::fs::create_dir_all(p.root().join("kernels")).unwrap();
    copy_from_repo(&p, "kernels/cute_gemm");
    // The pinned CUTLASS comes from kart's home, where `scripts/setup` installed it.
    let repo_toml = std::fs::read_to_string(repo_root().join("kart.toml")).unwrap();
    let library = &repo_toml[repo_toml.find("[library.cutlass]").unwrap()..];
    let library: String = library
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    let toml = p.read("kart.toml");
    p.write("kart.toml", &format!("{toml}\n{library}"));
    p
}

#[test]
fn a_cute_config_gives_the_same_bytes_in_two_folders() {
    let a = cute_project();
    let b = cute_project();
    let one = [
        "build",
        "cute_gemm",
        "-p",
        "BM=64",
        "-p",
        "BN=64",
        "-p",
        "STAGES=3",
    ];
    a.ok(&one);
    b.ok(&one);
    let (da, db) = (lock_digests(&a), lock_digests(&b));
    assert_eq!(da.len(), 1, "{}", a.read("kart.lock"));
    assert_eq!(da, db, "one key, two digests");
}

#[test]
fn a_build_that_disagrees_with_the_lock_fails_and_leaves_the_lock_alone() {
    let p = grid_project();
    p.ok(&["build"]);
    let digests = lock_digests(&p);
    // A lock whose first digest no build of its key makes (as a committed lock built
    // by an irreproducible compile would be), in a fresh clone: no store.
    let forged = "0".repeat(64);
    edit_lock(&p, &digests[0], &forged);
    let before = p.read("kart.lock");
    std::fs::remove_dir_all(p.root().join("artifacts")).unwrap();
    let out = p.kart(&["build"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = stderr(&out);
    assert!(
        err.contains("disagree with their action entries") && err.contains("grid[A=1,B=16]"),
        "{err}"
    );
    assert_eq!(p.read("kart.lock"), before, "the lock changed");
    // --locked and verify now see the same.
    let out = p.kart(&["build", "--locked"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let out = p.kart(&["verify"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(stdout(&out).contains("digest mismatch"), "{}", text(&out));
}

#[test]
fn a_digest_swapped_between_two_configs_is_reported() {
    let p = grid_project();
    p.ok(&["build"]);
    let d = lock_digests(&p);
    let lock = p.read("kart.lock");
    let swapped = lock
        .replace(&d[0], "SWAP")
        .replace(&d[1], &d[0])
        .replace("SWAP", &d[1]);
    p.write("kart.lock", &swapped);
    let out = p.kart(&["build", "--locked"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("2 artifact(s) of kart.lock disagree"),
        "{}",
        text(&out)
    );
    let out = p.kart(&["verify"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let out = p.kart(&["build"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(p.read("kart.lock"), swapped, "the lock was rewritten");
    // With no store (a fresh clone), --locked cannot check and says how many it took on
    // the lock's word.
    std::fs::remove_dir_all(p.root().join("artifacts")).unwrap();
    let out = p.ok(&["build", "--locked"]);
    assert!(
        stderr(&out).contains("2 digest(s) unchecked"),
        "{}",
        text(&out)
    );
}

#[test]
fn an_entry_changed_after_a_check_is_read_and_compared_again() {
    let p = grid_project();
    p.ok(&["build"]);
    // Entries changed within the last two seconds are read again rather than recorded.
    std::thread::sleep(Duration::from_millis(2100));
    p.ok(&["build", "--locked"]);
    let checked = p.root().join("artifacts/v1/checked");
    assert!(checked.is_file(), "no record of the checked bindings");
    // An entry edited in place to name another digest, after its binding was recorded
    // as checked: --locked reads it again and finds the disagreement.
    let lock = p.read("kart.lock");
    let key = lock
        .lines()
        .find_map(|l| l.strip_prefix("key = \""))
        .map(|k| k.trim_end_matches('"').to_string())
        .unwrap();
    let digest = &lock_digests(&p)[0];
    let entry = p
        .root()
        .join(format!("artifacts/v1/actions/{}/{key}.json", &key[..2]));
    let original = std::fs::read_to_string(&entry).unwrap();
    assert!(original.contains(digest.as_str()));
    std::fs::write(&entry, original.replace(digest.as_str(), &"0".repeat(64))).unwrap();
    let out = p.kart(&["build", "--locked"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("1 artifact(s) of kart.lock disagree"),
        "{}",
        text(&out)
    );
    // Put back, it agrees again; a malformed record file is ignored, not trusted.
    std::fs::write(&entry, &original).unwrap();
    std::thread::sleep(Duration::from_millis(2100));
    p.ok(&["build", "--locked"]);
    std::fs::write(&checked, "kart checked 1\nnot a record\n").unwrap();
    let out = p.ok(&["build", "--locked"]);
    assert!(stderr(&out).contains("up to date"), "{}", text(&out));
}

#[test]
fn a_shell_metacharacter_in_a_lock_value_runs_nothing() {
    let p = grid_project();
    p.ok(&["build"]);
    let marker = p.root().join("PWNED");
    let hostile = format!("A = \"2$(touch {})\"", marker.display());
    edit_lock(&p, "A = 1", &hostile);
    for args in [
        &["ls"][..],
        &["verify", "--rebuild", "all"],
        &["build"],
        &["build", "--locked"],
    ] {
        let out = p.kart(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        let err = stderr(&out);
        assert!(
            err.contains("kart.lock:") && err.contains("neither an integer nor a name"),
            "{args:?}: {err}"
        );
    }
    assert!(!marker.exists(), "the lock's value reached a shell");
}

#[test]
fn a_quote_in_a_kernel_name_or_an_oversized_size_is_refused() {
    let p = grid_project();
    p.ok(&["build"]);
    let good = p.read("kart.lock");
    edit_lock(
        &p,
        "kernel = \"grid\"",
        "kernel = \"grid\\\"\\\"\\\"\\nimport os\"",
    );
    for args in [&["ls"][..], &["export", "--python", "-o", "m.py", "grid"]] {
        let out = p.kart(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(
            stderr(&out).contains("not a C identifier"),
            "{}",
            text(&out)
        );
        // Shown escaped: no raw newline or quote run from the file reaches the terminal.
        assert!(!stderr(&out).contains("\nimport os"), "{}", text(&out));
    }
    assert!(!p.root().join("m.py").exists());
    p.write("kart.lock", &good);
    let size = good
        .lines()
        .find(|l| l.starts_with("size = "))
        .unwrap()
        .to_string();
    edit_lock(&p, &size, "size = 1099511627776");
    let out = p.kart(&["ls"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        stderr(&out).contains("more than kart reads"),
        "{}",
        text(&out)
    );
}

#[test]
fn an_exported_module_holds_data_only_as_literals() {
    // A valid but hostile-looking kernel name, and an output path with what would
    // break a docstring or a string literal.
    let p = TestProject::new(&["sm_90"]);
    p.kernel("eval", "out[0] = 1.0f;", "");
    p.ok(&["build"]);
    let name = "m\\N{x}\"\"\".py";
    p.ok(&["export", "--python", "-o", name, "eval"]);
    let marker = p.root().join("RAN");
    let check = format!(
        "import importlib.util, pathlib, sys\n\
         spec = importlib.util.spec_from_file_location('m', {name:?})\n\
         m = importlib.util.module_from_spec(spec)\n\
         spec.loader.exec_module(m)\n\
         assert m.KERNELS == ['eval'], m.KERNELS\n\
         assert '-o' in m.EXPORTED_BY, m.EXPORTED_BY\n\
         assert not pathlib.Path({:?}).exists()\n",
        marker.display().to_string()
    );
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(&check)
        .current_dir(p.root())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
}

/// A trusted remote whose entry for a key names that key but another config.
#[test]
fn a_remote_entry_for_another_artifact_is_ignored() {
    let server = Nginx::start();
    let url = server.url("kart");
    let p = grid_project();
    let toml = p.read("kart.toml");
    p.write(
        "kart.toml",
        &format!("{toml}\n[remote]\nurl = \"{url}\"\ntrusted = true\n"),
    );
    p.ok(&["build", "--no-remote"]);
    p.ok(&["push"]);
    let honest = lock_digests(&p);
    // On the server, make A=1's entry describe A=2 (with A=2's digest and size).
    let ac = server.www().join("kart/ac");
    let lock = p.read("kart.lock");
    let keys: Vec<&str> = lock
        .lines()
        .filter_map(|l| l.strip_prefix("key = \""))
        .map(|k| k.trim_end_matches('"'))
        .collect();
    let read = |k: &str| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(ac.join(k)).unwrap()).unwrap()
    };
    let (first, second) = (read(keys[0]), read(keys[1]));
    let mut forged = second.clone();
    forged["key"] = first["key"].clone();
    forged["preimage"] = first["preimage"].clone();
    std::fs::write(ac.join(keys[0]), serde_json::to_vec(&forged).unwrap()).unwrap();
    // An entry that says its blob is 1 TiB.
    let mut huge = second.clone();
    huge["size"] = serde_json::json!(1u64 << 40);
    std::fs::write(ac.join(keys[1]), serde_json::to_vec(&huge).unwrap()).unwrap();

    // A merge job: lock from the trusted remote's entries alone.
    std::fs::remove_file(p.root().join("kart.lock")).unwrap();
    std::fs::remove_dir_all(p.root().join("artifacts")).unwrap();
    let out = p.kart(&["build", "--entries-only"]);
    let err = stderr(&out);
    assert!(
        err.contains("describes grid[A=2,B=16] sm_90, not grid[A=1,B=16] sm_90; ignored"),
        "{}",
        text(&out)
    );
    assert!(err.contains("more than kart reads"), "{}", text(&out));
    // Neither entry made it into the lock (both configs were compiled here instead),
    // and the lock stays readable.
    assert_eq!(lock_digests(&p), honest, "{}", text(&out));
    p.ok(&["ls"]);
}

/// A server that answers any request at once and then sends its body about 1.1 KB
/// every 0.9 s (no length announced): enough to pass any stall check, far too slow to
/// wait for.
fn slow_drip_server() -> (u16, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let handle = std::thread::spawn(move || {
        listener.set_nonblocking(false).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            let Ok((mut conn, _)) = listener.accept() else {
                return;
            };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf);
                let _ = conn.write_all(
                    b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: application/octet-stream\r\n\r\n",
                );
                let chunk = [0u8; 1100];
                let end = Instant::now() + Duration::from_secs(30);
                while Instant::now() < end {
                    if conn.write_all(&chunk).is_err() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(900));
                }
            });
        }
    });
    (port, handle)
}

#[test]
fn a_slow_drip_remote_is_given_up_within_its_deadline() {
    let built = grid_project();
    built.ok(&["build"]);
    let (port, _server) = slow_drip_server();
    let url = format!("http://127.0.0.1:{port}/kart");
    // A fresh clone fetching from the drip. Each blob's deadline is the first byte's 5 s
    // and one stall period's 5 s plus its size at 1 MiB/s; the lock says each is a
    // megabyte, so the drip would take a quarter of an hour and no size limit ends it
    // first.
    let fresh = grid_project();
    let lock: String = built
        .read("kart.lock")
        .lines()
        .map(|l| match l.strip_prefix("size = ") {
            Some(_) => "size = 1000000\n".to_string(),
            None => format!("{l}\n"),
        })
        .collect();
    fresh.write("kart.lock", &lock);
    let deadline = 10.0 + 1e6 / 1048576.0;
    let start = Instant::now();
    let out = fresh.kart(&["fetch", "--remote", &url]);
    let took = start.elapsed().as_secs_f64();
    eprintln!("slow drip: given up after {took:.2} s (deadline {deadline:.2} s)");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("the whole request took over"),
        "{}",
        text(&out)
    );
    assert!(
        took < deadline + 1.0,
        "given up after {took:.1} s, deadline {deadline:.1} s"
    );
    assert!(fresh.blobs().is_empty());
}

#[test]
fn gc_without_a_lock_refuses() {
    let p = grid_project();
    p.ok(&["build"]);
    std::fs::remove_file(p.root().join("kart.lock")).unwrap();
    let out = p.kart(&["gc"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(stderr(&out).contains("no kart.lock"), "{}", text(&out));
    assert_eq!(p.blobs().len(), 2, "gc removed blobs without a lock");
    let out = p.ok(&["gc", "--all-unreferenced"]);
    assert!(stdout(&out).contains("removed 2 blobs"), "{}", text(&out));
    assert!(p.blobs().is_empty());
}

#[test]
fn a_store_outside_the_project_or_in_a_foreign_folder_is_refused() {
    let p = grid_project();
    let elsewhere = tempfile::Builder::new()
        .prefix("kart-not-a-store-")
        .tempdir()
        .unwrap();
    std::fs::write(elsewhere.path().join("notes.txt"), "mine").unwrap();
    let toml = p.read("kart.toml");
    let shown = elsewhere.path().display();
    p.write(
        "kart.toml",
        &toml.replace("[project]\n", &format!("[project]\nstore = \"{shown}\"\n")),
    );
    let out = p.kart(&["build"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        stderr(&out).contains("store_outside_project"),
        "{}",
        text(&out)
    );
    // Said explicitly: still no tag or .gitignore in a folder that is not a store.
    p.write(
        "kart.toml",
        &toml.replace(
            "[project]\n",
            &format!("[project]\nstore = \"{shown}\"\nstore_outside_project = true\n"),
        ),
    );
    let out = p.kart(&["build"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(stderr(&out).contains("not a kart store"), "{}", text(&out));
    assert!(!elsewhere.path().join("CACHEDIR.TAG").exists());
    assert!(!elsewhere.path().join(".gitignore").exists());
    // A new folder outside, said explicitly, is fine.
    let fresh = elsewhere.path().join("store");
    p.write(
        "kart.toml",
        &toml.replace(
            "[project]\n",
            &format!(
                "[project]\nstore = \"{}\"\nstore_outside_project = true\n",
                fresh.display()
            ),
        ),
    );
    p.ok(&["build"]);
    assert!(fresh.join("CACHEDIR.TAG").is_file());
}

#[test]
fn a_temp_file_left_in_the_project_root_is_swept() {
    let p = grid_project();
    p.write(".tmp-kart-AbC123", "a killed lock write");
    p.ok(&["ls"]);
    assert!(!p.root().join(".tmp-kart-AbC123").exists());
}

#[test]
fn the_ci_rebuild_step_fails_on_a_planted_mismatch() {
    let p = grid_project();
    p.ok(&["build"]);
    let script = repo_root().join("ci/prebuild");
    let run = |p: &TestProject| {
        std::process::Command::new("bash")
            .arg(&script)
            .args(["rebuild", "all"])
            .env("KART", env!("CARGO_BIN_EXE_kart"))
            .env("KART_PROJECT", p.root())
            .env("KART_NVCC", crate::harness::real_nvcc())
            .env("KART_REBUILD_SEED", "7")
            .output()
            .unwrap()
    };
    // On a fresh runner (empty store) an honest lock rebuilds to itself.
    std::fs::remove_dir_all(p.root().join("artifacts")).unwrap();
    let out = run(&p);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stdout(&out).contains("0 differ from kart.lock"),
        "{}",
        text(&out)
    );
    // A planted digest: the rebuild names it and fails.
    let d = lock_digests(&p);
    edit_lock(&p, &d[1], &"e".repeat(64));
    std::fs::remove_dir_all(p.root().join("artifacts")).unwrap();
    let out = run(&p);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stdout(&out).contains("nondeterministic: grid[A=2,B=16] sm_90"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_file_of_the_kernel_folder_that_is_not_a_source_is_not_an_input() {
    let p = grid_project();
    p.ok(&["build"]);
    let lock = p.read("kart.lock");
    // A check program, a benchmark and results beside the kernel change no key.
    p.write("kernels/grid/RESULTS.md", "# figures\n");
    p.write("kernels/grid/bench.py", "print('bench')\n");
    p.ok(&["build", "--locked"]);
    assert_eq!(p.read("kart.lock"), lock);
    // A header there that the source includes must be listed in `sources`.
    p.write("kernels/grid/helper.h", "#define HELPER 1\n");
    p.write(
        "kernels/grid/grid.cu",
        "#include \"helper.h\"\nextern \"C\" __global__ void grid(float* out) { out[0] = HELPER + A + B; }\n",
    );
    let out = p.kart(&["build"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("is not one of the kernel's `sources`"),
        "{}",
        text(&out)
    );
    let toml = p.read("kernels/grid/kernel.toml");
    p.write(
        "kernels/grid/kernel.toml",
        &toml.replace("[\"grid.cu\"]", "[\"grid.cu\", \"helper.h\"]"),
    );
    p.ok(&["build"]);
    assert!(Path::new(&p.root().join("kart.lock")).is_file());
}
