//! sha256 of files, with a digest cache keyed by a cheap file identity (path, size,
//! mtime, inode) so an ordinary CLI call never rehashes tens of MB of binaries. The
//! cache also remembers each plugin's manifest, so the client can build its registry
//! view without loading plugins.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
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

impl DigestCache {
    pub fn open(path: PathBuf) -> DigestCache {
        let entries = std::fs::read(&path)
            .ok()
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

    /// Write the cache atomically (temp file + rename) if it changed.
    pub fn save(&mut self) {
        let Some(path) = &self.path else { return };
        if !self.dirty {
            return;
        }
        let Some(dir) = path.parent() else { return };
        if std::fs::create_dir_all(dir).is_err() {
            return;
        }
        let file = CacheFile { schema: CACHE_SCHEMA.into(), entries: std::mem::take(&mut self.entries) };
        let bytes = serde_json::to_vec(&file).unwrap_or_default();
        self.entries = file.entries;
        let tmp = dir.join(format!(".digest-cache.{}.tmp", std::process::id()));
        let ok = std::fs::File::create(&tmp).and_then(|mut f| f.write_all(&bytes)).is_ok();
        if ok && std::fs::rename(&tmp, path).is_ok() {
            self.dirty = false;
        } else {
            let _ = std::fs::remove_file(&tmp);
        }
    }
}
