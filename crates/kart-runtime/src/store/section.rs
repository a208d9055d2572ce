//! Bytes `start..start + len` of an open file, read by offset without moving its
//! cursor: a whole `kart.lock`, or a bundle's lock section. Every read stops at the
//! section's end, so a reader of one section never sees the bytes after it.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt as _;

/// A part of a file (or all of it), read by offset.
#[derive(Debug)]
pub struct Section {
    file: File,
    start: u64,
    len: u64,
}

impl Section {
    /// Bytes `start..start + len` of `file` (the caller checked that they lie inside).
    pub fn new(file: File, start: u64, len: u64) -> Section {
        Section { file, start, len }
    }

    /// Its length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Up to `len` bytes at `at` (counted from the section's start), fewer at its end;
    /// `None` on a read error.
    pub fn read_at(&self, at: u64, len: u64) -> Option<Vec<u8>> {
        let len = len.min(self.len.saturating_sub(at));
        let mut bytes = vec![0u8; usize::try_from(len).ok()?];
        let mut filled = 0;
        while filled < bytes.len() {
            match self
                .file
                .read_at(&mut bytes[filled..], self.start + at + filled as u64)
            {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
        bytes.truncate(filled);
        Some(bytes)
    }

    /// Exactly `len` bytes at `at` (counted from the section's start): an error when
    /// they cannot be read or run past the section's end.
    pub fn read_exact(&self, at: u64, len: u64) -> std::io::Result<Vec<u8>> {
        let inside = at.checked_add(len).is_some_and(|end| end <= self.len);
        let size = usize::try_from(len)
            .ok()
            .filter(|_| inside)
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("bytes {at}..+{len} lie past its {} bytes", self.len),
                )
            })?;
        let mut bytes = vec![0u8; size];
        self.file.read_exact_at(&mut bytes, self.start + at)?;
        Ok(bytes)
    }

    /// A reader of the whole section from its start.
    pub fn reader(&self) -> impl Read + '_ {
        SectionReader {
            section: self,
            at: 0,
        }
    }
}

struct SectionReader<'a> {
    section: &'a Section,
    at: u64,
}

impl Read for SectionReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.section.len.saturating_sub(self.at);
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        if want == 0 {
            return Ok(0);
        }
        let n = (self.section.file).read_at(&mut buf[..want], self.section.start + self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_stop_at_the_section_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"0123456789").unwrap();
        let s = Section::new(File::open(&path).unwrap(), 2, 5);
        assert_eq!(s.read_at(0, 100).unwrap(), b"23456");
        assert_eq!(s.read_at(4, 3).unwrap(), b"6");
        assert_eq!(s.read_at(9, 3).unwrap(), b"");
        assert_eq!(s.read_exact(1, 2).unwrap(), b"34");
        assert!(s.read_exact(4, 2).is_err());
        assert!(s.read_exact(u64::MAX, 2).is_err());
        let mut all = Vec::new();
        s.reader().read_to_end(&mut all).unwrap();
        assert_eq!(all, b"23456");
    }
}
