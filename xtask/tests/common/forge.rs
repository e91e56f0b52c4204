//! What only a registry's publisher key can do, for the tests of what a verifier refuses
//! although `publish` never writes it: sign the next index, edited, and a timestamp naming
//! it.

use std::path::Path;

use cuda_aot::metadata::{Index, IndexRef, Timestamp, sign_doc};
use cuda_aot::source::layout;
use cuda_aot::trust::decode_unverified;
use cuda_aot::{Digest, Limits, SecretKey};

/// The current index of `registry`, edited by `edit`, signed by `publisher` as the next
/// version, with the next timestamp naming it.
pub fn reissue(registry: &Path, publisher: &SecretKey, edit: impl FnOnce(&mut Index)) {
    let limits = Limits::default();
    let ts_file = std::fs::read(registry.join(layout::TIMESTAMP)).unwrap();
    let ts: Timestamp = decode_unverified(&ts_file, limits.timestamp, "timestamp").unwrap();
    let index_file = std::fs::read(registry.join(layout::index(ts.index.version))).unwrap();
    let mut index: Index = decode_unverified(&index_file, limits.index, "index").unwrap();
    index.version += 1;
    edit(&mut index);
    let index_file = sign_doc(&index, &[publisher]).to_bytes();
    std::fs::write(registry.join(layout::index(index.version)), &index_file).unwrap();
    let ts = Timestamp {
        version: ts.version + 1,
        index: IndexRef {
            version: index.version,
            digest: Digest::of(&index_file),
            size: index_file.len() as u64,
        },
        ..ts
    };
    std::fs::write(
        registry.join(layout::TIMESTAMP),
        sign_doc(&ts, &[publisher]).to_bytes(),
    )
    .unwrap();
}
