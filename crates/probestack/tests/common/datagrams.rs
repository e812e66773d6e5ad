//! What the random UDP traffic shares, with the stack as the peer (`udp.rs`) and with
//! Linux (`udp_linux.rs`): datagrams that say what they should be, the tuning drawn for
//! UDP and IP, and the ways the stack's application sends.

use probestack::buf::Loan;
use probestack::socket::udp::{UdpError, UdpHandle};
use probestack::stack::Stack;
use probestack::tuning::Tuning;
use probestack::wire::Ipv4Address;
use proptest::prelude::*;

/// A payload that says what it should be: a 4-byte sequence number, then bytes derived
/// from it, so a receiver can tell an intact datagram from a corrupted one.
pub fn payload(seq: u32, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seq) as u8)
        .collect();
    if len >= 4 {
        v[..4].copy_from_slice(&seq.to_be_bytes());
    }
    v
}

/// Whether `d` is the [`payload`] its first four bytes name (or too short to name one).
pub fn intact(d: &[u8]) -> bool {
    d.len() < 4 || payload(u32::from_be_bytes([d[0], d[1], d[2], d[3]]), d.len()) == d
}

/// A tuning with each of UDP's and IP's switches drawn, from `fast()` or `bsd()` for the
/// rest.
pub fn udp_tuning() -> impl Strategy<Value = Tuning> {
    (any::<bool>(), proptest::collection::vec(any::<bool>(), 12)).prop_map(|(fast, b)| {
        let base = if fast { Tuning::fast() } else { Tuning::bsd() };
        Tuning {
            buffer_cache: b[0],
            inline_ip_header_checksum: b[1],
            defrag_check_only_fragments: b[2],
            udp_fast_path: b[3],
            sendto_without_connect: b[4],
            udp_header_template: b[5],
            udp_rx_short_path: b[6],
            pcb_recv_cache: b[7],
            pcb_send_cache: b[8],
            checksum_elision: b[9],
            fused_copy_checksum: b[10],
            checksum_offload: b[11],
            ..base
        }
    })
}

/// How the stack's application sends.
#[derive(Clone, Copy, Debug)]
pub enum SendHow {
    /// `udp_send` on a connected socket, `udp_send_to` on an unconnected one.
    Plain,
    /// `udp_send_msg` with the datagram in two parts.
    Gathered,
    /// `udp_send_batch` of this many datagrams of the length.
    Batch(usize),
    /// `udp_send_loan` (zero-copy).
    Loaned,
}

impl SendHow {
    /// How many datagrams one send makes.
    pub fn datagrams(self) -> usize {
        match self {
            SendHow::Batch(n) => n,
            _ => 1,
        }
    }
}

pub fn send_how() -> impl Strategy<Value = SendHow> {
    prop_oneof![
        3 => Just(SendHow::Plain),
        1 => Just(SendHow::Gathered),
        1 => (2..8usize).prop_map(SendHow::Batch),
        1 => Just(SendHow::Loaned),
    ]
}

/// Sends `datagrams` (one, or a batch's) on `h` as `how` says, to `to` or the connected
/// peer; how many went, or the first one's error.
pub fn stack_send(
    stack: &mut Stack,
    h: UdpHandle,
    how: SendHow,
    datagrams: &[Vec<u8>],
    to: Option<(Ipv4Address, u16)>,
) -> Result<usize, UdpError> {
    let d = &datagrams[0];
    match how {
        SendHow::Plain => match to {
            Some((addr, port)) => stack.udp_send_to(h, d, addr, port),
            None => stack.udp_send(h, d),
        }
        .map(|_| 1),
        SendHow::Gathered => {
            let (x, y) = d.split_at(d.len() / 2);
            stack.udp_send_msg(h, &[x, y], to).map(|_| 1)
        }
        SendHow::Batch(_) => {
            let parts: Vec<&[u8]> = datagrams.iter().map(|d| &d[..]).collect();
            stack.udp_send_batch(h, &parts, to)
        }
        SendHow::Loaned => {
            let loan = Loan::new(d.clone());
            stack.udp_send_loan(h, &loan.ext(), to).map(|_| 1)
        }
    }
}
