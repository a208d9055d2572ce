//! The no-op build's shortcut (`v1/settled/`): taken only while the plan's inputs, the
//! lock's bytes and the store's folders are those a full check found in agreement, and
//! never in place of a check that would find something.

use std::path::PathBuf;
use std::time::Duration;

use crate::harness::{TestProject, lock_digests, stderr, text};

fn grid_project() -> TestProject {
    let p = TestProject::new(&["sm_90"]);
    p.kernel(
        "grid",
        "out[threadIdx.x] = A * 1000 + B;",
        "[params]\nA = [1, 2]\nB = [16]\n",
    );
    p
}

/// The project's settled file, if there is one.
fn settled(p: &TestProject) -> Option<PathBuf> {
    std::fs::read_dir(p.root().join("artifacts/v1/settled"))
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|path| !path.file_name().unwrap().to_string_lossy().starts_with('.'))
}

/// Builds until the no-op build has recorded its settled state: the store's folders
/// must have stayed unchanged for two seconds first.
fn settle(p: &TestProject) {
    std::thread::sleep(Duration::from_millis(2100));
    let out = p.ok(&["build"]);
    assert!(stderr(&out).contains(" 0 compiled"), "{}", text(&out));
    assert!(
        settled(p).is_some(),
        "no settled file after a quiet no-op build"
    );
}

fn first_key(p: &TestProject) -> String {
    p.read("kart.lock")
        .lines()
        .find_map(|l| l.strip_prefix("key = \""))
        .map(|k| k.trim_end_matches('"').to_string())
        .expect("a key in the lock")
}

#[test]
fn a_settled_no_op_build_still_rebuilds_a_removed_blob_and_a_changed_source() {
    let p = grid_project();
    p.ok(&["build"]);
    assert!(settled(&p).is_none(), "recorded right after compiling");
    settle(&p);
    p.clear_log();
    let out = p.ok(&["build"]);
    assert!(
        stderr(&out).contains("2 artifacts: 0 compiled, 2 from the store"),
        "{}",
        text(&out)
    );
    let out = p.ok(&["build", "--locked"]);
    assert!(
        stderr(&out).contains("2 artifacts checked"),
        "{}",
        text(&out)
    );
    assert_eq!(p.compiles(), 0);

    // A blob removed behind kart's back (as by gc or rm): its folder changed, so the
    // next build checks everything and compiles it again.
    let digest = &lock_digests(&p)[0];
    let blob_dir = p
        .root()
        .join(format!("artifacts/v1/blobs/{}", &digest[..2]));
    for f in std::fs::read_dir(&blob_dir).unwrap().flatten() {
        if f.file_name().to_string_lossy().starts_with(digest.as_str()) {
            std::fs::remove_file(f.path()).unwrap();
        }
    }
    let out = p.ok(&["build"]);
    assert!(stderr(&out).contains("1 compiled"), "{}", text(&out));

    // A changed source changes the plan's inputs.
    settle(&p);
    p.clear_log();
    let source = p.read("kernels/grid/grid.cu");
    p.write("kernels/grid/grid.cu", &source.replace("1000", "1001"));
    let out = p.kart(&["build", "--locked"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let out = p.ok(&["build"]);
    assert!(stderr(&out).contains("2 compiled"), "{}", text(&out));
}

#[test]
fn a_settled_state_never_hides_a_forged_lock_or_entry() {
    let p = grid_project();
    p.ok(&["build"]);
    settle(&p);
    let lock = p.read("kart.lock");
    let digests = lock_digests(&p);

    // The lock edited: its bytes differ from those recorded.
    p.write("kart.lock", &lock.replacen(&digests[0], &"0".repeat(64), 1));
    let out = p.kart(&["build", "--locked"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let out = p.kart(&["build"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("disagree with their action entries"),
        "{}",
        text(&out)
    );
    p.write("kart.lock", &lock);
    settle(&p);

    // An action entry replaced (written and renamed in, as any writer of the store
    // does) to name another digest: its folder changed, so it is read and compared.
    let key = first_key(&p);
    let entry = p
        .root()
        .join(format!("artifacts/v1/actions/{}/{key}.json", &key[..2]));
    let original = std::fs::read_to_string(&entry).unwrap();
    let forged = original.replace(digests[0].as_str(), &"0".repeat(64));
    assert_ne!(forged, original);
    let tmp = entry.with_extension("forged");
    std::fs::write(&tmp, forged).unwrap();
    std::fs::rename(&tmp, &entry).unwrap();
    let out = p.kart(&["build", "--locked"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("1 artifact(s) of kart.lock disagree"),
        "{}",
        text(&out)
    );
    std::fs::write(&tmp, &original).unwrap();
    std::fs::rename(&tmp, &entry).unwrap();
    settle(&p);

    // What the shortcut does not see, as the README says: an entry edited in place
    // (no rename, so its folder keeps its mtime). --locked answers from the record,
    // which also proves the record is used; `kart verify` reads every entry and finds it.
    let original = std::fs::read_to_string(&entry).unwrap();
    std::fs::write(
        &entry,
        original.replace(digests[0].as_str(), &"0".repeat(64)),
    )
    .unwrap();
    let out = p.ok(&["build", "--locked"]);
    assert!(
        stderr(&out).contains("2 artifacts checked"),
        "{}",
        text(&out)
    );
    let out = p.kart(&["verify"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    std::fs::write(&entry, &original).unwrap();

    // A malformed settled file is no shortcut: the build checks, then records anew.
    let file = settled(&p).unwrap();
    std::fs::write(&file, "kart settled 1\ninputs nonsense\n").unwrap();
    let out = p.ok(&["build"]);
    assert!(stderr(&out).contains(" 0 compiled"), "{}", text(&out));
    assert!(
        std::fs::read_to_string(&file)
            .unwrap()
            .contains("artifacts 2"),
        "the settled file was not written again"
    );
}
