//! A collapsed page written from the upstream's bytes: what
//! `neardup.proxy.grouping.spliced_page.reference_spliced_page` writes, for a window at
//! resemblance whose fingerprints are all of the current scheme.
//!
//! The hits of the rounds (their bounds and spans: the table of `proxy.transport.hitscan`) are
//! read in window order; each `sig` is decoded from standard base64 to K little-endian uint64;
//! the similar pairs (`pairs`) are joined into groups labelled by their best-ranked hit; the page
//! `[start, start + size)` of the groups is written as the reference writes it: the first
//! response up to its hits' `[`, each kept hit copied up to its closing brace with its group key
//! and its folded hits (each with its similarity) appended, then the first response from its
//! hits' `]` to its closing brace. The caller appends the summary and the rest.
//!
//! `spliced` answers `NoPage` where the reference answers no page at all (a repeated document,
//! a window that does not fill the page), and None wherever the reference may answer otherwise
//! than this: a window the reference does not group this way (more than `max_rows` hits, a
//! `sig` it would read the slow way, a count or `took` outside 64 or 128 bits). The caller then
//! asks the reference.

use std::borrow::Cow;
use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};

use crate::pairs::{banded_pairs, labels, pairs};

/// Most rows whose pairs are all compared; a larger window's are found among band keys.
const ALL_PAIRS_ROWS: usize = 32;
/// Little-endian int64 per hit in a scan's table (`proxy.transport.hitscan.COLUMNS`).
pub const COLUMNS: usize = 16;
const START: usize = 0;
const END: usize = 1;
const INDEX: usize = 2;
const ID: usize = 4;
const ROUTING: usize = 6;
const SCORE: usize = 8;
const VERSION: usize = 10;
const SIG: usize = 12;
const COUNT: usize = 14;

/// One upstream answer of the window: its bytes, their scan and how many hits were asked.
pub struct Round<'a> {
    pub raw: &'a [u8],
    pub took: (i64, i64),
    pub hits: (i64, i64),
    pub close: i64,
    pub table: &'a [u8],
    pub requested: usize,
}

/// What the page is written with.
pub struct Settings<'a> {
    pub start: usize,
    pub size: usize,
    /// equal slots of K a similar pair has
    pub need: usize,
    pub total_as_int: bool,
    /// the scheme version every fingerprint must have, and its minhash count K
    pub version: &'a [u8],
    pub num_perm: usize,
    /// the largest window grouped here
    pub max_rows: usize,
    /// the text of a similarity of m equal slots, m = 0..=K
    pub similarities: &'a [&'a [u8]],
    /// what goes before a kept hit's group key, before its inner hits' total, before a
    /// folded hit's similarity
    pub group_open: &'a [u8],
    pub inner_open: &'a [u8],
    pub similarity_open: &'a [u8],
}

/// What `spliced` answers where it is sure of the reference's answer: a page, or none (a
/// repeated document, or a window that does not fill the page).
pub enum Answer<'a> {
    Page(Page<'a>),
    NoPage,
}

/// The page to write but its summary: the caller joins `head`, the summary and `tail`.
pub struct Page<'a> {
    /// the first response's bytes up to its closing brace, the page in place of its hits
    pub head: Vec<Cow<'a, [u8]>>,
    /// the first response from its closing brace on
    pub tail: &'a [u8],
    pub shown: usize,
    pub collapsed: usize,
    pub groups: usize,
    pub window: usize,
}

struct Hit<'a> {
    raw: &'a [u8],
    row: [i64; COLUMNS],
}

impl<'a> Hit<'a> {
    /// The value at `column`'s span (an absent one's is empty), None for a span not in the bytes.
    fn value(&self, column: usize) -> Option<&'a [u8]> {
        span(self.raw, self.row[column], self.row[column + 1])
    }

    /// The hit's bytes but its closing brace.
    fn open(&self) -> Option<&'a [u8]> {
        let whole = span(self.raw, self.row[START], self.row[END])?;
        whole.split_last().map(|(_, open)| open)
    }
}

fn span(raw: &[u8], start: i64, end: i64) -> Option<&[u8]> {
    if start == -1 && end == -1 {
        return Some(&[]);
    }
    raw.get(usize::try_from(start).ok()?..usize::try_from(end).ok()?)
}

/// A JSON integer token's value (`-?[0-9]+`, as the scan found it), None beyond 128 bits.
fn integer(text: &[u8]) -> Option<i128> {
    let digits = text.strip_prefix(b"-").unwrap_or(text);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// Each byte's base64 value, or `INVALID` outside the standard alphabet: a table, as random
/// letters would mispredict every branch of a match.
const INVALID: u8 = 0xff;
const SEXTETS: [u8; 256] = {
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut table = [INVALID; 256];
    let mut value = 0;
    while value < 64 {
        table[alphabet[value] as usize] = value as u8;
        value += 1;
    }
    table
};

/// Standard base64 without padding (whole quanta) into `out`, of 3 bytes per 4 letters; None at
/// any other byte.
fn decode_base64(text: &[u8], out: &mut [u8]) -> Option<()> {
    if !text.len().is_multiple_of(4) || text.len() / 4 * 3 != out.len() {
        return None;
    }
    let mut seen = 0u8;
    for (quantum, bytes) in text.chunks_exact(4).zip(out.chunks_exact_mut(3)) {
        let [a, b, c, d] = [0, 1, 2, 3].map(|k| SEXTETS[quantum[k] as usize]);
        seen |= a | b | c | d;
        let value = u32::from(a) << 18 | u32::from(b) << 12 | u32::from(c) << 6 | u32::from(d);
        bytes.copy_from_slice(&value.to_be_bytes()[1..]);
    }
    (seen & 0x40 == 0).then_some(()) // only INVALID has this bit
}

/// A multiply-rotate hash of the few identities of a window (FxHash's): their texts come from
/// the upstream, and at most `max_rows` of them keep a worst case small.
#[derive(Default)]
struct IdentityHasher(u64);

impl Hasher for IdentityHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(word)).wrapping_mul(0x51_7C_C1_B7_27_22_0A_95);
        }
    }
}

/// Every hit of the rounds in window order (None at a repeated document: same `_index`, `_id`
/// and `_routing`), and whether the last round had fewer hits than asked (no more exist); the
/// outer None: a table the hits cannot be read from.
#[allow(clippy::type_complexity)]
fn window_hits<'a>(rounds: &[Round<'a>]) -> Option<Option<(Vec<Hit<'a>>, bool)>> {
    let mut hits = Vec::new();
    let mut seen: HashSet<_, BuildHasherDefault<IdentityHasher>> = HashSet::default();
    let mut exhausted = false;
    for round in rounds {
        if !round.table.len().is_multiple_of(8 * COLUMNS) {
            return None;
        }
        let values = crate::words(round.table, i64::from_le_bytes);
        for row in values.chunks_exact(COLUMNS) {
            let hit = Hit {
                raw: round.raw,
                row: row.try_into().ok()?,
            };
            hit.open()?;
            if hit.row[ID] >= 0 && !seen.insert((hit.value(INDEX)?, hit.value(ID)?, hit.value(ROUTING)?)) {
                return Some(None);
            }
            hits.push(hit);
        }
        exhausted = values.len() / COLUMNS < round.requested;
    }
    Some(Some((hits, exhausted)))
}

/// The hits' signatures (rows × K) and shingle counts, None unless every one is usable as is.
fn signatures(hits: &[Hit], settings: &Settings) -> Option<(Vec<u64>, Vec<i64>)> {
    let k = settings.num_perm;
    if k == 0 || !(8 * k).is_multiple_of(3) || settings.version.is_empty() || settings.similarities.len() != k + 1 {
        return None;
    }
    let text_length = 8 * k / 3 * 4;
    let mut counts = Vec::with_capacity(hits.len());
    let mut bytes = vec![0u8; hits.len() * 8 * k];
    for (hit, signature) in hits.iter().zip(bytes.chunks_exact_mut(8 * k)) {
        let count = integer(hit.value(COUNT)?)?;
        if !(0..1i128 << 63).contains(&count) || hit.value(VERSION)? != settings.version {
            return None;
        }
        counts.push(count as i64);
        let sig = hit.value(SIG)?;
        if sig.len() != text_length {
            return None;
        }
        decode_base64(sig, signature)?;
    }
    Some((crate::words(&bytes, u64::from_le_bytes), counts))
}

/// The groups of the window (each its members in rank order), in the order of their first.
fn groups(signatures: &[u64], counts: &[i64], settings: &Settings) -> Vec<Vec<usize>> {
    let rows = counts.len();
    let find = if rows <= ALL_PAIRS_ROWS { pairs } else { banded_pairs };
    let (lo, hi, _) = find(signatures, counts, settings.num_perm, settings.need);
    let label = labels(rows, &lo, &hi);
    let mut group_of = vec![0; rows];
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (row, &first) in label.iter().enumerate() {
        if first == row {
            group_of[row] = groups.len();
            groups.push(vec![row]);
        } else {
            groups[group_of[first]].push(row);
        }
    }
    groups
}

pub fn spliced<'a>(rounds: &[Round<'a>], settings: &Settings<'a>) -> Option<Answer<'a>> {
    let first = rounds.first()?;
    let mut took: i128 = 0;
    for round in rounds {
        took = took.max(integer(span(round.raw, round.took.0, round.took.1)?)?);
    }
    let Some((hits, exhausted)) = window_hits(rounds)? else {
        return Some(Answer::NoPage); // the same document twice
    };
    if hits.len() > settings.max_rows || settings.need == 0 || settings.need > settings.num_perm {
        return None;
    }
    let (signatures, counts) = signatures(&hits, settings)?;
    let groups = groups(&signatures, &counts, settings);
    let wanted = settings.start.saturating_add(settings.size);
    if groups.len() < wanted && !exhausted {
        return Some(Answer::NoPage); // another round, or a deep page
    }
    let shown = &groups[settings.start.min(groups.len())..wanted.min(groups.len())];

    let raw = first.raw;
    let took_text = took.to_string().into_bytes();
    let (took_start, took_end) = (usize::try_from(first.took.0).ok()?, usize::try_from(first.took.1).ok()?);
    let hits_start = usize::try_from(first.hits.0).ok()?;
    let hits_end = usize::try_from(first.hits.1).ok()?;
    let close = usize::try_from(first.close).ok()?;
    let closing = raw.get(hits_end.checked_sub(1)?..close)?;
    let mut head: Vec<Cow<'a, [u8]>> = Vec::with_capacity(4 + 16 * shown.len());
    if raw.get(took_start..took_end)? == took_text {
        head.push(raw.get(..=hits_start)?.into());
    } else if took_end <= hits_start {
        head.push(raw[..took_start].into());
        head.push(took_text.into());
        head.push(raw.get(took_end..=hits_start)?.into());
    } else {
        return Some(Answer::NoPage);
    }
    let mut collapsed = 0;
    for (number, members) in shown.iter().enumerate() {
        if number > 0 {
            head.push(b",".into());
        }
        write_kept_hit(&mut head, &hits, members, &signatures, &counts, settings)?;
        collapsed += members.len() - 1;
    }
    head.push(closing.into());
    Some(Answer::Page(Page {
        head,
        tail: raw.get(close..)?,
        shown: shown.len(),
        collapsed,
        groups: groups.len(),
        window: hits.len(),
    }))
}

/// A kept hit with its group key and its folded hits, as the reference's `_write_kept_hit`.
fn write_kept_hit<'a>(
    out: &mut Vec<Cow<'a, [u8]>>,
    hits: &[Hit<'a>],
    members: &[usize],
    signatures: &[u64],
    counts: &[i64],
    settings: &Settings<'a>,
) -> Option<()> {
    let k = settings.num_perm;
    let kept = &hits[members[0]];
    let others = members.len() - 1;
    let total = if settings.total_as_int {
        others.to_string()
    } else {
        format!("{{\"value\":{others},\"relation\":\"eq\"}}")
    };
    out.extend([
        kept.open()?.into(),
        settings.group_open.into(),
        b"\"".into(),
        kept.value(INDEX)?.into(),
        b"/".into(),
        kept.value(ID)?.into(),
        b"\"".into(),
        settings.inner_open.into(),
        total.into_bytes().into(),
        b",\"max_score\":".into(),
        max_score(hits, &members[1..])?.into(),
        b",\"hits\":[".into(),
    ]);
    let a = &signatures[members[0] * k..(members[0] + 1) * k];
    for (number, &member) in members[1..].iter().enumerate() {
        let b = &signatures[member * k..(member + 1) * k];
        let equal = if counts[members[0]] > 0 && counts[member] > 0 {
            a.iter().zip(b).filter(|(x, y)| x == y).count()
        } else {
            0
        };
        let separator: &[u8] = if number > 0 { b"," } else { b"" };
        out.extend([
            separator.into(),
            hits[member].open()?.into(),
            settings.similarity_open.into(),
            settings.similarities[equal].into(),
            b"]}}".into(),
        ]);
    }
    out.push(b"]}}}}".into());
    Some(())
}

/// The highest `_score` of the folded hits as written (the first of equal ones), or null.
fn max_score<'a>(hits: &[Hit<'a>], folded: &[usize]) -> Option<&'a [u8]> {
    let mut best: Option<(f64, &'a [u8])> = None;
    for &member in folded {
        let hit = &hits[member];
        if hit.row[SCORE] >= 0 {
            let text = hit.value(SCORE)?;
            let score: f64 = std::str::from_utf8(text).ok()?.parse().ok()?;
            if best.is_none_or(|(high, _)| score > high) {
                best = Some((score, text));
            }
        }
    }
    Some(best.map_or(b"null", |(_, text)| text))
}
