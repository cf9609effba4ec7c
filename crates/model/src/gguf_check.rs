//! Validation of an untrusted GGUF file's header before anything trusts it: the metadata is
//! walked once (every length checked against the bytes left in the file) to vet
//! `general.alignment` before the header parser divides by it, and every tensor's shape is
//! checked with overflow-checked products against its type's block size and the file's size
//! before any tensor is read. Errors name the key or tensor.

use std::io::{Read, Seek, SeekFrom};

use candle_core::quantized::gguf_file::Content;

/// Largest alignment accepted (llama.cpp writes 32; anything this large is corrupt).
const MAX_ALIGNMENT: u64 = 1 << 16;
/// Array nesting accepted in metadata (GGUF writers produce at most arrays of arrays).
const MAX_ARRAY_DEPTH: usize = 4;

/// Why a header was refused.
pub type Reason = String;

/// A forward-only walk over the header. The position is counted here and values are skipped
/// by reading through the caller's buffer: a seek per value (the vocabulary alone is 49,152
/// strings) would cost a system call each and drop the buffer.
struct Header<'a, R> {
    r: &'a mut R,
    size: u64,
    pos: u64,
    /// GGUF v1 writes 32-bit lengths.
    v1: bool,
}

impl<R: Read> Header<'_, R> {
    fn left(&self) -> Result<u64, Reason> {
        Ok(self.size.saturating_sub(self.pos))
    }
    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], Reason> {
        let mut b = [0u8; N];
        self.r
            .read_exact(&mut b)
            .map_err(|_| "the header ends early".to_string())?;
        self.pos += N as u64;
        Ok(b)
    }
    fn u32(&mut self) -> Result<u32, Reason> {
        Ok(u32::from_le_bytes(self.bytes::<4>()?))
    }
    fn u64(&mut self) -> Result<u64, Reason> {
        Ok(u64::from_le_bytes(self.bytes::<8>()?))
    }
    fn len(&mut self) -> Result<u64, Reason> {
        if self.v1 {
            self.u32().map(u64::from)
        } else {
            self.u64()
        }
    }
    fn skip(&mut self, n: u64, what: &str) -> Result<(), Reason> {
        if n > self.left()? {
            return Err(format!("{what} claims {n} bytes, more than the file holds"));
        }
        let copied = std::io::copy(&mut self.r.by_ref().take(n), &mut std::io::sink())
            .map_err(|e| e.to_string())?;
        if copied != n {
            return Err(format!("{what}: the header ends early"));
        }
        self.pos += n;
        Ok(())
    }
    fn string(&mut self, what: &str) -> Result<Vec<u8>, Reason> {
        let n = self.len()?;
        if n > self.left()? {
            return Err(format!(
                "{what}: a string of {n} bytes, more than the file holds"
            ));
        }
        let mut v = vec![0u8; n as usize];
        self.r
            .read_exact(&mut v)
            .map_err(|_| format!("{what}: the string ends early"))?;
        self.pos += n;
        Ok(v)
    }
    /// Skips a value of type `ty`; returns it when it is an integer.
    fn value(&mut self, ty: u32, key: &str, depth: usize) -> Result<Option<i128>, Reason> {
        let fixed = |ty: u32| -> Option<u64> {
            Some(match ty {
                0 | 1 | 7 => 1,
                2 | 3 => 2,
                4..=6 => 4,
                10..=12 => 8,
                _ => return None,
            })
        };
        match ty {
            0 => Ok(Some(self.bytes::<1>()?[0] as i128)),
            1 => Ok(Some(i8::from_le_bytes(self.bytes::<1>()?) as i128)),
            2 => Ok(Some(u16::from_le_bytes(self.bytes::<2>()?) as i128)),
            3 => Ok(Some(i16::from_le_bytes(self.bytes::<2>()?) as i128)),
            4 => Ok(Some(self.u32()? as i128)),
            5 => Ok(Some(i32::from_le_bytes(self.bytes::<4>()?) as i128)),
            10 => Ok(Some(self.u64()? as i128)),
            11 => Ok(Some(i64::from_le_bytes(self.bytes::<8>()?) as i128)),
            6 | 7 | 12 => {
                self.skip(fixed(ty).unwrap_or(1), key)?;
                Ok(None)
            }
            8 => {
                let n = self.len()?;
                self.skip(n, key)?;
                Ok(None)
            }
            9 => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(format!("metadata `{key}`: arrays nested too deeply"));
                }
                let elem = self.u32()?;
                let count = self.len()?;
                match fixed(elem) {
                    Some(sz) => {
                        let bytes = count.checked_mul(sz).ok_or_else(|| {
                            format!("metadata `{key}`: an array of {count} elements overflows")
                        })?;
                        self.skip(bytes, key)?;
                    }
                    None => {
                        // strings or arrays: at least a length each
                        if count > self.left()? / if self.v1 { 4 } else { 8 } {
                            return Err(format!(
                                "metadata `{key}`: an array of {count} elements, more than the \
                                 file holds"
                            ));
                        }
                        for _ in 0..count {
                            self.value(elem, key, depth + 1)?;
                        }
                    }
                }
                Ok(None)
            }
            other => Err(format!("metadata `{key}` has unknown value type {other}")),
        }
    }
}

/// Checks `general.alignment` (walking the metadata) before the header is parsed.
pub fn precheck<R: Read + Seek>(r: &mut R) -> Result<(), Reason> {
    let start = r.stream_position().map_err(|e| e.to_string())?;
    let size = r.seek(SeekFrom::End(0)).map_err(|e| e.to_string())?;
    r.seek(SeekFrom::Start(start)).map_err(|e| e.to_string())?;
    let mut h = Header {
        r,
        size,
        pos: start,
        v1: false,
    };
    let magic = h.bytes::<4>()?;
    if &magic != b"GGUF" {
        return Err("not a GGUF file (the magic bytes are not `GGUF`)".into());
    }
    let version = h.u32()?;
    if !(1..=3).contains(&version) {
        return Err(format!(
            "unsupported GGUF version {version} (1 to 3 are read)"
        ));
    }
    h.v1 = version == 1;
    let _tensors = h.len()?;
    let kvs = h.len()?;
    if kvs > h.left()? / 9 {
        return Err(format!(
            "the header declares {kvs} metadata entries, more than the file holds"
        ));
    }
    for _ in 0..kvs {
        let key = String::from_utf8_lossy(&h.string("a metadata key")?).into_owned();
        let ty = h.u32()?;
        let v = h.value(ty, &key, 0)?;
        if key == "general.alignment" {
            match v {
                Some(a) if a > 0 && (a as u64).is_power_of_two() && a as u64 <= MAX_ALIGNMENT => {}
                Some(a) => {
                    return Err(format!(
                        "metadata `general.alignment` is {a}; it must be a power of two from 1 \
                         to {MAX_ALIGNMENT}"
                    ))
                }
                None => return Err(
                    "metadata `general.alignment` is not an integer (it must be a power of two)"
                        .into(),
                ),
            }
        }
    }
    h.r.seek(SeekFrom::Start(start))
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// Checks every tensor of a parsed header: element counts without overflow, whole blocks of
/// its type, and data inside the file.
pub fn check_tensors(content: &Content, file_size: u64) -> Result<(), Reason> {
    let data_start = content.tensor_data_offset;
    for (name, t) in &content.tensor_infos {
        // A zero dimension makes an empty tensor that candle's loaders abort on.
        if t.shape.dims().contains(&0) {
            return Err(format!(
                "tensor `{name}`: dimensions {:?} hold no elements",
                t.shape.dims()
            ));
        }
        let mut elems: u64 = 1;
        for &d in t.shape.dims() {
            elems = elems.checked_mul(d as u64).ok_or_else(|| {
                format!("tensor `{name}`: dimensions {:?} overflow", t.shape.dims())
            })?;
        }
        let block = t.ggml_dtype.block_size() as u64;
        if !elems.is_multiple_of(block) {
            return Err(format!(
                "tensor `{name}`: {elems} elements are not whole blocks of {block} ({:?})",
                t.ggml_dtype
            ));
        }
        let bytes = (elems / block)
            .checked_mul(t.ggml_dtype.type_size() as u64)
            .ok_or_else(|| format!("tensor `{name}`: its byte size overflows"))?;
        let end = data_start
            .checked_add(t.offset)
            .and_then(|x| x.checked_add(bytes))
            .ok_or_else(|| format!("tensor `{name}`: its offset overflows"))?;
        if end > file_size {
            return Err(format!(
                "tensor `{name}` ({:?}, {:?}) needs bytes up to {end}, but the file has {file_size} \
                 (truncated or corrupt)",
                t.ggml_dtype,
                t.shape.dims()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::gguf::GgufFile;

    fn string(out: &mut Vec<u8>, s: &str) {
        out.extend((s.len() as u64).to_le_bytes());
        out.extend(s.as_bytes());
    }

    /// A v3 GGUF: the given u32 metadata, one f32 tensor of `dims`, and `data` bytes of data.
    fn gguf(meta: &[(&str, u32)], dims: &[u64], data: usize) -> tempfile::NamedTempFile {
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend(1u64.to_le_bytes());
        b.extend((meta.len() as u64).to_le_bytes());
        for (k, v) in meta {
            string(&mut b, k);
            b.extend(4u32.to_le_bytes());
            b.extend(v.to_le_bytes());
        }
        string(&mut b, "w");
        b.extend((dims.len() as u32).to_le_bytes());
        for d in dims {
            b.extend(d.to_le_bytes());
        }
        b.extend(0u32.to_le_bytes()); // f32
        b.extend(0u64.to_le_bytes());
        while !b.len().is_multiple_of(32) {
            b.push(0);
        }
        b.extend(vec![0u8; data]);
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), b).unwrap();
        f
    }

    fn open_err(f: &tempfile::NamedTempFile) -> String {
        GgufFile::open(f.path()).unwrap_err().to_string()
    }

    #[test]
    fn a_zero_or_odd_alignment_is_refused_not_divided_by() {
        for a in [0u32, 3, 1 << 20] {
            let e = open_err(&gguf(&[("general.alignment", a)], &[4], 16));
            assert!(
                e.contains("general.alignment") && e.contains("power of two"),
                "{e}"
            );
        }
        assert!(GgufFile::open(gguf(&[("general.alignment", 32)], &[4], 16).path()).is_ok());
    }

    #[test]
    fn overflowing_or_truncated_tensors_are_refused_before_reading() {
        let e = open_err(&gguf(&[], &[1 << 32, 1 << 32], 16));
        assert!(e.contains("`w`") && e.contains("overflow"), "{e}");
        let e = open_err(&gguf(&[], &[1 << 20, 1 << 10], 16));
        assert!(e.contains("`w`") && e.contains("truncated"), "{e}");
        // red-team finding: a zero dimension aborted in candle's loader
        let e = open_err(&gguf(&[], &[0], 16));
        assert!(e.contains("`w`") && e.contains("no elements"), "{e}");
    }

    /// Issue 13: a wrongly typed value was reported as missing.
    #[test]
    fn a_wrongly_typed_value_is_named_with_its_type() {
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend(0u64.to_le_bytes());
        b.extend(2u64.to_le_bytes());
        for (k, v) in [
            ("general.architecture", "llama"),
            ("llama.embedding_length", "big"),
        ] {
            string(&mut b, k);
            b.extend(8u32.to_le_bytes());
            string(&mut b, v);
        }
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), b).unwrap();
        let e = GgufFile::open(f.path())
            .unwrap()
            .config()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("llama.embedding_length")
                && e.contains("String")
                && e.contains("not a non-negative integer"),
            "{e}"
        );
    }

    #[test]
    fn garbage_and_absurd_counts_are_clear_errors() {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), b"GGML\x03\0\0\0").unwrap();
        assert!(open_err(&f).contains("magic"));
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend(0u64.to_le_bytes());
        b.extend(u64::MAX.to_le_bytes());
        std::fs::write(f.path(), b).unwrap();
        assert!(open_err(&f).contains("metadata entries"));
    }
}
