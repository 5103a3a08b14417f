//! sha256 of files, with a digest cache keyed by a cheap file identity (path, size,
//! mtime, inode) so an ordinary CLI call never rehashes tens of MB of binaries. The
//! cache also remembers each plugin's manifest, so the client can build its registry
//! view without loading plugins.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Hash a file in 64 KiB chunks.
pub fn file_sha256(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

/// The cheap identity of a file version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileIdentity {
    pub size: u64,
    pub mtime_ns: i128,
    pub ctime_ns: i128,
    pub inode: u64,
    pub device: u64,
}

impl FileIdentity {
    pub fn of(path: &Path) -> std::io::Result<FileIdentity> {
        let m = std::fs::metadata(path)?;
        Ok(FileIdentity {
            size: m.size(),
            mtime_ns: m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128,
            ctime_ns: m.ctime() as i128 * 1_000_000_000 + m.ctime_nsec() as i128,
            inode: m.ino(),
            device: m.dev(),
        })
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CacheEntry {
    pub identity: FileIdentity,
    pub sha256: String,
    /// Manifest (or load error) of a plugin file, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<Value>,
}

/// On-disk digest cache (`<runtime_home>/digest-cache.json`). Best effort: a
/// missing or unreadable cache only costs a rehash.
#[derive(Debug, Default)]
pub struct DigestCache {
    path: Option<PathBuf>,
    entries: BTreeMap<String, CacheEntry>,
    dirty: bool,
}

#[derive(Serialize, Deserialize)]
struct CacheFile {
    schema: String,
    entries: BTreeMap<String, CacheEntry>,
}

const CACHE_SCHEMA: &str = "aab.digest-cache/v1";

/// Largest digest cache read back (manifests included). A bigger file is ignored
/// like a corrupt one: it only costs a rehash.
pub const MAX_CACHE_BYTES: u64 = 32 * 1024 * 1024;

/// A small private file read through [`crate::fsread`] (no symlink, no FIFO wait,
/// regular files of at most `max` bytes); `None` for anything else.
pub fn read_regular_file_bounded(path: &Path, max: u64) -> Option<Vec<u8>> {
    crate::fsread::read_regular_bounded(path, max).ok().flatten()
}

impl DigestCache {
    pub fn open(path: PathBuf) -> DigestCache {
        let entries = read_regular_file_bounded(&path, MAX_CACHE_BYTES)
            .and_then(|b| serde_json::from_slice::<CacheFile>(&b).ok())
            .filter(|f| f.schema == CACHE_SCHEMA)
            .map(|f| f.entries)
            .unwrap_or_default();
        DigestCache { path: Some(path), entries, dirty: false }
    }

    pub fn in_memory() -> DigestCache {
        DigestCache::default()
    }

    /// The cached entry for `path` if its identity is unchanged.
    pub fn lookup(&self, path: &Path, identity: &FileIdentity) -> Option<&CacheEntry> {
        self.entries.get(&path.display().to_string()).filter(|e| &e.identity == identity)
    }

    /// sha256 of `path`, from the cache when the file identity is unchanged.
    pub fn sha256(&mut self, path: &Path) -> std::io::Result<(String, FileIdentity)> {
        let identity = FileIdentity::of(path)?;
        if let Some(e) = self.lookup(path, &identity) {
            return Ok((e.sha256.clone(), identity));
        }
        let sha = file_sha256(path)?;
        // Re-stat: a file modified while we hashed must not be cached under the
        // identity we saw before hashing.
        if FileIdentity::of(path)? == identity {
            self.entries.insert(path.display().to_string(), CacheEntry { identity: identity.clone(), sha256: sha.clone(), manifest: None });
            self.dirty = true;
        }
        Ok((sha, identity))
    }

    pub fn manifest(&self, path: &Path, sha256: &str) -> Option<&Value> {
        self.entries.get(&path.display().to_string()).filter(|e| e.sha256 == sha256).and_then(|e| e.manifest.as_ref())
    }

    pub fn set_manifest(&mut self, path: &Path, sha256: &str, manifest: Value) {
        if let Some(e) = self.entries.get_mut(&path.display().to_string())
            && e.sha256 == sha256 && e.manifest.as_ref() != Some(&manifest) {
                e.manifest = Some(manifest);
                self.dirty = true;
            }
    }

    /// Write the cache atomically (a new 0600 temp file, then rename) if it changed.
    /// It names every plugin file of the user and their manifests: private, like
    /// the rest of the runtime home.
    pub fn save(&mut self) {
        let Some(path) = &self.path else { return };
        if !self.dirty {
            return;
        }
        let Some(dir) = path.parent() else { return };
        if std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).is_err() {
            return;
        }
        let file = CacheFile { schema: CACHE_SCHEMA.into(), entries: std::mem::take(&mut self.entries) };
        let bytes = serde_json::to_vec(&file).unwrap_or_default();
        self.entries = file.entries;
        if bytes.len() as u64 > MAX_CACHE_BYTES {
            return;
        }
        let tmp = dir.join(format!(".digest-cache.{}.tmp", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        // `create_new` + O_NOFOLLOW: never write through something planted at the temp name.
        let ok = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
            .and_then(|mut f| f.write_all(&bytes).and_then(|()| f.sync_all()))
            .is_ok();
        if ok && std::fs::rename(&tmp, path).is_ok() {
            self.dirty = false;
        } else {
            let _ = std::fs::remove_file(&tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn cache_with_one_entry(path: PathBuf, hashed: &Path) -> DigestCache {
        let mut cache = DigestCache::open(path);
        cache.sha256(hashed).expect("hash");
        cache.save();
        cache
    }

    #[test]
    fn saved_cache_is_private_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let hashed = dir.path().join("plugin.so");
        std::fs::write(&hashed, b"bytes").unwrap();
        let path = dir.path().join("home").join("digest-cache.json");
        cache_with_one_entry(path.clone(), &hashed);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "digest-cache.json mode {mode:o}");
        let home_mode = std::fs::metadata(path.parent().unwrap()).unwrap().permissions().mode() & 0o777;
        assert_eq!(home_mode, 0o700, "runtime home mode {home_mode:o}");
        let reopened = DigestCache::open(path);
        let identity = FileIdentity::of(&hashed).unwrap();
        assert!(reopened.lookup(&hashed, &identity).is_some());
        // No temp file is left behind.
        let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("home")).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().ends_with(".tmp")).collect();
        assert!(leftovers.is_empty());
    }

    #[test]
    fn hostile_cache_files_are_ignored_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let hashed = dir.path().join("plugin.so");
        std::fs::write(&hashed, b"bytes").unwrap();
        let real = dir.path().join("real.json");
        cache_with_one_entry(real.clone(), &hashed);
        let identity = FileIdentity::of(&hashed).unwrap();
        // A symlink to a valid cache is not followed.
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(DigestCache::open(link).lookup(&hashed, &identity).is_none());
        // A FIFO nobody writes to: opening must not block.
        let fifo = dir.path().join("fifo.json");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: plain syscall with a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(DigestCache::open(fifo).entries.is_empty());
        // A character device that never ends is not read.
        assert!(read_regular_file_bounded(Path::new("/dev/zero"), MAX_CACHE_BYTES).is_none());
        // A directory, and a file over the cap.
        assert!(read_regular_file_bounded(dir.path(), MAX_CACHE_BYTES).is_none());
        assert!(read_regular_file_bounded(&real, 4).is_none());
        assert!(read_regular_file_bounded(&real, MAX_CACHE_BYTES).is_some());
    }
}
