//! Reading the text files kart is configured by (`kart.toml`, `kernel.toml`, `kart.lock`,
//! the sidecars) so that every error names the file, line and column.

use std::ops::Range;
use std::path::{Component, Path, PathBuf};

use toml::Spanned;

use crate::error::{Error, IoContext, Result};

/// The most kart reads of one kind of file: any file kart reads may be a FIFO that
/// never ends, a link to `/dev/zero` or a mistake gigabytes long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    /// The kind of file, for messages.
    pub what: &'static str,
    /// Bytes.
    pub bytes: u64,
}

impl Limit {
    /// `kart.lock`: a lock of 100,000 artifacts is about 50 MB.
    pub const LOCK: Limit = Limit {
        what: "kart.lock",
        bytes: 256 << 20,
    };
    /// `kart.toml`, `kernel.toml`, fleet and problems files: written by hand.
    pub const MANIFEST: Limit = Limit {
        what: "a manifest",
        bytes: 4 << 20,
    };
    /// A kernel's source or header, scanned for the params it mentions.
    pub const SOURCE: Limit = Limit {
        what: "a kernel source",
        bytes: 64 << 20,
    };
    /// An action entry: it carries nvcc's stderr and the key's preimage.
    pub const ENTRY: Limit = Limit {
        what: "an action entry",
        bytes: 8 << 20,
    };
    /// `kart.tune`, `kart.attest`: one record per config and GPU.
    pub const SIDECAR: Limit = Limit {
        what: "a sidecar (kart.tune, kart.attest)",
        bytes: 64 << 20,
    };
    /// A run-time trace.
    pub const TRACE: Limit = Limit {
        what: "a trace",
        bytes: 256 << 20,
    };
    /// Small files of kart's own (a cached fingerprint, a record of an install).
    pub const CACHE: Limit = Limit {
        what: "a cache file",
        bytes: 4 << 20,
    };
}

/// What kind of file system object a file type is, for messages.
fn kind_of(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_dir() {
        "a folder"
    } else {
        "not a regular file"
    }
}

/// Opens `path` for reading only if it is (or a symlink leads to) a regular file. The
/// open itself cannot block (`O_NONBLOCK`: a FIFO with no writer would wait forever),
/// and the type is taken from the opened handle, so the file checked is the file read.
/// Anything else is an `InvalidInput` error saying what it is.
pub fn open_regular(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let t = file.metadata()?.file_type();
    if !t.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("it is {}, not a regular file", kind_of(t)),
        ));
    }
    Ok(file)
}

/// Opens the regular file at `path` for reading if it holds at most `limit` bytes,
/// and says how many it holds. A file of another type or over the limit is refused
/// with a message naming the file, the limit and what to do.
pub fn open_limited(path: &Path, limit: Limit) -> Result<(std::fs::File, u64)> {
    let file = match open_regular(path) {
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {
            return Err(over_limit(path, limit, e.to_string()));
        }
        other => other.at("read", path)?,
    };
    let len = file.metadata().at("read", path)?.len();
    if len > limit.bytes {
        return Err(over_limit(path, limit, format!("it is {}", byte_size(len))));
    }
    Ok((file, len))
}

/// The refusal of a file that is not a regular file of at most `limit` bytes: `why`
/// says what it is instead.
pub fn over_limit(path: &Path, limit: Limit, why: String) -> Error {
    Error::usage(
        format!(
            "`{}`: {why}; kart reads {} only from a regular file of at most {}",
            path.display(),
            limit.what,
            byte_size(limit.bytes)
        ),
        Some("replace it with the file itself (not a FIFO, device or link to one), or check that it is the right file".into()),
    )
}

fn byte_size(n: u64) -> String {
    if n >= 1 << 20 {
        format!("{} MiB", n >> 20)
    } else {
        format!("{n} bytes")
    }
}

/// Reads at most `limit` bytes of a regular file at `path`. A file of another type or
/// over the limit is refused with a message naming the file, the limit and what to do.
pub fn read_limited(path: &Path, limit: Limit) -> Result<Vec<u8>> {
    use std::io::Read;
    let (file, len) = open_limited(path, limit)?;
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(limit.bytes + 1)
        .read_to_end(&mut bytes)
        .at("read", path)?;
    if bytes.len() as u64 > limit.bytes {
        return Err(over_limit(path, limit, "it grew while being read".into()));
    }
    Ok(bytes)
}

/// Reads a UTF-8 text file of at most `limit` bytes, naming it on failure.
pub fn read_text(path: &Path, limit: Limit) -> Result<String> {
    text_of(read_limited(path, limit)?, path)
}

/// `bytes` as UTF-8 text; where they are not, an error naming `path` and the line and
/// column of the first bad byte.
pub fn text_of(bytes: Vec<u8>, path: &Path) -> Result<String> {
    String::from_utf8(bytes).map_err(|e| {
        let offset = e.utf8_error().valid_up_to();
        let before = &e.as_bytes()[..offset];
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let column = offset
            - before
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |p| p + 1)
            + 1;
        Error::InvalidFile {
            path: path.to_path_buf(),
            line,
            column,
            message: "the file is not valid UTF-8".into(),
            hint: Some("save it as UTF-8".into()),
        }
    })
}

/// Where `path` really is, even where its last components do not exist yet: the
/// deepest existing ancestor resolved through every symlink, the rest appended (what
/// `create_dir_all` would create). `None` for a dangling symlink on the way, whose
/// target nobody can check, or a path with `..` below the existing part.
pub fn real_path(path: &Path) -> Option<PathBuf> {
    let mut existing = path;
    let mut rest = Vec::new();
    while existing.symlink_metadata().is_err() {
        rest.push(existing.file_name()?);
        existing = existing.parent()?;
    }
    let mut real = std::fs::canonicalize(existing).ok()?;
    for name in rest.into_iter().rev() {
        real.push(name);
    }
    Some(real)
}

/// serde's "unknown field `x`, expected one of `a`, `b`" (or "expected `a`"): the
/// unknown name and the expected ones.
fn unknown_field(message: &str) -> Option<(&str, Vec<&str>)> {
    let rest = message.strip_prefix("unknown field `")?;
    let (unknown, rest) = rest.split_once('`')?;
    let expected = rest
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|name| !name.is_empty())
        .collect();
    Some((unknown, expected))
}

/// A manifest's text with its (display) path, for errors that point into it.
pub struct SourceFile<'a> {
    /// Its path as errors show it.
    pub path: PathBuf,
    /// Its text.
    pub text: &'a str,
}

impl SourceFile<'_> {
    /// 1-based line and column of a byte offset.
    pub fn locate(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let before = &self.text.as_bytes()[..offset];
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let line_start = before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |p| p + 1);
        let column = self.text[line_start..offset].chars().count() + 1;
        (line, column)
    }

    /// An error at `span` of the file, with a hint.
    pub fn error(
        &self,
        span: Range<usize>,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) -> Error {
        let (line, column) = self.locate(span.start);
        Error::InvalidFile {
            path: self.path.clone(),
            line,
            column,
            message: message.into(),
            hint: Some(hint.into()),
        }
    }

    /// Parses the text as TOML, errors pointing at the line and column.
    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        toml::from_str(self.text).map_err(|e| {
            let span = e.span().unwrap_or(0..0);
            let message = e.message().trim().to_string();
            if let Some((unknown, expected)) = unknown_field(&message) {
                let hint = match crate::suggest::did_you_mean(unknown, expected.iter().copied()) {
                    Some(guess) => format!("{guess} (keys here: {})", expected.join(", ")),
                    None => format!("remove or correct it; keys here: {}", expected.join(", ")),
                };
                return self.error(span, format!("unknown key `{unknown}`"), hint);
            }
            self.error(
                span,
                message,
                "fix the TOML; see the file formats in README.md",
            )
        })
    }

    /// Resolves a path written in this file (relative to `base`) to a path relative to
    /// `root`, refusing absolute paths and anything that leaves the project (also
    /// through symlinks).
    pub fn inside_root(
        &self,
        root: &Path,
        base: &Path,
        written: &Spanned<String>,
        what: &str,
    ) -> Result<PathBuf> {
        let text = written.get_ref();
        let outside = || {
            self.error(
                written.span(),
                format!("{what} `{text}` is outside the project"),
                "use a relative path that stays inside the folder holding kart.toml",
            )
        };
        let p = Path::new(text);
        if text.is_empty() || p.is_absolute() {
            return Err(self.error(
                written.span(),
                format!("{what} `{text}` must be a relative path"),
                "write it relative to the file that names it",
            ));
        }
        let mut joined = base.strip_prefix(root).unwrap_or(base).to_path_buf();
        for component in p.components() {
            match component {
                Component::Normal(c) => joined.push(c),
                Component::CurDir => {}
                Component::ParentDir => {
                    if !joined.pop() {
                        return Err(outside());
                    }
                }
                Component::RootDir | Component::Prefix(_) => return Err(outside()),
            }
        }
        // A symlink may still lead out of the project, also one above a folder that
        // does not exist yet (kart would create it on the far side of the link).
        match real_path(&root.join(&joined)) {
            Some(real) if real.starts_with(root) => Ok(joined),
            _ => Err(outside()),
        }
    }
}
