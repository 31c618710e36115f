//! On-disk cache of compiled components.
//!
//! Compiling a component with Cranelift takes tens of milliseconds; loading the machine
//! code back takes a fraction of that. The cache key is the component's SHA-256 digest
//! plus the engine's compatibility hash (wasmtime version, target, engine settings), so a
//! host upgrade or a changed setting never loads stale code. The runtime supplies the
//! digest: hashed from the bytes, or known beforehand (taken by the build for a bundled
//! connector, recorded with a stored one) and then checked against the bytes only when
//! they are compiled, so nothing is ever filed under a digest its bytes do not have.
//!
//! Deserializing compiled code is `unsafe` in wasmtime because the bytes are trusted to
//! be machine code: the cache only ever loads files it wrote itself (each written whole
//! under a name no other writer uses, then renamed), opens a file and checks its length
//! and XXH3-128 against what it recorded at write time, so a truncated or corrupted file
//! is recompiled, not executed. On Linux the check reads the file through a read-only
//! mapping (its pages come from the page cache, nothing is copied), elsewhere it reads
//! the file into memory.
//!
//! On Linux wasmtime then maps that same open file (through `/proc/self/fd`, so a
//! rename in between cannot put another file there) instead of copying it: the code is
//! shared with the page cache and only the pages a call runs become resident. A copy
//! cost a host with 500 stored connectors half a GiB of memory, all of it written at
//! start-up. The file is never written in place (the cache writes a new file and renames
//! it over the old one, and removing a file leaves its mapping intact), so the mapped
//! bytes stay the checked ones; replacing a cache file in place by hand while the host
//! runs is not supported. Elsewhere, or if the mapping fails, wasmtime gets a copy of
//! the checked bytes.
//!
//! The check guards against accidents (a torn write, a bad disk block), not an attacker:
//! whoever can write the cache directory can write the checksum beside it, so a
//! cryptographic hash would add nothing but time. XXH3 reads the file at memory speed
//! (SHA-256 of it was a third of a cached load).
//!
//! The cache is bounded ([`CacheBound`]): every component ever built or installed would
//! otherwise stay on disk (an interpreter component's code is tens of MiB, and a
//! developer rebuilds one on every change). A read marks its entry used (its modification
//! time); after each write the entries unused for longer than the bound's age are
//! removed, then the least recently used until the rest fits its size. Entries this
//! runtime has loaded and still holds are never removed, nor is the one just written, so
//! the cache may stay above its size while they need more. Another process sharing the
//! directory that loses a race with a removal finds the entry missing and recompiles.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::Engine;
use xxhash_rust::xxh3::xxh3_128;

/// How far the compiled-component cache may grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheBound {
    /// The size of all entries together, in bytes, that pruning brings the cache down to
    /// (least recently used first).
    pub max_bytes: u64,
    /// How long an entry may go unused before it is removed.
    pub max_unused: Duration,
}

impl Default for CacheBound {
    /// 2 GiB (dozens of interpreter components, thousands of Rust ones), and entries
    /// unused for 30 days.
    fn default() -> Self {
        Self {
            max_bytes: 2 * 1024 * 1024 * 1024,
            max_unused: Duration::from_secs(30 * 24 * 3600),
        }
    }
}

/// Compiled components on disk, keyed by component digest and engine compatibility.
#[derive(Debug, Clone)]
pub struct ComponentCache {
    dir: Option<PathBuf>,
    engine_key: String,
    bound: CacheBound,
    in_use: InUse,
}

/// The entries (by digest) whose components this runtime holds, with how many holds each.
#[derive(Debug, Clone, Default)]
struct InUse(Arc<Mutex<HashMap<String, usize>>>);

impl InUse {
    fn hold(&self, digest_hex: &str) -> EntryHold {
        let mut held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *held.entry(digest_hex.to_owned()).or_default() += 1;
        EntryHold {
            in_use: self.clone(),
            digest_hex: digest_hex.to_owned(),
        }
    }

    fn digests(&self) -> HashSet<String> {
        let held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        held.keys().cloned().collect()
    }
}

/// Keeps a cache entry from being pruned while a loaded component built from it lives.
#[derive(Debug)]
pub struct EntryHold {
    in_use: InUse,
    digest_hex: String,
}

impl Drop for EntryHold {
    fn drop(&mut self) {
        let mut held = self.in_use.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = held.get_mut(&self.digest_hex) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.digest_hex);
            }
        }
    }
}

/// Where a loaded component came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadSource {
    /// Machine code read back from the on-disk cache.
    Cache,
    /// Compiled now (and written to the cache when there is one).
    Compiled,
}

struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn finish(&self) -> u64 {
        // Only `write` is used: the full digest is read through `finalize` instead.
        0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

impl ComponentCache {
    /// A cache in `dir` (created if missing) held to `bound`, or no cache at all when
    /// `dir` is `None`.
    pub fn new(engine: &Engine, dir: Option<PathBuf>, bound: CacheBound) -> std::io::Result<Self> {
        let mut hasher = Sha256Hasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let engine_key = hex::encode(&hasher.0.finalize()[..8]);
        if let Some(dir) = &dir {
            fs::create_dir_all(dir)?;
        }
        Ok(Self {
            dir,
            engine_key,
            bound,
            in_use: InUse::default(),
        })
    }

    /// Keeps the entry of `digest_hex` while the hold lives (`None` without a cache).
    pub fn hold(&self, digest_hex: &str) -> Option<EntryHold> {
        self.dir.as_ref()?;
        Some(self.in_use.hold(digest_hex))
    }

    fn paths(&self, digest_hex: &str) -> Option<(PathBuf, PathBuf)> {
        let dir = self.dir.as_ref()?;
        let base = format!("{digest_hex}-{}", self.engine_key);
        Some((
            dir.join(format!("{base}.cwasm")),
            dir.join(format!("{base}.xxh3")),
        ))
    }

    /// The component with digest `digest_hex` (64 lowercase hex digits, checked by the
    /// caller: it becomes part of a file name) as compiled earlier, if the cache holds
    /// it whole. An entry that cannot be read or does not match its checksum is logged
    /// and treated as missing.
    pub fn read(&self, engine: &Engine, digest_hex: &str) -> Option<Component> {
        let (code, sum) = self.paths(digest_hex)?;
        let component = read_verified(engine, &code, &sum)?;
        mark_used(&code);
        Some(component)
    }

    /// Compiles `bytes`, whose digest is `digest_hex`, and stores the result. A cache
    /// that cannot be written is logged and bypassed: it never makes a load fail.
    pub fn compile(
        &self,
        engine: &Engine,
        digest_hex: &str,
        bytes: &[u8],
    ) -> wasmtime::Result<Component> {
        let component = Component::new(engine, bytes)?;
        if let Some((code, sum)) = self.paths(digest_hex) {
            match component.serialize() {
                Ok(serialized) => match write_atomically(&code, &sum, &serialized) {
                    Ok(()) => self.prune(digest_hex),
                    Err(err) => {
                        tracing::warn!(path = %code.display(), error = %err, "could not write the compiled-component cache");
                    }
                },
                Err(err) => {
                    tracing::warn!(error = %err, "could not serialize a compiled component")
                }
            }
        }
        Ok(component)
    }

    /// Holds the cache to its bound, sparing `written` (just written) and every entry a
    /// live component of this runtime was loaded from.
    fn prune(&self, written: &str) {
        let Some(dir) = &self.dir else {
            return;
        };
        let mut spared = self.in_use.digests();
        spared.insert(written.to_owned());
        let removed = prune_dir(dir, self.bound, &spared, SystemTime::now());
        if removed.entries > 0 {
            tracing::info!(dir = %dir.display(), entries = removed.entries, bytes = removed.bytes, "pruned the compiled-component cache");
        }
    }
}

/// How long a file a writer may still be renaming into place (`*.tmp-*`), or a code file
/// whose checksum may still be coming, is left alone.
const WRITE_GRACE: Duration = Duration::from_secs(3600);

/// What one pruning removed.
#[derive(Debug, Default, PartialEq, Eq)]
struct Removed {
    entries: usize,
    bytes: u64,
}

/// One cache entry on disk: `<digest>-<engine key>.cwasm` and its `.xxh3`.
struct Entry {
    digest_hex: String,
    files: Vec<PathBuf>,
    bytes: u64,
    /// When it was last written or read.
    used: SystemTime,
    /// A code file without its checksum (never loaded).
    incomplete: bool,
}

/// Removes, from `dir`: entries unused since `bound.max_unused` before `now`, then the
/// least recently used until the rest is within `bound.max_bytes`, never one whose
/// digest is in `spared`; and leftovers of interrupted writes older than
/// [`WRITE_GRACE`]. Files not named as the cache names them are left alone. Entries of
/// every engine key count (those of another wasmtime version or setting are never loaded
/// by this one, so they age out).
fn prune_dir(dir: &Path, bound: CacheBound, spared: &HashSet<String>, now: SystemTime) -> Removed {
    let Ok(listing) = fs::read_dir(dir) else {
        return Removed::default();
    };
    let age = |modified: SystemTime| now.duration_since(modified).unwrap_or_default();
    let mut entries: HashMap<String, Entry> = HashMap::new();
    let mut removed = Removed::default();
    for file in listing.filter_map(Result::ok) {
        let path = file.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()).map(str::to_owned) else {
            continue;
        };
        let Ok(meta) = file.metadata() else {
            continue;
        };
        let modified = meta.modified().unwrap_or(now);
        if let Some((entry_name, _)) = name.split_once(".tmp-") {
            if entry_key(entry_name).is_some()
                && age(modified) > WRITE_GRACE
                && fs::remove_file(&path).is_ok()
            {
                removed.bytes += meta.len();
            }
            continue;
        }
        let Some((key, digest_hex, is_code)) = entry_key(&name) else {
            continue;
        };
        let entry = entries.entry(key).or_insert_with(|| Entry {
            digest_hex: digest_hex.to_owned(),
            files: Vec::new(),
            bytes: 0,
            used: SystemTime::UNIX_EPOCH,
            incomplete: true,
        });
        entry.files.push(path);
        entry.bytes += meta.len();
        if is_code {
            entry.used = modified;
        } else {
            entry.incomplete = false;
        }
    }
    let mut entries: Vec<Entry> = entries.into_values().collect();
    // Least recently used first.
    entries.sort_by_key(|e| e.used);
    let mut total: u64 = entries.iter().map(|e| e.bytes).sum();
    for entry in entries {
        if spared.contains(&entry.digest_hex) {
            continue;
        }
        let stale = age(entry.used) > bound.max_unused
            || (entry.incomplete && age(entry.used) > WRITE_GRACE);
        if !stale && total <= bound.max_bytes {
            continue;
        }
        // The checksum first: a code file without one is never loaded.
        let mut files = entry.files;
        files.sort_by_key(|f| f.extension().is_some_and(|e| e == "cwasm"));
        if files.iter().all(|f| fs::remove_file(f).is_ok()) {
            removed.entries += 1;
            removed.bytes += entry.bytes;
            total -= entry.bytes;
        }
    }
    removed
}

/// `(entry, digest, whether it is the code file)` of a file named
/// `<64 hex>-<16 hex>.cwasm` or `.xxh3`; `None` for any other name.
fn entry_key(name: &str) -> Option<(String, &str, bool)> {
    let (stem, is_code) = match name.rsplit_once('.')? {
        (stem, "cwasm") => (stem, true),
        (stem, "xxh3") => (stem, false),
        _ => return None,
    };
    let (digest_hex, engine_key) = stem.split_once('-')?;
    let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hex(digest_hex, 64) && hex(engine_key, 16)).then(|| (stem.to_owned(), digest_hex, is_code))
}

/// Marks a cache entry used now (its code file's modification time), so pruning keeps
/// it over entries used longer ago. A cache the process may read but not write keeps its
/// old time.
fn mark_used(code: &Path) {
    if let Ok(file) = fs::OpenOptions::new().write(true).open(code) {
        let _ = file.set_modified(SystemTime::now());
    }
}

/// `<length> <xxh3-128 hex>` of `serialized`: what the checksum file holds.
fn checksum(serialized: &[u8]) -> String {
    format!("{} {:032x}", serialized.len(), xxh3_128(serialized))
}

fn read_verified(engine: &Engine, code: &Path, sum: &Path) -> Option<Component> {
    let expected = fs::read_to_string(sum).ok()?;
    let expected = expected.trim();
    let file = fs::File::open(code).ok()?;
    let loaded = match checked_mapping(&file, expected) {
        // SAFETY: the bytes of this open file were written by `write_atomically` from
        // `Component::serialize` of this same engine configuration (the engine key is part
        // of the name) and match the checksum recorded at write time; the cache never
        // writes a file in place (see the module docs), so the mapping wasmtime makes of
        // it holds the bytes just checked.
        Some(true) => match unsafe { map_open_file(engine, &file) } {
            Some(mapped) => mapped,
            None => copy_checked(engine, file, code, expected)?,
        },
        Some(false) => {
            warn_mismatch(code);
            return None;
        }
        None => copy_checked(engine, file, code, expected)?,
    };
    match loaded {
        Ok(component) => Some(component),
        Err(err) => {
            tracing::warn!(path = %code.display(), error = %err, "unusable compiled-component cache entry; recompiling");
            None
        }
    }
}

fn warn_mismatch(code: &Path) {
    tracing::warn!(path = %code.display(), "compiled-component cache entry does not match its checksum; recompiling");
}

/// Reads `file` (at `code`) whole, checks it against `expected` and hands wasmtime a copy:
/// where the file cannot be mapped. `None` when it cannot be read or does not match.
fn copy_checked(
    engine: &Engine,
    mut file: fs::File,
    code: &Path,
    expected: &str,
) -> Option<wasmtime::Result<Component>> {
    use std::io::Read as _;

    let mut serialized = Vec::new();
    file.read_to_end(&mut serialized).ok()?;
    if checksum(&serialized) != expected {
        warn_mismatch(code);
        return None;
    }
    // SAFETY: written by the cache from this engine configuration (see `read_verified`),
    // and the bytes wasmtime copies are the ones just checked.
    Some(unsafe { Component::deserialize(engine, &serialized) })
}

/// Checks the bytes of `file` against `expected` (`<length> <xxh3-128 hex>`) through a
/// read-only mapping, so they are read once, from the page cache, and never copied; the
/// mapping wasmtime then makes of the same file shares those pages. `None` where the
/// file cannot be mapped here (the caller reads it instead).
#[cfg(target_os = "linux")]
fn checked_mapping(file: &fs::File, expected: &str) -> Option<bool> {
    use rustix::mm::{mmap, munmap, MapFlags, ProtFlags};

    let len = usize::try_from(file.metadata().ok()?.len()).ok()?;
    if len == 0 {
        return None;
    }
    // SAFETY: a fresh read-only mapping of `len` bytes of `file` at an address the kernel
    // picks; it is read only through the slice below and unmapped before returning. The
    // cache never writes a file in place (see the module docs), so the bytes do not change
    // under the slice.
    let at = unsafe {
        mmap(
            std::ptr::null_mut(),
            len,
            ProtFlags::READ,
            MapFlags::SHARED | MapFlags::POPULATE,
            file,
            0,
        )
    }
    .ok()?;
    // SAFETY: `at` is the start of the `len` readable bytes just mapped.
    let bytes = unsafe { std::slice::from_raw_parts(at.cast::<u8>(), len) };
    let matches = checksum(bytes) == expected;
    // SAFETY: unmaps exactly the mapping made above; `bytes` is not used after this.
    let _ = unsafe { munmap(at, len) };
    Some(matches)
}

#[cfg(not(target_os = "linux"))]
fn checked_mapping(_: &fs::File, _: &str) -> Option<bool> {
    None
}

/// The component in `file`, mapped rather than copied; `None` where this cannot be done
/// (the caller copies the bytes instead).
///
/// # Safety
/// The file's bytes must have been checked against the checksum the cache wrote with
/// them (see `read_verified`).
#[cfg(target_os = "linux")]
unsafe fn map_open_file(engine: &Engine, file: &fs::File) -> Option<wasmtime::Result<Component>> {
    use std::os::fd::AsRawFd as _;

    // The open file itself, whatever its name points at by now.
    let path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    // SAFETY: the caller checked this file's bytes against their checksum.
    match unsafe { Component::deserialize_file(engine, &path) } {
        Ok(component) => Some(Ok(component)),
        // No `/proc` (a minimal container) or no mapping: copying still works.
        Err(err) => {
            tracing::debug!(error = %err, "could not map a compiled-component cache entry; copying it");
            None
        }
    }
}

#[cfg(not(target_os = "linux"))]
unsafe fn map_open_file(_: &Engine, _: &fs::File) -> Option<wasmtime::Result<Component>> {
    None
}

fn write_atomically(code: &Path, sum: &Path, serialized: &[u8]) -> std::io::Result<()> {
    let write = |path: &Path, data: &[u8]| -> std::io::Result<()> {
        // A name no other writer (process, thread or file) uses: only a whole file is
        // ever renamed into place.
        static WRITES: AtomicU64 = AtomicU64::new(0);
        let n = WRITES.fetch_add(1, Ordering::Relaxed);
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(format!(".tmp-{}-{n}", std::process::id()));
        let tmp = PathBuf::from(tmp);
        let mut file = fs::File::create(&tmp)?;
        file.write_all(data)?;
        file.sync_all()?;
        fs::rename(&tmp, path)
    };
    // The checksum is written last: a crash in between leaves a code file without a
    // checksum, which is never loaded.
    let _ = fs::remove_file(sum);
    write(code, serialized)?;
    write(sum, checksum(serialized).as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    /// Writes entry `n` (`bytes` of code) of engine `engine`, last used `ago` before `now`.
    fn entry(
        dir: &Path,
        n: u8,
        engine: &str,
        bytes: usize,
        ago: Duration,
        now: SystemTime,
    ) -> String {
        let digest = format!("{n:02x}").repeat(32);
        let base = dir.join(format!("{digest}-{engine}"));
        let code = base.with_extension("cwasm");
        fs::write(&code, vec![0u8; bytes]).unwrap();
        fs::write(base.with_extension("xxh3"), "sum").unwrap();
        let file = fs::OpenOptions::new().write(true).open(&code).unwrap();
        file.set_modified(now - ago).unwrap();
        digest
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    fn present(dir: &Path, digest: &str) -> bool {
        names(dir).iter().any(|n| n.starts_with(digest))
    }

    const ENGINE: &str = "00112233445566aa";

    #[test]
    fn the_least_recently_used_go_first_until_the_rest_fits() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let oldest = entry(dir.path(), 1, ENGINE, 1000, 3 * HOUR, now);
        let older = entry(dir.path(), 2, ENGINE, 1000, 2 * HOUR, now);
        let newest = entry(dir.path(), 3, ENGINE, 1000, HOUR, now);
        // Room for two entries (each 1003 bytes with its checksum).
        let bound = CacheBound {
            max_bytes: 2100,
            max_unused: 100 * HOUR,
        };
        let removed = prune_dir(dir.path(), bound, &HashSet::new(), now);
        assert_eq!(
            removed,
            Removed {
                entries: 1,
                bytes: 1003
            }
        );
        assert!(!present(dir.path(), &oldest), "{:?}", names(dir.path()));
        assert!(present(dir.path(), &older) && present(dir.path(), &newest));
        // Within the bound now: nothing more goes.
        assert_eq!(
            prune_dir(dir.path(), bound, &HashSet::new(), now),
            Removed::default()
        );
    }

    #[test]
    fn spared_entries_stay_even_above_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let held = entry(dir.path(), 1, ENGINE, 1000, 500 * HOUR, now);
        let other = entry(dir.path(), 2, ENGINE, 1000, HOUR, now);
        let bound = CacheBound {
            max_bytes: 10,
            max_unused: 100 * HOUR,
        };
        let spared: HashSet<String> = [held.clone()].into();
        prune_dir(dir.path(), bound, &spared, now);
        assert!(present(dir.path(), &held), "{:?}", names(dir.path()));
        assert!(!present(dir.path(), &other));
    }

    #[test]
    fn entries_unused_too_long_go_whatever_their_size_and_engine() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let stale = entry(dir.path(), 1, ENGINE, 10, 31 * 24 * HOUR, now);
        let stale_other_engine = entry(dir.path(), 2, "ffffffffffffffff", 10, 31 * 24 * HOUR, now);
        let recent = entry(dir.path(), 3, ENGINE, 10, 29 * 24 * HOUR, now);
        let removed = prune_dir(dir.path(), CacheBound::default(), &HashSet::new(), now);
        assert_eq!(removed.entries, 2);
        assert!(!present(dir.path(), &stale) && !present(dir.path(), &stale_other_engine));
        assert!(present(dir.path(), &recent));
    }

    #[test]
    fn leftovers_of_interrupted_writes_go_after_a_grace_and_other_files_stay() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let digest = "ab".repeat(32);
        let set_age = |path: &Path, ago: Duration| {
            fs::write(path, "x").unwrap();
            let file = fs::OpenOptions::new().write(true).open(path).unwrap();
            file.set_modified(now - ago).unwrap();
        };
        // A code file whose checksum never came, and a temporary file, both old.
        set_age(
            &dir.path().join(format!("{digest}-{ENGINE}.cwasm")),
            2 * HOUR,
        );
        set_age(
            &dir.path().join(format!("{digest}-{ENGINE}.xxh3.tmp-7-0")),
            2 * HOUR,
        );
        // The same, still being written.
        let fresh = "cd".repeat(32);
        set_age(
            &dir.path().join(format!("{fresh}-{ENGINE}.cwasm")),
            Duration::ZERO,
        );
        set_age(
            &dir.path().join(format!("{fresh}-{ENGINE}.xxh3.tmp-7-1")),
            Duration::ZERO,
        );
        // Not the cache's.
        set_age(&dir.path().join("notes.txt"), 1000 * HOUR);
        set_age(&dir.path().join("short-0011.cwasm"), 1000 * HOUR);
        prune_dir(dir.path(), CacheBound::default(), &HashSet::new(), now);
        assert_eq!(
            names(dir.path()),
            vec![
                format!("{fresh}-{ENGINE}.cwasm"),
                format!("{fresh}-{ENGINE}.xxh3.tmp-7-1"),
                "notes.txt".to_string(),
                "short-0011.cwasm".to_string(),
            ]
        );
    }

    #[test]
    fn holds_count_until_the_last_is_dropped() {
        let in_use = InUse::default();
        let first = in_use.hold("a");
        let second = in_use.hold("a");
        drop(first);
        assert!(in_use.digests().contains("a"));
        drop(second);
        assert!(in_use.digests().is_empty());
    }
}
