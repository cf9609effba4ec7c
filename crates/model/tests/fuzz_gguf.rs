//! Bounded fuzzing of the GGUF reader (issue 13): mutated and truncated copies of a real GGUF
//! header must give an error or a model, never a panic, an abort or a huge allocation.

use candle_core::Device;
use hat_model::gguf::GgufFile;
use proptest::prelude::*;

fn fixture() -> Vec<u8> {
    std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llama/model.gguf"),
    )
    .unwrap()
}

fn try_open(bytes: &[u8]) {
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), bytes).unwrap();
    if let Ok(g) = GgufFile::open(f.path()) {
        let _ = g.config();
        let _ = g.tokenizer_spec();
        let _ = g.load_tensors(&Device::Cpu);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// Random bytes written over the header (counts, lengths, types, dims, offsets).
    #[test]
    fn mutated_headers_never_panic(edits in prop::collection::vec((0usize..4096, any::<u8>()), 1..12)) {
        let mut b = fixture();
        let header = b.len().min(4096);
        for (at, v) in edits {
            b[at % header] = v;
        }
        try_open(&b);
    }

    /// Files cut anywhere.
    #[test]
    fn truncated_files_never_panic(cut in 0usize..300_000) {
        let b = fixture();
        try_open(&b[..cut.min(b.len())]);
    }
}
