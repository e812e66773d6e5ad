//! A bounded single-producer, single-consumer ring: the memory link's wire between two
//! stacks, each on its own core (DESIGN.md §2).
//!
//! [`ring`] makes a ring of a given capacity and returns its two ends. A [`Producer`] pushes
//! and a [`Consumer`] pops; each is `Send` and holds an `Arc` of the shared ring, so each
//! end can move to its own thread, and both work as well in one thread.
//!
//! # How it works
//!
//! The ring is an array of slots and two positions that only grow (wrapping at
//! `usize::MAX`): `tail`, where the producer writes next, and `head`, where the consumer
//! reads next. Slot `p` lives at `p & mask` (the array's length is a power of two, so the
//! wrap of the positions is invisible); the ring holds `tail - head` items, at most
//! `capacity`, which need not be a power of two.
//!
//! Each position has exactly one writer: the producer stores `tail`, the consumer stores
//! `head`. The producer fills a slot and then publishes it with a `Release` store of `tail`;
//! the consumer `Acquire`-loads `tail`, so it sees the slot's contents. Symmetrically the
//! consumer empties a slot and then releases it with a `Release` store of `head`; the
//! producer `Acquire`-loads `head` before writing the slot again. Each end also keeps a
//! private copy of the other's position and reloads it only when the copy says the ring is
//! full (producer) or empty (consumer), so that in a steady stream the two cores touch each
//! other's cache line once per wrap-around rather than once per item; the two positions sit
//! on cache lines of their own (false sharing would defeat that).
//!
//! # Why `unsafe`
//!
//! A slot is written by one thread and later read by another, with no lock: that is an
//! `UnsafeCell` whose exclusive access the index protocol above guarantees, which the
//! compiler cannot check. The alternatives were a `Mutex<VecDeque>` (a lock per push and
//! pop, contended whenever both cores work at once, the cost the papers' two-workstation
//! experiments do not have) or boxing each item into an `AtomicPtr` (an allocation per
//! frame). The `unsafe` is three small blocks, each with its argument, plus the `Sync`
//! impl; slots hold `Option<T>`, so dropping the ring drops whatever is still in it with no
//! `unsafe` at all.

use std::cell::UnsafeCell;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The largest capacity a ring may have.
pub const MAX_CAPACITY: usize = 1 << 20;

/// Why a ring could not be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingError {
    /// The capacity must be from 1 to [`MAX_CAPACITY`].
    Capacity { requested: usize, max: usize },
}

impl fmt::Display for RingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RingError::Capacity { requested, max } => {
                write!(f, "ring capacity {requested} is not within 1..={max}")
            }
        }
    }
}

impl std::error::Error for RingError {}

/// A value on a cache line (two, for CPUs that prefetch lines in pairs) of its own.
#[repr(align(128))]
struct CachePadded<T>(T);

struct Shared<T> {
    slots: Box<[UnsafeCell<Option<T>>]>,
    mask: usize,
    capacity: usize,
    /// The consumer's position: the next slot to read. Written only by the consumer.
    head: CachePadded<AtomicUsize>,
    /// The producer's position: the next slot to write. Written only by the producer.
    tail: CachePadded<AtomicUsize>,
}

// SAFETY: the slots are the only part of `Shared` that is not already `Sync`. A slot at
// position `p` is touched by the producer only while `p` is in `tail..head + capacity`
// (free: the consumer has released it with its `Release` store of `head`, which the
// producer acquired), and by the consumer only while `p` is in `head..tail` (full: the
// producer has published it with its `Release` store of `tail`, which the consumer
// acquired). The two ranges never overlap and there is one producer and one consumer
// (`Producer` and `Consumer` are not `Clone`, and their methods that touch slots take
// `&mut self`, except `Consumer::peek`, which only reads and borrows the consumer so no pop
// can run meanwhile). So no slot is ever accessed by two threads at once, and a `T` moves
// between threads only by value, which needs `T: Send`.
unsafe impl<T: Send> Sync for Shared<T> {}

/// Makes a ring that holds up to `capacity` items and returns its two ends.
pub fn ring<T>(capacity: usize) -> Result<(Producer<T>, Consumer<T>), RingError> {
    if capacity == 0 || capacity > MAX_CAPACITY {
        return Err(RingError::Capacity {
            requested: capacity,
            max: MAX_CAPACITY,
        });
    }
    let len = capacity.next_power_of_two();
    let slots: Box<[UnsafeCell<Option<T>>]> = (0..len).map(|_| UnsafeCell::new(None)).collect();
    let shared = Arc::new(Shared {
        slots,
        mask: len - 1,
        capacity,
        head: CachePadded(AtomicUsize::new(0)),
        tail: CachePadded(AtomicUsize::new(0)),
    });
    Ok((
        Producer {
            shared: Arc::clone(&shared),
            tail: 0,
            head_cache: 0,
        },
        Consumer {
            shared,
            head: 0,
            tail_cache: 0,
        },
    ))
}

/// The writing end of a ring.
pub struct Producer<T> {
    shared: Arc<Shared<T>>,
    /// The producer's own position (the shared `tail` is a published copy).
    tail: usize,
    /// The consumer's position as last seen.
    head_cache: usize,
}

impl<T> Producer<T> {
    /// Adds `value` at the back, or gives it back if the ring is full.
    #[inline]
    pub fn push(&mut self, value: T) -> Result<(), T> {
        if self.is_full() {
            return Err(value);
        }
        let tail = self.tail;
        let slot = &self.shared.slots[tail & self.shared.mask];
        // SAFETY: `is_full` returned false, so `tail - head < capacity` for a `head` this
        // thread acquired: the consumer has finished with the slot at `tail` and will not
        // touch it until the `Release` store below publishes it. We are the only producer.
        // A free slot holds `None` (the consumer `take`s what it reads), so writing over
        // it without dropping it first loses nothing.
        unsafe {
            slot.get().write(Some(value));
        }
        self.tail = tail.wrapping_add(1);
        self.shared.tail.0.store(self.tail, Ordering::Release);
        Ok(())
    }

    /// Whether a push would fail now. Reloads the consumer's position only when the
    /// cached one says full.
    #[inline]
    pub fn is_full(&mut self) -> bool {
        let cap = self.shared.capacity;
        if self.tail.wrapping_sub(self.head_cache) < cap {
            return false;
        }
        self.head_cache = self.shared.head.0.load(Ordering::Acquire);
        self.tail.wrapping_sub(self.head_cache) >= cap
    }

    /// Items in the ring now (the consumer may take some at any moment).
    pub fn len(&self) -> usize {
        let head = self.shared.head.0.load(Ordering::Acquire);
        self.tail.wrapping_sub(head)
    }

    /// Whether the ring is empty now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn capacity(&self) -> usize {
        self.shared.capacity
    }

    /// Whether the consumer is gone (dropped): nothing pushed will ever be read.
    pub fn is_abandoned(&self) -> bool {
        Arc::strong_count(&self.shared) == 1
    }
}

/// The reading end of a ring.
pub struct Consumer<T> {
    shared: Arc<Shared<T>>,
    /// The consumer's own position (the shared `head` is a published copy).
    head: usize,
    /// The producer's position as last seen.
    tail_cache: usize,
}

impl<T> Consumer<T> {
    /// Takes the item at the front, if any.
    #[inline]
    pub fn pop(&mut self) -> Option<T> {
        self.pop_if(|_| true)
    }

    /// Takes the item at the front if `admit` says yes to it: a peek and a pop in one,
    /// for a consumer that decides by what comes next (flow control).
    #[inline]
    pub fn pop_if(&mut self, admit: impl FnOnce(&T) -> bool) -> Option<T> {
        let head = self.head;
        if head == self.tail_cache {
            self.tail_cache = self.shared.tail.0.load(Ordering::Acquire);
            if head == self.tail_cache {
                return None;
            }
        }
        let slot = &self.shared.slots[head & self.shared.mask];
        // SAFETY: `head != tail` for a `tail` this thread acquired, so the producer
        // published the slot at `head` and will not touch it again until the `Release`
        // store below gives it back. We are the only consumer.
        let value = unsafe {
            let item = &mut *slot.get();
            if !item.as_ref().is_some_and(admit) {
                return None;
            }
            item.take()
        };
        self.head = head.wrapping_add(1);
        self.shared.head.0.store(self.head, Ordering::Release);
        value
    }

    /// Whether the ring is empty now: the cheap test of a consumer about to poll (it
    /// reloads the producer's position only when the cached one says empty).
    #[inline]
    pub fn is_drained(&mut self) -> bool {
        if self.head != self.tail_cache {
            return false;
        }
        self.tail_cache = self.shared.tail.0.load(Ordering::Acquire);
        self.head == self.tail_cache
    }

    /// The item at the front, left in place.
    #[inline]
    pub fn peek(&self) -> Option<&T> {
        let head = self.head;
        let tail = self.shared.tail.0.load(Ordering::Acquire);
        if head == tail {
            return None;
        }
        let slot = &self.shared.slots[head & self.shared.mask];
        // SAFETY: as in `pop`, the slot at `head` is published and the producer keeps off
        // it until `head` moves; `head` moves only through `pop`, which needs `&mut self`,
        // and the returned reference borrows `self`, so the slot stays ours while it lives.
        unsafe { (*slot.get()).as_ref() }
    }

    /// Items in the ring now (the producer may add some at any moment).
    pub fn len(&self) -> usize {
        let tail = self.shared.tail.0.load(Ordering::Acquire);
        tail.wrapping_sub(self.head)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn capacity(&self) -> usize {
        self.shared.capacity
    }

    /// Whether the producer is gone (dropped): once empty, the ring stays empty.
    pub fn is_abandoned(&self) -> bool {
        Arc::strong_count(&self.shared) == 1
    }
}

impl<T> fmt::Debug for Producer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Producer")
            .field("len", &self.len())
            .field("capacity", &self.capacity())
            .finish()
    }
}

impl<T> fmt::Debug for Consumer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("len", &self.len())
            .field("capacity", &self.capacity())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn capacity_bounds() {
        assert!(matches!(ring::<u8>(0), Err(RingError::Capacity { .. })));
        assert!(matches!(
            ring::<u8>(MAX_CAPACITY + 1),
            Err(RingError::Capacity { .. })
        ));
        assert!(ring::<u8>(1).is_ok());
        assert_eq!(
            RingError::Capacity {
                requested: 0,
                max: 4
            }
            .to_string(),
            "ring capacity 0 is not within 1..=4"
        );
    }

    #[test]
    fn holds_exactly_its_capacity_in_one_thread() {
        for cap in [1usize, 2, 3, 5, 8, 100] {
            let (mut p, mut c) = ring::<usize>(cap).unwrap();
            assert_eq!((p.capacity(), c.capacity()), (cap, cap));
            // Several wrap-arounds, with the ring filled to the brim each time.
            let mut next_out = 0;
            let mut next_in = 0;
            for _round in 0..5 {
                while p.push(next_in).is_ok() {
                    next_in += 1;
                }
                assert!(p.is_full());
                assert_eq!(p.len(), cap);
                assert_eq!(c.len(), cap);
                assert_eq!(p.push(999), Err(999));
                assert_eq!(c.peek(), Some(&next_out));
                // Take all but one, then refill.
                for _ in 0..cap - 1 {
                    assert_eq!(c.pop(), Some(next_out));
                    next_out += 1;
                }
            }
            while let Some(v) = c.pop() {
                assert_eq!(v, next_out);
                next_out += 1;
            }
            assert_eq!(next_out, next_in);
            assert!(c.is_empty() && p.is_empty());
            assert_eq!(c.peek(), None);
            assert_eq!(c.pop(), None);
        }
    }

    #[test]
    fn pop_if_takes_only_what_it_admits() {
        let (mut p, mut c) = ring::<u32>(3).unwrap();
        assert!(c.is_drained());
        assert_eq!(c.pop_if(|_| true), None);
        for v in [1, 20, 3] {
            p.push(v).unwrap();
        }
        assert!(!c.is_drained());
        assert_eq!(c.pop_if(|&v| v < 10), Some(1));
        // Refused: left at the front, the ring unchanged.
        assert_eq!(c.pop_if(|&v| v < 10), None);
        assert_eq!(c.len(), 2);
        assert_eq!(c.peek(), Some(&20));
        assert_eq!(c.pop_if(|&v| v == 20), Some(20));
        // The slots it freed take new items, across the wrap-around.
        p.push(4).unwrap();
        p.push(5).unwrap();
        assert!(p.is_full());
        assert_eq!(c.pop(), Some(3));
        assert_eq!(c.pop_if(|_| true), Some(4));
        assert_eq!(c.pop_if(|&v| v == 5), Some(5));
        assert!(c.is_drained());
        assert_eq!(c.pop_if(|_| true), None);
    }

    #[test]
    fn ends_know_when_the_other_is_gone() {
        let (p, c) = ring::<u8>(4).unwrap();
        assert!(!p.is_abandoned() && !c.is_abandoned());
        drop(c);
        assert!(p.is_abandoned());
        let (mut p, mut c) = ring::<u8>(4).unwrap();
        p.push(7).unwrap();
        drop(p);
        assert!(c.is_abandoned());
        assert_eq!(c.pop(), Some(7));
        assert_eq!(c.pop(), None);
        let dbg = format!("{c:?}");
        assert!(dbg.contains("capacity: 4"), "{dbg}");
    }

    /// Counts drops, to show that nothing leaks and nothing drops twice.
    struct Counted<'a>(&'a AtomicUsize);

    impl Drop for Counted<'_> {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn items_left_in_the_ring_are_dropped_once() {
        let drops = AtomicUsize::new(0);
        {
            let (mut p, mut c) = ring(8).unwrap();
            for _ in 0..6 {
                assert!(p.push(Counted(&drops)).is_ok());
            }
            drop(c.pop());
            drop(c.pop());
            assert_eq!(drops.load(Ordering::Relaxed), 2);
            // Fill it (across the wrap-around); a refused push hands the value back, and
            // dropping it is the caller's.
            for _ in 0..4 {
                assert!(p.push(Counted(&drops)).is_ok());
            }
            assert_eq!(c.len(), 8);
            let back = p.push(Counted(&drops));
            assert!(back.is_err());
            drop(back);
            assert_eq!(drops.load(Ordering::Relaxed), 3);
        }
        // 10 pushed, 2 of them popped, 1 refused: all 11 dropped exactly once.
        assert_eq!(drops.load(Ordering::Relaxed), 11);
    }

    #[test]
    fn two_threads_move_millions_of_items_in_order() {
        // A ring of one hands every item across cores on its own: fewer of those.
        for (cap, n) in [(1usize, 200_000u64), (7, 1_000_000), (256, 4_000_000)] {
            let (mut p, mut c) = ring::<Box<u64>>(cap).unwrap();
            let producer = std::thread::spawn(move || {
                let mut i = 0;
                while i < n {
                    match p.push(Box::new(i)) {
                        Ok(()) => i += 1,
                        Err(_) => std::thread::yield_now(),
                    }
                }
            });
            let mut expected = 0u64;
            let mut sum = 0u64;
            while expected < n {
                match c.pop() {
                    Some(v) => {
                        assert_eq!(*v, expected);
                        sum = sum.wrapping_add(*v);
                        expected += 1;
                    }
                    None => {
                        if c.is_abandoned() && c.is_empty() {
                            break;
                        }
                        std::thread::yield_now();
                    }
                }
                // Peeking from the consumer's thread is safe at any time.
                if expected.is_multiple_of(1024) {
                    if let Some(v) = c.peek() {
                        assert_eq!(**v, expected);
                    }
                }
            }
            producer.join().unwrap();
            assert_eq!(expected, n, "cap {cap}");
            assert_eq!(sum, n * (n - 1) / 2);
            assert_eq!(c.pop(), None);
        }
    }
}
