//! All pairs of a small window's MinHash signatures that have at least `need` equal slots.
//!
//! `equal_slot_pairs(signatures, counts, num_perm, need)` compares every pair of rows (i < j)
//! whose shingle counts are both above 0, slot by slot, and stops a pair as soon as more than
//! `num_perm - need` slots differ: at a resemblance threshold t a similar pair has at least
//! `need = ⌈tK⌉` equal slots of K. The pairs come in row-major order with their numbers of
//! equal slots: exactly the pairs, order and counts of the NumPy band-key search it stands in
//! for (`neardup.proxy.grouping.fingerprints.window_pairs`), which the tests compare it with.
//! For the few dozen rows of a search window that is some hundreds of pairs, each given up
//! after a few slots when unrelated, with no array built on the way.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

fn words<T, const N: usize>(raw: &[u8], read: fn([u8; N]) -> T) -> Vec<T> {
    raw.chunks_exact(N)
        .map(|chunk| read(chunk.try_into().expect("chunks of N bytes")))
        .collect()
}

fn le_bytes(values: &[i64]) -> Vec<u8> {
    values.iter().flat_map(|value| value.to_le_bytes()).collect()
}

/// The (i, j, equal slots) of every similar pair, in row-major order.
fn pairs(signatures: &[u64], counts: &[i64], num_perm: usize, need: usize) -> (Vec<i64>, Vec<i64>, Vec<i64>) {
    let rows = counts.len();
    let allowed = num_perm - need; // unequal slots a similar pair may have
    let (mut lo, mut hi, mut equal) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..rows {
        if counts[i] <= 0 {
            continue;
        }
        let a = &signatures[i * num_perm..(i + 1) * num_perm];
        for j in i + 1..rows {
            if counts[j] <= 0 {
                continue;
            }
            let b = &signatures[j * num_perm..(j + 1) * num_perm];
            let mut unequal = 0;
            for (x, y) in a.iter().zip(b) {
                unequal += usize::from(x != y);
                if unequal > allowed {
                    break;
                }
            }
            if unequal <= allowed {
                lo.push(i as i64);
                hi.push(j as i64);
                equal.push((num_perm - unequal) as i64);
            }
        }
    }
    (lo, hi, equal)
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
    let (lo, hi, equal) = pairs(&signatures, &counts, num_perm, need);
    Ok((
        PyBytes::new(py, &le_bytes(&lo)),
        PyBytes::new(py, &le_bytes(&hi)),
        PyBytes::new(py, &le_bytes(&equal)),
    ))
}

#[pymodule]
fn _pairs(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(equal_slot_pairs, m)?)
}
