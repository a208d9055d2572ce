//! Reading the text files kart is configured by (`kart.toml`, `kernel.toml`, `kart.lock`,
//! the sidecars) so that every error names the file, line and column.

use std::ops::Range;
use std::path::{Component, Path, PathBuf};

use toml::Spanned;

use crate::error::{Error, IoContext, Result};

/// Reads a UTF-8 text file, naming it on failure.
pub fn read_text(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).at("read", path)?;
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
        // A symlink may still lead out of the project.
        if let Ok(real) = std::fs::canonicalize(root.join(&joined))
            && !real.starts_with(root)
        {
            return Err(outside());
        }
        Ok(joined)
    }
}
