//! sha256 digests and the canonical encoding every key in kart is hashed over.

use std::io::Read;
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::error::{IoContext, Result};

/// Lower-case hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Lower-case hex sha256 of a file's contents, streamed.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut file = crate::text::open_regular(path).at("open", path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf).at("read", path)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

/// Lower-case hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// True for a 64-digit lower-case hex string: the only form kart accepts as a digest,
/// so that a digest can safely become a file name.
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// An ordered list of named inputs, hashed with an unambiguous encoding: a domain tag,
/// then for each pair the length-prefixed name and value. Two different lists can never
/// encode to the same bytes, and the encoding depends on nothing but the list (not on
/// `std::hash`, the platform or the crate versions).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Preimage(pub Vec<(String, String)>);

impl Preimage {
    /// Appends a named input.
    pub fn push(&mut self, name: impl Into<String>, value: impl Into<String>) {
        self.0.push((name.into(), value.into()));
    }

    /// sha256 over `domain` and every pair, length-prefixed.
    pub fn digest(&self, domain: &str) -> String {
        let mut h = Sha256::new();
        let mut field = |bytes: &[u8]| {
            h.update((bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        };
        field(domain.as_bytes());
        for (name, value) in &self.0 {
            field(name.as_bytes());
            field(value.as_bytes());
        }
        hex(&h.finalize())
    }

    /// The value of the first input named `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_sha256() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(is_sha256_hex(&sha256_hex(b"")));
        assert!(!is_sha256_hex("../etc/passwd"));
        assert!(!is_sha256_hex(&"A".repeat(64)));
    }

    #[test]
    fn encoding_is_unambiguous() {
        let mut a = Preimage::default();
        a.push("ab", "c");
        let mut b = Preimage::default();
        b.push("a", "bc");
        assert_ne!(a.digest("d"), b.digest("d"));
        assert_ne!(a.digest("d1"), a.digest("d2"));
    }
}
