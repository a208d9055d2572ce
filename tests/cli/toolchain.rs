//! kart for a project of one's own, with nothing of kart's repository: `kart init` in a
//! temporary folder, `kart toolchain install` of the pinned nvcc, a toolkit component
//! (cuRAND) and a header library (CUTLASS) from PyPI into kart's home, then build,
//! `--locked`, export and doctor. Real downloads: every test that installs from PyPI
//! shares one home under cargo's target folder, which kart locks while installing, so a
//! second run (or another test binary) downloads nothing; the tests with a package index
//! on loopback take nvcc's real wheels from that home's wheel cache.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::harness::{stderr, stdout, text};

/// The home shared by the tests that install (kept between runs).
pub(crate) fn shared_home() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("kart-home")
}

pub(crate) fn kart(dir: &Path, home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kart"))
        .args(args)
        .current_dir(dir)
        .env("KART_HOME", home)
        .env_remove("KART_NVCC")
        .env_remove("CUDA_HOME")
        .env_remove("CUDA_PATH")
        .env_remove("KART_REMOTE")
        // No nvcc from the machine: only the one kart installs.
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .output()
        .expect("the kart binary runs")
}

pub(crate) fn ok(dir: &Path, home: &Path, args: &[&str]) -> Output {
    let out = kart(dir, home, args);
    assert!(out.status.success(), "kart {args:?}\n{}", text(&out));
    out
}

const KERNEL_CU: &str = r#"#include <curand_kernel.h>
#include <cutlass/numeric_types.h>

template <int N>
__global__ void noise(float* out, unsigned long long seed) {
  curandStatePhilox4_32_10_t state;
  curand_init(seed, threadIdx.x, 0, &state);
  cutlass::half_t h(curand_uniform(&state));
  out[threadIdx.x] = float(h) * N;
}
"#;

const KERNEL_TOML: &str = r#"name = "noise"
sources = ["noise.cu"]
entry = ["noise<N>"]
libraries = ["cutlass"]
targets = ["sm_90"]
default = { N = 2 }

[params]
N = [1, 2]
"#;

#[test]
fn a_project_of_ones_own_installs_its_toolchain_and_builds() {
    let home = shared_home();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("server");
    let out = ok(tmp.path(), &home, &["init", "server"]);
    assert!(stderr(&out).contains("created kart.toml"), "{}", text(&out));
    // A second init changes nothing, and says so.
    let again = ok(&dir, &home, &["init"]);
    assert!(
        stderr(&again).contains("nothing changed"),
        "{}",
        text(&again)
    );

    let toml = std::fs::read_to_string(dir.join("kart.toml")).unwrap();
    let toml = toml.replace(
        "nvcc = \"13.0\"",
        "nvcc = \"13.0\"\ncomponents = [\"nvidia-curand==10.4.0.35\"]",
    ) + "\n[library.cutlass]\npip = \"nvidia-cutlass==4.2.0.0\"\ninclude = \"cutlass_library/source/include\"\nsha256 = \"f305d9da4498a22258c8dc946ef4f85c41c2b81839ece104582f8b3a78baeaca\"\n";
    std::fs::write(dir.join("kart.toml"), toml).unwrap();
    std::fs::create_dir_all(dir.join("kernels/noise")).unwrap();
    std::fs::write(dir.join("kernels/noise/noise.cu"), KERNEL_CU).unwrap();
    std::fs::write(dir.join("kernels/noise/kernel.toml"), KERNEL_TOML).unwrap();

    // Before the install the build says what to run.
    let before = kart(&dir, &tmp.path().join("empty-home"), &["build"]);
    assert_eq!(before.status.code(), Some(3), "{}", text(&before));
    assert!(
        stderr(&before).contains("kart toolchain install"),
        "{}",
        text(&before)
    );

    ok(&dir, &home, &["toolchain", "install"]);
    // Installed once: a second install only checks.
    let again = ok(&dir, &home, &["toolchain", "install"]);
    assert!(
        stderr(&again).contains("already installed"),
        "{}",
        text(&again)
    );
    assert!(!stderr(&again).contains("downloading"), "{}", text(&again));
    let nvcc = stdout(&ok(&dir, &home, &["toolchain", "path", "nvcc"]));
    assert!(nvcc.trim().starts_with(home.to_str().unwrap()), "{nvcc}");
    let list = stdout(&ok(&dir, &home, &["toolchain", "list"]));
    assert!(
        list.lines()
            .any(|l| l.starts_with('*') && l.contains("nvcc 13.0"))
            && list
                .lines()
                .any(|l| l.starts_with('*') && l.contains("cutlass")),
        "{list}"
    );

    let built = ok(&dir, &home, &["build"]);
    assert!(stderr(&built).contains("4 artifacts"), "{}", text(&built));
    ok(&dir, &home, &["build", "--locked"]);
    ok(
        &dir,
        &home,
        &["export", "noise", "smoke", "--python", "-o", "kernels.py"],
    );
    let module = std::fs::read_to_string(dir.join("kernels.py")).unwrap();
    assert!(module.contains("\"noise\"") && module.contains("\"smoke\""));
    // doctor: the toolchain it found, and (on a machine without a GPU) that it has none.
    let doctor = kart(&dir, &home, &["doctor"]);
    let said = format!("{}{}", stdout(&doctor), stderr(&doctor));
    assert!(said.contains("13.0.88"), "{said}");
}

/// The wheel files of nvcc 13.0 for x86_64, as kart's pins name them.
const NVCC_WHEELS: &[(&str, &str)] = &[
    (
        "nvidia-cuda-nvcc",
        "nvidia_cuda_nvcc-13.0.88-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
    ),
    (
        "nvidia-cuda-crt",
        "nvidia_cuda_crt-13.0.88-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
    ),
    (
        "nvidia-nvvm",
        "nvidia_nvvm-13.0.88-py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64.whl",
    ),
    (
        "nvidia-cuda-runtime",
        "nvidia_cuda_runtime-13.0.96-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
    ),
    (
        "nvidia-cuda-cccl",
        "nvidia_cuda_cccl-13.0.85-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
    ),
];

/// How the hostile index on loopback answers.
#[derive(Clone, Copy)]
enum Hostile {
    /// The project page is JSON that never ends, fast.
    EndlessIndex,
    /// The index says a wheel has 10 bytes; the wheel announces 1 TiB.
    HugeWheel,
    /// The wheel comes one byte every 300 ms, never stalling the 2 s clock.
    DripWheel,
}

/// A package index on loopback that answers every request as `mode` says; its URL.
fn hostile_index(mode: Hostile) -> String {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let url = base.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let base = base.clone();
            std::thread::spawn(move || {
                let mut request = String::new();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let _ = reader.read_line(&mut request);
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) <= 2 {
                        break;
                    }
                }
                let path = request.split_whitespace().nth(1).unwrap_or("/").to_string();
                if let Some(wheel) = path.strip_prefix("/files/") {
                    let _ = wheel;
                    match mode {
                        Hostile::HugeWheel => {
                            let _ = stream.write_all(
                                b"HTTP/1.1 200 OK\r\nContent-Length: 1099511627776\r\n\r\n",
                            );
                            let chunk = vec![0u8; 1 << 20];
                            while stream.write_all(&chunk).is_ok() {}
                        }
                        _ => {
                            let _ = stream.write_all(
                                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                            );
                            while stream.write_all(b"1\r\nx\r\n").is_ok() {
                                std::thread::sleep(std::time::Duration::from_millis(300));
                            }
                        }
                    }
                    return;
                }
                let name = path.trim_matches('/');
                if let Hostile::EndlessIndex = mode {
                    let _ = stream.write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{\"files\": [",
                    );
                    let item =
                        b"{\"filename\": \"x\", \"url\": \"x\", \"hashes\": {}}, ".repeat(20_000);
                    while stream.write_all(&item).is_ok() {}
                    return;
                }
                let file = NVCC_WHEELS
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map_or("none.whl", |(_, f)| f);
                let body = format!(
                    "{{\"files\": [{{\"filename\": \"{file}\", \"url\": \"{base}/files/{file}\", \
                     \"hashes\": {{\"sha256\": \"{}\"}}, \"size\": 10}}]}}",
                    "0".repeat(64)
                );
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    url
}

#[test]
fn a_hostile_index_is_bounded_in_bytes_and_time_and_leaves_nothing() {
    for (mode, phrase, seconds) in [
        (
            Hostile::EndlessIndex,
            "more than the 67108864 bytes expected",
            30,
        ),
        (
            Hostile::HugeWheel,
            "announces 1099511627776 bytes, more than the 10 expected",
            10,
        ),
        (Hostile::DripWheel, "given up at its deadline", 10),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        ok(tmp.path(), &home, &["init", "p"]);
        let project = tmp.path().join("p");
        let started = std::time::Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_kart"))
            .args(["toolchain", "install"])
            .current_dir(&project)
            .env("KART_HOME", &home)
            .env("KART_INDEX_URL", hostile_index(mode))
            .env("KART_INSTALL_STALL_TIMEOUT", "2")
            .output()
            .unwrap();
        let took = started.elapsed().as_secs();
        assert_eq!(out.status.code(), Some(3), "{}", text(&out));
        assert!(stderr(&out).contains(phrase), "{}", text(&out));
        assert!(took < seconds, "{took} s: {}", text(&out));
        // Nothing downloaded is left behind, and nothing is installed.
        let downloads = home.join("wheels/v1");
        let left: Vec<_> = std::fs::read_dir(&downloads)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{left:?}");
        assert!(!stdout(&out).contains("installed"), "{}", text(&out));
    }
}

/// A small wheel holding `members` (path, mode, bytes).
fn fake_wheel(members: &[(&str, u32, &[u8])]) -> Vec<u8> {
    use std::io::Write;
    let mut out = std::io::Cursor::new(Vec::new());
    let mut zip = zip::ZipWriter::new(&mut out);
    for (member, mode, bytes) in members {
        let options = zip::write::SimpleFileOptions::default().unix_permissions(*mode);
        zip.start_file(*member, options).unwrap();
        zip.write_all(bytes).unwrap();
    }
    zip.finish().unwrap();
    out.into_inner()
}

/// nvcc 13.0's real wheels in the shared home's wheel cache, installed there from
/// PyPI first if they are not (with a small component no other test pins, so that a
/// home whose installs all predate the wheel cache downloads them too).
fn real_nvcc_wheels() -> Vec<PathBuf> {
    let home = shared_home();
    let paths: Vec<PathBuf> = NVCC_WHEELS
        .iter()
        .map(|(_, file)| {
            let sha = kart::install::sets::pinned_sha256(file).unwrap();
            home.join(kart::install::shared::WHEELS)
                .join(format!("{sha}.whl"))
        })
        .collect();
    if !paths.iter().all(|p| p.is_file()) {
        let tmp = tempfile::tempdir().unwrap();
        ok(tmp.path(), &home, &["init", "p"]);
        let dir = tmp.path().join("p");
        set_components(&dir, &["nvidia-nvtx==13.0.85"]);
        ok(&dir, &home, &["toolchain", "install"]);
    }
    paths
}

/// Puts nvcc 13.0's wheels in `home`'s wheel cache (hard links to the shared home's,
/// else copies): an install hashes them again and downloads none.
fn seed_nvcc_wheels(home: &Path) {
    let cache = home.join(kart::install::shared::WHEELS);
    std::fs::create_dir_all(&cache).unwrap();
    for wheel in real_nvcc_wheels() {
        let dest = cache.join(wheel.file_name().unwrap());
        if !dest.exists() && std::fs::hard_link(&wheel, &dest).is_err() {
            std::fs::copy(&wheel, &dest).unwrap();
        }
    }
}

/// A package index on loopback with nvcc 13.0's wheels (put in `home`'s wheel cache,
/// so no byte of them is fetched: the index answers 404 for them) and each of
/// `components` (`name==version`) as a small wheel holding its dist-info and a header.
/// Returns its URL and the wheel files downloaded from it so far.
pub(crate) fn fake_index(
    home: &Path,
    components: &[&str],
) -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{BufRead, BufReader, Write};
    seed_nvcc_wheels(home);
    let mut served: Vec<(String, String, Vec<u8>)> = Vec::new();
    for spec in components {
        let (name, version) = spec.split_once("==").unwrap();
        let stem = name.replace('-', "_");
        let file = format!("{stem}-{version}-py3-none-manylinux2014_x86_64.whl");
        let metadata = format!("{stem}-{version}.dist-info/METADATA");
        let bytes = fake_wheel(&[
            (&metadata, 0o644, b"Name: x\n"),
            (&format!("nvidia/{stem}/include/{stem}.h"), 0o644, b"//\n"),
        ]);
        served.push((name.to_string(), file, bytes));
    }
    let fetched = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = fetched.clone();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let url = base.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = String::new();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let _ = reader.read_line(&mut request);
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) <= 2 {
                    break;
                }
            }
            let path = request.split_whitespace().nth(1).unwrap_or("/").to_string();
            let (status, body) = if let Some(file) = path.strip_prefix("/files/") {
                log.lock().unwrap().push(file.to_string());
                match served.iter().find(|(_, f, _)| f == file) {
                    Some((_, _, bytes)) => ("200 OK", bytes.clone()),
                    None => ("404 Not Found", Vec::new()),
                }
            } else {
                let name = path.trim_matches('/');
                // Every version of a component the index serves, each a file of its page.
                let entries: Vec<(String, String, usize)> =
                    match NVCC_WHEELS.iter().find(|(n, _)| *n == name) {
                        Some((_, f)) => {
                            let sha = kart::install::sets::pinned_sha256(f).unwrap().to_string();
                            vec![(f.to_string(), sha, 10usize)]
                        }
                        None => served
                            .iter()
                            .filter(|(n, _, _)| n == name)
                            .map(|(_, f, b)| (f.clone(), kart::digest::sha256_hex(b), b.len()))
                            .collect(),
                    };
                if entries.is_empty() {
                    ("404 Not Found", Vec::new())
                } else {
                    let files: Vec<String> = entries
                        .iter()
                        .map(|(file, sha, size)| {
                            format!(
                                "{{\"filename\": \"{file}\", \"url\": \"{base}/files/{file}\", \
                                 \"hashes\": {{\"sha256\": \"{sha}\"}}, \"size\": {size}}}"
                            )
                        })
                        .collect();
                    (
                        "200 OK",
                        format!("{{\"files\": [{}]}}", files.join(", ")).into_bytes(),
                    )
                }
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(&body);
        }
    });
    (url, fetched)
}

/// kart in `dir` with `home` and the package index at `index`.
pub(crate) fn kart_at(dir: &Path, home: &Path, index: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kart"))
        .args(args)
        .current_dir(dir)
        .env("KART_HOME", home)
        .env("KART_INDEX_URL", index)
        .env_remove("KART_NVCC")
        .env_remove("CUDA_HOME")
        .env_remove("CUDA_PATH")
        .env_remove("KART_REMOTE")
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .output()
        .expect("the kart binary runs")
}

/// A new project `name` under `parent` pinning nvcc 13.0 with `components`; its root.
pub(crate) fn project_with(parent: &Path, home: &Path, name: &str, components: &[&str]) -> PathBuf {
    ok(parent, home, &["init", name]);
    let dir = parent.join(name);
    set_components(&dir, components);
    std::fs::canonicalize(dir).unwrap()
}

pub(crate) fn set_components(dir: &Path, components: &[&str]) {
    let toml = std::fs::read_to_string(dir.join("kart.toml")).unwrap();
    let start = toml.find("nvcc = \"13.0\"").unwrap() + "nvcc = \"13.0\"".len();
    let end = toml[start..].find("\n[").map_or(toml.len(), |i| start + i);
    let list: Vec<String> = components.iter().map(|c| format!("\"{c}\"")).collect();
    let toml = format!(
        "{}\ncomponents = [{}]\n{}",
        &toml[..start],
        list.join(", "),
        &toml[end..]
    );
    std::fs::write(dir.join("kart.toml"), toml).unwrap();
}

#[test]
fn a_build_after_a_components_change_names_the_set_that_is_not_installed() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let (index, _) = fake_index(&home, &["nvidia-fake-a==1.0"]);
    let dir = project_with(tmp.path(), &home, "p", &[]);
    let out = kart_at(&dir, &home, &index, &["toolchain", "install"]);
    assert!(out.status.success(), "{}", text(&out));
    set_components(&dir, &["nvidia-fake-a==1.0"]);
    let out = kart_at(&dir, &home, &index, &["build"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let said = stderr(&out);
    assert!(
        said.contains("nvcc 13.0 with components nvidia-fake-a==1.0 is not installed")
            && said.contains("it has nvcc 13.0 with no components")
            && said.contains("kart toolchain install")
            && !said.contains("nvcc not found"),
        "{said}"
    );
    // `toolchain path` says the same; installing the new set fixes it.
    let out = kart_at(&dir, &home, &index, &["toolchain", "path"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(stderr(&out).contains("with components nvidia-fake-a==1.0"));
    let out = kart_at(&dir, &home, &index, &["toolchain", "install"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = kart_at(&dir, &home, &index, &["toolchain", "path"]);
    assert!(out.status.success(), "{}", text(&out));
}

/// The folder name of `dir`'s installed toolchain.
pub(crate) fn install_name(dir: &Path, home: &Path, index: &str) -> String {
    let out = kart_at(dir, home, index, &["toolchain", "path"]);
    assert!(out.status.success(), "{}", text(&out));
    let path = stdout(&out);
    Path::new(path.trim())
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

#[test]
fn toolchain_gc_keeps_what_other_projects_use_and_list_tells_installs_apart() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let (index, _) = fake_index(&home, &["nvidia-fake-a==1.0"]);
    let one = project_with(tmp.path(), &home, "one", &[]);
    let two = project_with(tmp.path(), &home, "two", &["nvidia-fake-a==1.0"]);
    for dir in [&one, &two] {
        let out = kart_at(dir, &home, &index, &["toolchain", "install"]);
        assert!(out.status.success(), "{}", text(&out));
    }
    let (a, b) = (
        install_name(&one, &home, &index),
        install_name(&two, &home, &index),
    );
    assert_ne!(a, b);

    // list: what tells the two installs apart, and who used each.
    let list = stdout(&kart_at(&one, &home, &index, &["toolchain", "list"]));
    let block = |name: &str| -> String {
        let start = list.find(name).unwrap_or_else(|| panic!("{list}"));
        let end = list[start + 1..]
            .find("\n* ")
            .or_else(|| list[start + 1..].find("\n  1"))
            .map_or(list.len(), |i| start + 1 + i);
        list[start..end].to_string()
    };
    assert!(
        list.contains(&format!("* {a}  nvcc 13.0 with no components")),
        "{list}"
    );
    assert!(
        list.contains(&format!(
            "  {b}  nvcc 13.0 with components nvidia-fake-a==1.0"
        )),
        "{list}"
    );
    assert!(
        block(&a).contains(&format!("used by {}", one.display())),
        "{list}"
    );
    assert!(
        block(&b).contains(&format!("used by {}", two.display())),
        "{list}"
    );
    let json = stdout(&kart_at(
        &one,
        &home,
        &index,
        &["toolchain", "list", "--json"],
    ));
    assert!(
        json.contains("\"uses\"") && json.contains("\"installed_at\""),
        "{json}"
    );

    // Another project's recent install is kept; the dry run says why.
    let dry = kart_at(&one, &home, &index, &["toolchain", "gc", "--dry-run"]);
    assert!(dry.status.success(), "{}", text(&dry));
    assert!(!stdout(&dry).contains("would remove"), "{}", text(&dry));
    assert!(
        stdout(&dry).contains(&format!("keep {a}: this project pins it"))
            && stdout(&dry).contains(&format!("keep {b}: last used")),
        "{}",
        text(&dry)
    );
    // Unused for 0 days: the other project's goes, this one's never.
    let dry = kart_at(
        &one,
        &home,
        &index,
        &["toolchain", "gc", "--dry-run", "--unused-for", "0"],
    );
    let said = stdout(&dry);
    assert!(
        said.contains(&format!("would remove {b}"))
            && said.contains(&format!("by {}", two.display()))
            && !said.contains(&format!("would remove {a}")),
        "{said}"
    );
    // An unknown name is refused; this project's own is kept even when named.
    let out = kart_at(&one, &home, &index, &["toolchain", "gc", "13.0-nothing"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(stderr(&out).contains(&b), "{}", text(&out));
    let out = kart_at(&one, &home, &index, &["toolchain", "gc", "--dry-run", &a]);
    assert!(
        stdout(&out).contains(&format!("keep {a}: this project pins it")),
        "{}",
        text(&out)
    );

    // Forty days later for the other project's install: the gc removes it.
    let used = home.join("used");
    for e in std::fs::read_dir(&used).unwrap().flatten() {
        let t = std::fs::read_to_string(e.path()).unwrap();
        if t.contains(&b) {
            let mut v: serde_json::Value = serde_json::from_str(&t).unwrap();
            let at = v["at"].as_u64().unwrap() - 40 * 86_400;
            v["at"] = at.into();
            std::fs::write(e.path(), v.to_string()).unwrap();
        }
    }
    let record = home.join("toolchains").join(format!("{b}.json"));
    let touched = Command::new("touch")
        .args(["-d", "41 days ago"])
        .arg(&record)
        .status()
        .unwrap();
    assert!(touched.success());
    let dry = kart_at(&one, &home, &index, &["toolchain", "gc", "--dry-run"]);
    assert!(
        stdout(&dry).contains(&format!(
            "would remove {b} (0.0 MB): last used 40 days ago by {}",
            two.display()
        )),
        "{}",
        text(&dry)
    );
    assert!(home.join("toolchains").join(&b).is_dir());
    let gc = kart_at(&one, &home, &index, &["toolchain", "gc"]);
    assert!(gc.status.success(), "{}", text(&gc));
    assert!(!home.join("toolchains").join(&b).exists());
    assert!(home.join("toolchains").join(&a).is_dir());
    // Its use went with it.
    let left = std::fs::read_dir(&used).unwrap().count();
    assert_eq!(left, 1, "{}", text(&gc));
}

#[test]
fn a_component_pin_the_index_lacks_is_refused_with_the_versions_it_has() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let (index, _) = fake_index(&home, &["nvidia-fake-a==1.0"]);
    let dir = project_with(tmp.path(), &home, "p", &["nvidia-fake-a==2.0"]);
    let out = kart_at(&dir, &home, &index, &["toolchain", "install"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let said = stderr(&out);
    assert!(
        said.contains("the index has no Linux")
            && said.contains("wheel of `nvidia-fake-a==2.0`")
            && said.contains("versions of `nvidia-fake-a` the index has for this machine: 1.0"),
        "{said}"
    );
}

#[test]
fn a_refused_pin_lists_the_releases_nearest_it_in_version_order() {
    // An index page lists files by name: 1.0.x sorts before 1.1 and 1.10 before 1.2, so
    // the last 20 of the page would leave out the 1.0 release a pin of `1.0` means.
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let mut pins: Vec<String> = vec!["nvidia-fake-a==1.0.7".to_string()];
    pins.extend((1..=24).map(|minor| format!("nvidia-fake-a=={minor}.1")));
    let mut pins: Vec<&str> = pins.iter().map(String::as_str).collect();
    pins.sort_unstable();
    let (index, _) = fake_index(&home, &pins);
    let dir = project_with(tmp.path(), &home, "p", &["nvidia-fake-a==1.0"]);
    let out = kart_at(&dir, &home, &index, &["toolchain", "install"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let said = stderr(&out);
    let newest: Vec<String> = (6..=24).map(|minor| format!("{minor}.1")).collect();
    assert!(
        said.contains(&format!(
            "versions of `nvidia-fake-a` the index has for this machine: 1.0.7, {}; pin one of them",
            newest.join(", ")
        )),
        "{said}"
    );
}
