//! Input roots of remote actions (REAPI v2): a tree of files laid out by relative
//! path, turned into `Directory` messages, each named by the digest of its encoding
//! (a Merkle tree), and the blobs an executor needs for it: every file and every
//! `Directory`, by digest, each read only when it must be uploaded.
//!
//! A `Directory`'s files, folders and symlinks are sorted by name and unique, so the
//! same files give the same root digest wherever they lie on disk; a folder added whole
//! ([`TreeBuilder::add_tree`]) is one digest, built once and shared by every action
//! of a build (the toolkit, a header library). Symlinks in a folder are followed, as
//! the action key follows them ([`crate::tree::collect_files`]): the executor gets the
//! content the key hashed, and nothing that points outside the input root.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::UNIX_EPOCH;

use bazel_remote_apis::build::bazel::remote::execution::v2 as re;
use prost::Message as _;

use crate::digest::sha256_file;
use crate::error::{IoContext, Result};

pub use crate::remote::grpc::Digest;

/// Where a blob's bytes are.
#[derive(Clone, Debug)]
pub enum BlobSource {
    /// A file, read when the blob is uploaded (and checked against its digest then).
    File(PathBuf),
    /// Bytes in memory (an encoded message, a generated unit).
    Bytes(Arc<Vec<u8>>),
}

impl BlobSource {
    /// The bytes.
    pub fn read(&self) -> Result<Vec<u8>> {
        match self {
            BlobSource::File(path) => std::fs::read(path).at("read", path),
            BlobSource::Bytes(bytes) => Ok(bytes.as_ref().clone()),
        }
    }
}

/// The blobs of one or more trees, by digest: what an executor may need uploaded.
#[derive(Clone, Debug, Default)]
pub struct Blobs(pub BTreeMap<Digest, BlobSource>);

impl Blobs {
    /// Adds bytes; returns their digest.
    pub fn add_bytes(&mut self, bytes: Vec<u8>) -> Digest {
        let digest = Digest::of(&bytes);
        self.0
            .entry(digest.clone())
            .or_insert_with(|| BlobSource::Bytes(Arc::new(bytes)));
        digest
    }

    /// Adds every blob of `other`.
    pub fn extend(&mut self, other: &Blobs) {
        for (d, s) in &other.0 {
            self.0.entry(d.clone()).or_insert_with(|| s.clone());
        }
    }

    /// Total bytes.
    pub fn bytes(&self) -> u64 {
        self.0.keys().map(|d| d.size).sum()
    }
}

/// A file's digest and executable bit, remembered by path, size and mtime: a build
/// hashes each file of the toolkit and of a library once, however many actions use it.
#[derive(Debug, Default)]
pub struct DigestCache {
    known: Mutex<HashMap<PathBuf, (u64, u128, Digest, bool)>>,
}

impl DigestCache {
    /// The digest and executable bit of the regular file at `path` (symlinks followed).
    pub fn file(&self, path: &Path) -> Result<(Digest, bool)> {
        use std::os::unix::fs::PermissionsExt as _;
        let meta = std::fs::metadata(path).at("stat", path)?;
        let mtime = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        let executable = meta.permissions().mode() & 0o111 != 0;
        if let Ok(known) = self.known.lock()
            && let Some((size, time, digest, x)) = known.get(path)
            && *size == meta.len()
            && *time == mtime
        {
            return Ok((digest.clone(), *x));
        }
        let digest = Digest {
            hash: sha256_file(path)?,
            size: meta.len(),
        };
        if let Ok(mut known) = self.known.lock() {
            known.insert(
                path.to_path_buf(),
                (meta.len(), mtime, digest.clone(), executable),
            );
        }
        Ok((digest, executable))
    }
}

/// One name in a folder being assembled.
#[derive(Debug)]
enum Node {
    File {
        digest: Digest,
        executable: bool,
    },
    Folder(Folder),
    /// A folder whose `Directory` was built before: its digest.
    Tree(Digest),
}

#[derive(Debug, Default)]
struct Folder(BTreeMap<String, Node>);

/// A tree of files being laid out by relative path (`a/b/c.h`), then built into
/// `Directory` messages.
#[derive(Debug, Default)]
pub struct TreeBuilder {
    root: Folder,
}

/// The components of a relative path, refused if it is absolute, empty or climbs out
/// (`..`), so nothing can be laid out outside the root.
fn components(path: &str) -> std::result::Result<Vec<&str>, String> {
    let parts: Vec<&str> = path
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    if path.starts_with('/') || parts.is_empty() || parts.contains(&"..") {
        return Err(format!(
            "`{path}` is not a relative path inside the input root"
        ));
    }
    Ok(parts)
}

impl TreeBuilder {
    /// Lays `node` at `path`; the same file twice is fine, two different things at one
    /// path are an error.
    fn add(&mut self, path: &str, node: Node) -> std::result::Result<(), String> {
        let parts = components(path)?;
        let (last, folders) = parts.split_last().ok_or("an empty path")?;
        let mut here = &mut self.root;
        for (i, part) in folders.iter().enumerate() {
            let next = here
                .0
                .entry((*part).to_string())
                .or_insert_with(|| Node::Folder(Folder::default()));
            here = match next {
                Node::Folder(f) => f,
                _ => {
                    return Err(format!(
                        "`{}` is both a file and a folder of the input root",
                        parts[..=i].join("/")
                    ));
                }
            };
        }
        match here.0.get(*last) {
            None => {
                here.0.insert((*last).to_string(), node);
                Ok(())
            }
            Some(Node::File { digest, executable }) => match &node {
                Node::File {
                    digest: d,
                    executable: x,
                } if d == digest && x == executable => Ok(()),
                _ => Err(format!("`{path}` is laid out twice, differently")),
            },
            Some(Node::Tree(digest)) => match &node {
                Node::Tree(d) if d == digest => Ok(()),
                _ => Err(format!("`{path}` is laid out twice, differently")),
            },
            Some(Node::Folder(_)) => Err(format!("`{path}` is already a folder")),
        }
    }

    /// A file with this digest at `path`.
    pub fn add_file(
        &mut self,
        path: &str,
        digest: Digest,
        executable: bool,
    ) -> std::result::Result<(), String> {
        self.add(path, Node::File { digest, executable })
    }

    /// A folder built before ([`TreeBuilder::build`], [`folder_tree`]) at `path`.
    pub fn add_tree(&mut self, path: &str, digest: Digest) -> std::result::Result<(), String> {
        self.add(path, Node::Tree(digest))
    }

    /// Builds every `Directory`, adds each to `blobs`, and returns the root's digest.
    pub fn build(self, blobs: &mut Blobs) -> Digest {
        build_folder(self.root, blobs)
    }
}

fn build_folder(folder: Folder, blobs: &mut Blobs) -> Digest {
    let mut dir = re::Directory::default();
    // BTreeMap order is byte order of the UTF-8 names: code point order, as the
    // protocol requires.
    for (name, node) in folder.0 {
        match node {
            Node::File { digest, executable } => dir.files.push(re::FileNode {
                name,
                digest: Some(digest.to_proto()),
                is_executable: executable,
                node_properties: None,
            }),
            Node::Folder(sub) => {
                let digest = build_folder(sub, blobs);
                dir.directories.push(re::DirectoryNode {
                    name,
                    digest: Some(digest.to_proto()),
                });
            }
            Node::Tree(digest) => dir.directories.push(re::DirectoryNode {
                name,
                digest: Some(digest.to_proto()),
            }),
        }
    }
    blobs.add_bytes(dir.encode_to_vec())
}

/// The `Directory` tree of the files under `dir` (symlinks followed) that `keep` accepts
/// (given each file's path relative to `dir`, `/`-separated); the files and every
/// `Directory` go into `blobs`. Digests come from `cache`.
pub fn folder_tree(
    dir: &Path,
    keep: &dyn Fn(&str) -> bool,
    cache: &DigestCache,
    blobs: &mut Blobs,
) -> Result<Digest> {
    let mut rel = Vec::new();
    crate::tree::collect_files(dir, dir, &mut rel)?;
    let mut tree = TreeBuilder::default();
    for r in rel.into_iter().filter(|r| keep(r)) {
        let path = dir.join(&r);
        let (digest, executable) = cache.file(&path)?;
        blobs
            .0
            .entry(digest.clone())
            .or_insert_with(|| BlobSource::File(path.clone()));
        tree.add_file(&r, digest, executable)
            .map_err(|why| crate::error::Error::environment(why, "rename the file"))?;
    }
    Ok(tree.build(blobs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn project(root: &Path) {
        write(root, "kernels/k/k.cu", "#include \"common.h\"\n");
        write(root, "kernels/k/common.h", "#define X 1\n");
        write(root, "include/lib/a.h", "int a;\n");
    }

    fn root_digest(root: &Path) -> Digest {
        let mut blobs = Blobs::default();
        let tree = folder_tree(root, &|_| true, &DigestCache::default(), &mut blobs).unwrap();
        // Every directory and file of the tree is among the blobs.
        assert_eq!(blobs.0.len(), 3 + 5, "{blobs:?}");
        tree
    }

    #[test]
    fn the_same_files_give_the_same_root_in_two_folders() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        project(a.path());
        project(b.path());
        assert_eq!(root_digest(a.path()), root_digest(b.path()));
    }

    #[test]
    fn changing_one_header_changes_the_root() {
        let a = tempfile::tempdir().unwrap();
        project(a.path());
        let before = root_digest(a.path());
        write(a.path(), "include/lib/a.h", "int b;\n");
        assert_ne!(before, root_digest(a.path()));
    }

    #[test]
    fn entries_are_sorted_and_executable_bits_kept() {
        use std::os::unix::fs::PermissionsExt as _;
        let a = tempfile::tempdir().unwrap();
        write(a.path(), "b", "b");
        write(a.path(), "a", "a");
        write(a.path(), "B", "B");
        std::fs::set_permissions(a.path().join("a"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        let mut blobs = Blobs::default();
        let root = folder_tree(a.path(), &|_| true, &DigestCache::default(), &mut blobs).unwrap();
        let bytes = blobs.0[&root].read().unwrap();
        let dir = re::Directory::decode(bytes.as_slice()).unwrap();
        let names: Vec<(&str, bool)> = dir
            .files
            .iter()
            .map(|f| (f.name.as_str(), f.is_executable))
            .collect();
        assert_eq!(names, [("B", false), ("a", true), ("b", false)]);
    }

    #[test]
    fn paths_stay_inside_the_root_and_conflicts_are_refused() {
        let mut t = TreeBuilder::default();
        let d = Digest::of(b"x");
        assert!(t.add_file("../x", d.clone(), false).is_err());
        assert!(t.add_file("/etc/passwd", d.clone(), false).is_err());
        t.add_file("a/b", d.clone(), false).unwrap();
        t.add_file("a/b", d.clone(), false).unwrap();
        assert!(t.add_file("a/b", Digest::of(b"y"), false).is_err());
        assert!(t.add_file("a/b/c", d.clone(), false).is_err());
        assert!(t.add_file("a", d, false).is_err());
    }

    #[test]
    fn symlinks_are_followed() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        write(a.path(), "real/x.h", "x");
        std::os::unix::fs::symlink("real", a.path().join("link")).unwrap();
        write(b.path(), "real/x.h", "x");
        write(b.path(), "link/x.h", "x");
        let digest = |p: &Path| {
            folder_tree(p, &|_| true, &DigestCache::default(), &mut Blobs::default()).unwrap()
        };
        assert_eq!(digest(a.path()), digest(b.path()));
    }
}
