//! Byte-level BPE tokenizer built from GGUF metadata or a Hugging Face `tokenizer.json`.
//!
//! We build the tokenizer ourselves rather than through candle's `from_gguf` because the
//! pre-tokenizer must follow `tokenizer.ggml.pre`: SmolLM2's `smollm` splits every digit
//! on its own, then applies the GPT-2 regex with no added prefix space, and its 17 control
//! tokens (`<|im_start|>` ...) must be matched as special tokens. Ids equal llama.cpp's
//! (`llama-tokenize` with special-token parsing) for the same text.

use std::collections::HashMap;

use fancy_regex::Regex;

use crate::error::{Error, Result};

/// GPT-2 pattern (also used after `smollm`'s digit split).
pub const GPT2_PATTERN: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
/// Llama 3 pattern (`llama-bpe`).
pub const LLAMA3_PATTERN: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2 pattern.
pub const QWEN2_PATTERN: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Every number character on its own (`Digits(individual_digits=true)`).
pub const DIGITS_PATTERN: &str = r"\p{N}";

/// Kind of a vocabulary entry (GGUF `tokenizer.ggml.token_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    Normal,
    Unknown,
    Control,
    UserDefined,
    Unused,
    Byte,
}

impl TokenKind {
    /// Whether the token is matched verbatim in input text.
    pub fn is_special(self) -> bool {
        matches!(self, Self::Control | Self::UserDefined)
    }
}

/// Everything needed to build a [`Tokenizer`].
#[derive(Debug, Clone, Default)]
pub struct TokenizerSpec {
    pub tokens: Vec<String>,
    pub kinds: Vec<TokenKind>,
    pub merges: Vec<String>,
    /// Regexes applied in order; each splits pieces into matches and gaps.
    pub pre_patterns: Vec<String>,
    pub ignore_merges: bool,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub unk: Option<u32>,
    pub pad: Option<u32>,
    pub add_bos: bool,
    /// Extra end-of-generation tokens (e.g. `<|im_end|>`, `<|eot_id|>`).
    pub eog: Vec<u32>,
}

/// A byte-level BPE tokenizer.
#[derive(Debug)]
pub struct Tokenizer {
    tokens: Vec<String>,
    kinds: Vec<TokenKind>,
    vocab: HashMap<String, u32>,
    merges: HashMap<(u32, u32), (u32, u32)>,
    pre: Vec<Regex>,
    pre_names: Vec<String>,
    ignore_merges: bool,
    specials: Vec<(String, u32)>,
    byte_to_char: [char; 256],
    char_to_byte: HashMap<char, u8>,
    bos: Option<u32>,
    eos: Option<u32>,
    unk: Option<u32>,
    pad: Option<u32>,
    add_bos: bool,
    eog: Vec<u32>,
}

/// GPT-2's reversible mapping of bytes to printable characters.
fn bytes_to_unicode() -> [char; 256] {
    let mut out = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..256u32 {
        let printable =
            (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        out[b as usize] = if printable {
            char::from_u32(b).unwrap_or('?')
        } else {
            let c = char::from_u32(256 + n).unwrap_or('?');
            n += 1;
            c
        };
    }
    out
}

/// Pre-tokenizer patterns for a GGUF `tokenizer.ggml.pre` value.
pub fn patterns_for_pre(pre: &str) -> Result<(Vec<String>, bool)> {
    let p = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    Ok(match pre {
        "smollm" | "starcoder" | "refact" | "codeshell" => {
            (p(&[DIGITS_PATTERN, GPT2_PATTERN]), false)
        }
        "llama-bpe" | "llama3" | "llama-v3" | "falcon3" => (p(&[LLAMA3_PATTERN]), true),
        "qwen2" | "deepseek-r1-qwen" => (p(&[QWEN2_PATTERN]), false),
        "gpt-2" | "gpt2" | "default" | "" => (p(&[GPT2_PATTERN]), false),
        other => {
            return Err(Error::Tokenizer(format!(
                "unsupported pre-tokenizer `{other}` (supported: smollm, llama-bpe, qwen2, gpt-2)"
            )))
        }
    })
}

/// Pieces longer than this that exhaust the regex engine are cut into chunks of this size.
const PRE_TOKEN_CHUNK: usize = 4096;

/// Splits `piece` into the matches of `re` and the gaps between them. A piece on which the
/// backtracking engine gives up (a run of a megabyte of letters or spaces exceeds its stack)
/// is cut into [`PRE_TOKEN_CHUNK`]-byte chunks at character boundaries, each split on its own:
/// ordinary text never takes this path, and the whole encoding stays linear in the input.
fn split_by<'a>(re: &Regex, piece: &'a str, out: &mut Vec<&'a str>) -> Result<()> {
    let mark = out.len();
    let mut last = 0;
    let mut failed = None;
    for m in re.find_iter(piece) {
        let m = match m {
            Ok(m) => m,
            Err(e) => {
                failed = Some(e);
                break;
            }
        };
        if m.start() > last {
            out.push(&piece[last..m.start()]);
        }
        if m.end() > m.start() {
            out.push(m.as_str());
        }
        last = m.end();
    }
    match failed {
        None => {
            if last < piece.len() {
                out.push(&piece[last..]);
            }
            Ok(())
        }
        Some(e) if piece.len() <= PRE_TOKEN_CHUNK => Err(Error::Tokenizer(format!(
            "the pre-tokenizer regex failed on a {}-byte piece: {e}",
            piece.len()
        ))),
        Some(_) => {
            out.truncate(mark);
            let mut start = 0;
            while start < piece.len() {
                let mut end = (start + PRE_TOKEN_CHUNK).min(piece.len());
                while !piece.is_char_boundary(end) {
                    end -= 1;
                }
                split_by(re, &piece[start..end], out)?;
                start = end;
            }
            Ok(())
        }
    }
}

impl Tokenizer {
    /// Builds the tokenizer from a spec.
    pub fn new(spec: TokenizerSpec) -> Result<Self> {
        let TokenizerSpec {
            tokens,
            mut kinds,
            merges,
            pre_patterns,
            ignore_merges,
            bos,
            eos,
            unk,
            pad,
            add_bos,
            mut eog,
        } = spec;
        if tokens.is_empty() {
            return Err(Error::Tokenizer("empty vocabulary".into()));
        }
        kinds.resize(tokens.len(), TokenKind::Normal);
        let mut vocab = HashMap::with_capacity(tokens.len());
        for (i, t) in tokens.iter().enumerate() {
            vocab.entry(t.clone()).or_insert(i as u32);
        }
        let mut merge_map = HashMap::with_capacity(merges.len());
        for (rank, m) in merges.iter().enumerate() {
            let Some((a, b)) = m.split_once(' ') else {
                return Err(Error::Tokenizer(format!("bad merge `{m}`")));
            };
            let (Some(&ia), Some(&ib)) = (vocab.get(a), vocab.get(b)) else {
                continue;
            };
            let Some(&im) = vocab.get(&format!("{a}{b}")) else {
                continue;
            };
            merge_map.entry((ia, ib)).or_insert((rank as u32, im));
        }
        let pre = pre_patterns
            .iter()
            .map(|p| {
                Regex::new(p).map_err(|e| Error::Tokenizer(format!("bad pre-tokenizer regex: {e}")))
            })
            .collect::<Result<Vec<_>>>()?;
        let mut specials: Vec<(String, u32)> = tokens
            .iter()
            .enumerate()
            .filter(|(i, t)| kinds[*i].is_special() && !t.is_empty())
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        specials.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        let byte_to_char = bytes_to_unicode();
        let char_to_byte = byte_to_char
            .iter()
            .enumerate()
            .map(|(b, c)| (*c, b as u8))
            .collect();
        if let Some(e) = eos {
            if !eog.contains(&e) {
                eog.push(e);
            }
        }
        for name in [
            "<|im_end|>",
            "<|eot_id|>",
            "<|endoftext|>",
            "<|eom_id|>",
            "<end_of_turn>",
        ] {
            if let Some(&id) = vocab.get(name) {
                if kinds[id as usize].is_special() && !eog.contains(&id) {
                    eog.push(id);
                }
            }
        }
        Ok(Self {
            tokens,
            kinds,
            vocab,
            merges: merge_map,
            pre,
            pre_names: pre_patterns,
            ignore_merges,
            specials,
            byte_to_char,
            char_to_byte,
            bos,
            eos,
            unk,
            pad,
            add_bos,
            eog,
        })
    }

    /// Number of entries in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }
    /// Beginning-of-sequence token.
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }
    /// End-of-sequence token.
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }
    /// Unknown token.
    pub fn unk(&self) -> Option<u32> {
        self.unk
    }
    /// Padding token.
    pub fn pad(&self) -> Option<u32> {
        self.pad
    }
    /// Whether encoding with `add_special` prepends BOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }
    /// Tokens that end generation.
    pub fn eog_tokens(&self) -> &[u32] {
        &self.eog
    }
    /// Number of special (control or user-defined) tokens.
    /// The text of every special token (what `encode` turns into a control token).
    pub fn special_strings(&self) -> impl Iterator<Item = &str> {
        self.specials.iter().map(|(s, _)| s.as_str())
    }

    pub fn special_count(&self) -> usize {
        self.specials.len()
    }
    /// Pre-tokenizer regexes.
    pub fn pre_patterns(&self) -> &[String] {
        &self.pre_names
    }
    /// The string of a token id.
    pub fn token_str(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }
    /// The id of an exact vocabulary string.
    pub fn token_id(&self, s: &str) -> Option<u32> {
        self.vocab.get(s).copied()
    }
    /// Kind of a token.
    pub fn kind(&self, id: u32) -> Option<TokenKind> {
        self.kinds.get(id as usize).copied()
    }

    /// Encodes text; special tokens in the text are recognised. `add_special` prepends BOS
    /// when the model asks for it.
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        if add_special && self.add_bos {
            if let Some(b) = self.bos {
                out.push(b);
            }
        }
        // The next occurrence of every special token at or after `done`, found again only
        // once `done` passes it: searching the rest of the text for every token after each
        // match was quadratic (a megabyte of `<|im_end|>` took minutes).
        let mut next: Vec<Option<usize>> = self
            .specials
            .iter()
            .map(|(s, _)| text.find(s.as_str()))
            .collect();
        let mut done = 0;
        while done < text.len() {
            // earliest special token occurrence, longest at that position
            let mut best: Option<(usize, &str, u32)> = None;
            for ((s, id), at) in self.specials.iter().zip(next.iter_mut()) {
                if at.is_some_and(|p| p < done) {
                    *at = text[done..].find(s.as_str()).map(|p| p + done);
                }
                if let Some(pos) = *at {
                    if best.is_none_or(|(bp, bs, _)| pos < bp || (pos == bp && s.len() > bs.len()))
                    {
                        best = Some((pos, s, *id));
                    }
                }
            }
            match best {
                Some((pos, s, id)) => {
                    self.encode_plain(&text[done..pos], &mut out)?;
                    out.push(id);
                    done = pos + s.len();
                }
                None => {
                    self.encode_plain(&text[done..], &mut out)?;
                    break;
                }
            }
        }
        Ok(out)
    }

    fn pre_tokenize<'a>(&self, text: &'a str) -> Result<Vec<&'a str>> {
        let mut pieces = vec![text];
        for re in &self.pre {
            let mut next = Vec::with_capacity(pieces.len() * 2);
            for piece in pieces {
                split_by(re, piece, &mut next)?;
            }
            pieces = next;
        }
        Ok(pieces)
    }

    fn encode_plain(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        for piece in self.pre_tokenize(text)? {
            let mapped: String = piece
                .bytes()
                .map(|b| self.byte_to_char[b as usize])
                .collect();
            if self.ignore_merges {
                if let Some(&id) = self.vocab.get(&mapped) {
                    out.push(id);
                    continue;
                }
            }
            let mut word: Vec<u32> = Vec::with_capacity(mapped.len());
            let mut buf = [0u8; 4];
            for c in mapped.chars() {
                match self.vocab.get(c.encode_utf8(&mut buf) as &str) {
                    Some(&id) => word.push(id),
                    None => match self.unk {
                        Some(u) => word.push(u),
                        None => {
                            return Err(Error::Tokenizer(format!(
                                "character {c:?} not in vocabulary"
                            )))
                        }
                    },
                }
            }
            self.merge_word(&mut word);
            out.extend_from_slice(&word);
        }
        Ok(())
    }

    /// Applies the BPE merges to one pre-token, lowest rank first and leftmost among equal
    /// ranks. A heap of candidate pairs over a linked list of symbols makes it O(n log n) in
    /// the word's length (rescanning the word after every merge was quadratic: 20,000
    /// repeated letters took seconds, 120,000 never finished).
    fn merge_word(&self, word: &mut Vec<u32>) {
        use std::cmp::Reverse;
        use std::collections::BinaryHeap;
        let n = word.len();
        if n < 2 {
            return;
        }
        const NONE: usize = usize::MAX;
        let mut next: Vec<usize> = (1..=n).map(|i| if i < n { i } else { NONE }).collect();
        let mut prev: Vec<usize> = (0..n).map(|i| i.checked_sub(1).unwrap_or(NONE)).collect();
        let mut alive = vec![true; n];
        // (rank, left position, left id, right id): stale entries are skipped when popped
        let mut heap = BinaryHeap::new();
        let push =
            |heap: &mut BinaryHeap<Reverse<(u32, usize, u32, u32)>>, i: usize, a: u32, b: u32| {
                if let Some(&(rank, _)) = self.merges.get(&(a, b)) {
                    heap.push(Reverse((rank, i, a, b)));
                }
            };
        for i in 0..n - 1 {
            push(&mut heap, i, word[i], word[i + 1]);
        }
        while let Some(Reverse((_, i, a, b))) = heap.pop() {
            let j = next[i];
            if !alive[i] || j == NONE || word[i] != a || word[j] != b {
                continue;
            }
            let Some(&(_, merged)) = self.merges.get(&(a, b)) else {
                continue;
            };
            word[i] = merged;
            alive[j] = false;
            next[i] = next[j];
            if next[j] != NONE {
                prev[next[j]] = i;
            }
            if prev[i] != NONE {
                push(&mut heap, prev[i], word[prev[i]], merged);
            }
            if next[i] != NONE {
                push(&mut heap, i, merged, word[next[i]]);
            }
        }
        let mut k = 0;
        for i in 0..n {
            if alive[i] {
                word[k] = word[i];
                k += 1;
            }
        }
        word.truncate(k);
    }

    /// Raw bytes of one token (special tokens give their text).
    pub fn token_bytes(&self, id: u32) -> Vec<u8> {
        let Some(s) = self.tokens.get(id as usize) else {
            return Vec::new();
        };
        if self.kinds[id as usize].is_special() {
            return s.as_bytes().to_vec();
        }
        let mut out = Vec::with_capacity(s.len());
        let mut buf = [0u8; 4];
        for c in s.chars() {
            match self.char_to_byte.get(&c) {
                Some(&b) => out.push(b),
                None => out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes()),
            }
        }
        out
    }

    /// Decodes ids to bytes; control tokens are dropped when `skip_special`.
    pub fn decode_bytes(&self, ids: &[u32], skip_special: bool) -> Vec<u8> {
        let mut out = Vec::new();
        for &id in ids {
            if skip_special
                && self
                    .kinds
                    .get(id as usize)
                    .is_some_and(|k| *k == TokenKind::Control)
            {
                continue;
            }
            out.extend(self.token_bytes(id));
        }
        out
    }

    /// Decodes ids to text (invalid UTF-8 replaced).
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> String {
        String::from_utf8_lossy(&self.decode_bytes(ids, skip_special)).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The merge loop this module used before (rescan after every merge): the reference for
    /// the heap-based one.
    fn merge_word_naive(t: &Tokenizer, word: &mut Vec<u32>) {
        loop {
            let mut best: Option<(usize, u32, u32)> = None;
            for i in 0..word.len().saturating_sub(1) {
                if let Some(&(rank, merged)) = t.merges.get(&(word[i], word[i + 1])) {
                    if best.is_none_or(|(_, r, _)| rank < r) {
                        best = Some((i, rank, merged));
                    }
                }
            }
            let Some((i, _, merged)) = best else { break };
            word[i] = merged;
            word.remove(i + 1);
        }
    }

    /// A tokenizer whose merges overlap and tie: every pair of `a b c` and their products.
    fn overlapping() -> Tokenizer {
        let bu = bytes_to_unicode();
        let mut tokens: Vec<String> = bu.iter().map(|c| c.to_string()).collect();
        let mut merges = Vec::new();
        for (x, y) in [
            ("a", "a"),
            ("a", "b"),
            ("b", "a"),
            ("aa", "a"),
            ("ab", "a"),
            ("b", "c"),
            ("aa", "aa"),
            ("c", "c"),
            ("a", "bc"),
        ] {
            let m = format!("{x}{y}");
            if !tokens.contains(&m) {
                tokens.push(m);
            }
            merges.push(format!("{x} {y}"));
        }
        let kinds = vec![TokenKind::Normal; tokens.len()];
        Tokenizer::new(TokenizerSpec {
            tokens,
            kinds,
            merges,
            pre_patterns: vec![],
            ..Default::default()
        })
        .unwrap()
    }

    proptest::proptest! {
        #[test]
        fn heap_merges_equal_the_rescanning_loop(w in "[abc]{0,60}") {
            let t = overlapping();
            let ids: Vec<u32> = w.chars().map(|c| t.vocab[&c.to_string()]).collect();
            let (mut fast, mut slow) = (ids.clone(), ids);
            t.merge_word(&mut fast);
            merge_word_naive(&t, &mut slow);
            proptest::prop_assert_eq!(fast, slow);
        }
    }

    /// Issue 13: a megabyte of one character class exceeded the regex engine's stack and the
    /// message failed to encode.
    #[test]
    fn megabyte_runs_encode_and_round_trip() {
        for pre in ["smollm", "qwen2", "llama-bpe"] {
            let t = toy(pre);
            for s in [
                " ".repeat(1 << 20),
                "\n".repeat(1 << 20),
                "x".repeat(1 << 20),
                "!?".repeat(1 << 19),
                "hello world ".repeat(1 << 16),
            ] {
                let ids = t.encode(&s, false).unwrap();
                assert_eq!(t.decode(&ids, false), s, "{pre}");
            }
        }
    }

    /// Issue 13: 120,000 repeated letters never finished (quadratic merging).
    #[test]
    fn a_very_long_word_encodes_in_linearithmic_time() {
        let t = overlapping();
        let ids = t.encode(&"a".repeat(200_000), false).unwrap();
        assert_eq!(ids.len(), 50_000); // "aaaa" tokens
    }

    /// Issue 13: every special token searched the rest of the text again after each special
    /// token found, so a megabyte of `<|im_end|>` took minutes (quadratic).
    #[test]
    fn a_megabyte_of_special_tokens_encodes_in_linear_time() {
        let t = toy("qwen2");
        let ids = t.encode(&"<|im_end|>".repeat(100_000), false).unwrap();
        assert_eq!(ids, vec![1; 100_000]);
        let s = "x<|im_start|>y<|im_end|>".repeat(40_000);
        let ids = t.encode(&s, false).unwrap();
        assert_eq!(ids.iter().filter(|&&i| i == 0).count(), 40_000);
        assert_eq!(t.decode(&ids, false), s);
    }

    fn toy(pre: &str) -> Tokenizer {
        let bu = bytes_to_unicode();
        let mut tokens: Vec<String> = vec!["<|im_start|>".into(), "<|im_end|>".into()];
        let mut kinds = vec![TokenKind::Control, TokenKind::Control];
        for c in bu {
            tokens.push(c.to_string());
            kinds.push(TokenKind::Normal);
        }
        let g = bu[b' ' as usize];
        for t in [
            "he",
            "ll",
            "hell",
            "hello",
            &format!("{g}w"),
            &format!("{g}wo"),
            "12",
        ] {
            tokens.push(t.to_string());
            kinds.push(TokenKind::Normal);
        }
        let merges = vec![
            "h e".to_string(),
            "l l".into(),
            "he ll".into(),
            "hell o".into(),
            format!("{g} w"),
            format!("{g}w o"),
            "1 2".into(),
        ];
        let (pre_patterns, ignore_merges) = patterns_for_pre(pre).unwrap();
        Tokenizer::new(TokenizerSpec {
            tokens,
            kinds,
            merges,
            pre_patterns,
            ignore_merges,
            eos: Some(1),
            ..Default::default()
        })
        .unwrap()
    }

    #[test]
    fn merges_and_specials() {
        let t = toy("gpt-2");
        let ids = t.encode("<|im_start|>hello wo<|im_end|>", false).unwrap();
        assert_eq!(ids[0], 0);
        assert_eq!(*ids.last().unwrap(), 1);
        assert_eq!(t.token_str(ids[1]), Some("hello"));
        assert_eq!(t.decode(&ids, false), "<|im_start|>hello wo<|im_end|>");
        assert_eq!(t.decode(&ids, true), "hello wo");
    }

    #[test]
    fn smollm_splits_digits() {
        let gpt2 = toy("gpt-2");
        let smol = toy("smollm");
        assert_eq!(gpt2.encode("12", false).unwrap().len(), 1);
        assert_eq!(smol.encode("12", false).unwrap().len(), 2);
    }

    #[test]
    fn roundtrip_unicode() {
        let t = toy("qwen2");
        let s = "价格 ¥12 🎉 ok\n\n";
        assert_eq!(t.decode(&t.encode(s, false).unwrap(), false), s);
    }

    #[test]
    fn unknown_pre_is_an_error() {
        assert!(patterns_for_pre("nonsense").is_err());
    }
}
