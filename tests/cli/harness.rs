//! A small harness: a throw-away project in a temp folder, the `kart` binary run in
//! it, and an nvcc wrapper that logs every compile (and hangs on request).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root, read at run time.
pub fn repo_root() -> PathBuf {
    PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    )
}

/// Records that the calling test could not run here and why: a line on stderr, and a
/// file in the `skips` folder of Cargo's test scratch folder (`CARGO_TARGET_TMPDIR`)
/// that `scripts/test` counts as a skip (never as a pass). With `KART_REQUIRE_ALL=1` a
/// skip is a failure instead.
pub fn skip(test: &str, reason: &str) {
    if std::env::var("KART_REQUIRE_ALL").is_ok_and(|v| v == "1") {
        panic!("{test} cannot run here ({reason}) and KART_REQUIRE_ALL=1");
    }
    eprintln!("skipped: {test}: {reason}");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("skips");
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(dir.join(test), format!("{reason}\n"));
}

/// The pinned nvcc that `scripts/setup` installs.
pub fn real_nvcc() -> PathBuf {
    kart_testkit::pinned_nvcc(&repo_root())
}

/// A wrapper beside the real nvcc (so the toolkit root is the real one) that appends
/// its arguments to `$KART_TEST_NVCC_LOG` and, when a define `MODE=hang` is passed,
/// starts a grandchild holding stderr open and sleeps instead of compiling.
///
/// Written once per test process (the tests of one binary run on several threads),
/// through a temp file with a unique name in the same folder, then renamed: test
/// binaries running at the same time each write the same bytes, and a reader never sees
/// a partial script.
pub fn logging_nvcc() -> PathBuf {
    static WRAPPER: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    WRAPPER.get_or_init(write_logging_nvcc).clone()
}

fn write_logging_nvcc() -> PathBuf {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    // By its real path: checkouts that share one installed toolchain (through a link)
    // then all write the same wrapper, whose bytes are part of every key.
    let real = real_nvcc();
    let real = real.canonicalize().unwrap_or(real);
    let wrapper = real.with_file_name("nvcc-kart-test");
    let script = format!(
        "#!/bin/sh\n\
         [ -n \"$KART_TEST_NVCC_LOG\" ] && echo \"$*\" >> \"$KART_TEST_NVCC_LOG\"\n\
         case \"$*\" in\n\
         *-DMODE=hang*)\n\
           sleep 300 &\n\
           [ -n \"$KART_TEST_PIDS\" ] && echo $! >> \"$KART_TEST_PIDS\"\n\
           echo 'nvcc wrapper: hanging on purpose' >&2\n\
           sleep 300\n\
           exit 0;;\n\
         esac\n\
         exec \"{}\" \"$@\"\n",
        real.display()
    );
    if std::fs::read_to_string(&wrapper).ok().as_deref() != Some(script.as_str()) {
        let folder = wrapper.parent().expect("nvcc lives in a folder");
        let mut tmp = tempfile::Builder::new()
            .prefix(".nvcc-kart-test.")
            .tempfile_in(folder)
            .expect("create the wrapper's temp file");
        tmp.write_all(script.as_bytes()).expect("write the wrapper");
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o755))
            .expect("make the wrapper executable");
        tmp.persist(&wrapper)
            .expect("rename the wrapper into place");
    }
    wrapper
}

/// A project in a temp folder.
pub struct TestProject {
    pub dir: tempfile::TempDir,
    pub nvcc_log: PathBuf,
}

impl TestProject {
    /// An empty project with `kart.toml` for the given targets.
    pub fn new(targets: &[&str]) -> TestProject {
        let dir = tempfile::Builder::new()
            .prefix("kart-test-")
            .tempdir()
            .unwrap();
        let nvcc_log = dir.path().join("nvcc.log");
        let p = TestProject { dir, nvcc_log };
        let list: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
        p.write(
            "kart.toml",
            &format!(
                "[project]\ntargets = [{}]\n\n[toolchain]\nnvcc = \"13.0\"\n",
                list.join(", ")
            ),
        );
        p
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn write(&self, rel: &str, text: &str) {
        let path = self.root().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.root().join(rel)).unwrap()
    }

    /// A kernel `name` whose one entry is `name`, with extra `kernel.toml` lines.
    pub fn kernel(&self, name: &str, body: &str, toml_extra: &str) {
        self.write(
            &format!("kernels/{name}/{name}.cu"),
            &format!("extern \"C\" __global__ void {name}(float* out) {{\n{body}\n}}\n"),
        );
        self.write(
            &format!("kernels/{name}/kernel.toml"),
            &format!(
                "name = \"{name}\"\nsources = [\"{name}.cu\"]\nentry = [\"{name}\"]\n{toml_extra}"
            ),
        );
    }

    /// Runs kart with the logging nvcc.
    pub fn kart(&self, args: &[&str]) -> Output {
        self.kart_env(args, &[])
    }

    pub fn kart_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kart"));
        cmd.args(args)
            .current_dir(self.root())
            .env("KART_NVCC", logging_nvcc())
            .env("KART_TEST_NVCC_LOG", &self.nvcc_log)
            .env_remove("NVCC_PREPEND_FLAGS")
            .env_remove("NVCC_APPEND_FLAGS")
            .env_remove("NVCC_CCBIN");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    }

    /// Runs `sh -c SCRIPT kart` in the project, with the logging nvcc: `"$0"` in the
    /// script is the kart binary (for a umask or other shell state before it starts).
    pub fn kart_env_via_shell(&self, script: &str) -> Output {
        Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg(env!("CARGO_BIN_EXE_kart"))
            .current_dir(self.root())
            .env("KART_NVCC", logging_nvcc())
            .env("KART_TEST_NVCC_LOG", &self.nvcc_log)
            .env_remove("NVCC_PREPEND_FLAGS")
            .env_remove("NVCC_APPEND_FLAGS")
            .env_remove("NVCC_CCBIN")
            .output()
            .unwrap()
    }

    /// Runs kart and asserts success.
    pub fn ok(&self, args: &[&str]) -> Output {
        let out = self.kart(args);
        assert!(
            out.status.success(),
            "kart {args:?} failed:\n{}",
            text(&out)
        );
        out
    }

    /// How many compiles (not `--version` probes, not the smoke gate, not the `--dryrun`
    /// of a batch) the wrapper logged: a batch of configs is one.
    pub fn compiles(&self) -> usize {
        std::fs::read_to_string(&self.nvcc_log)
            .unwrap_or_default()
            .lines()
            .filter(|l| {
                l.contains(" -o ") && !l.contains("smoke/smoke.cu") && !l.contains("--dryrun")
            })
            .count()
    }

    /// The compile lines the wrapper logged.
    pub fn compile_lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.nvcc_log)
            .unwrap_or_default()
            .lines()
            .filter(|l| {
                l.contains(" -o ") && !l.contains("smoke/smoke.cu") && !l.contains("--dryrun")
            })
            .map(str::to_string)
            .collect()
    }

    pub fn clear_log(&self) {
        let _ = std::fs::remove_file(&self.nvcc_log);
    }

    /// Every blob file of the store: (relative path, bytes).
    pub fn blobs(&self) -> Vec<(String, Vec<u8>)> {
        let base = self.root().join("artifacts/v1/blobs");
        let mut out = Vec::new();
        for shard in std::fs::read_dir(&base).unwrap().flatten() {
            for f in std::fs::read_dir(shard.path()).unwrap().flatten() {
                let rel = f
                    .path()
                    .strip_prefix(&base)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                out.push((rel, std::fs::read(f.path()).unwrap()));
            }
        }
        out.sort();
        out
    }
}

/// The digests kart.lock names, in its order.
pub fn lock_digests(p: &TestProject) -> Vec<String> {
    p.read("kart.lock")
        .lines()
        .filter_map(|l| l.strip_prefix("digest = \""))
        .map(|d| d.trim_end_matches('"').to_string())
        .collect()
}

/// stdout and stderr of a run, for messages.
pub fn text(out: &Output) -> String {
    format!(
        "status: {}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}
