//! How many random conversations a run holds, and from which seed: a fixed seed by
//! default, so that CI runs the same ones each time; `PROBESTACK_CONVERSATIONS=N` runs N,
//! and `PROBESTACK_CONVERSATION_SEED=random` (or a number) explores others
//! (`tcp_conversations.rs`, `tcp_smoltcp.rs`, `tcp_linux.rs`, `udp.rs`); the tuning
//! they draw; and what the TCP conversations with two applications share (with itself in
//! `tcp_conversations.rs`, with Linux in `tcp_linux.rs`): the steps, and the model of a
//! byte stream that checks what a reader gets.

use probestack::buf::Loan;
use probestack::socket::tcp::{TcpError, TcpHandle};
use probestack::stack::Stack;
use probestack::tcp::State;
use probestack::tuning::Tuning;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

use super::transfer::pattern;

pub fn config(default_cases: u32) -> Config {
    let var = |name| std::env::var(name).ok();
    let rng_seed = match var("PROBESTACK_CONVERSATION_SEED").as_deref() {
        Some("random") => RngSeed::Random,
        Some(n) => RngSeed::Fixed(n.parse().expect("a seed is a number or `random`")),
        None => RngSeed::Fixed(0x7c9_2026),
    };
    Config {
        cases: var("PROBESTACK_CONVERSATIONS").map_or(default_cases, |n| {
            n.parse().expect("PROBESTACK_CONVERSATIONS is a number")
        }),
        rng_seed,
        // Not written to a file of regressions: a failure prints its minimal case, and
        // the ones found are kept as tests of their own.
        failure_persistence: None,
        ..Config::default()
    }
}

/// A tuning with each switch drawn, from `fast()` or `bsd()` for the kernel and the
/// lookups (the stack checks the switches that need others, such as verify on read).
pub fn tuning() -> impl Strategy<Value = Tuning> {
    (any::<bool>(), proptest::collection::vec(any::<bool>(), 11)).prop_map(|(fast, b)| {
        let base = if fast { Tuning::fast() } else { Tuning::bsd() };
        Tuning {
            checksum_elision: b[0],
            fused_copy_checksum: b[1],
            header_prediction: b[2],
            tcp_output_per_batch: b[3],
            checksum_offload: b[4],
            segmentation_offload: b[5],
            software_segmentation: b[6],
            tcp_send_by_reference: b[7],
            tcp_verify_on_read: b[8],
            tcp_header_template: b[9],
            buffer_cache: b[10],
            ..base
        }
    })
}

/// How a write is made: copied, loaned (zero-copy send, where the side can), or urgent.
#[derive(Clone, Copy, Debug)]
pub enum How {
    Copy,
    Loan,
    Urgent,
}

/// One step of a conversation, on one connection; `side` 0 or 1.
#[derive(Clone, Copy, Debug)]
pub enum Step {
    Write {
        side: usize,
        len: usize,
        how: How,
    },
    Read {
        side: usize,
        max: usize,
    },
    Wait {
        ms: u64,
    },
    Shutdown {
        side: usize,
    },
    /// `side` writes `len` bytes while the other reads, until all are read.
    Stream {
        side: usize,
        len: usize,
    },
    /// The link is cut both ways for `ms` (what follows is the test's to say).
    Cut {
        ms: u64,
    },
    /// `side`'s application changes its socket options mid-stream: Nagle, and how it
    /// reads (zero-copy or copying) where it can.
    Options {
        side: usize,
        nodelay: bool,
        zero_copy: bool,
    },
}

/// A step: writes and reads of up to 70 KB, waits under `wait_ms`, streams under
/// `stream_len` bytes, cuts under `cut_ms`.
pub fn step(wait_ms: u64, stream_len: usize, cut_ms: u64) -> impl Strategy<Value = Step> {
    let len = prop_oneof![1..64usize, 64..2048usize, 2048..70_000usize];
    let how = prop_oneof![6 => Just(How::Copy), 3 => Just(How::Loan), 1 => Just(How::Urgent)];
    prop_oneof![
        6 => (0..2usize, len.clone(), how).prop_map(|(side, len, how)| Step::Write { side, len, how }),
        6 => (0..2usize, len).prop_map(|(side, max)| Step::Read { side, max }),
        4 => prop_oneof![Just(0u64), 1..50u64, 50..wait_ms].prop_map(|ms| Step::Wait { ms }),
        1 => (0..2usize).prop_map(|side| Step::Shutdown { side }),
        1 => (0..2usize, 1..stream_len).prop_map(|(side, len)| Step::Stream { side, len }),
        1 => (1..cut_ms).prop_map(|ms| Step::Cut { ms }),
        1 => (0..2usize, any::<bool>(), any::<bool>())
            .prop_map(|(side, nodelay, zero_copy)| Step::Options { side, nodelay, zero_copy }),
    ]
}

/// One act of the applications on a connection: a step, or an application ending its
/// side with a close (`abort` false: a FIN, or a RST if data it had not read was waiting,
/// RFC 9293 §3.10.4 and RFC 2525 §2.17) or an abort (a RST, RFC 9293 §3.10.5; Linux's
/// close with `SO_LINGER` of zero).
#[derive(Clone, Copy, Debug)]
pub enum Act {
    Do(Step),
    End {
        side: usize,
        abort: bool,
    },
    /// The connecting side's application opens one more connection, from the port of one
    /// it ended where `reuse` asks and there is one (the new connection then meets what
    /// is left of the old: TIME-WAIT, or a survivor that missed the RST).
    Open {
        reuse: bool,
    },
}

impl From<Step> for Act {
    fn from(step: Step) -> Act {
        Act::Do(step)
    }
}

/// An act: mostly a step, now and then an application ending its side, and with
/// `opens`, opening another connection.
pub fn act(
    wait_ms: u64,
    stream_len: usize,
    cut_ms: u64,
    opens: bool,
) -> impl Strategy<Value = Act> {
    let open = any::<bool>().prop_map(|reuse| Act::Open { reuse });
    prop_oneof![
        30 => step(wait_ms, stream_len, cut_ms).prop_map(Act::Do),
        1 => (0..2usize, any::<bool>()).prop_map(|(side, abort)| Act::End { side, abort }),
        u32::from(opens) => open,
    ]
}

/// One direction of a connection: what the writer's calls were taken for, what the
/// reader has read, and whether the writer shut down.
#[derive(Default)]
pub struct Stream {
    pub written: usize,
    pub read: Vec<u8>,
    pub shut: bool,
    pub eof_seen: bool,
}

/// The stream's bytes from `offset`: a pattern per direction (`side` is the writer), so
/// that bytes crossing over would show.
pub fn bytes(side: usize, offset: usize, len: usize) -> Vec<u8> {
    let mut b = pattern(offset, len);
    if side == 1 {
        b.iter_mut().for_each(|x| *x = !*x);
    }
    b
}

impl Stream {
    /// Takes what `reader` got from a read of up to `max` bytes of the stream that side
    /// `writer` (named `writer_name`) writes: data, or the end (`None`). It must be the
    /// next bytes written, or the end after a shutdown and everything read. Whether it
    /// was new (data, or the end seen the first time).
    pub fn take(
        &mut self,
        got: Option<Vec<u8>>,
        max: usize,
        reader: &str,
        writer: usize,
        writer_name: &str,
    ) -> Result<bool, TestCaseError> {
        match got {
            Some(data) => {
                let at = self.read.len();
                prop_assert!(
                    !data.is_empty() && data.len() <= max,
                    "{reader} read {} bytes asking for {max}",
                    data.len()
                );
                prop_assert!(
                    at + data.len() <= self.written,
                    "{reader} read past what {writer_name} wrote"
                );
                prop_assert!(
                    data == bytes(writer, at, data.len()),
                    "{reader} read bytes at {at} that {writer_name} did not write there"
                );
                self.read.extend_from_slice(&data);
                Ok(true)
            }
            None => {
                prop_assert!(
                    self.shut && self.read.len() == self.written,
                    "{reader} saw the end of the stream at {} of {} (shut down: {})",
                    self.read.len(),
                    self.written,
                    self.shut
                );
                Ok(!std::mem::replace(&mut self.eof_seen, true))
            }
        }
    }
}

/// A write of `data` by the application of the stack `st` (named `name`) on `h`, made as
/// `how` (a loan is kept in `loans`, to be checked for coming back), held to the model:
/// it takes bytes only before the writer's shutdown (`shut`), `WouldBlock` only with no
/// room, `Shutdown` only after it. How many bytes it took.
pub fn stack_write(
    st: &mut Stack,
    h: TcpHandle,
    data: Vec<u8>,
    how: How,
    shut: bool,
    name: &str,
    loans: &mut Vec<Loan>,
) -> Result<usize, TestCaseError> {
    let len = data.len();
    let r = match how {
        How::Copy => st.tcp_send(h, &data),
        How::Urgent => st.tcp_send_urgent(h, &data),
        How::Loan => {
            let loan = Loan::new(data);
            let r = st.tcp_send_loan(h, &loan.ext());
            loans.push(loan);
            r
        }
    };
    match r {
        Ok(n) => {
            prop_assert!(!shut, "{name} wrote after its shutdown");
            prop_assert!(n > 0 && n <= len, "{name} took {n} of {len}");
            Ok(n)
        }
        Err(TcpError::WouldBlock) => {
            prop_assert!(!shut, "{name} would block after its shutdown");
            let room = st.tcp_send_capacity(h).unwrap();
            prop_assert_eq!(room, 0, "{} would block with room", name);
            Ok(0)
        }
        Err(TcpError::Shutdown) => {
            prop_assert!(shut, "{name} refused before shutdown");
            Ok(0)
        }
        Err(e) => Err(TestCaseError::fail(format!("{name} write: {e}"))),
    }
}

/// What a call of the stack's may tell the survivor of a connection the other side ended:
/// the peer's reset, or (the reset lost, its own segments unanswered) that it timed out.
pub fn ends_survivor(e: &TcpError) -> bool {
    matches!(e, TcpError::ConnectionReset | TcpError::TimedOut)
}

/// The application of the stack `st` ends its side of the connection on `h`: an abort or
/// a close. Whether the end was quiet: an abort from CLOSING, LAST-ACK or TIME-WAIT, where
/// RFC 9293 §3.10.5 only deletes the connection and sends no RST.
pub fn stack_end_connection(st: &mut Stack, h: TcpHandle, abort: bool) -> Result<bool, TcpError> {
    let resets = matches!(
        st.tcp_state(h),
        Ok(State::SynReceived
            | State::Established
            | State::FinWait1
            | State::FinWait2
            | State::CloseWait)
    );
    if abort {
        st.tcp_abort(h)?;
    } else {
        st.tcp_close(h)?;
    }
    Ok(abort && !resets)
}

/// A read of up to `max` bytes by the application of the stack `st` on `h`, zero-copy
/// or copying: the data, or the end of the stream (`None`).
pub fn stack_read(
    st: &mut Stack,
    h: TcpHandle,
    max: usize,
    zero_copy: bool,
) -> Result<Option<Vec<u8>>, TcpError> {
    if zero_copy {
        st.tcp_recv_zero_copy(h, max).map(|b| b.map(|b| b.to_vec()))
    } else {
        let mut buf = vec![0u8; max];
        st.tcp_recv(h, &mut buf).map(|n| {
            buf.truncate(n);
            (n > 0).then_some(buf)
        })
    }
}
