//! Installs of one home share what they can: nvcc's wheels are downloaded once into
//! the home's wheel cache, each file is one read-only copy that every install links,
//! a gc of one install leaves the others whole, and a killed install leaves nothing
//! in use. nvcc 13.0's real wheels (from the shared home's cache), a small component
//! from a package index on loopback.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use crate::harness::{stderr, stdout, text};
use crate::toolchain::{fake_index, install_name, kart_at, project_with};

const NVCC: &str = "nvidia/cu13/bin/nvcc";

/// `toolchain install --json` in `dir`: the report.
fn install(dir: &Path, home: &Path, index: &str) -> serde_json::Value {
    let out = kart_at(dir, home, index, &["toolchain", "install", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{e}: {}", text(&out)))
}

/// The files (not folders) under `dir`.
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                out.push(e.path());
            }
        }
    }
    out
}

#[test]
fn a_second_component_set_downloads_only_its_new_wheel_and_links_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let (index, fetched) = fake_index(&home, &["nvidia-fake-a==1.0", "nvidia-fake-b==1.0"]);
    let one = project_with(tmp.path(), &home, "one", &[]);
    let two = project_with(tmp.path(), &home, "two", &["nvidia-fake-a==1.0"]);

    // nvcc's wheels are in the home's cache: hashed again, none downloaded.
    let first = install(&one, &home, &index);
    assert_eq!(first["downloaded"], 0, "{first}");
    assert!(first["cached"].as_u64().unwrap() > 100_000_000, "{first}");
    assert!(fetched.lock().unwrap().is_empty());
    // The second set downloads its one new wheel; every nvcc file is shared.
    let second = install(&two, &home, &index);
    let got: Vec<String> = fetched.lock().unwrap().clone();
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].starts_with("nvidia_fake_a-1.0-"), "{got:?}");
    let downloaded = second["downloaded"].as_u64().unwrap();
    assert!(downloaded > 0 && downloaded < 10_000, "{second}");
    let sharing = &second["sharing"];
    assert!(
        sharing["shared_bytes"].as_u64().unwrap() > 250_000_000
            && sharing["new_bytes"].as_u64().unwrap() < 10_000
            && sharing["copied"] == 0,
        "{second}"
    );

    // One copy on disk, read-only, linked by both installs.
    let (a, b) = (
        home.join("toolchains")
            .join(install_name(&one, &home, &index)),
        home.join("toolchains")
            .join(install_name(&two, &home, &index)),
    );
    let (nvcc_a, nvcc_b) = (
        std::fs::metadata(a.join(NVCC)).unwrap(),
        std::fs::metadata(b.join(NVCC)).unwrap(),
    );
    assert_eq!(nvcc_a.ino(), nvcc_b.ino());
    assert_eq!(nvcc_a.permissions().mode() & 0o777, 0o555);
    for file in files_under(&b) {
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o222, 0, "{} is writable", file.display());
    }
    let nvcc_bytes = std::fs::read(b.join(NVCC)).unwrap();

    // list: each install's size, and how little of it is its own.
    let list = stdout(&kart_at(
        &one,
        &home,
        &index,
        &["toolchain", "list", "--json"],
    ));
    let listed: serde_json::Value = serde_json::from_str(&list).unwrap();
    let of = |path: &Path| {
        listed
            .as_array()
            .unwrap()
            .iter()
            .find(|i| Path::new(i["path"].as_str().unwrap()) == path)
            .unwrap_or_else(|| panic!("{list}"))
            .clone()
    };
    assert!(of(&b)["bytes"].as_u64().unwrap() > 250_000_000, "{list}");
    assert!(of(&b)["own_bytes"].as_u64().unwrap() < 10_000, "{list}");

    // gc of the first install (named, from the second project): the second one keeps
    // every file, and every wheel it was unpacked from.
    let name_a = a.file_name().unwrap().to_str().unwrap().to_string();
    let gc = kart_at(&two, &home, &index, &["toolchain", "gc", &name_a]);
    assert!(gc.status.success(), "{}", text(&gc));
    assert!(!a.exists());
    assert_eq!(std::fs::read(b.join(NVCC)).unwrap(), nvcc_bytes);
    let out = kart_at(&two, &home, &index, &["toolchain", "path", "nvcc"]);
    assert!(out.status.success(), "{}", text(&out));
    let cache = home.join(kart::install::shared::WHEELS);
    assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 6);

    // A cached wheel that no longer holds its bytes is downloaded again.
    let fake_sha = wheel_sha(&b, "nvidia_fake_a");
    let cached = cache.join(format!("{fake_sha}.whl"));
    std::fs::remove_file(&cached).unwrap();
    std::fs::write(&cached, b"not a wheel").unwrap();
    let three = project_with(
        tmp.path(),
        &home,
        "three",
        &["nvidia-fake-a==1.0", "nvidia-fake-b==1.0"],
    );
    install(&three, &home, &index);
    let got: Vec<String> = fetched.lock().unwrap().clone();
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(
        got[1].starts_with("nvidia_fake_a-1.0-") && got[2].starts_with("nvidia_fake_b-1.0-"),
        "{got:?}"
    );
    assert_eq!(
        kart::digest::sha256_file(&cached).unwrap(),
        fake_sha,
        "the cache holds the wheel's bytes again"
    );

    // Nothing installed any more: no wheel and no file is kept.
    let c = home
        .join("toolchains")
        .join(install_name(&three, &home, &index));
    let names: Vec<&str> = [&b, &c]
        .iter()
        .map(|p| p.file_name().unwrap().to_str().unwrap())
        .collect();
    let gc = kart_at(
        &one,
        &home,
        &index,
        &[&["toolchain", "gc"][..], &names].concat(),
    );
    assert!(gc.status.success(), "{}", text(&gc));
    let said = stdout(&gc);
    assert!(
        said.contains("removed 7 cached wheel(s)")
            && said.contains("shared file(s) no install links"),
        "{}",
        text(&gc)
    );
    assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 0);
    assert!(files_under(&home.join(kart::install::shared::FILES)).is_empty());
}

/// The sha256 of the wheel of `install`'s record whose file name starts with `stem`.
fn wheel_sha(install: &Path, stem: &str) -> String {
    let mut record = install.as_os_str().to_owned();
    record.push(".json");
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(record).unwrap()).unwrap();
    record["wheels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w[0].as_str().unwrap().starts_with(stem))
        .unwrap()[1]
        .as_str()
        .unwrap()
        .to_string()
}

/// nvcc's wheels back in `home`'s cache after a gc removed them.
fn seed_again(home: &Path) {
    let _ = fake_index(home, &[]);
}

#[test]
fn a_killed_install_leaves_nothing_in_use_and_the_next_one_finishes() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let (index, _) = fake_index(&home, &[]);
    let dir = project_with(tmp.path(), &home, "p", &[]);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kart"))
        .args(["toolchain", "install"])
        .current_dir(&dir)
        .env("KART_HOME", &home)
        .env("KART_INDEX_URL", &index)
        .env("KART_FAILPOINT", "install.before-rename")
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    assert!(stderr(&out).contains("failpoint"), "{}", text(&out));
    // Linked but never renamed into place: not installed.
    let out = kart_at(&dir, &home, &index, &["toolchain", "path"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let toolchains = home.join("toolchains");
    let left: Vec<_> = std::fs::read_dir(&toolchains).unwrap().flatten().collect();
    assert_eq!(left.len(), 1, "the killed install's temporary folder");
    // A gc removes its folder, then the shared files only it linked.
    let gc = kart_at(&dir, &home, &index, &["toolchain", "gc"]);
    assert!(gc.status.success(), "{}", text(&gc));
    assert_eq!(std::fs::read_dir(&toolchains).unwrap().count(), 0);
    assert!(files_under(&home.join(kart::install::shared::FILES)).is_empty());
    // The next install finishes.
    seed_again(&home);
    let out = kart_at(&dir, &home, &index, &["toolchain", "install"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = kart_at(&dir, &home, &index, &["toolchain", "path", "nvcc"]);
    assert!(out.status.success(), "{}", text(&out));
}
