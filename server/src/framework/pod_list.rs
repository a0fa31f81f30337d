//! The pods on a node: a list in chunks shared between copies.
//!
//! Every scheduling cycle's snapshot shares the cache's node infos, so the cache's next
//! change to a node copies that node's info. With a flat vector that copy (and the drop
//! of the old one) costs one reference count per pod on the node: a node holding tens
//! of thousands of pods, as scheduler_perf's SchedulingWhileGated builds, made every
//! cycle linear in them. Here a copy shares the chunks, and a change copies only the
//! one or two chunks it touches. Order and `swap_remove` behave exactly as a `Vec`'s.

use std::sync::Arc;

use crate::model::Pod;

/// Pods per chunk: a copy costs `len / CHUNK` reference counts, a change up to two
/// chunks' worth.
const CHUNK: usize = 128;

#[derive(Clone, Default)]
pub struct PodList {
    /// Every chunk is full but the last, which is never empty.
    chunks: Vec<Arc<Vec<Arc<Pod>>>>,
    len: usize,
}

/// Iterates a [`PodList`] in order.
pub type Iter<'a> = std::iter::FlatMap<
    std::slice::Iter<'a, Arc<Vec<Arc<Pod>>>>,
    std::slice::Iter<'a, Arc<Pod>>,
    fn(&'a Arc<Vec<Arc<Pod>>>) -> std::slice::Iter<'a, Arc<Pod>>,
>;

fn chunk_iter(c: &Arc<Vec<Arc<Pod>>>) -> std::slice::Iter<'_, Arc<Pod>> {
    c.iter()
}

impl PodList {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn get(&self, i: usize) -> Option<&Arc<Pod>> {
        self.chunks.get(i / CHUNK)?.get(i % CHUNK)
    }

    pub fn iter(&self) -> Iter<'_> {
        self.chunks.iter().flat_map(chunk_iter as fn(_) -> _)
    }

    pub fn push(&mut self, pod: Arc<Pod>) {
        match self.chunks.last_mut() {
            Some(last) if last.len() < CHUNK => Arc::make_mut(last).push(pod),
            _ => {
                let mut c = Vec::with_capacity(CHUNK);
                c.push(pod);
                self.chunks.push(Arc::new(c));
            }
        }
        self.len += 1;
    }

    /// Removes the pod at `i`, moving the last pod into its place (as `Vec::swap_remove`).
    /// `None` if `i` is out of range.
    pub fn swap_remove(&mut self, i: usize) -> Option<Arc<Pod>> {
        if i >= self.len {
            return None;
        }
        let last_chunk = self.chunks.last_mut()?;
        let last = Arc::make_mut(last_chunk).pop()?;
        if last_chunk.is_empty() {
            self.chunks.pop();
        }
        self.len -= 1;
        if i == self.len {
            return Some(last);
        }
        let chunk = Arc::make_mut(&mut self.chunks[i / CHUNK]);
        Some(std::mem::replace(&mut chunk[i % CHUNK], last))
    }

    /// The index of the first pod `f` accepts.
    pub fn position(&self, f: impl FnMut(&Arc<Pod>) -> bool) -> Option<usize> {
        self.iter().position(f)
    }

    /// The index of the last pod `f` accepts.
    pub fn rposition(&self, mut f: impl FnMut(&Arc<Pod>) -> bool) -> Option<usize> {
        self.chunks
            .iter()
            .enumerate()
            .rev()
            .find_map(|(ci, c)| c.iter().rposition(&mut f).map(|j| ci * CHUNK + j))
    }

    pub fn first(&self) -> Option<&Arc<Pod>> {
        self.get(0)
    }

    pub fn last(&self) -> Option<&Arc<Pod>> {
        self.chunks.last()?.last()
    }
}

impl std::ops::Index<usize> for PodList {
    type Output = Arc<Pod>;
    fn index(&self, i: usize) -> &Arc<Pod> {
        match self.get(i) {
            Some(p) => p,
            None => panic!("pod index {i} out of range for {} pods", self.len),
        }
    }
}

impl<'a> IntoIterator for &'a PodList {
    type Item = &'a Arc<Pod>;
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl std::fmt::Debug for PodList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter().map(|p| &p.uid)).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pod;

    fn names(l: &PodList) -> Vec<String> {
        l.iter().map(|p| p.name.to_string()).collect()
    }

    #[test]
    fn behaves_as_a_vec_across_chunks_and_copies_share_untouched_chunks() {
        let pods: Vec<Arc<Pod>> = (0..3 * CHUNK + 5)
            .map(|i| pod(&format!("p{i}")).build())
            .collect();
        let mut list = PodList::new();
        let mut vec = Vec::new();
        for p in &pods {
            list.push(p.clone());
            vec.push(p.clone());
        }
        let copy = list.clone();
        // Removing from the front, the middle, chunk edges and the end (3 * CHUNK is
        // the last index by then), as a Vec does.
        for i in [0, CHUNK - 1, CHUNK, 2 * CHUNK + 7, 3 * CHUNK, 5] {
            let a = list.swap_remove(i).map(|p| p.name.to_string());
            let b = Some(vec.swap_remove(i).name.to_string());
            assert_eq!(a, b);
            assert_eq!(
                names(&list),
                vec.iter().map(|p| p.name.to_string()).collect::<Vec<_>>()
            );
        }
        assert_eq!(list.len(), vec.len());
        assert!(list.swap_remove(list.len()).is_none());
        // The copy taken before is untouched, and still shares the chunks no change reached.
        assert_eq!(copy.len(), pods.len());
        assert_eq!(
            names(&copy),
            pods.iter().map(|p| p.name.to_string()).collect::<Vec<_>>()
        );
        let mut grown = copy.clone();
        grown.push(pod("extra").build());
        assert!(Arc::ptr_eq(&copy.chunks[1], &grown.chunks[1]));
        assert!(!Arc::ptr_eq(&copy.chunks[3], &grown.chunks[3]));
        assert_eq!(
            list.rposition(|p| p.name.as_ref() == "p7"),
            vec.iter().rposition(|p| p.name.as_ref() == "p7")
        );
        assert_eq!(
            list.position(|p| p.name.as_ref() == "p300"),
            vec.iter().position(|p| p.name.as_ref() == "p300")
        );
        assert_eq!(
            list.last().map(|p| p.name.clone()),
            vec.last().map(|p| p.name.clone())
        );
        // Emptied, it holds no chunks.
        while !list.is_empty() {
            list.swap_remove(0);
        }
        assert!(list.chunks.is_empty() && list.first().is_none());
    }
}
