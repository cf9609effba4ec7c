//! The decode-time call check's cost (`CallGrammar::admits`): one token after a call's
//! prefix (what the engine pays each decode step of a constrained turn), and a sweep of a
//! whole 49,152-token vocabulary (what it pays when eight draws in a row are refused and
//! every token is checked at once).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use serde_json::json;

use hat_harness::{CallGrammar, CallSyntax};

fn bench(c: &mut Criterion) {
    let schema = json!({"type": "object", "properties": {
        "sku": {"type": "string"}, "size": {"type": "string"}, "color": {"type": "string"},
        "category": {"type": "string", "enum": ["garments", "kicks", "devices", "munchies"]}},
        "required": ["sku"]});
    let names = [
        "t_3876",
        "match_goods",
        "store_faq",
        "pin_listing",
        "quote_price",
    ];
    let g = CallGrammar::new(CallSyntax::JsonTags, names.iter().map(|n| (*n, &schema)));
    // a reply sentence, then a call halfway through its arguments
    let before = br#"Sure, let me look that up for you right away!
<tool_call>{"name": "t_3876", "arguments": {"size": "M", "category": "kic"#;
    // a vocabulary-sized set of tokens: 1-8 bytes drawn from printable ASCII
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let vocab: Vec<Vec<u8>> = (0..49_152)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = 1 + (x % 8) as usize;
            (0..len).map(|k| 32 + ((x >> (8 * k)) % 95) as u8).collect()
        })
        .collect();
    let mut grp = c.benchmark_group("call_grammar");
    grp.bench_function("one_token", |b| b.iter(|| g.admits(before, b"ks\"")));
    grp.throughput(Throughput::Elements(vocab.len() as u64));
    grp.sample_size(10);
    grp.bench_function("vocabulary_49152", |b| {
        b.iter(|| vocab.iter().filter(|t| g.admits(before, t)).count())
    });
    grp.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
