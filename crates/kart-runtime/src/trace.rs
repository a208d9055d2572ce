//! What a workload really ran: with `KART_TRACE=FILE` (or [`enable`]) the runtime
//! appends one JSON line per distinct (kernel, config, target, problem, GPU) it
//! launches, and one per distinct `best()` answer that did not come from a record for
//! exactly its problem. `kart coverage --trace` and `kart bundle --trace` read it.
//!
//! The hot path is a hash of the problem and a lookup in the loaded artifact's set of
//! problems seen; the file is written only when something new is seen (one `write` of
//! one line to a file opened for appending, so several processes can share it and a
//! killed process loses nothing written before). With tracing off a launch pays one
//! atomic load.

use std::collections::HashSet;
use std::fs::File;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use serde::{Deserialize, Serialize};

use crate::error::{Error, IoContext as _, Result};
use crate::model::{Config, Problem};

/// The variable naming the trace file.
pub const TRACE_ENV: &str = "KART_TRACE";

/// One line of a trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case", deny_unknown_fields)]
pub enum TraceRecord {
    /// A launch of an artifact for a problem (none: launched with explicit geometry).
    Launch {
        /// The kernel.
        kernel: String,
        /// Its config.
        config: Config,
        /// The artifact's target (`sm_90a`).
        target: String,
        /// The artifact's blob.
        digest: String,
        /// The problem, when the launch named one.
        problem: Option<Problem>,
        /// The GPU's name, as the driver reports it.
        gpu: String,
        /// Its compute capability (`9.0`).
        capability: String,
    },
    /// A `best()` answer that came from the nearest record or the kernel's default.
    Fallback {
        /// The kernel asked for (the base of its family).
        kernel: String,
        /// The problem.
        problem: Problem,
        /// The GPU's name.
        gpu: String,
        /// Its compute capability.
        capability: String,
        /// The kernel chosen (the base or a variant).
        chose: String,
        /// The config chosen.
        config: Config,
        /// `nearest` or `default`.
        source: String,
    },
}

/// The open trace of this process.
pub struct Tracer {
    path: PathBuf,
    file: Mutex<File>,
    /// Hashes of the fallback records written.
    fallbacks: Mutex<HashSet<u64, BuildHasherDefault<Prehashed>>>,
}

static TRACER: OnceLock<Option<Tracer>> = OnceLock::new();

/// The tracer, if tracing is on: [`enable`]d, or `KART_TRACE` set when first asked.
#[inline]
pub fn tracer() -> Option<&'static Tracer> {
    TRACER
        .get_or_init(|| {
            let path = std::env::var_os(TRACE_ENV).filter(|v| !v.is_empty())?;
            match Tracer::open(Path::new(&path)) {
                Ok(t) => Some(t),
                Err(e) => {
                    // Tracing must never stop a workload: say why once, run without.
                    eprintln!("kart: {TRACE_ENV}: {e}; running without a trace");
                    None
                }
            }
        })
        .as_ref()
}

/// Turns tracing on into `path` (appending), for programs that choose in code. Must
/// come before the first launch; an error if tracing was already decided.
pub fn enable(path: &Path) -> Result<()> {
    let tracer = Tracer::open(path)?;
    TRACER.set(Some(tracer)).map_err(|_| {
        Error::usage(
            "tracing was already decided for this process (by KART_TRACE or an earlier launch)",
            Some("call kart_runtime::trace::enable before the first launch".into()),
        )
    })
}

impl Tracer {
    fn open(path: &Path) -> Result<Tracer> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .at("open the trace", path)?;
        Ok(Tracer {
            path: path.to_path_buf(),
            file: Mutex::new(file),
            fallbacks: Mutex::default(),
        })
    }

    /// Where it writes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one record as one line. A failed write is reported once per record and
    /// never fails the launch.
    pub fn write(&self, record: &TraceRecord) {
        let Ok(mut line) = serde_json::to_vec(record) else {
            return;
        };
        line.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = file.write_all(&line) {
            eprintln!(
                "kart: cannot write the trace `{}`: {e}",
                self.path.display()
            );
        }
    }

    /// Records a `best()` answer that was not an exact record, once per (kernel,
    /// problem, GPU).
    pub fn fallback(&self, record: TraceRecord) {
        let TraceRecord::Fallback {
            kernel,
            problem,
            gpu,
            ..
        } = &record
        else {
            return;
        };
        let mut h = Fnv::default();
        h.write(kernel.as_bytes());
        h.write(gpu.as_bytes());
        let key = problem_hash(h, problem);
        let new = self
            .fallbacks
            .lock()
            .map(|mut seen| seen.insert(key))
            .unwrap_or(false);
        if new {
            self.write(&record);
        }
    }
}

/// The problems a loaded artifact has been traced with: the check a launch makes.
#[derive(Debug, Default)]
pub struct Seen(Mutex<HashSet<u64, BuildHasherDefault<Prehashed>>>);

impl Seen {
    /// Whether `problem` is new for this artifact (and from now on seen).
    #[inline]
    pub fn first(&self, problem: Option<&Problem>) -> bool {
        let key = problem.map_or(0, |p| problem_hash(Fnv::default(), p));
        self.0.lock().map(|mut s| s.insert(key)).unwrap_or(false)
    }
}

/// A 64-bit hash of a problem's keys and values (FNV-1a: a few nanoseconds for the
/// handful of keys a problem has).
fn problem_hash(mut h: Fnv, problem: &Problem) -> u64 {
    for (k, v) in problem {
        h.write(k.as_bytes());
        h.write_u8(0xff);
        h.write_i64(*v);
    }
    // Never 0, the key of "no problem".
    h.finish() | 1
}

/// FNV-1a.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// The hasher of sets whose keys are hashes already.
#[derive(Default)]
pub struct Prehashed(u64);

impl Hasher for Prehashed {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8) | u64::from(*b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// Reads a trace: every line a record, checked; a line that is not one is an error
/// naming its number (a torn last line of a killed process is skipped).
pub fn read(path: &Path) -> Result<Vec<TraceRecord>> {
    let text = crate::text::read_text(path, crate::text::Limit::TRACE)?;
    let mut records = Vec::new();
    let lines: Vec<&str> = text.split('\n').collect();
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let torn = i + 1 == lines.len() && !text.ends_with('\n');
        match serde_json::from_str::<TraceRecord>(line) {
            Ok(r) => {
                r.validate().map_err(|message| Error::InvalidFile {
                    path: path.to_path_buf(),
                    line: i + 1,
                    column: 1,
                    message,
                    hint: Some(
                        "a trace is written by the runtime with KART_TRACE set; do not edit it"
                            .into(),
                    ),
                })?;
                records.push(r);
            }
            Err(_) if torn => {}
            Err(e) => {
                return Err(Error::InvalidFile {
                    path: path.to_path_buf(),
                    line: i + 1,
                    column: e.column(),
                    message: format!("not a trace record: {e}"),
                    hint: Some(
                        "a trace is written by the runtime with KART_TRACE set; do not edit it"
                            .into(),
                    ),
                });
            }
        }
    }
    Ok(records)
}

impl TraceRecord {
    /// Checks every field beyond its type.
    pub fn validate(&self) -> std::result::Result<(), String> {
        use crate::untrusted::{identifier, label, release};
        let (kernel, problem, gpu, capability) = match self {
            TraceRecord::Launch {
                kernel,
                target,
                digest,
                problem,
                gpu,
                capability,
                ..
            } => {
                target
                    .parse::<crate::target::TargetArch>()
                    .map_err(|e| e.0)?;
                if !crate::digest::is_sha256_hex(digest) {
                    return Err("a digest must be 64 lower-case hex digits".into());
                }
                (kernel, problem.as_ref(), gpu, capability)
            }
            TraceRecord::Fallback {
                kernel,
                problem,
                gpu,
                capability,
                chose,
                source,
                ..
            } => {
                identifier("kernel", chose)?;
                if source != "nearest" && source != "default" {
                    return Err(format!("source `{source}` is not nearest or default"));
                }
                (kernel, Some(problem), gpu, capability)
            }
        };
        identifier("kernel", kernel)?;
        label("gpu", gpu)?;
        release("capability", capability)?;
        for key in problem.into_iter().flat_map(|p| p.keys()) {
            identifier("problem key", key)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_is_new_once_per_artifact() {
        let seen = Seen::default();
        let p: Problem = [("M".to_string(), 64), ("N".to_string(), 128)].into();
        let q: Problem = [("M".to_string(), 128), ("N".to_string(), 64)].into();
        assert!(seen.first(Some(&p)));
        assert!(!seen.first(Some(&p)));
        assert!(seen.first(Some(&q)));
        assert!(seen.first(None));
        assert!(!seen.first(None));
    }

    #[test]
    fn traces_round_trip_and_bad_lines_are_refused_at_their_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trace.jsonl");
        let tracer = Tracer::open(&path).unwrap();
        let launch = TraceRecord::Launch {
            kernel: "scale".into(),
            config: Config::default(),
            target: "sm_90a".into(),
            digest: "a".repeat(64),
            problem: Some([("N".to_string(), 4096)].into()),
            gpu: "NVIDIA H100 80GB HBM3".into(),
            capability: "9.0".into(),
        };
        let fallback = TraceRecord::Fallback {
            kernel: "scale".into(),
            problem: [("N".to_string(), 7)].into(),
            gpu: "NVIDIA H100 80GB HBM3".into(),
            capability: "9.0".into(),
            chose: "scale".into(),
            config: Config::default(),
            source: "default".into(),
        };
        tracer.write(&launch);
        tracer.fallback(fallback.clone());
        tracer.fallback(fallback.clone());
        assert_eq!(read(&path).unwrap(), vec![launch.clone(), fallback]);
        // A killed writer's torn last line is skipped; a bad line inside is not.
        std::fs::write(
            &path,
            format!(
                "{}\n{{\"event\":\"lau",
                serde_json::to_string(&launch).unwrap()
            ),
        )
        .unwrap();
        assert_eq!(read(&path).unwrap().len(), 1);
        std::fs::write(&path, "{\"event\":\"launch\"}\n").unwrap();
        let err = read(&path).unwrap_err().to_string();
        assert!(err.contains(":1:"), "{err}");
        let evil = serde_json::to_string(&launch)
            .unwrap()
            .replace("scale", "x; rm -rf /");
        std::fs::write(&path, evil + "\n").unwrap();
        assert!(read(&path).is_err());
    }
}
