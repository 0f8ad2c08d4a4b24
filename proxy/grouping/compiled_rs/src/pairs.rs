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
