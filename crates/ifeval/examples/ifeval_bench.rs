//! Timing of every IFEval check on large adversarial responses (issue 13):
//! `cargo run --release -p hat-ifeval --example ifeval_bench [BYTES]`.

use std::time::Instant;

use hat_ifeval::{builtin_inputs, Instruction, INSTRUCTION_IDS};

fn main() {
    let bytes: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("BYTES is a number"))
        .unwrap_or(1_000_000);
    // One configured instruction per id, taken from the built-in prompts.
    let records = builtin_inputs();
    let mut per_id: Vec<(String, Instruction)> = Vec::new();
    for id in INSTRUCTION_IDS {
        'found: for r in &records {
            for (i, ins) in r.instructions().unwrap().into_iter().enumerate() {
                if r.instruction_id_list[i] == id {
                    per_id.push((id.to_string(), ins));
                    break 'found;
                }
            }
        }
    }
    let prose = "The U.S. economy grew 3.5% in Q3, e.g. \"strong\" (Mr. Smith's view); \
                 CANNOT gonna stop... Really?! *Bold* -- yes. ";
    let inputs: Vec<(&str, String)> = vec![
        ("quotes", fill("\"q\" ", bytes)),
        ("prose", fill(prose, bytes)),
        ("dots", fill(".", bytes)),
        ("punct", fill("!?.,;:*'\"()[]{}<>-`", bytes)),
        ("bang-paren", fill("a!(", bytes)),
        ("dot-space", fill(". ", bytes)),
        ("apostrophes", fill("'a ", bytes)),
        ("commas", fill(",", bytes)),
    ];
    for (name, text) in &inputs {
        let all = Instant::now();
        let mut slow = Vec::new();
        for (id, ins) in &per_id {
            let t = Instant::now();
            let _ = ins.check_strict(text);
            let _ = ins.check_loose(text);
            let s = t.elapsed().as_secs_f64();
            if s > 0.05 {
                slow.push(format!("{id} {s:.2}s"));
            }
        }
        let t = Instant::now();
        let n = hat_ifeval::tokenize::word_tokenize(text).len();
        let tok = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let s = hat_ifeval::punkt::count_sentences(text);
        let sen = t.elapsed().as_secs_f64();
        println!(
            "{name:12} {:>8} B: all checks {:.2}s; word_tokenize {tok:.3}s ({n} tokens), sentences {sen:.3}s ({s}); slow: {}",
            text.len(),
            all.elapsed().as_secs_f64(),
            slow.join(", ")
        );
    }
}

fn fill(unit: &str, bytes: usize) -> String {
    unit.repeat(bytes / unit.len())
}
