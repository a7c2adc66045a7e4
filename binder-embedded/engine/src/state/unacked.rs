//! A channel's unacknowledged deliveries by delivery tag.

use std::collections::VecDeque;

use super::sessions::Unacked;
use crate::envelope::Envelope;

/// Tags grow by one per delivery on a channel, so a deque indexed from the oldest live tag
/// gives O(1) insert, single ack and multiple ack (a `BTreeMap` cost a third of the ack path).
#[derive(Debug)]
pub(super) struct UnackedLog<E: Envelope> {
    /// Tag of `entries[0]`.
    first: u64,
    entries: VecDeque<Option<Unacked<E>>>,
    live: usize,
}

impl<E: Envelope> Default for UnackedLog<E> {
    fn default() -> Self {
        UnackedLog {
            first: 0,
            entries: VecDeque::new(),
            live: 0,
        }
    }
}

impl<E: Envelope> UnackedLog<E> {
    /// Records a delivery; tags must be inserted in increasing order.
    pub(super) fn insert(&mut self, tag: u64, unacked: Unacked<E>) {
        if self.entries.is_empty() {
            self.first = tag;
        }
        let index = (tag - self.first) as usize;
        while self.entries.len() < index {
            // Tags used by no-ack deliveries leave holes.
            self.entries.push_back(None);
        }
        self.entries.push_back(Some(unacked));
        self.live += 1;
    }

    fn index(&self, tag: u64) -> Option<usize> {
        let index = usize::try_from(tag.checked_sub(self.first)?).ok()?;
        (index < self.entries.len()).then_some(index)
    }

    /// The deliveries still unacknowledged, oldest first.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Unacked<E>> {
        self.entries.iter().flatten()
    }

    /// The deliveries still unacknowledged with their tags, oldest first.
    pub(super) fn iter_tagged(&self) -> impl Iterator<Item = (u64, &Unacked<E>)> {
        let first = self.first;
        self.entries
            .iter()
            .enumerate()
            .filter_map(move |(i, e)| e.as_ref().map(|u| (first + i as u64, u)))
    }

    /// How many deliveries are unacknowledged.
    pub(super) fn len(&self) -> usize {
        self.live
    }

    pub(super) fn contains(&self, tag: u64) -> bool {
        self.index(tag).is_some_and(|i| self.entries[i].is_some())
    }

    /// Removes one delivery.
    pub(super) fn remove(&mut self, tag: u64) -> Option<Unacked<E>> {
        let i = self.index(tag)?;
        let taken = self.entries[i].take()?;
        self.live -= 1;
        self.trim();
        Some(taken)
    }

    /// Removes every delivery up to and including `tag` (all of them for tag 0).
    pub(super) fn remove_up_to(&mut self, tag: u64) -> Vec<Unacked<E>> {
        let mut taken = Vec::new();
        self.remove_up_to_into(tag, &mut taken);
        taken
    }

    /// [`Self::remove_up_to`] appending to `taken` (a buffer the caller reuses).
    pub(super) fn remove_up_to_into(&mut self, tag: u64, taken: &mut Vec<Unacked<E>>) {
        let end = if tag == 0 {
            self.entries.len()
        } else {
            match tag.checked_sub(self.first) {
                Some(n) => (n as usize + 1).min(self.entries.len()),
                None => 0,
            }
        };
        if end == 1 {
            // One delivery (a `multiple` ack covering one): no drain.
            if let Some(Some(u)) = self.entries.pop_front() {
                taken.push(u);
                self.live -= 1;
            }
            self.first += 1;
            self.trim();
            return;
        }
        // Sized up front: `flatten` gives no size hint, and collecting would reallocate at
        // every doubling.
        taken.reserve(self.live.min(end));
        let before = taken.len();
        taken.extend(self.entries.drain(..end).flatten());
        self.first += end as u64;
        self.live -= taken.len() - before;
        self.trim();
    }

    /// Removes everything, oldest first.
    pub(super) fn take_all(&mut self) -> Vec<Unacked<E>> {
        self.remove_up_to(0)
    }

    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Unacked<E>> {
        self.entries.iter_mut().flatten()
    }

    fn trim(&mut self) {
        while matches!(self.entries.front(), Some(None)) {
            self.entries.pop_front();
            self.first += 1;
        }
    }
}
