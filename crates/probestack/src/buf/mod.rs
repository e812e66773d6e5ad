//! Packet buffers: blocks with headroom, a pool of fixed-size blocks, chains for
//! scatter-gather, and external buffers the application loans to the stack.
//!
//! Four types, one job each (DESIGN.md §5):
//!
//! | type | file | job |
//! |---|---|---|
//! | [`PacketBuf`] | `packet.rs` | one block, a data window inside it; headers are prepended into the headroom and stripped by moving the window |
//! | [`Pool`] | `pool.rs` | fixed-size blocks by class, a free list per class with a one-behind cache in front, or plain global allocation (the `buffer_cache` switch) |
//! | [`BufChain`] | `chain.rs` | an ordered list of segments (packet buffers and external buffers): a message larger than one block, or a header in front of loaned data |
//! | [`ExtBuf`], [`Loan`] | `loan.rs` | reference-counted read-only memory: data the application loaned for a zero-copy send, or a block the stack hands over on a zero-copy receive |
//!
//! # Packet buffers
//!
//! ```text
//!  0          start                    end                 capacity
//!  +-----------+------------------------+--------------------+
//!  | headroom  | data (the window)      | tailroom           |
//!  +-----------+------------------------+--------------------+
//!      prepend <-      trim_front ->   <- trim_back   append ->
//! ```
//!
//! On the send path a layer prepends its header by moving `start` back over the
//! headroom: no copy of what is already in the window, the way an mbuf's `M_PREPEND` works
//! when there is leading space. On the receive path a layer strips its header by moving
//! `start` forward. [`HEADROOM`] is what the stack reserves when it allocates a buffer it
//! will send: room for a virtio-net header (12 bytes), Ethernet (14), IPv4 with every
//! option (60) and TCP with every option (60), rounded up to 192 so that a payload written
//! at `start` begins three cache lines into the block.
//!
//! # The pool
//!
//! | class | block size | holds |
//! |---|---:|---|
//! | [`Class::Small`] | 256 | headers, ACKs, a 64-byte datagram behind [`HEADROOM`] |
//! | [`Class::Cluster`] | 2048 | a 1500-byte frame |
//! | [`Class::Jumbo9k`] | 9216 | a 9000-byte jumbo frame |
//! | [`Class::Jumbo64k`] | 65792 (64 KiB + 256) | a 65535-byte IP datagram, its 14-byte Ethernet header and [`HEADROOM`] |
//!
//! [`Pool::alloc`] picks the smallest class whose block holds `headroom + len`.
//!
//! With the cache on ([`PoolConfig::buffer_cache`]), each class keeps the blocks given back
//! to it on a free list (a stack, so the block freed last, which is the warmest in the CPU
//! caches, is the first reused) and, in front of the list, a **one-behind cache**: one slot
//! that holds the block freed most recently. This is the one-buffer cache Partridge and Pink
//! put in `sendit` (paper 002 §6.4, "A Faster UDP"): they noticed that a program sending
//! datagrams allocates and frees a buffer for every `sendto`, and that keeping the last
//! freed buffer for the next allocation skips the allocator (in their kernel, the priority
//! changes around it). In a steady send or echo loop every allocation is a cache hit and
//! the free list is never touched. The paper's cache keeps the first buffer parked in it
//! and frees later ones normally; ours keeps the latest and pushes the older one down onto
//! the list, so blocks come back in exact last-in first-out order. `alloc` and `free` are a
//! few compares and a move: no hashing, no locking.
//!
//! With the cache off, every `alloc` takes a fresh zeroed block from the global allocator
//! and every `free` gives it back, as a 1993 kernel called `malloc` and `free` for every
//! mbuf. The two modes share the class choice, the limit and the statistics and differ only
//! in where blocks come from and go to, so a measurement of one against the other measures
//! the cache.
//!
//! **Zeroing.** A block is zeroed when it is first taken from the global allocator. A block
//! reused from the cache or a free list is *not* zeroed again: its bytes are whatever its
//! last user left. No stale data can reach the wire because every layer writes every byte
//! it sends: the window `alloc` returns is filled by the caller (a copy of the payload, a
//! frame received into it), `prepend` and `append` hand out bytes the layer then writes in
//! full (a header emitter writes every field), and nothing outside the window is ever sent.
//! The same holds for a receive buffer: a device writes the frame and the driver trims the
//! window to the frame's length.
//!
//! **Accounting.** The pool counts a block as outstanding from the `alloc` that handed it
//! out to the [`Pool::free`] that takes it back. A [`PacketBuf`] that is dropped instead
//! of freed gives its memory back to the global allocator (nothing leaks), but the pool
//! never hears of it, so it stays outstanding in [`PoolStats`]: a count that grows at rest
//! shows a path that forgets to free. A buffer that crosses to another stack's thread (the
//! memory link hands frames over without copying) is freed into the receiving stack's pool,
//! which accepts any block whose capacity matches a class; the sending stack calls
//! [`Pool::detach`] as the buffer leaves, so that it stops counting it. A pool never counts
//! a block it did not hand out, so its figures always add up: `allocs = frees + detached +
//! outstanding`. Keeping the origin in a shared atomic counter instead would let a drop or
//! another thread's free update it, at the price of atomic operations on every `alloc` and
//! `free`; we keep those two paths plain.
//!
//! A limit on the bytes outstanding ([`PoolConfig::limit_bytes`], the stack's memory budget
//! like BSD's `nmbclusters`) makes `alloc` refuse with [`BufError::Exhausted`], counted.
//! Free lists are bounded too ([`PoolConfig::max_free_bytes_per_class`]): a pool that keeps
//! receiving blocks from another thread does not grow without end. What it cannot keep it
//! hands, a magazine of [`MAGAZINE`] blocks at a time, to a [`Depot`] it shares with the
//! pool at the other end of the link, which takes a magazine when its own free list runs
//! dry (Bonwick's magazines and depot): one-way traffic then circulates blocks instead of
//! taking every one fresh from the global allocator.
//!
//! # Chains and external buffers
//!
//! A [`BufChain`] is a list of segments, each a [`PacketBuf`] (owned, writable) or an
//! [`ExtBuf`] (shared, read-only); [`BufChain::split_to`] shares external memory instead of
//! copying it. A frame on its way out is one [`PacketBuf`] whose fragments
//! ([`PacketBuf::push_frag`]) are `ExtBuf`s: the loaned bytes of a zero-copy send, which a
//! device with scatter-gather reads where they are (TCP's send buffer, `tcp::send_buffer`,
//! keeps the loans until they are acknowledged).
//!
//! An [`ExtBuf`] is a reference-counted block (`Arc`) and a byte range in it; cloning and
//! slicing cost a reference-count increment, and a slice may cross threads. When the
//! application loans memory for a zero-copy send it keeps a [`Loan`]; the stack holds
//! `ExtBuf`s into it (TCP until the data is acknowledged). [`Loan::is_complete`] says when
//! the stack holds none any more, and [`Loan::try_reclaim`] gives the memory back only then.
//! This is the user-space counterpart of the copy-on-write protection in paper 004 §3.1
//! (Chase, Gallatin and Yocum): there the kernel marks the pages of a pending send
//! copy-on-write so that the application cannot change data TCP may still retransmit, and
//! releases them when the receiver acknowledges; here the application cannot get its buffer
//! back while any `ExtBuf` into it lives, and no `ExtBuf` can write to it. On a zero-copy
//! receive the memory NIC (header/data split) writes the payload into a page-aligned block
//! of its own ([`PageRecycler`], its DMA's placement: a block used again once nothing refers to it) and
//! the stack hands the whole pages of it to the application by reference, as paper 004
//! remaps the page that holds the payload.
//!
//! # Errors
//!
//! Nothing here panics on what a caller passes at run time: running out of headroom or
//! tailroom, trimming or copying past the end, a request larger than the largest class, an
//! exhausted pool and a failed allocation are each a [`BufError`] that says what was needed
//! and what there was, and the operation that failed changed nothing.

mod chain;
mod loan;
mod packet;
mod pool;

pub use chain::{BufChain, Segment};
pub use loan::{ExtBuf, Loan, PageRecycler, PAGE_SIZE};
pub use packet::{PacketBuf, TxOffload};
pub use pool::{
    Class, ClassStats, Depot, Pool, PoolConfig, PoolStats, CLUSTER_SIZE, HEADROOM, JUMBO64K_SIZE,
    JUMBO9K_SIZE, MAGAZINE, SMALL_SIZE,
};

use std::fmt;

/// What went wrong with a buffer operation. The operation that returned it changed nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BufError {
    /// `prepend` wants `need` bytes in front of the window; the headroom is `have`.
    NoHeadroom { need: usize, have: usize },
    /// `append` wants `need` bytes behind the window; the tailroom is `have`.
    NoTailroom { need: usize, have: usize },
    /// The operation needs `need` bytes of data (to trim, skip, split off or copy, or room
    /// in a destination slice) and there are `have`.
    TooShort { need: usize, have: usize },
    /// A block of `need` bytes is more than the largest there can be (`max`): a request
    /// beyond the largest pool class, or a headroom beyond a buffer's capacity.
    TooLarge { need: usize, max: usize },
    /// The pool's limit on bytes outstanding refuses a block of `need` bytes.
    Exhausted {
        need: usize,
        outstanding: usize,
        limit: usize,
    },
    /// The global allocator could not provide `size` bytes.
    OutOfMemory { size: usize },
    /// A range `start..end` that does not lie inside a buffer of `len` bytes.
    OutOfRange {
        start: usize,
        end: usize,
        len: usize,
    },
}

impl fmt::Display for BufError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BufError::NoHeadroom { need, have } => {
                write!(f, "no headroom: need {need} bytes, have {have}")
            }
            BufError::NoTailroom { need, have } => {
                write!(f, "no tailroom: need {need} bytes, have {have}")
            }
            BufError::TooShort { need, have } => {
                write!(f, "too short: need {need} bytes, have {have}")
            }
            BufError::TooLarge { need, max } => {
                write!(f, "too large: {need} bytes, at most {max}")
            }
            BufError::Exhausted {
                need,
                outstanding,
                limit,
            } => write!(
                f,
                "pool exhausted: {need} more bytes with {outstanding} outstanding would pass the limit of {limit}"
            ),
            BufError::OutOfMemory { size } => {
                write!(f, "out of memory: could not allocate {size} bytes")
            }
            BufError::OutOfRange { start, end, len } => {
                write!(f, "range {start}..{end} out of a buffer of {len} bytes")
            }
        }
    }
}

impl std::error::Error for BufError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_display_what_was_needed() {
        let cases = [
            (
                BufError::NoHeadroom { need: 20, have: 14 },
                "no headroom: need 20 bytes, have 14",
            ),
            (
                BufError::NoTailroom { need: 9, have: 8 },
                "no tailroom: need 9 bytes, have 8",
            ),
            (
                BufError::TooShort { need: 3, have: 2 },
                "too short: need 3 bytes, have 2",
            ),
            (
                BufError::TooLarge {
                    need: 70000,
                    max: 65792,
                },
                "too large: 70000 bytes, at most 65792",
            ),
            (
                BufError::Exhausted {
                    need: 2048,
                    outstanding: 4096,
                    limit: 5000,
                },
                "pool exhausted: 2048 more bytes with 4096 outstanding would pass the limit of 5000",
            ),
            (
                BufError::OutOfMemory { size: 1 << 40 },
                "out of memory: could not allocate 1099511627776 bytes",
            ),
            (
                BufError::OutOfRange {
                    start: 5,
                    end: 3,
                    len: 10,
                },
                "range 5..3 out of a buffer of 10 bytes",
            ),
        ];
        for (e, want) in cases {
            assert_eq!(e.to_string(), want);
            let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(e);
            assert_eq!(boxed.to_string(), want);
        }
    }

    #[test]
    fn every_type_crosses_threads() {
        fn send<T: Send>() {}
        fn sync<T: Sync>() {}
        send::<PacketBuf>();
        send::<ExtBuf>();
        sync::<ExtBuf>();
        send::<Loan>();
        send::<BufChain>();
        send::<Segment>();
        send::<Pool>();
        send::<BufError>();
    }
}
