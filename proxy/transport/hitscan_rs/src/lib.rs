//! One validating pass over the bytes of an Elasticsearch search response.
//!
//! `scan(raw)` checks that `raw` is one strict JSON document (RFC 8259, strict UTF-8, at most
//! 512 nested containers) of the shape the proxy can collapse by splicing, and returns where
//! the pieces it splices are, as byte offsets into `raw`; `None` for anything else, so that the
//! caller falls back to decoding. The rules are those of
//! `neardup.proxy.transport.hitscan.reference_scan`, which this module must match exactly.
//!
//! Keys are compared on their raw bytes. In the objects whose keys are looked up (the top
//! level, `hits`, each hit, its `_source` and `_source.neardup`) a key with an escape could
//! spell a looked-up key differently, so any escaped key there, or a looked-up key given twice,
//! gives `None`. Everything else is only validated.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// Containers deeper than this give `None`; the top-level container has depth 1.
const MAX_DEPTH: u32 = 512;

/// Values per hit in the table: start, end, then the (start, end) pairs of `_index`, `_id`,
/// `_routing`, `_score`, `v`, `sig` and `n`.
const HIT_FIELDS: usize = 16;

/// Offsets of a response's pieces, and the hits' rows one after another.
struct Scan {
    took: (usize, usize),
    hits: (usize, usize),
    close: usize,
    table: Vec<i64>,
}

/// A key or string value: the content between the quotes, and whether it holds an escape.
#[derive(Clone, Copy)]
struct Str {
    start: usize,
    end: usize,
    escaped: bool,
}

/// A number token, and whether it is an integer (no fraction, no exponent).
#[derive(Clone, Copy)]
struct Num {
    start: usize,
    end: usize,
    integer: bool,
}

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
}

/// `Some(())` when `ok`, so that a failed rule returns `None` through `?`.
#[inline(always)]
fn check(ok: bool) -> Option<()> {
    ok.then_some(())
}

impl<'a> Parser<'a> {
    #[inline(always)]
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    #[inline(always)]
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    /// A string whose opening quote is at the cursor. UTF-8 was checked for the whole input.
    ///
    /// Works on 32-byte blocks: the block's mask marks its quotes, backslashes and control
    /// bytes, and each escape only clears the mask's bits it covers, so text with an escape
    /// every few words (newlines) does not reload a block per escape.
    #[inline(always)]
    fn string(&mut self) -> Option<Str> {
        let b = self.b;
        let start = self.i + 1;
        let mut i = start;
        let mut escaped = false;
        'blocks: loop {
            let mut mask = block_mask(b, i);
            if mask == 0 {
                // A plain run: find its end with the long-text loop (None: the input ends first).
                check(i + 32 < b.len())?;
                i = find_special(b, i + 32)?;
                continue;
            }
            loop {
                let k = i + mask.trailing_zeros() as usize;
                match b[k] {
                    b'"' => {
                        self.i = k + 1;
                        return Some(Str { start, end: k, escaped });
                    }
                    b'\\' => escaped = true,
                    _ => return None, // a raw control byte
                }
                let used = escape_end(b, k)? - i;
                if used >= 32 {
                    i += used;
                    continue 'blocks;
                }
                mask &= u32::MAX << used;
                if mask == 0 {
                    i += 32;
                    continue 'blocks;
                }
            }
        }
    }

    /// A string value without escapes (the ones the proxy copies as they are).
    #[inline]
    fn plain_string(&mut self) -> Option<Str> {
        check(self.peek()? == b'"')?;
        let s = self.string()?;
        check(!s.escaped)?;
        Some(s)
    }

    #[inline]
    fn digits(&mut self) -> usize {
        let from = self.i;
        while let Some(b'0'..=b'9') = self.peek() {
            self.i += 1;
        }
        self.i - from
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?` at the cursor.
    #[inline]
    fn number(&mut self) -> Option<Num> {
        let start = self.i;
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek()? {
            b'0' => self.i += 1,
            b'1'..=b'9' => {
                self.digits();
            }
            _ => return None,
        }
        let mut integer = true;
        if self.peek() == Some(b'.') {
            self.i += 1;
            integer = false;
            check(self.digits() > 0)?;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            integer = false;
            if let Some(b'+' | b'-') = self.peek() {
                self.i += 1;
            }
            check(self.digits() > 0)?;
        }
        Some(Num {
            start,
            end: self.i,
            integer,
        })
    }

    #[inline]
    fn integer(&mut self) -> Option<Num> {
        let n = self.number()?;
        check(n.integer)?;
        Some(n)
    }

    #[inline]
    fn literal(&mut self, word: &[u8]) -> Option<()> {
        check(self.b.get(self.i..self.i + word.len())? == word)?;
        self.i += word.len();
        Some(())
    }

    /// Any value at the cursor; a container starting here has depth `depth`.
    fn value(&mut self, depth: u32) -> Option<()> {
        match self.peek()? {
            b'"' => {
                self.string()?;
            }
            b'{' => {
                self.object(depth, false, |p, _| p.value(depth + 1))?;
            }
            b'[' => {
                self.array(depth, |p| p.value(depth + 1))?;
            }
            b't' => self.literal(b"true")?,
            b'f' => self.literal(b"false")?,
            b'n' => self.literal(b"null")?,
            _ => {
                self.number()?;
            }
        }
        Some(())
    }

    /// The object whose `{` is at the cursor: `member` parses each value, given its raw key.
    /// `looked_up`: the object's keys are looked up, so an escaped key gives `None`. Returns
    /// the offset of the closing `}`.
    #[inline]
    fn object<F>(&mut self, depth: u32, looked_up: bool, mut member: F) -> Option<usize>
    where
        F: FnMut(&mut Self, &'a [u8]) -> Option<()>,
    {
        check(depth <= MAX_DEPTH && self.peek()? == b'{')?;
        self.i += 1;
        self.ws();
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(self.i - 1);
        }
        loop {
            check(self.peek()? == b'"')?;
            let key = self.string()?;
            check(!(looked_up && key.escaped))?;
            self.ws();
            check(self.peek()? == b':')?;
            self.i += 1;
            self.ws();
            let b: &'a [u8] = self.b;
            member(self, &b[key.start..key.end])?;
            self.ws();
            match self.peek()? {
                b',' => {
                    self.i += 1;
                    self.ws();
                }
                b'}' => {
                    self.i += 1;
                    return Some(self.i - 1);
                }
                _ => return None,
            }
        }
    }

    /// The array whose `[` is at the cursor: `element` parses each element. Returns the offsets
    /// of its `[` and just after its `]`.
    #[inline]
    fn array<F>(&mut self, depth: u32, mut element: F) -> Option<(usize, usize)>
    where
        F: FnMut(&mut Self) -> Option<()>,
    {
        let start = self.i;
        check(depth <= MAX_DEPTH && self.peek()? == b'[')?;
        self.i += 1;
        self.ws();
        if self.peek()? == b']' {
            self.i += 1;
            return Some((start, self.i));
        }
        loop {
            element(self)?;
            self.ws();
            match self.peek()? {
                b',' => {
                    self.i += 1;
                    self.ws();
                }
                b']' => {
                    self.i += 1;
                    return Some((start, self.i));
                }
                _ => return None,
            }
        }
    }

    /// The whole response.
    fn response(&mut self) -> Option<Scan> {
        self.ws();
        let mut took: Option<Num> = None;
        let mut hits: Option<((usize, usize), Vec<i64>)> = None;
        let close = self.object(1, true, |p, key| {
            match key {
                b"took" => {
                    check(took.is_none())?;
                    took = Some(p.integer()?);
                }
                b"hits" => {
                    check(hits.is_none())?;
                    hits = Some(p.hits(2)?);
                }
                b"neardup" => return None,
                _ => p.value(2)?,
            }
            Some(())
        })?;
        self.ws();
        check(self.i == self.b.len())?;
        let took = took?;
        let (hits, table) = hits?;
        Some(Scan {
            took: (took.start, took.end),
            hits,
            close,
            table,
        })
    }

    /// The `hits` object: its `hits` array's bounds and the hits' rows.
    fn hits(&mut self, depth: u32) -> Option<((usize, usize), Vec<i64>)> {
        let mut found: Option<((usize, usize), Vec<i64>)> = None;
        self.object(depth, true, |p, key| {
            if key == b"hits" {
                check(found.is_none())?;
                let mut table = Vec::new();
                let bounds = p.array(depth + 1, |p| p.hit(depth + 2, &mut table))?;
                found = Some((bounds, table));
                Some(())
            } else {
                p.value(depth + 1)
            }
        })?;
        found
    }

    /// One hit, appended to `table` as its row.
    fn hit(&mut self, depth: u32, table: &mut Vec<i64>) -> Option<()> {
        let start = self.i;
        let mut row = [-1i64; HIT_FIELDS];
        let mut seen = 0u32; // bit k: the key whose pair starts at row[k] was given
        let close = self.object(depth, true, |p, key| {
            let slot = match key {
                b"_index" => 2,
                b"_id" => 4,
                b"_routing" => 6,
                b"_score" => 8,
                b"_source" => 10,
                b"fields" | b"inner_hits" => return None,
                _ => return p.value(depth + 1),
            };
            check(seen & (1 << slot) == 0)?;
            seen |= 1 << slot;
            let bounds: &[usize] = match slot {
                8 if p.peek()? == b'n' => return p.literal(b"null"),
                8 => {
                    let n = p.number()?;
                    &[n.start, n.end]
                }
                10 => &p.source(depth + 1)?,
                _ => {
                    let s = p.plain_string()?;
                    &[s.start, s.end]
                }
            };
            for (cell, &offset) in row[slot..].iter_mut().zip(bounds) {
                *cell = offset as i64;
            }
            Some(())
        })?;
        check(seen & (1 << 10) != 0)?;
        row[0] = start as i64;
        row[1] = (close + 1) as i64;
        table.extend_from_slice(&row);
        Some(())
    }

    /// A hit's `_source`: the bounds of `neardup.v`, `neardup.sig` and `neardup.n`.
    fn source(&mut self, depth: u32) -> Option<[usize; 6]> {
        let mut found = None;
        self.object(depth, true, |p, key| {
            if key == b"neardup" {
                check(found.is_none())?;
                found = Some(p.neardup(depth + 1)?);
                Some(())
            } else {
                p.value(depth + 1)
            }
        })?;
        found
    }

    /// `_source.neardup`: the bounds of `v`, `sig` and `n`.
    fn neardup(&mut self, depth: u32) -> Option<[usize; 6]> {
        let (mut v, mut sig, mut n) = (None, None, None);
        self.object(depth, true, |p, key| {
            let (slot, value) = match key {
                b"v" => (&mut v, p.plain_string().map(|s| (s.start, s.end))),
                b"sig" => (&mut sig, p.plain_string().map(|s| (s.start, s.end))),
                b"n" => (&mut n, p.integer().map(|t| (t.start, t.end))),
                _ => return p.value(depth + 1),
            };
            check(slot.is_none())?;
            *slot = Some(value?);
            Some(())
        })?;
        let ((v0, v1), (s0, s1), (n0, n1)) = (v?, sig?, n?);
        Some([v0, v1, s0, s1, n0, n1])
    }
}

/// The length of the escape `\\c`, by `c`: 6 for `\\uXXXX`, 0 for no escape. A table rather
/// than a match, whose jump costs more per escape than the rest.
static ESCAPE_LEN: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut k = 0;
    while k < 8 {
        table[b"\"\\/bfnrt"[k] as usize] = 2;
        k += 1;
    }
    table[b'u' as usize] = 6;
    table
};

/// The offset just after the escape whose backslash is at `k`, if it is one.
#[inline(always)]
fn escape_end(b: &[u8], k: usize) -> Option<usize> {
    let step = ESCAPE_LEN[*b.get(k + 1)? as usize] as usize;
    check(step != 0)?;
    if step == 6 {
        check(b.get(k + 2..k + 6)?.iter().all(u8::is_ascii_hexdigit))?;
    }
    Some(k + step)
}

#[inline(always)]
fn is_special(x: u8) -> bool {
    x == b'"' || x == b'\\' || x < 0x20
}

/// Bit k set where `b[i + k]` (k < 32, inside `b`) is `"`, `\` or a control byte.
#[inline(always)]
fn block_mask(b: &[u8], i: usize) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if i + 32 <= b.len() {
        // SAFETY: the 32 bytes are inside `b`.
        return unsafe { x86::sse2_mask32(b.as_ptr().add(i)) };
    }
    partial_mask(b, i)
}

#[cfg_attr(target_arch = "x86_64", inline(never), cold)]
fn partial_mask(b: &[u8], i: usize) -> u32 {
    let rest = b.get(i..).unwrap_or_default();
    rest.iter()
        .take(32)
        .enumerate()
        .fold(0, |mask, (k, &x)| mask | (is_special(x) as u32) << k)
}

/// The offset of the first `"`, `\` or control byte at or after `i`, if any: the end of a run
/// of plain text, most of a response's bytes.
#[cfg(not(target_arch = "x86_64"))]
fn find_special(b: &[u8], i: usize) -> Option<usize> {
    b.get(i..)?.iter().position(|&x| is_special(x)).map(|k| i + k)
}

#[cfg(target_arch = "x86_64")]
fn find_special(b: &[u8], i: usize) -> Option<usize> {
    if is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2.
        unsafe { x86::find_special_avx2(b, i) }
    } else {
        x86::find_special_sse2(b, i)
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::is_special;
    use std::arch::x86_64::*;

    /// Bit k set where byte k of the 32 at `p` is `"`, `\` or below 0x20.
    ///
    /// # Safety
    /// `p` must point to 32 readable bytes. (SSE2 is part of x86_64.)
    #[inline(always)]
    pub unsafe fn sse2_mask32(p: *const u8) -> u32 {
        unsafe {
            let quote = _mm_set1_epi8(b'"' as i8);
            let backslash = _mm_set1_epi8(b'\\' as i8);
            let control = _mm_set1_epi8(0x1f);
            let special = |v: __m128i| {
                // min(v, 0x1f) == v exactly where v <= 0x1f, unsigned.
                let low = _mm_cmpeq_epi8(_mm_min_epu8(v, control), v);
                let marks = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)), low);
                _mm_movemask_epi8(marks) as u32
            };
            let p = p as *const __m128i;
            special(_mm_loadu_si128(p)) | (special(_mm_loadu_si128(p.add(1))) << 16)
        }
    }

    pub fn find_special_sse2(b: &[u8], mut i: usize) -> Option<usize> {
        while i + 32 <= b.len() {
            // SAFETY: i + 32 <= b.len().
            let mask = unsafe { sse2_mask32(b.as_ptr().add(i)) };
            if mask != 0 {
                return Some(i + mask.trailing_zeros() as usize);
            }
            i += 32;
        }
        b.get(i..)?.iter().position(|&x| is_special(x)).map(|k| i + k)
    }

    #[target_feature(enable = "avx2")]
    pub fn find_special_avx2(b: &[u8], mut i: usize) -> Option<usize> {
        let quote = _mm256_set1_epi8(b'"' as i8);
        let backslash = _mm256_set1_epi8(b'\\' as i8);
        let control = _mm256_set1_epi8(0x1f);
        let special = |v: __m256i| {
            let low = _mm256_cmpeq_epi8(_mm256_min_epu8(v, control), v);
            let marks = _mm256_or_si256(
                _mm256_or_si256(_mm256_cmpeq_epi8(v, quote), _mm256_cmpeq_epi8(v, backslash)),
                low,
            );
            _mm256_movemask_epi8(marks) as u32 as u64
        };
        while i + 64 <= b.len() {
            // SAFETY: i + 64 <= b.len(), and loadu needs no alignment.
            let (lo, hi) = unsafe {
                let p = b.as_ptr().add(i) as *const __m256i;
                (_mm256_loadu_si256(p), _mm256_loadu_si256(p.add(1)))
            };
            let mask = special(lo) | (special(hi) << 32);
            if mask != 0 {
                return Some(i + mask.trailing_zeros() as usize);
            }
            i += 64;
        }
        find_special_sse2(b, i)
    }
}

/// The whole scan on a byte slice.
fn scan_bytes(raw: &[u8]) -> Option<Scan> {
    // Once for the whole input: outside strings any byte above 0x7f is a syntax error anyway,
    // so the parser itself only looks at ASCII.
    simdutf8::basic::from_utf8(raw).ok()?;
    Parser { b: raw, i: 0 }.response()
}

type ScanResult<'py> = (usize, usize, usize, usize, usize, Bound<'py, PyBytes>);

/// scan(raw) -> (took_start, took_end, hits_start, hits_end, close, table) | None
///
/// raw: bytes, or any C-contiguous buffer of bytes. table: 16 little-endian int64 per hit.
#[pyfunction]
fn scan<'py>(py: Python<'py>, raw: &Bound<'py, PyAny>) -> PyResult<Option<ScanResult<'py>>> {
    let found = if let Ok(bytes) = raw.cast::<PyBytes>() {
        scan_bytes(bytes.as_bytes())
    } else {
        let buffer = PyBuffer::<u8>::get(raw)?;
        if buffer.len_bytes() == 0 {
            None
        } else {
            let Some(slice) = buffer.as_slice_ptr() else {
                return Err(PyTypeError::new_err("scan() needs a C-contiguous buffer"));
            };
            // SAFETY: the buffer stays exported while `buffer` lives, and the GIL is held for
            // the whole scan, which runs no Python code, so nothing can resize or write it.
            scan_bytes(unsafe { slice.as_ref() })
        }
    };
    let Some(s) = found else { return Ok(None) };
    let table = PyBytes::new_with(py, s.table.len() * 8, |out| {
        for (chunk, value) in out.chunks_exact_mut(8).zip(&s.table) {
            chunk.copy_from_slice(&value.to_le_bytes());
        }
        Ok(())
    })?;
    Ok(Some((s.took.0, s.took.1, s.hits.0, s.hits.1, s.close, table)))
}

#[pymodule]
fn _hitscan(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(scan, m)?)
}
