//! The proxy's grouping of a small window, compiled (`neardup.proxy.grouping._compiled`).
//!
//! * `equal_slot_pairs`: the similar pairs of a window's MinHash signatures (`pairs`), which
//!   `neardup.proxy.grouping.fingerprints.window_pairs` uses;
//! * `spliced_page`: a collapsed page written from the upstream's bytes (`page`), which
//!   `neardup.proxy.grouping.spliced_page.spliced_page` uses.
//!
//! Each has a Python reference the tests compare it with.

mod page;
mod pairs;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes};

fn words<T, const N: usize>(raw: &[u8], read: fn([u8; N]) -> T) -> Vec<T> {
    raw.chunks_exact(N)
        .map(|chunk| read(chunk.try_into().expect("chunks of N bytes")))
        .collect()
}

fn le_bytes(values: &[i64]) -> Vec<u8> {
    values.iter().flat_map(|value| value.to_le_bytes()).collect()
}

type Pairs<'py> = (Bound<'py, PyBytes>, Bound<'py, PyBytes>, Bound<'py, PyBytes>);

/// equal_slot_pairs(signatures, counts, num_perm, need) -> (i, j, equal)
///
/// signatures: rows × num_perm little-endian uint64; counts: one little-endian int64 per row;
/// 1 <= need <= num_perm. The three results hold little-endian int64, one per pair.
#[pyfunction]
fn equal_slot_pairs<'py>(
    py: Python<'py>,
    signatures: &[u8],
    counts: &[u8],
    num_perm: usize,
    need: usize,
) -> PyResult<Pairs<'py>> {
    if num_perm == 0 || need == 0 || need > num_perm || !counts.len().is_multiple_of(8) {
        return Err(PyValueError::new_err("need 1 <= need <= num_perm and whole int64 counts"));
    }
    if signatures.len() != counts.len() * num_perm {
        return Err(PyValueError::new_err("signatures must hold num_perm uint64 per count"));
    }
    let signatures = words(signatures, u64::from_le_bytes);
    let counts = words(counts, i64::from_le_bytes);
    let (lo, hi, equal) = pairs::pairs(&signatures, &counts, num_perm, need);
    Ok((
        PyBytes::new(py, &le_bytes(&lo)),
        PyBytes::new(py, &le_bytes(&hi)),
        PyBytes::new(py, &le_bytes(&equal)),
    ))
}

type Scan<'py> = (i64, i64, i64, i64, i64, Bound<'py, PyBytes>);

/// spliced_page(rounds, start, size, need, total_as_int, version, num_perm, max_rows,
///              similarities, marks, summary) -> (body, shown, collapsed, groups, window) | False | None
///
/// rounds: (bytes, their hitscan scan, hits asked) per upstream answer of the window;
/// similarities: the texts of a similarity of m equal slots, m = 0..=num_perm, joined by
/// commas; marks: what goes before a kept hit's group key, before its inner hits' total, before
/// a folded hit's similarity and before the summary; summary(shown, collapsed, groups, window):
/// the summary's JSON, written before the response's closing brace. False: no page (the
/// reference answers none too); None: the reference decides.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn spliced_page<'py>(
    py: Python<'py>,
    rounds: Vec<(Bound<'py, PyBytes>, Scan<'py>, usize)>,
    start: usize,
    size: usize,
    need: usize,
    total_as_int: bool,
    version: &[u8],
    num_perm: usize,
    max_rows: usize,
    similarities: &[u8],
    marks: (Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>),
    summary: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let rounds: Vec<page::Round> = rounds
        .iter()
        .map(
            |(raw, (took_start, took_end, hits_start, hits_end, close, table), requested)| page::Round {
                raw: raw.as_bytes(),
                took: (*took_start, *took_end),
                hits: (*hits_start, *hits_end),
                close: *close,
                table: table.as_bytes(),
                requested: *requested,
            },
        )
        .collect();
    let similarities: Vec<&[u8]> = similarities.split(|&byte| byte == b',').collect();
    let settings = page::Settings {
        start,
        size,
        need,
        total_as_int,
        version,
        num_perm,
        max_rows,
        similarities: &similarities,
        group_open: &marks.0,
        inner_open: &marks.1,
        similarity_open: &marks.2,
    };
    let written = match page::spliced(&rounds, &settings) {
        None => return Ok(py.None().into_bound(py)),
        Some(page::Answer::NoPage) => return Ok(PyBool::new(py, false).to_owned().into_any()),
        Some(page::Answer::Page(written)) => written,
    };
    let summary = summary.call1((written.shown, written.collapsed, written.groups, written.window))?;
    let summary = summary.cast::<PyBytes>()?.as_bytes();
    // The answer in one buffer of its exact length: its pieces are most of the upstream's bytes.
    let pieces = written
        .head
        .iter()
        .map(|piece| piece.as_ref())
        .chain([marks.3.as_slice(), summary, written.tail]);
    let length = pieces.clone().map(<[u8]>::len).sum();
    let body = PyBytes::new_with(py, length, |buffer| {
        let mut at = 0;
        for piece in pieces {
            buffer[at..at + piece.len()].copy_from_slice(piece);
            at += piece.len();
        }
        Ok(())
    })?;
    Ok((body, written.shown, written.collapsed, written.groups, written.window)
        .into_pyobject(py)?
        .into_any())
}

#[pymodule]
fn _compiled(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(equal_slot_pairs, m)?)?;
    m.add_function(wrap_pyfunction!(spliced_page, m)?)
}
