//! A validator with the acceptance rules of Python's `json.loads` (strict mode), used by
//! `detectable_format:json_format`. `serde_json` is stricter (it rejects `NaN`, `Infinity`,
//! out-of-range numbers and lone surrogate escapes), so the grammar is checked by hand.

/// Maximum nesting accepted; deeper input is rejected rather than overflowing the stack
/// (CPython raises `RecursionError` near this depth).
const MAX_DEPTH: usize = 900;

/// True iff Python `json.loads(text)` returns without raising.
pub fn is_valid(text: &str) -> bool {
    let b = text.as_bytes();
    let mut p = Parser { b, i: 0 };
    if text.starts_with('\u{feff}') {
        return false;
    }
    p.ws();
    if !p.value(0) {
        return false;
    }
    p.ws();
    p.i == b.len()
}

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn lit(&mut self, s: &str) -> bool {
        if self.b[self.i..].starts_with(s.as_bytes()) {
            self.i += s.len();
            true
        } else {
            false
        }
    }

    fn value(&mut self, depth: usize) -> bool {
        if depth > MAX_DEPTH {
            return false;
        }
        match self.peek() {
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => self.string(),
            Some(b'n') => self.lit("null"),
            Some(b't') => self.lit("true"),
            Some(b'f') => self.lit("false"),
            Some(b'N') => self.lit("NaN"),
            Some(b'I') => self.lit("Infinity"),
            Some(b'-') if self.b[self.i..].starts_with(b"-Infinity") => self.lit("-Infinity"),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => false,
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.i += 1;
        }
        self.i - start
    }

    fn number(&mut self) -> bool {
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek() {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return false,
        }
        // Fraction and exponent are optional; a dangling `.` or `e` ends the number before it
        // (the rest then fails as extra data), as in Python's scanner.
        if self.peek() == Some(b'.') && matches!(self.b.get(self.i + 1), Some(b'0'..=b'9')) {
            self.i += 1;
            self.digits();
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            let save = self.i;
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if self.digits() == 0 {
                self.i = save;
            }
        }
        true
    }

    fn string(&mut self) -> bool {
        self.i += 1; // opening quote
        loop {
            match self.peek() {
                None => return false,
                Some(b'"') => {
                    self.i += 1;
                    return true;
                }
                Some(c) if c < 0x20 => return false,
                Some(b'\\') => {
                    self.i += 1;
                    match self.peek() {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => self.i += 1,
                        Some(b'u') => {
                            self.i += 1;
                            let hex = self.b.get(self.i..self.i + 4);
                            if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                                return false;
                            }
                            self.i += 4;
                        }
                        _ => return false,
                    }
                }
                Some(_) => self.i += 1,
            }
        }
    }

    fn array(&mut self, depth: usize) -> bool {
        self.i += 1;
        self.ws();
        if self.peek() == Some(b']') {
            self.i += 1;
            return true;
        }
        loop {
            if !self.value(depth + 1) {
                return false;
            }
            self.ws();
            match self.peek() {
                Some(b',') => {
                    self.i += 1;
                    self.ws();
                }
                Some(b']') => {
                    self.i += 1;
                    return true;
                }
                _ => return false,
            }
        }
    }

    fn object(&mut self, depth: usize) -> bool {
        self.i += 1;
        self.ws();
        if self.peek() == Some(b'}') {
            self.i += 1;
            return true;
        }
        loop {
            if self.peek() != Some(b'"') || !self.string() {
                return false;
            }
            self.ws();
            if self.peek() != Some(b':') {
                return false;
            }
            self.i += 1;
            self.ws();
            if !self.value(depth + 1) {
                return false;
            }
            self.ws();
            match self.peek() {
                Some(b',') => {
                    self.i += 1;
                    self.ws();
                }
                Some(b'}') => {
                    self.i += 1;
                    return true;
                }
                _ => return false,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_valid;

    #[test]
    fn accepts_what_python_accepts() {
        for ok in [
            "\"hello\"",
            "42",
            "true",
            "null",
            "NaN",
            "-Infinity",
            "[Infinity]",
            "1e400",
            "-0.5E-3",
            "{\"a\": 1, \"a\": 2}",
            "\"\\ud800\"",
            " { } ",
            "[1, [2, {\"x\": []}]]",
        ] {
            assert!(is_valid(ok), "{ok}");
        }
    }

    #[test]
    fn rejects_what_python_rejects() {
        for bad in [
            "",
            "[1,]",
            "{\"a\":1,}",
            "// c\n1",
            "'x'",
            "\"a\nb\"",
            "1 2",
            "01",
            "1.",
            ".5",
            "-",
            "[1]\u{a0}",
            "{a: 1}",
            "\"\\x\"",
            "\"\\u12\"",
            "nul",
            "+1",
            "\u{feff}1",
        ] {
            assert!(!is_valid(bad), "{bad:?}");
        }
    }
}
