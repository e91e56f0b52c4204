//! An action's input root as REAPI sees it: every input of the [`Action`](super::super::Action)
//! at the place the executor gives it (`super::Layout`), so that relative paths between
//! inputs, and from the working folder to each, are the same on a worker as here. Files are
//! hashed (SHA-256, the digest function every REAPI server speaks) once per process; the
//! folders are the REAPI `Directory` messages, each stored by its own digest.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bazel_remote_apis::build::bazel::remote::execution::v2 as re;
use prost::Message;
use sha2::{Digest as _, Sha256};

/// A REAPI digest: SHA-256 in lower-case hex and the size.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Blob {
    /// Lower-case hex SHA-256.
    pub hash: String,
    /// Size in bytes.
    pub size: i64,
}

impl Blob {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Blob {
        Blob {
            hash: hex::encode(Sha256::digest(bytes)),
            size: bytes.len() as i64,
        }
    }
    /// As the protocol's message.
    pub fn proto(&self) -> re::Digest {
        re::Digest {
            hash: self.hash.clone(),
            size_bytes: self.size,
        }
    }
    /// From the protocol's message.
    pub fn from_proto(d: &re::Digest) -> Blob {
        Blob {
            hash: d.hash.clone(),
            size: d.size_bytes,
        }
    }
}

/// Where a blob's bytes are: a file of this machine, or in memory (a message).
#[derive(Debug, Clone)]
pub enum Source {
    /// A file, read when uploaded.
    File(PathBuf),
    /// Bytes made here (a `Directory`, the `Command`, the `Action`).
    Bytes(Arc<Vec<u8>>),
}

/// One entry of a folder.
#[derive(Debug, Clone)]
enum Node {
    File { blob: Blob, executable: bool },
    Link(String),
    Dir(BTreeMap<String, Node>),
}

/// File digests by (path, size, modification time), for the life of the process: the
/// toolkit's thousands of files are hashed once however many actions send them.
#[derive(Debug, Default)]
pub struct Hashes {
    files: Mutex<HashMap<(PathBuf, u64, i128), Blob>>,
}

impl Hashes {
    fn file(&self, path: &Path, meta: &std::fs::Metadata) -> std::io::Result<Blob> {
        use std::os::unix::fs::MetadataExt;
        let key = (
            path.to_path_buf(),
            meta.len(),
            meta.mtime() as i128 * 1_000_000_000 + meta.mtime_nsec() as i128,
        );
        if let Some(b) = self.files.lock().expect("hashes").get(&key) {
            return Ok(b.clone());
        }
        let mut h = Sha256::new();
        let mut f = std::fs::File::open(path)?;
        let mut buf = vec![0u8; 1 << 16];
        let mut size = 0i64;
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
            size += n as i64;
        }
        let blob = Blob {
            hash: hex::encode(h.finalize()),
            size,
        };
        self.files.lock().expect("hashes").insert(key, blob.clone());
        Ok(blob)
    }
}

/// The input root of one action: its digest and every blob it is made of.
#[derive(Debug)]
pub struct InputRoot {
    /// The root `Directory`'s digest.
    pub digest: Blob,
    /// Every blob (files and `Directory` messages) with where its bytes are.
    pub blobs: BTreeMap<Blob, Source>,
    /// The digest of each folder at the top of the root, by name (the toolkit's is the
    /// action's `cuda-aot-toolkit` platform property).
    pub tops: BTreeMap<String, Blob>,
}

/// The input root holding `inputs` (files and folders of this machine, each at the place
/// given: its path's components below the root), plus empty folders at `dirs` (the working
/// folder, the outputs' folders).
pub fn input_root(
    inputs: &[(PathBuf, Vec<String>)],
    dirs: &[Vec<String>],
    hashes: &Hashes,
) -> std::io::Result<InputRoot> {
    let mut root = BTreeMap::new();
    let mut files: BTreeMap<Blob, Source> = BTreeMap::new();
    for d in dirs {
        place_dir(&mut root, d);
    }
    for (input, at) in inputs {
        let node = scan(input, hashes, &mut files)?;
        place(&mut root, at, node, input)?;
    }
    let mut blobs = files;
    let mut tops = BTreeMap::new();
    let digest = store(&root, &mut blobs, Some(&mut tops));
    Ok(InputRoot {
        digest,
        blobs,
        tops,
    })
}

/// Makes the folder `at` (and its parents) exist in `root`.
fn place_dir(root: &mut BTreeMap<String, Node>, at: &[String]) {
    let mut dir = root;
    for part in at {
        let entry = dir
            .entry(part.clone())
            .or_insert_with(|| Node::Dir(BTreeMap::new()));
        dir = match entry {
            Node::Dir(d) => d,
            // A file where a folder is wanted: the input wins (a conflict would fail the
            // action, which names it).
            _ => return,
        };
    }
}

/// Puts `node` at `at`, merging folders (an input inside another input).
fn place(
    root: &mut BTreeMap<String, Node>,
    at: &[String],
    node: Node,
    shown: &Path,
) -> std::io::Result<()> {
    let Some((last, parents)) = at.split_last() else {
        return Err(std::io::Error::other("the input / is not allowed"));
    };
    place_dir(root, parents);
    let mut dir = root;
    for p in parents {
        dir = match dir.get_mut(p) {
            Some(Node::Dir(d)) => d,
            _ => {
                return Err(std::io::Error::other(format!(
                    "{}: a parent is a file",
                    shown.display()
                )));
            }
        };
    }
    match (dir.get_mut(last), node) {
        (Some(Node::Dir(have)), Node::Dir(add)) => merge(have, add),
        (_, node) => {
            dir.insert(last.clone(), node);
        }
    }
    Ok(())
}

fn merge(have: &mut BTreeMap<String, Node>, add: BTreeMap<String, Node>) {
    for (name, node) in add {
        match (have.get_mut(&name), node) {
            (Some(Node::Dir(h)), Node::Dir(a)) => merge(h, a),
            (_, node) => {
                have.insert(name, node);
            }
        }
    }
}

/// The node of the file or folder `path` (links kept as links), its files added to
/// `files`.
fn scan(path: &Path, hashes: &Hashes, files: &mut BTreeMap<Blob, Source>) -> std::io::Result<Node> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::symlink_metadata(path)?;
    let kind = meta.file_type();
    if kind.is_symlink() {
        let target = std::fs::read_link(path)?;
        // A link to an absolute path would mean nothing on a worker: what it points to is
        // sent instead (the same bytes as the toolkit's file it names, stored once).
        if target.is_absolute() {
            return scan(&std::fs::canonicalize(path)?, hashes, files);
        }
        return Ok(Node::Link(target.to_string_lossy().into_owned()));
    }
    if kind.is_file() {
        let blob = hashes.file(path, &meta)?;
        files.insert(blob.clone(), Source::File(path.to_path_buf()));
        return Ok(Node::File {
            blob,
            executable: meta.permissions().mode() & 0o111 != 0,
        });
    }
    if kind.is_dir() {
        let mut out = BTreeMap::new();
        for e in std::fs::read_dir(path)? {
            let e = e?;
            let name = e.file_name().to_str().map(str::to_string).ok_or_else(|| {
                std::io::Error::other(format!("{}: a name that is not UTF-8", e.path().display()))
            })?;
            out.insert(name, scan(&e.path(), hashes, files)?);
        }
        return Ok(Node::Dir(out));
    }
    Err(std::io::Error::other(format!(
        "{}: not a file, folder or link",
        path.display()
    )))
}

/// Stores the `Directory` messages of `dir` (and below) in `blobs`; returns its digest.
fn store(
    dir: &BTreeMap<String, Node>,
    blobs: &mut BTreeMap<Blob, Source>,
    mut tops: Option<&mut BTreeMap<String, Blob>>,
) -> Blob {
    let mut msg = re::Directory::default();
    for (name, node) in dir {
        match node {
            Node::File { blob, executable } => msg.files.push(re::FileNode {
                name: name.clone(),
                digest: Some(blob.proto()),
                is_executable: *executable,
                ..Default::default()
            }),
            Node::Link(target) => msg.symlinks.push(re::SymlinkNode {
                name: name.clone(),
                target: target.clone(),
                ..Default::default()
            }),
            Node::Dir(sub) => {
                let digest = store(sub, blobs, None);
                if let Some(tops) = tops.as_deref_mut() {
                    tops.insert(name.clone(), digest.clone());
                }
                msg.directories.push(re::DirectoryNode {
                    name: name.clone(),
                    digest: Some(digest.proto()),
                });
            }
        }
    }
    let bytes = msg.encode_to_vec();
    let blob = Blob::of(&bytes);
    blobs.insert(blob.clone(), Source::Bytes(Arc::new(bytes)));
    blob
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_are_placed_where_given_and_hashed_once() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir_all(src.join("inc")).unwrap();
        std::fs::write(src.join("a.cu"), b"kernel").unwrap();
        std::fs::write(src.join("inc/a.cuh"), b"header").unwrap();
        let hashes = Hashes::default();
        let place = |p: &str| vec!["w".to_string(), p.to_string()];
        let inputs = vec![(src.clone(), place("src"))];
        let dirs = vec![place("out")];
        let root = input_root(&inputs, &dirs, &hashes).unwrap();
        // The same inputs: the same root digest; a changed file: another.
        let again = input_root(&inputs, &dirs, &hashes).unwrap();
        assert_eq!(root.digest, again.digest);
        assert!(root.blobs.contains_key(&Blob::of(b"kernel")));
        std::fs::write(src.join("a.cu"), b"kernel 2").unwrap();
        let changed = input_root(&inputs, &dirs, &hashes).unwrap();
        assert_ne!(root.digest, changed.digest);
    }
}
