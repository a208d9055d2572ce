//! Unpacking a wheel (a zip file) into a folder, as `pip install --target` lays it out,
//! each file through the home's shared files ([`super::shared`]): the folder gets a
//! hard link to the one copy of those bytes. A wheel is data from the network: a
//! member whose path is absolute, leaves the folder, or is a link is refused, and sizes
//! are bounded.

use std::path::{Component, Path, PathBuf};

use super::shared::{FileStore, Put};
use crate::error::{Error, IoContext, Result};

/// The most one wheel may unpack to: the largest toolkit component wheels unpack to a
/// few GiB.
const MAX_UNPACKED_BYTES: u64 = 16 << 30;

/// How many times its own size a wheel may unpack to (headers compress about 5×; a
/// zip bomb, 1,000× and more), and the floor of that bound for small wheels.
const MAX_RATIO: u64 = 20;
const MIN_BOUND: u64 = 64 << 20;

/// Unpacks `wheel` into `dest` (created if needed), each file stored in `store` and
/// linked (else copied) from there; files already in `dest` are replaced (wheels of one
/// toolkit share a few files, as pip's installs do). Returns the number of files
/// placed. The members may hold at most `MAX_RATIO` times the wheel's size (at least
/// 64 MiB, at most 16 GiB), checked against what each member really holds. Files are
/// read-only (0444, or 0555 where the wheel marks them executable).
pub fn unpack(wheel: &Path, dest: &Path, store: &mut FileStore) -> Result<usize> {
    let file = std::fs::File::open(wheel).at("open", wheel)?;
    let packed = file.metadata().at("read", wheel)?.len();
    let bound = packed
        .saturating_mul(MAX_RATIO)
        .clamp(MIN_BOUND, MAX_UNPACKED_BYTES);
    let bad = |message: String| {
        Error::environment(
            format!("wheel `{}`: {message}", wheel.display()),
            "the file is not a wheel kart can install; run `kart toolchain install` again",
        )
    };
    let mut archive =
        zip::ZipArchive::new(std::io::BufReader::new(file)).map_err(|e| bad(e.to_string()))?;
    let mut total = 0u64;
    let mut written = 0usize;
    for i in 0..archive.len() {
        let mut member = archive.by_index(i).map_err(|e| bad(e.to_string()))?;
        let name = member.name().map_err(|e| bad(e.to_string()))?.into_owned();
        let Some(relative) = safe_path(&name) else {
            return Err(bad(format!(
                "member {} is not a relative path inside the wheel",
                crate::untrusted::quoted(&name)
            )));
        };
        let path = dest.join(&relative);
        if member.is_dir() {
            std::fs::create_dir_all(&path).at("create", &path)?;
            continue;
        }
        if member.is_symlink() {
            return Err(bad(format!(
                "member {} is a symbolic link",
                crate::untrusted::quoted(&name)
            )));
        }
        total = total.saturating_add(member.size());
        if total > bound {
            return Err(bad(format!(
                "unpacks to more than {} MiB, {MAX_RATIO} times its {packed} bytes: refused as a zip bomb",
                bound >> 20
            )));
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).at("create", parent)?;
        }
        let executable = member.unix_mode().unwrap_or(0o644) & 0o111 != 0;
        let size = member.size();
        let stored = match store.put(&mut member, size, executable)? {
            Put::Stored(stored) => stored,
            Put::WrongSize(copied) => {
                return Err(bad(format!(
                    "member {} holds {copied} bytes, not the {size} its header says",
                    crate::untrusted::quoted(&name)
                )));
            }
        };
        // Replace, never write through: an existing file is a hard link elsewhere.
        store.place(&stored, &path)?;
        written += 1;
    }
    Ok(written)
}

/// `name` as a relative path of normal components only.
fn safe_path(name: &str) -> Option<PathBuf> {
    let path = Path::new(name);
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Normal(c) => out.push(c),
            Component::CurDir => {}
            _ => return None,
        }
    }
    (!out.as_os_str().is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_relative_paths_inside_the_wheel_are_taken() {
        assert_eq!(
            safe_path("nvidia/cu13/bin/nvcc"),
            Some("nvidia/cu13/bin/nvcc".into())
        );
        assert_eq!(safe_path("./a/b"), Some("a/b".into()));
        for bad in ["/etc/passwd", "../x", "a/../../x", "", "."] {
            assert_eq!(safe_path(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_wheel_unpacks_with_its_modes_and_a_hostile_one_is_refused() {
        use std::io::Write;
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let make = |name: &str, members: &[(&str, u32, &[u8])]| {
            let path = dir.path().join(name);
            let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
            for (member, mode, bytes) in members {
                let options = zip::write::SimpleFileOptions::default().unix_permissions(*mode);
                zip.start_file(*member, options).unwrap();
                zip.write_all(bytes).unwrap();
            }
            zip.finish().unwrap();
            path
        };
        let good = make(
            "good.whl",
            &[
                ("pkg/bin/tool", 0o755, b"#!/bin/sh\n"),
                ("pkg/include/a.h", 0o644, b"// a\n"),
            ],
        );
        let out = dir.path().join("out");
        let mut store = FileStore::open(&dir.path().join("home")).unwrap();
        assert_eq!(unpack(&good, &out, &mut store).unwrap(), 2);
        let mode = std::fs::metadata(out.join("pkg/bin/tool"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o555);
        assert_eq!(
            std::fs::read(out.join("pkg/include/a.h")).unwrap(),
            b"// a\n"
        );

        let hostile = make("bad.whl", &[("../escape.h", 0o644, b"x")]);
        let err = unpack(&hostile, &dir.path().join("out2"), &mut store).unwrap_err();
        assert!(err.to_string().contains("not a relative path"), "{err}");
        assert!(!dir.path().join("escape.h").exists());
    }

    #[test]
    fn a_zip_bomb_is_refused_before_it_fills_the_disk() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bomb.whl");
        let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .large_file(true);
        // 160 MiB of zeros deflate to about 160 KiB: 1,000 times the wheel's size.
        let zeros = vec![0u8; 1 << 20];
        for member in ["pkg/a.h", "pkg/b.h"] {
            zip.start_file(member, options).unwrap();
            for _ in 0..80 {
                zip.write_all(&zeros).unwrap();
            }
        }
        zip.finish().unwrap();
        let packed = std::fs::metadata(&path).unwrap().len();
        assert!(packed < 1 << 20, "{packed}");
        let out = dir.path().join("out");
        let mut store = FileStore::open(&dir.path().join("home")).unwrap();
        let err = unpack(&path, &out, &mut store).unwrap_err();
        assert!(err.to_string().contains("zip bomb"), "{err}");
        // The first member fits the 64 MiB floor no more than the second: nothing of
        // either was written beyond the bound.
        let written: u64 = ["pkg/a.h", "pkg/b.h"]
            .iter()
            .filter_map(|m| std::fs::metadata(out.join(m)).ok())
            .map(|m| m.len())
            .sum();
        assert!(written <= MIN_BOUND, "{written}");
    }
}
