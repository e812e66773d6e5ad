//! The connections' deadlines, ordered: an indexed binary min-heap of (deadline, slot),
//! at most one entry per socket slot, so that a poll finds the connections whose timers
//! are due, and the stack its next deadline, without visiting every connection.
//!
//! A connection keeps its own timers (retransmission, persist, delayed ACK, keepalive,
//! TIME-WAIT: [`Connection::next_deadline`](super::connection::Connection::next_deadline));
//! the socket table (`socket::tcp::TcpSockets`, once it has more than a few slots) tells
//! this queue a deadline for each connection it lent out ([`set`](TimerQueue::set)): the
//! earliest timer when that moved earlier, or the one queued before when the timers only
//! moved later, put right when it comes up. Each entry knows where it sits in the heap,
//! so a slot's entry is re-keyed or removed in place, O(log n), and never duplicated.
//! (4.4BSD's `tcp_slowtimo` instead visited every connection twice a second, and this
//! stack every connection at every poll: about 3 ns a connection, 1.4 µs a poll with 500
//! open.)

use crate::time::Instant;

/// Where a slot's entry is: not queued.
const ABSENT: u32 = u32::MAX;

#[derive(Debug, Default)]
pub struct TimerQueue {
    /// The heap: each entry's deadline is no later than its children's.
    heap: Vec<(Instant, u32)>,
    /// For each slot, the index of its entry in `heap`, or [`ABSENT`].
    position: Vec<u32>,
}

impl TimerQueue {
    pub fn new() -> TimerQueue {
        TimerQueue::default()
    }

    /// The number of slots with a deadline.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// The earliest deadline of any slot.
    pub fn earliest(&self) -> Option<Instant> {
        self.heap.first().map(|&(d, _)| d)
    }

    /// Slot `slot`'s deadline, if it has one.
    #[cfg(test)]
    pub fn deadline(&self, slot: usize) -> Option<Instant> {
        match self.position.get(slot) {
            Some(&p) if p != ABSENT => Some(self.heap[p as usize].0),
            _ => None,
        }
    }

    /// Sets slot `slot`'s deadline (`None`: it has none), replacing what it had.
    #[inline]
    pub fn set(&mut self, slot: usize, deadline: Option<Instant>) {
        let at = self.position.get(slot).copied().unwrap_or(ABSENT);
        match (at, deadline) {
            (ABSENT, None) => {}
            (ABSENT, Some(d)) => {
                if self.position.len() <= slot {
                    self.position.resize(slot + 1, ABSENT);
                }
                self.heap.push((d, slot as u32));
                let last = self.heap.len() - 1;
                self.position[slot] = last as u32;
                self.sift_up(last);
            }
            (at, Some(d)) => {
                let at = at as usize;
                let old = std::mem::replace(&mut self.heap[at].0, d);
                if d < old {
                    self.sift_up(at);
                } else if d > old {
                    self.sift_down(at);
                }
            }
            (at, None) => self.remove_at(at as usize),
        }
    }

    /// Removes and returns a slot whose deadline is at or before `now`, the earliest first.
    pub fn pop_due(&mut self, now: Instant) -> Option<usize> {
        match self.heap.first() {
            Some(&(d, slot)) if d <= now => {
                self.remove_at(0);
                Some(slot as usize)
            }
            _ => None,
        }
    }

    fn remove_at(&mut self, at: usize) {
        let slot = self.heap[at].1 as usize;
        self.position[slot] = ABSENT;
        let last = self.heap.len() - 1;
        if at == last {
            self.heap.pop();
            return;
        }
        self.heap.swap(at, last);
        self.heap.pop();
        self.position[self.heap[at].1 as usize] = at as u32;
        // The entry moved into the hole may belong above it or below it.
        self.sift_up(at);
        self.sift_down(at);
    }

    #[inline(always)]
    fn sift_up(&mut self, mut at: usize) {
        while at > 0 {
            let parent = (at - 1) / 2;
            if self.heap[parent].0 <= self.heap[at].0 {
                break;
            }
            self.swap(at, parent);
            at = parent;
        }
    }

    #[inline(always)]
    fn sift_down(&mut self, mut at: usize) {
        loop {
            let (left, right) = (2 * at + 1, 2 * at + 2);
            let mut least = at;
            if left < self.heap.len() && self.heap[left].0 < self.heap[least].0 {
                least = left;
            }
            if right < self.heap.len() && self.heap[right].0 < self.heap[least].0 {
                least = right;
            }
            if least == at {
                break;
            }
            self.swap(at, least);
            at = least;
        }
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.position[self.heap[a].1 as usize] = a as u32;
        self.position[self.heap[b].1 as usize] = b as u32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(us: u64) -> Instant {
        Instant::from_micros(us)
    }

    #[test]
    fn due_slots_come_out_earliest_first_and_only_when_due() {
        let mut q = TimerQueue::new();
        q.set(3, Some(t(30)));
        q.set(1, Some(t(10)));
        q.set(7, Some(t(20)));
        assert_eq!(q.earliest(), Some(t(10)));
        assert_eq!(q.pop_due(t(5)), None);
        assert_eq!(q.pop_due(t(25)), Some(1));
        assert_eq!(q.pop_due(t(25)), Some(7));
        assert_eq!(q.pop_due(t(25)), None);
        assert_eq!(q.earliest(), Some(t(30)));
        assert_eq!(q.deadline(3), Some(t(30)));
        assert_eq!(q.deadline(1), None);
    }

    #[test]
    fn a_moved_or_cancelled_deadline_leaves_nothing_behind() {
        let mut q = TimerQueue::new();
        q.set(0, Some(t(10)));
        q.set(1, Some(t(20)));
        // Later: the slot's one entry moves; nothing at 10 stays.
        q.set(0, Some(t(40)));
        assert_eq!(q.earliest(), Some(t(20)));
        assert_eq!(q.len(), 2);
        // Earlier again, then cancelled.
        q.set(0, Some(t(5)));
        assert_eq!(q.earliest(), Some(t(5)));
        q.set(0, None);
        assert_eq!(q.earliest(), Some(t(20)));
        assert_eq!(q.len(), 1);
        q.set(1, None);
        assert!(q.is_empty());
        assert_eq!(q.earliest(), None);
        q.set(1, None);
        assert!(q.is_empty());
    }

    proptest! {
        /// Against a plain table of each slot's deadline: after any sequence of sets and
        /// pops, the queue's earliest, each slot's deadline and what pops are the table's.
        #[test]
        fn matches_a_table_of_deadlines(
            ops in prop::collection::vec((0usize..24, prop::option::of(0u64..1000), any::<bool>()), 0..400)
        ) {
            let mut q = TimerQueue::new();
            let mut table: Vec<Option<Instant>> = vec![None; 24];
            for (slot, deadline, pop) in ops {
                if pop {
                    let now = t(deadline.unwrap_or(500));
                    let popped = q.pop_due(now);
                    let least = table
                        .iter()
                        .enumerate()
                        .filter_map(|(i, d)| d.map(|d| (d, i)))
                        .min();
                    match (popped, least) {
                        (Some(i), Some((d, _))) => {
                            // Any slot with the least deadline may come first.
                            prop_assert_eq!(table[i], Some(d));
                            prop_assert!(d <= now);
                            table[i] = None;
                        }
                        (None, least) => prop_assert!(least.is_none_or(|(d, _)| d > now)),
                        (Some(i), None) => prop_assert!(false, "popped {} from nothing", i),
                    }
                } else {
                    let d = deadline.map(t);
                    q.set(slot, d);
                    table[slot] = d;
                }
                prop_assert_eq!(q.earliest(), table.iter().flatten().min().copied());
                prop_assert_eq!(q.len(), table.iter().flatten().count());
                for (i, d) in table.iter().enumerate() {
                    prop_assert_eq!(q.deadline(i), *d);
                }
            }
        }
    }
}
