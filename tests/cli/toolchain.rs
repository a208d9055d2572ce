//! kart for a project of one's own, with nothing of kart's repository: `kart init` in a
//! temporary folder, `kart toolchain install` of the pinned nvcc, a toolkit component
//! (cuRAND) and a header library (CUTLASS) from PyPI into kart's home, then build,
//! `--locked`, export and doctor. Real downloads: every test that installs shares one
//! home under cargo's target folder, which kart locks while installing, so a second
//! run (or another test binary) downloads nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::harness::{stderr, stdout, text};

/// The home shared by the tests that install (kept between runs).
fn shared_home() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("kart-home")
}

fn kart(dir: &Path, home: &Path, args: &[&str]) -> Output {
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

fn ok(dir: &Path, home: &Path, args: &[&str]) -> Output {
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
            .any(|l| l.starts_with('*') && l.contains("toolchain") && l.contains("13.0"))
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
        let downloads = home.join("downloads");
        let left: Vec<_> = std::fs::read_dir(&downloads)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{left:?}");
        assert!(!stdout(&out).contains("installed"), "{}", text(&out));
    }
}
