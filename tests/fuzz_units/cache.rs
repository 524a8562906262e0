//! Fuzz target 5: compilation-cache files.
//!
//! - Model and data caches through `cache::blob::decode`, beyond the truncation and bit-flip
//!   tests of blob.rs: caches encoded from structurally mutated models (so the damage reaches
//!   the model validator and the CPU compiler past every blob-level check, as a cache written
//!   by a buggy or hostile client would), byte-mutated caches, and data caches of the wrong
//!   length or content. A decoded model goes through `prepare_from_parts`, the cache load
//!   path (validated again, then compiled): nothing may panic.
//! - Driver-managed cache entries on disk (`cache::managed`): header fields and bytes
//!   mutated, or the body mutated and re-checksummed; a damaged entry is a miss and is
//!   removed, a verified one goes on to the decoder and the load path.
//! - The token-record store file, mutated and re-checksummed so the damage reaches the parser
//!   past the SHA-256: opening loads consistent records or resets them, and reopening agrees.

use std::fs;
use std::path::PathBuf;

use nnaccel_uapi::fuzz::{self, Rng};
use sha2::{Digest, Sha256};

use super::hal::mutate_model;
use super::*;
use nnaccel_hal::cache::blob;
use nnaccel_hal::cache::files::MemfdBuffer;
use nnaccel_hal::cache::managed::PROGRAMS_DIR;
use nnaccel_hal::cache::records::{MAX_RECORDS, RECORDS_FILE, RecordStore};
use nnaccel_hal::cache::{CacheError, Hash, ManagedCache, Token};
use nnaccel_hal::driver::{Backend, Driver};
use nnaccel_hal::validate::validate_model;

fn buffer(bytes: &[u8]) -> MemfdBuffer {
    let mut b = MemfdBuffer::new();
    b.append(bytes).unwrap();
    b
}

/// out = a + c over 512 floats, c a 2 KiB constant: a cache that references its data.
fn large_constant_model() -> Model {
    let values: Vec<String> = (0..512).map(|v| v.to_string()).collect();
    let json = format!(
        r#"{{"version": 1,
            "operands": [
              {{"type": "TENSOR_FLOAT32", "dimensions": [1, 512], "lifetime": "MODEL_INPUT"}},
              {{"type": "TENSOR_FLOAT32", "dimensions": [1, 512], "lifetime": "CONSTANT_COPY",
               "value": [{}]}},
              {{"type": "INT32", "dimensions": [], "lifetime": "CONSTANT_COPY", "value": [0]}},
              {{"type": "TENSOR_FLOAT32", "dimensions": [1, 512], "lifetime": "MODEL_OUTPUT"}}
            ],
            "operations": [{{"type": "ADD", "inputs": [0, 1, 2], "outputs": [3]}}],
            "inputIndexes": [0], "outputIndexes": [3]}}"#,
        values.join(", ")
    );
    nnaccel_protocol::modelfile::parse_model(&json)
        .unwrap()
        .model
}

#[test]
fn mutated_model_and_data_caches_are_corrupt_or_validated_never_panic() {
    let mut models: Vec<Model> = seeds().into_iter().map(|s| s.model).collect();
    models.push(large_constant_model());
    let driver = Driver::new(Backend::CpuOnly);
    let (mut decoded, mut valid, mut refused) = (0usize, 0usize, 0usize);
    fuzz::run("cache-blob", 3000, |rng| {
        let mut model = rng.pick(&models).clone();
        if rng.chance(1, 2) {
            for _ in 0..=rng.below(2) {
                mutate_model(rng, &mut model);
            }
        }
        // A mutated model may not encode at all (a reference outside its pools): that is
        // the writer's side, refused before any bytes exist.
        let Ok(enc) = blob::encode(&model, rng.chance(1, 2)) else {
            return;
        };
        let mut model_bytes = enc.model;
        let mut data = enc.data;
        match rng.below(4) {
            0 => fuzz::mutate(rng, &mut model_bytes),
            1 => fuzz::mutate(rng, &mut data),
            2 => {
                // Keep the header and mutate only the postcard body.
                let mut body = model_bytes.split_off(9.min(model_bytes.len()));
                fuzz::mutate(rng, &mut body);
                model_bytes.extend(body);
            }
            _ => {}
        }
        match blob::decode(&model_bytes, buffer(&data)) {
            Ok((m, on_device)) => {
                decoded += 1;
                // A decoded model carries its constants itself: at most the data pool.
                assert!(m.pools.len() <= 1);
                // The cache load path: validated again, then compiled; an invalid model is
                // GENERAL_FAILURE (the cache is unusable), never a panic.
                let prepared =
                    driver.prepare_from_parts(&m, on_device, ExecutionPreference::FastSingleAnswer);
                if validate_model(&m).is_ok() {
                    valid += 1;
                    for o in &m.operands {
                        if o.lifetime == OperandLifetime::ConstantReference {
                            let end = u64::from(o.location.offset) + u64::from(o.location.length);
                            let pool = m.pools.get(o.location.pool_index as usize);
                            assert!(pool.is_some_and(|p| end <= p.size), "{o:?}");
                        }
                    }
                } else {
                    assert_eq!(prepared.err(), Some(ErrorStatus::GeneralFailure));
                }
            }
            Err(e) => {
                refused += 1;
                assert!(
                    matches!(e, CacheError::Corrupt(_) | CacheError::Format { .. }),
                    "{e}"
                );
            }
        }
    });
    println!("cache blobs: {decoded} decoded ({valid} valid models), {refused} refused");
    assert!(decoded > valid && valid > 0 && refused > 0 || fuzz::cases(3000) < 100);
}

/// A fresh directory for case `n` of fuzz target `target` (in /dev/shm when there is one:
/// cheap fsyncs). The target is in the name because the targets run in parallel threads of
/// one process: with the pid and case number alone, one target's clean-up removed the
/// directory the other was writing to.
fn case_dir(target: &str, n: usize) -> PathBuf {
    let base = PathBuf::from("/dev/shm");
    let base = if base.is_dir() {
        base
    } else {
        std::env::temp_dir()
    };
    let d = base.join(format!("nnaccel-fuzz-{target}-{}-{n}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    d
}

fn record(rng: &mut Rng) -> (Token, Hash) {
    let mut t = [0u8; 32];
    let mut h = [0u8; 32];
    rng.fill(&mut t);
    rng.fill(&mut h);
    (t, h)
}

#[test]
fn mutated_record_files_load_consistently_or_reset() {
    let mut n = 0usize;
    let (mut loaded, mut reset) = (0usize, 0usize);
    fuzz::run("cache-records", 400, |rng| {
        n += 1;
        let dir = case_dir("cache-records", n);
        let mut store = RecordStore::open(&dir, "build").unwrap();
        let records: Vec<(Token, Hash)> = (0..1 + rng.below(4)).map(|_| record(rng)).collect();
        for (t, h) in &records {
            store.insert(*t, *h).unwrap();
        }
        let path = dir.join(RECORDS_FILE);
        let file = fs::read(&path).unwrap();
        let (body, _sum) = file.split_at(file.len() - 32);
        let mut body = body.to_vec();
        fuzz::mutate(rng, &mut body);
        if rng.chance(1, 8) {
            // A count field claiming more than the limit (offset: magic, version, id).
            let at = 12 + "build".len();
            if body.len() >= at + 4 {
                body[at..at + 4].copy_from_slice(&(MAX_RECORDS as u32 + 1).to_le_bytes());
            }
        }
        let mut damaged = body.clone();
        if rng.chance(3, 4) {
            damaged.extend_from_slice(&Sha256::digest(&body));
        }
        fs::write(&path, &damaged).unwrap();
        let store = RecordStore::open(&dir, "build").unwrap();
        assert!(store.len() <= MAX_RECORDS);
        if store.is_empty() {
            reset += 1;
        } else {
            loaded += 1;
        }
        // Whatever the first open decided is on disk now: a second open agrees.
        let again = RecordStore::open(&dir, "build").unwrap();
        assert_eq!(again.len(), store.len());
        let _ = fs::remove_dir_all(&dir);
    });
    println!("record files: {loaded} loaded, {reset} reset");
    assert!(reset > 0 || fuzz::cases(400) < 50);
}

#[test]
fn mutated_managed_cache_entries_are_misses_or_verified_never_panic() {
    let mut models: Vec<Model> = seeds().into_iter().map(|s| s.model).collect();
    models.push(large_constant_model());
    let driver = Driver::new(Backend::CpuOnly);
    let mut n = 0usize;
    let (mut hits, mut misses) = (0usize, 0usize);
    fuzz::run("cache-managed", 400, |rng| {
        n += 1;
        let dir = case_dir("cache-managed", n);
        let cache = ManagedCache::open(&dir, 64 << 20).unwrap();
        let enc = blob::encode(rng.pick(&models), false).unwrap();
        let key = ManagedCache::key("build", &enc.model, &enc.data);
        cache.put(&key, &enc.model, &enc.data).unwrap();
        let path = dir
            .join(PROGRAMS_DIR)
            .join(format!("{}.nnc", nnaccel_hal::cache::hex(&key)));
        let mut bytes = fs::read(&path).unwrap();
        // Header: magic, version, model length, data length (u64s at 8 and 16), SHA-256 at 24.
        match rng.below(3) {
            0 => fuzz::mutate(rng, &mut bytes),
            1 => {
                let at = *rng.pick(&[8usize, 16]);
                bytes[at..at + 8].copy_from_slice(&rng.edgy_u64().to_le_bytes());
            }
            _ => {
                // The body mutated and re-checksummed: only the decoder can refuse it.
                let mut body = bytes.split_off(56);
                fuzz::mutate(rng, &mut body);
                let model_len = (body.len() as u64).min(enc.model.len() as u64);
                bytes[8..16].copy_from_slice(&model_len.to_le_bytes());
                bytes[16..24].copy_from_slice(&(body.len() as u64 - model_len).to_le_bytes());
                bytes[24..56].copy_from_slice(&Sha256::digest(&body));
                bytes.extend(body);
            }
        }
        fs::write(&path, &bytes).unwrap();
        match cache.get(&key).unwrap() {
            Some((model_bytes, data)) => {
                hits += 1;
                if let Ok((m, on_device)) = blob::decode(&model_bytes, data) {
                    let _ = driver.prepare_from_parts(
                        &m,
                        on_device,
                        ExecutionPreference::FastSingleAnswer,
                    );
                }
            }
            None => {
                misses += 1;
                assert!(!path.exists(), "a damaged entry is removed");
            }
        }
        let _ = fs::remove_dir_all(&dir);
    });
    println!("managed entries: {hits} verified, {misses} damaged");
    assert!(hits > 0 && misses > 0 || fuzz::cases(400) < 50);
}
