//! A device with a router behind it: for each frame the stack sends, the test's [`Hop`]
//! says whether it goes on to the wire and what the router answers (an ICMP error quoting
//! it), which the stack then receives as if from the wire (`tcp.rs`' narrow path,
//! `icmp_errors.rs`).

use std::collections::VecDeque;

use probestack::buf::PacketBuf;
use probestack::driver::{
    Device, DeviceCaps, DeviceContext, DeviceError, RxChecksum, RxFrame, TxMeta,
};
use probestack::sim::{ipv4_frame, ipv4_header};
use probestack::time::Instant;
use probestack::wire::ethernet::EthernetAddress;
use probestack::wire::icmpv4::{self, Icmpv4Repr};
use probestack::wire::ipv4::IpProtocol;
use probestack::wire::{Checksum, Ipv4Address};

/// What the router does with the frames a stack sends.
pub trait Hop: Send {
    /// Whether `frame` goes on to the wire (as the router leaves it: it may mark it), and
    /// the router's answer to the stack, if any.
    fn forward(&mut self, frame: &mut PacketBuf) -> (bool, Option<PacketBuf>);
}

/// A device with a [`Hop`] behind it.
pub struct Routed<D, H> {
    pub dev: D,
    pub hop: H,
    answers: VecDeque<PacketBuf>,
    last_now: Instant,
}

impl<D, H> Routed<D, H> {
    pub fn new(dev: D, hop: H) -> Routed<D, H> {
        Routed {
            dev,
            hop,
            answers: VecDeque::new(),
            last_now: Instant::ZERO,
        }
    }
}

impl<D: Device, H: Hop> Device for Routed<D, H> {
    fn caps(&self) -> DeviceCaps {
        self.dev.caps()
    }
    fn transmit(
        &mut self,
        mut frame: PacketBuf,
        meta: TxMeta,
        cx: &DeviceContext<'_>,
    ) -> Result<(), DeviceError> {
        self.last_now = cx.now;
        let (on, answer) = self.hop.forward(&mut frame);
        self.answers.extend(answer);
        if on {
            self.dev.transmit(frame, meta, cx)
        } else {
            Ok(())
        }
    }
    fn tx_ready(&self) -> bool {
        self.dev.tx_ready()
    }
    fn take_notification(&mut self, cx: &DeviceContext<'_>) -> bool {
        self.dev.take_notification(cx) || !self.answers.is_empty()
    }
    fn receive(&mut self, cx: &DeviceContext<'_>) -> Option<RxFrame> {
        match self.answers.pop_front() {
            Some(frame) => Some(RxFrame {
                frame,
                checksum: RxChecksum::None,
            }),
            None => self.dev.receive(cx),
        }
    }
    fn next_deadline(&self) -> Option<Instant> {
        if self.answers.is_empty() {
            self.dev.next_deadline()
        } else {
            // Answers are due at once.
            Some(self.last_now)
        }
    }
}

/// The ICMP message `icmp` in a frame from `from` to `to` (address and MAC each).
pub fn icmp_frame(
    icmp: &Icmpv4Repr,
    from: (Ipv4Address, EthernetAddress),
    to: (Ipv4Address, EthernetAddress),
) -> PacketBuf {
    let ip = ipv4_header(from.0, to.0, IpProtocol::Icmp, icmp.buffer_len());
    let f = ipv4_frame(from.1, to.1, &ip, |payload| {
        icmp.emit(&mut icmpv4::Packet::new_unchecked(payload), Checksum::Check)
            .unwrap();
    });
    PacketBuf::from_slice(&f, 0).unwrap()
}

/// What an ICMP error quotes of `datagram` (RFC 792: its IP header and at least 8 bytes
/// of its payload; routers send more), with the TCP sequence number moved by `seq_shift`
/// (a forged error's) when it is a TCP segment.
pub fn quoted(datagram: &[u8], seq_shift: u32) -> Vec<u8> {
    let mut quoted = datagram[..48.min(datagram.len())].to_vec();
    let ihl = usize::from(quoted[0] & 0x0f) * 4;
    if quoted[9] == 6 && quoted.len() >= ihl + 8 {
        let seq = u32::from_be_bytes(quoted[ihl + 4..ihl + 8].try_into().unwrap());
        quoted[ihl + 4..ihl + 8].copy_from_slice(&seq.wrapping_add(seq_shift).to_be_bytes());
    }
    quoted
}
