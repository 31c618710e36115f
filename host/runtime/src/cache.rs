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
//! under a name no other writer uses, then renamed), reads a file into memory, checks
//! those bytes' length and XXH3-128 against what it recorded at write time, and hands
//! wasmtime exactly the bytes it checked (wasmtime copies them into executable memory),
//! so a truncated or corrupted file is recompiled, not executed, and nothing done to the
//! file later reaches the code.
//!
//! The check guards against accidents (a torn write, a bad disk block), not an attacker:
//! whoever can write the cache directory can write the checksum beside it, so a
//! cryptographic hash would add nothing but time. XXH3 reads the file at memory speed
//! (SHA-256 of it was a third of a cached load). Mapping the file instead of reading it
//! would halve a load again, but then the checked bytes would not be the ones that run.

use std::fs;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::Engine;
use xxhash_rust::xxh3::xxh3_128;

/// Compiled components on disk, keyed by component digest and engine compatibility.
#[derive(Debug, Clone)]
pub struct ComponentCache {
    dir: Option<PathBuf>,
    engine_key: String,
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
    /// A cache in `dir` (created if missing), or no cache at all when `dir` is `None`.
    pub fn new(engine: &Engine, dir: Option<PathBuf>) -> std::io::Result<Self> {
        let mut hasher = Sha256Hasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let engine_key = hex::encode(&hasher.0.finalize()[..8]);
        if let Some(dir) = &dir {
            fs::create_dir_all(dir)?;
        }
        Ok(Self { dir, engine_key })
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
        read_verified(engine, &code, &sum)
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
                Ok(serialized) => {
                    if let Err(err) = write_atomically(&code, &sum, &serialized) {
                        tracing::warn!(path = %code.display(), error = %err, "could not write the compiled-component cache");
                    }
                }
                Err(err) => {
                    tracing::warn!(error = %err, "could not serialize a compiled component")
                }
            }
        }
        Ok(component)
    }
}

/// `<length> <xxh3-128 hex>` of `serialized`: what the checksum file holds.
fn checksum(serialized: &[u8]) -> String {
    format!("{} {:032x}", serialized.len(), xxh3_128(serialized))
}

fn read_verified(engine: &Engine, code: &Path, sum: &Path) -> Option<Component> {
    let expected = fs::read_to_string(sum).ok()?;
    let serialized = fs::read(code).ok()?;
    if checksum(&serialized) != expected.trim() {
        tracing::warn!(path = %code.display(), "compiled-component cache entry does not match its checksum; recompiling");
        return None;
    }
    // SAFETY: these bytes were written by `write_atomically` from `Component::serialize`
    // of this same engine configuration (the engine key is part of the name) and match
    // the checksum recorded at write time; wasmtime copies them, so the file does not
    // matter after this.
    match unsafe { Component::deserialize(engine, &serialized) } {
        Ok(component) => Some(component),
        Err(err) => {
            tracing::warn!(path = %code.display(), error = %err, "unusable compiled-component cache entry; recompiling");
            None
        }
    }
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
