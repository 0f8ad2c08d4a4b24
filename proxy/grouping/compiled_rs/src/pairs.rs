//! All pairs of a small window's MinHash signatures that have at least `need` equal slots.
//!
//! Every pair of rows (i < j) whose shingle counts are both above 0 is compared slot by slot,
//! and given up as soon as more than `num_perm - need` slots differ: at a resemblance
//! threshold t a similar pair has at least `need = ⌈tK⌉` equal slots of K. The pairs come in
//! row-major order with their numbers of equal slots: exactly the pairs, order and counts of
//! the NumPy band-key search it stands in for (`neardup.proxy.grouping.fingerprints.window_pairs`).
//! For the few dozen rows of a search window that is some hundreds of pairs, each given up
//! after a few slots when unrelated, with no array built on the way.

/// The (i, j, equal slots) of every similar pair, in row-major order.
pub fn pairs(signatures: &[u64], counts: &[i64], num_perm: usize, need: usize) -> (Vec<i64>, Vec<i64>, Vec<i64>) {
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
            if let Some(slots) = equal_slots(a, &signatures[j * num_perm..(j + 1) * num_perm], allowed) {
                lo.push(i as i64);
                hi.push(j as i64);
                equal.push(slots as i64);
            }
        }
    }
    (lo, hi, equal)
}

/// The equal slots of `a` and `b`, None as soon as more than `allowed` differ.
fn equal_slots(a: &[u64], b: &[u64], allowed: usize) -> Option<usize> {
    let mut unequal = 0;
    for (x, y) in a.iter().zip(b) {
        unequal += usize::from(x != y);
        if unequal > allowed {
            return None;
        }
    }
    Some(a.len() - unequal)
}

/// Each row's group label: the smallest row of its connected component over `lo`/`hi`
/// (union-find, the smaller root winning each union, so a root is its component's smallest row).
pub fn labels(rows: usize, lo: &[i64], hi: &[i64]) -> Vec<usize> {
    fn root(parent: &mut [usize], mut node: usize) -> usize {
        while parent[node] != node {
            parent[node] = parent[parent[node]];
            node = parent[node];
        }
        node
    }
    let mut parent: Vec<usize> = (0..rows).collect();
    for (&a, &b) in lo.iter().zip(hi) {
        let (a, b) = (root(&mut parent, a as usize), root(&mut parent, b as usize));
        if a < b {
            parent[b] = a;
        } else if b < a {
            parent[a] = b;
        }
    }
    (0..rows).map(|node| root(&mut parent, node)).collect()
}

/// `pairs` found among band keys, for windows where comparing all pairs costs too much: a
/// similar pair has at most `u = K - need` unequal slots, so of `u + 1` disjoint bands of
/// `⌊K / (u + 1)⌋` slots one is wholly equal (pigeonhole). The pairs whose rows share a band's
/// key in some band are the candidates, each then compared slot by slot: the same pairs, order
/// and counts as comparing all of them.
pub fn banded_pairs(signatures: &[u64], counts: &[i64], num_perm: usize, need: usize) -> (Vec<i64>, Vec<i64>, Vec<i64>) {
    let bands = num_perm - need + 1;
    let width = num_perm / bands;
    let live: Vec<usize> = (0..counts.len()).filter(|&row| counts[row] > 0).collect();
    let mut keys: Vec<(u64, usize)> = Vec::with_capacity(live.len());
    let mut candidates: Vec<(usize, usize)> = Vec::new();
    for band in 0..bands {
        keys.clear();
        keys.extend(live.iter().map(|&row| {
            let slots = &signatures[row * num_perm + band * width..row * num_perm + (band + 1) * width];
            let key = slots.iter().fold(0x243F_6A88_85A3_08D3u64, |key, &slot| {
                (key ^ slot).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29)
            });
            (key, row)
        }));
        keys.sort_unstable();
        for run in keys.chunk_by(|a, b| a.0 == b.0).filter(|run| run.len() > 1) {
            for (number, &(_, i)) in run.iter().enumerate() {
                candidates.extend(run[number + 1..].iter().map(|&(_, j)| (i, j)));
            }
        }
    }
    candidates.sort_unstable();
    candidates.dedup();
    let allowed = num_perm - need;
    let (mut lo, mut hi, mut equal) = (Vec::new(), Vec::new(), Vec::new());
    for (i, j) in candidates {
        let (a, b) = (
            &signatures[i * num_perm..(i + 1) * num_perm],
            &signatures[j * num_perm..(j + 1) * num_perm],
        );
        if let Some(slots) = equal_slots(a, b, allowed) {
            lo.push(i as i64);
            hi.push(j as i64);
            equal.push(slots as i64);
        }
    }
    (lo, hi, equal)
}
