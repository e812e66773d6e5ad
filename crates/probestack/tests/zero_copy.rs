//! Zero-copy send and receive (paper 004 §3.1) between two stacks on the memory link and on
//! a frame queue, on a virtual clock: the application loans its memory, TCP sends it by
//! reference and holds it until it is acknowledged, and the loan completes (the memory
//! comes back, unchanged, the same allocation) only then. Checked by hash through a lossy
//! wire, with the NIC gathering by DMA or the CPU by PIO, with and without checksum
//! offload, mixed with copying sends, and over a device that cannot gather (the driver
//! copies, counted); on the receiving side, whole pages from a header-splitting NIC, and a
//! sender's memory as it came where the device hands it across.

mod common;

use common::tamper::{LoseAndReorder, Tampered};
use common::transfer::{connect, fnv, pattern, PatternSender, FNV_START};
use probestack::buf::Loan;
use probestack::driver::{
    CopyMode, Device, DeviceCaps, DeviceContext, DeviceError, FaultConfig, MemoryNic, RxFrame,
    TxMeta,
};
use probestack::probe::Counter;
use probestack::sim::{HostConfig, Pair, ADDR_B};
use probestack::socket::tcp::TcpError;
use probestack::time::{Duration, Instant};
use probestack::tuning::Tuning;

const PORT: u16 = 5002;

fn host(mtu: usize, copy_mode: CopyMode, offload: bool) -> HostConfig {
    let mut h = HostConfig::with_mtu(mtu);
    h.stack.tuning = Tuning {
        checksum_elision: false,
        checksum_offload: offload,
        segmentation_offload: false,
        ..Tuning::fast()
    };
    h.stack.tcp.msl = Duration::from_secs(1);
    h.nic.copy_mode = copy_mode;
    if offload {
        h.nic = h.nic.with_offloads();
    }
    h
}

/// What a zero-copy transfer saw.
struct Outcome {
    /// Loans that were checked incomplete while some of their bytes were unacknowledged.
    held_while_unacked: usize,
    loans: usize,
}

/// Sends `total` bytes from A to B, every `copy_every`-th chunk by copy and the rest as
/// loans of `chunk` bytes; checks the stream by hash, each loan's completion, and that
/// every loan comes back unchanged in its own allocation. B reads with zero-copy receive
/// when `zero_copy_rx` says so (dropping each buffer once hashed), else by copy.
fn loaned_transfer(
    p: &mut Pair,
    chunk: usize,
    total: usize,
    copy_every: usize,
    zero_copy_rx: bool,
) -> Outcome {
    let (tx, rx) = connect(p, PORT);
    if zero_copy_rx {
        p.b.tcp_set_zero_copy_receive(rx, true).unwrap();
    }
    let (mut made, mut got) = (0usize, 0usize);
    let (mut hs, mut hr) = (FNV_START, FNV_START);
    // Loans in flight: the loan, where it starts in the stream, how much of it is queued,
    // its address, and whether it was ever seen incomplete with its bytes unacknowledged.
    let mut loans: Vec<(Loan, usize, usize, usize, bool)> = Vec::new();
    let mut copying: Option<(Vec<u8>, usize)> = None;
    let (mut returned, mut held) = (0usize, 0usize);
    let mut buf = vec![0u8; 256 * 1024];
    let mut n_chunk = 0usize;
    let done = p.run_until(Duration::from_secs(120), |p| {
        loop {
            // The next piece of the stream: a copy or a loan, in the order made.
            if let Some((data, off)) = copying.as_mut() {
                match p.a.tcp_send(tx, &data[*off..]) {
                    Ok(n) => *off += n,
                    Err(TcpError::WouldBlock) => break,
                    Err(e) => panic!("send: {e}"),
                }
                if *off == data.len() {
                    copying = None;
                }
                continue;
            }
            if let Some(last) = loans.last_mut().filter(|l| l.2 < l.0.len()) {
                let rest = last.0.slice(last.2..).unwrap();
                match p.a.tcp_send_loan(tx, &rest) {
                    Ok(n) => last.2 += n,
                    Err(TcpError::WouldBlock) => break,
                    Err(e) => panic!("send_loan: {e}"),
                }
                continue;
            }
            if made == total {
                break;
            }
            let n = chunk.min(total - made);
            let data = pattern(made, n);
            fnv(&mut hs, &data);
            n_chunk += 1;
            if copy_every > 0 && n_chunk.is_multiple_of(copy_every) {
                copying = Some((data, 0));
            } else {
                let addr = data.as_ptr() as usize;
                loans.push((Loan::new(data), made, 0, addr, false));
            }
            made += n;
        }
        loop {
            got += if zero_copy_rx {
                match p.b.tcp_recv_zero_copy(rx, usize::MAX) {
                    Ok(None) | Err(TcpError::WouldBlock) => break,
                    Ok(Some(chunk)) => {
                        fnv(&mut hr, &chunk);
                        chunk.len()
                    }
                    Err(e) => panic!("recv_zero_copy: {e}"),
                }
            } else {
                match p.b.tcp_recv(rx, &mut buf) {
                    Ok(0) | Err(TcpError::WouldBlock) => break,
                    Ok(n) => {
                        fnv(&mut hr, &buf[..n]);
                        n
                    }
                    Err(e) => panic!("recv: {e}"),
                }
            };
        }
        // The completion: a loan whose bytes are not all acknowledged must still be
        // held; one that is complete must be reclaimable, unchanged.
        let acked = made - p.a.tcp_send_queued(tx).unwrap();
        let mut i = 0;
        while i < loans.len() {
            let (loan, start, queued, _, seen) = &mut loans[i];
            let end = *start + loan.len();
            if acked < end && *queued > 0 {
                assert!(!loan.is_complete(), "a loan completed before its ACK");
                *seen = true;
            }
            if *queued == loan.len() && loan.is_complete() {
                assert!(acked >= end, "complete, yet not all acknowledged");
                let (loan, start, _, addr, seen) = loans.remove(i);
                let mut back = loan.try_reclaim().expect("a complete loan comes back");
                assert_eq!(back.as_ptr() as usize, addr, "the same allocation");
                assert_eq!(back, pattern(start, back.len()), "the memory is unchanged");
                // The application reuses it: the stack must never read it again (the
                // receiver's hash would show it).
                back.fill(0xEE);
                returned += 1;
                held += usize::from(seen);
            } else {
                i += 1;
            }
        }
        got == total && loans.is_empty() && copying.is_none()
    });
    if !done {
        for c in Counter::ALL {
            let (a, b) = (
                p.a.ledger().counters().get(*c),
                p.b.ledger().counters().get(*c),
            );
            if a + b > 0 {
                eprintln!("{:40} {a:>10} {b:>10}", c.name());
            }
        }
    }
    assert!(
        done,
        "stalled: made {made}, received {got} of {total}, {} loans out",
        loans.len()
    );
    assert_eq!(hs, hr, "the bytes received differ from the bytes sent");
    Outcome {
        held_while_unacked: held,
        loans: returned,
    }
}

fn zero_copy_segments(p: &Pair) -> u64 {
    p.a.ledger().counters().get(Counter::TcpZeroCopySegments)
}

#[test]
fn loans_travel_by_reference_through_a_lossy_wire_and_complete_on_ack() {
    for (mode, offload, mtu) in [
        (CopyMode::Dma, false, 1500),
        (CopyMode::Dma, true, 9000),
        (CopyMode::Pio, false, 9000),
        (CopyMode::Pio, true, 1500),
    ] {
        let mut a = host(mtu, mode, offload);
        let mut b = host(mtu, mode, offload);
        a.nic.rx_faults = FaultConfig::lossy(7);
        b.nic.rx_faults = FaultConfig::lossy(8);
        let mut p = Pair::new(a, b).unwrap();
        // Chunks of an odd size, so segments straddle loans and copies.
        let out = loaned_transfer(&mut p, 7777, 3 << 20, 5, false);
        let what = format!("{mode:?} offload={offload} mtu={mtu}");
        assert!(out.loans > 300, "{what}: {} loans", out.loans);
        assert!(
            out.held_while_unacked > out.loans / 2,
            "{what}: loans were seen held until acknowledged"
        );
        assert!(zero_copy_segments(&p) > 100, "{what}");
        let c = |s: &Pair, k| s.b.ledger().counters().get(k);
        assert_eq!(c(&p, Counter::TcpDropBadChecksum), 0, "{what}");
        assert!(
            p.a.ledger()
                .counters()
                .get(Counter::TcpRetransmittedSegments)
                > 0,
            "{what}: the lossy wire made TCP retransmit loaned data"
        );
        assert_eq!(
            p.a.ledger().counters().get(Counter::DriverTxLinearized),
            0,
            "{what}: the memory NIC gathers; the stack copies nothing"
        );
    }
}

#[test]
fn loans_of_every_size_deliver_the_bytes_the_copy_path_would() {
    for (chunk, total, copy_every) in [
        (1, 20_000, 7),
        (333, 300_000, 0),
        (4095, 1 << 20, 2),
        (4097, 1 << 20, 0),
        (100_003, 2 << 20, 3),
    ] {
        let mut p = Pair::new(
            host(9000, CopyMode::Dma, false),
            host(9000, CopyMode::Dma, false),
        )
        .unwrap();
        let out = loaned_transfer(&mut p, chunk, total, copy_every, false);
        assert!(out.loans > 0, "chunk {chunk}");
    }
}

#[test]
fn a_loan_is_not_copied_by_the_socket_layer() {
    // Everything loaned, no faults: every data segment carries the loan by reference.
    let mut p = Pair::new(
        host(9000, CopyMode::Dma, true),
        host(9000, CopyMode::Dma, true),
    )
    .unwrap();
    let out = loaned_transfer(&mut p, 64 * 1024, 8 << 20, 0, false);
    assert_eq!(out.loans, 128);
    let data_segments = p.a.ledger().counters().get(Counter::TcpSegmentsOut);
    let zc = zero_copy_segments(&p);
    assert!(zc >= (8 << 20) / 8960, "{zc} zero-copy segments");
    assert!(zc <= data_segments);
}

/// A memory NIC that says it cannot gather: the stack must hand it whole frames.
struct NoGather(MemoryNic);

impl Device for NoGather {
    fn caps(&self) -> DeviceCaps {
        DeviceCaps {
            scatter_gather: false,
            ..self.0.caps()
        }
    }
    fn transmit(
        &mut self,
        frame: probestack::buf::PacketBuf,
        meta: TxMeta,
        cx: &DeviceContext<'_>,
    ) -> Result<(), DeviceError> {
        assert!(
            !frame.has_frags(),
            "a frame with fragments reached a device without SG"
        );
        self.0.transmit(frame, meta, cx)
    }
    fn tx_ready(&self) -> bool {
        self.0.tx_ready()
    }
    fn take_notification(&mut self, cx: &DeviceContext<'_>) -> bool {
        self.0.take_notification(cx)
    }
    fn receive(&mut self, cx: &DeviceContext<'_>) -> Option<RxFrame> {
        self.0.receive(cx)
    }
    fn next_deadline(&self) -> Option<Instant> {
        self.0.next_deadline()
    }
    fn recycle(&mut self, frame: probestack::buf::PacketBuf) {
        self.0.recycle(frame)
    }
    fn buffer_depot(&self) -> Option<probestack::buf::Depot> {
        self.0.buffer_depot()
    }
}

/// Across a frame queue, which hands a frame's fragments to the other end with it, loaned
/// data reaches the receiving stack by reference: kept in its receive buffer as it is
/// (`Tuning::tcp_send_by_reference`), or copied together where a segment also carries
/// copied bytes; every loan still completes, unchanged, once acknowledged and read.
#[test]
fn loans_cross_a_frame_queue_by_reference() {
    for mtu in [1500, 9000] {
        let mut h = host(mtu, CopyMode::Dma, false);
        // At 1500, B acknowledging at input (not after its reads, as it does verifying on
        // read) lets A send a copy's last bytes with the next loan's first in one segment,
        // the case B must copy together.
        h.stack.tuning.tcp_verify_on_read = mtu != 1500;
        let mut p = Pair::on_frame_queue(h.clone(), h).unwrap();
        let out = loaned_transfer(&mut p, 50_000, 4 << 20, 3, false);
        assert!(out.loans > 40, "MTU {mtu}: {} loans", out.loans);
        let b = |k| p.b.ledger().counters().get(k);
        assert!(b(Counter::TcpSegmentsInByReference) > 100, "MTU {mtu}");
        if mtu == 1500 {
            // Copies go into the ring there (at 9000 into shared blocks, by reference
            // too): a segment holding the ring's last bytes and a loan's first.
            assert!(b(Counter::StackRxLinearized) > 0, "copies and loans met");
        }
        assert_eq!(b(Counter::TcpDropBadChecksum), 0, "MTU {mtu}");
        assert_eq!(p.a.ledger().counters().get(Counter::DriverTxLinearized), 0);
    }
}

#[test]
fn a_device_without_scatter_gather_gets_whole_frames_the_driver_copied() {
    let mut p = Pair::with_devices(
        host(1500, CopyMode::Dma, false),
        host(1500, CopyMode::Dma, false),
        |nic| Box::new(NoGather(nic)),
        |nic| Box::new(nic),
    )
    .unwrap();
    let out = loaned_transfer(&mut p, 50_000, 1 << 20, 3, false);
    assert!(out.loans > 10);
    let linearized = p.a.ledger().counters().get(Counter::DriverTxLinearized);
    assert!(
        linearized >= zero_copy_segments(&p) && linearized > 0,
        "{linearized} linearized"
    );
}

/// Sends `total` bytes from A by copy; B reads them with zero-copy receive (or by copy,
/// every `copy_every`-th read). Checks the stream by hash; returns the bytes B got in
/// whole page-aligned pages.
fn paged_transfer(p: &mut Pair, total: usize, copy_every: usize) -> usize {
    let (tx, rx) = connect(p, PORT);
    p.b.tcp_set_zero_copy_receive(rx, true).unwrap();
    let mut sender = PatternSender::new(total);
    let (mut got, mut paged, mut reads) = (0usize, 0usize, 0usize);
    let mut hr = FNV_START;
    let mut buf = vec![0u8; 10_000];
    let done = p.run_until(Duration::from_secs(120), |p| {
        sender.pump(p, tx);
        loop {
            reads += 1;
            if copy_every > 0 && reads.is_multiple_of(copy_every) {
                match p.b.tcp_recv(rx, &mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        fnv(&mut hr, &buf[..n]);
                        got += n;
                    }
                    Err(TcpError::WouldBlock) => break,
                    Err(e) => panic!("recv: {e}"),
                }
                continue;
            }
            match p.b.tcp_recv_zero_copy(rx, usize::MAX) {
                Ok(None) => break,
                Ok(Some(chunk)) => {
                    fnv(&mut hr, &chunk);
                    got += chunk.len();
                    if chunk.is_page_aligned() && chunk.len().is_multiple_of(4096) {
                        paged += chunk.len();
                    }
                }
                Err(TcpError::WouldBlock) => break,
                Err(e) => panic!("recv_zero_copy: {e}"),
            }
        }
        got == total
    });
    assert!(
        done,
        "stalled: sent {}, received {got} of {total}",
        sender.sent
    );
    assert_eq!(
        sender.hash, hr,
        "the bytes received differ from the bytes sent"
    );
    paged
}

fn split_host(mtu: usize, offload: bool) -> HostConfig {
    let mut h = host(mtu, CopyMode::Dma, offload);
    h.nic.header_split = true;
    h
}

#[test]
fn whole_pages_reach_the_application_by_reference_and_odd_data_is_copied() {
    for (mtu, offload) in [(9000, false), (32768, true), (16384, false)] {
        let mut p = Pair::new(host(mtu, CopyMode::Dma, offload), split_host(mtu, offload)).unwrap();
        let total = 16 << 20;
        let paged = paged_transfer(&mut p, total, 0);
        let c = |k| p.b.ledger().counters().get(k);
        let (pages, odd) = (
            c(Counter::TcpZeroCopyRxBytes),
            c(Counter::TcpZeroCopyRxOddBytes),
        );
        let what = format!("mtu {mtu} offload {offload}");
        assert_eq!(
            pages + odd,
            total as u64,
            "{what}: every byte is one or the other"
        );
        assert!(odd > 0, "{what}: no MSS here is a whole number of pages");
        // The MSS less its odd tail, in whole pages: at least half of every segment.
        assert!(pages * 2 > total as u64, "{what}: {pages} bytes in pages");
        assert_eq!(
            paged as u64, pages,
            "{what}: the application got them as pages"
        );
        assert_eq!(c(Counter::TcpDropBadChecksum), 0, "{what}");
    }
}

#[test]
fn zero_copy_receive_survives_a_lossy_wire_and_copying_reads() {
    let mut b = split_host(9000, false);
    b.nic.rx_faults = FaultConfig::lossy(11);
    let mut a = host(9000, CopyMode::Dma, false);
    a.nic.rx_faults = FaultConfig::lossy(12);
    let mut p = Pair::new(a, b).unwrap();
    let total = 8 << 20;
    paged_transfer(&mut p, total, 3);
    let c = |k| p.b.ledger().counters().get(k);
    assert!(
        c(Counter::TcpOutOfOrderSegments) > 0,
        "the wire reordered or lost"
    );
    assert!(c(Counter::TcpZeroCopyRxBytes) > 0);
    assert_eq!(
        c(Counter::TcpZeroCopyRxBytes) + c(Counter::TcpZeroCopyRxOddBytes),
        total as u64
    );
}

#[test]
fn a_corrupted_split_segment_is_caught_and_retransmitted() {
    // Bit flips the CRC does not catch, no receive offload: the stack sums the pages it
    // does not copy and drops the bad segment; TCP sends it again.
    let mut b = split_host(9000, false);
    b.nic.rx_faults = FaultConfig {
        seed: 5,
        flip_passed: 0.02,
        ..FaultConfig::none()
    };
    let mut p = Pair::new(host(9000, CopyMode::Dma, false), b).unwrap();
    let paged = paged_transfer(&mut p, 4 << 20, 0);
    assert!(paged > 0, "the page path was taken");
    assert!(p.b.ledger().counters().get(Counter::TcpDropBadChecksum) > 0);
}

#[test]
fn without_header_split_what_came_by_copy_is_odd_data() {
    // A sends from its ring (nothing by reference), so every byte reaches B in the
    // frame: B copies all of it.
    let mut a = host(9000, CopyMode::Dma, false);
    a.stack.tuning.tcp_send_by_reference = false;
    let mut p = Pair::new(a, host(9000, CopyMode::Dma, false)).unwrap();
    let total = 2 << 20;
    assert_eq!(paged_transfer(&mut p, total, 0), 0);
    let c = |k| p.b.ledger().counters().get(k);
    assert_eq!(c(Counter::TcpZeroCopyRxBytes), 0);
    assert_eq!(c(Counter::TcpZeroCopyRxOddBytes), total as u64);
}

#[test]
fn without_header_split_what_a_sender_passed_by_reference_goes_over_as_it_came() {
    // The memory NIC's DMA hands TCP's shared blocks across (A sends by reference at
    // 9000); with no header split B's application takes them as they are, uncopied.
    let mut p = Pair::new(
        host(9000, CopyMode::Dma, false),
        host(9000, CopyMode::Dma, false),
    )
    .unwrap();
    let total = 4 << 20;
    paged_transfer(&mut p, total, 0);
    let c = |k| p.b.ledger().counters().get(k);
    let (uncopied, odd) = (
        c(Counter::TcpZeroCopyRxBytes),
        c(Counter::TcpZeroCopyRxOddBytes),
    );
    assert_eq!(uncopied + odd, total as u64);
    assert!(uncopied * 2 > total as u64, "{uncopied} bytes uncopied");
    assert!(c(Counter::TcpSegmentsInByReference) > 0);
}

#[test]
fn loans_across_a_frame_queue_reach_the_application_uncopied() {
    // A frame queue hands a frame's fragments to the other end: B's application gets
    // A's loaned memory itself, never a copy (one or several loans in a segment, at any
    // MTU), and each loan completes only once B's application has let go of it (the
    // completion checks in `loaned_transfer`). What A copies goes by reference too where
    // its segments are large enough for its shared blocks (9000), and as odd data from
    // its ring where they are not (1500).
    for (mtu, chunk, copy_every, copies_odd) in [
        (1500, 5000, 0, false),
        (1500, 5000, 3, true),
        (9000, 70_000, 3, false),
        (65535, 100_000, 0, false),
    ] {
        let mut p = Pair::on_frame_queue(
            host(mtu, CopyMode::Dma, false),
            host(mtu, CopyMode::Dma, false),
        )
        .unwrap();
        let total = 8 << 20;
        let out = loaned_transfer(&mut p, chunk, total, copy_every, true);
        let what = format!("mtu {mtu}, copy_every {copy_every}");
        assert!(out.loans > 10, "{what}");
        let c = |k| p.b.ledger().counters().get(k);
        let (uncopied, odd) = (
            c(Counter::TcpZeroCopyRxBytes),
            c(Counter::TcpZeroCopyRxOddBytes),
        );
        assert_eq!(uncopied + odd, total as u64, "{what}");
        if copies_odd {
            assert!(
                odd > 0 && uncopied > odd,
                "{what}: {uncopied} uncopied, {odd} odd"
            );
        } else {
            assert_eq!(odd, 0, "{what}: {uncopied} uncopied");
            // (A segment holding ring bytes and a loan's first ones is copied together.)
            assert_eq!(c(Counter::StackRxLinearized), 0, "{what}");
        }
        assert_eq!(c(Counter::TcpDropBadChecksum), 0, "{what}");
    }
}

#[test]
fn loans_received_as_they_came_survive_loss_reordering_and_corruption() {
    // Across a frame queue that loses frames, holds some back and corrupts copies of
    // others: in-order data reaches B's application by reference, what came out of order
    // is copied (odd data), the corrupted copies are caught, and every loan completes
    // only after its ACK and once B's application has let go of it (`loaned_transfer`,
    // which also checks the stream by hash).
    let lossy = |dev| -> Box<dyn Device + Send> {
        Box::new(Tampered {
            dev,
            tamper: LoseAndReorder::default(),
        })
    };
    let mut p = Pair::on_frame_queue_with(
        host(9000, CopyMode::Dma, false),
        host(9000, CopyMode::Dma, false),
        lossy,
        lossy,
    )
    .unwrap();
    let total = 8 << 20;
    let out = loaned_transfer(&mut p, 100_000, total, 0, true);
    assert!(out.loans > 10);
    assert!(out.held_while_unacked > 0);
    let c = |k| p.b.ledger().counters().get(k);
    let (uncopied, odd) = (
        c(Counter::TcpZeroCopyRxBytes),
        c(Counter::TcpZeroCopyRxOddBytes),
    );
    assert_eq!(uncopied + odd, total as u64);
    assert!(odd > 0 && uncopied > odd, "{uncopied} uncopied, {odd} odd");
    assert!(c(Counter::TcpOutOfOrderSegments) > 10);
    assert!(c(Counter::TcpDropBadChecksum) > 0);
}

#[test]
fn udp_loans_go_out_uncopied_and_complete_once_transmitted() {
    for (offload, mtu) in [(false, 1500), (true, 9000)] {
        let mut p = Pair::new(
            host(mtu, CopyMode::Dma, offload),
            host(mtu, CopyMode::Dma, offload),
        )
        .unwrap();
        let rx = p.b.udp_open();
        p.b.udp_bind(rx, probestack::wire::Ipv4Address::UNSPECIFIED, 9)
            .unwrap();
        let tx = p.a.udp_open();
        let mut buf = vec![0u8; 70_000];
        // Sizes from one byte to past the MTU (fragmented, and so copied), each sent from
        // an odd offset into its loan.
        for (i, &size) in [1usize, 7, 1000, 1472, 3000, 8972, 20_000]
            .iter()
            .enumerate()
        {
            let mut data = vec![0xA5; 3];
            data.extend(pattern(i * 100_000, size));
            let loan = Loan::new(data);
            let part = loan.slice(3..).unwrap();
            let sent = p.a.udp_send_loan(tx, &part, Some((ADDR_B, 9))).unwrap();
            assert_eq!(sent, size);
            drop(part);
            if i == 0 {
                // The first waits for ARP, holding the loan.
                assert!(!loan.is_complete(), "held while the datagram waits");
            }
            let mut got = None;
            assert!(p.run_until(Duration::from_secs(2), |p| {
                if let Ok(r) = p.b.udp_recv_from(rx, &mut buf) {
                    got = Some(r);
                }
                got.is_some()
            }));
            let r = got.unwrap();
            assert_eq!(
                &buf[..r.len],
                &pattern(i * 100_000, size)[..],
                "size {size}"
            );
            assert!(loan.is_complete(), "transmitted: the loan is back");
            let mut back = loan.try_reclaim().unwrap();
            back.fill(0xEE); // the application reuses it; nothing is sent again
        }
        let c = |k| p.a.ledger().counters().get(k);
        assert_eq!(c(Counter::UdpZeroCopyDatagrams), 7);
        assert_eq!(p.b.ledger().counters().get(Counter::UdpDropBadChecksum), 0);
        // The NIC gathers a UDP datagram's fragments (only TCP's go across uncopied):
        // nothing is left for the receiving host to copy together.
        assert_eq!(p.b.ledger().counters().get(Counter::StackRxLinearized), 0);
    }
}

/// A loaned UDP datagram across a frame queue arrives with its data in a fragment: IP
/// input copies it together (only a TCP segment is read in pieces) and delivers it.
#[test]
fn a_loaned_udp_datagram_crosses_a_frame_queue_copied_together_at_the_receiver() {
    let h = host(1500, CopyMode::Dma, false);
    let mut p = Pair::on_frame_queue(h.clone(), h).unwrap();
    let rx = p.b.udp_open();
    p.b.udp_bind(rx, probestack::wire::Ipv4Address::UNSPECIFIED, 9)
        .unwrap();
    let tx = p.a.udp_open();
    let mut buf = vec![0u8; 2000];
    for (i, size) in [1usize, 600, 1472].into_iter().enumerate() {
        let loan = Loan::new(pattern(i * 1000, size));
        assert_eq!(
            p.a.udp_send_loan(tx, &loan.ext(), Some((ADDR_B, 9))),
            Ok(size)
        );
        let mut got = None;
        assert!(p.run_until(Duration::from_secs(2), |p| {
            got = p.b.udp_recv_from(rx, &mut buf).ok();
            got.is_some()
        }));
        assert_eq!(&buf[..got.unwrap().len], &pattern(i * 1000, size)[..]);
    }
    let b = |k| p.b.ledger().counters().get(k);
    assert_eq!(b(Counter::StackRxLinearized), 3);
    assert_eq!(b(Counter::IpDropMalformed), 0);
}

#[test]
fn zero_copy_with_tso_and_negotiated_elision_across_mtus() {
    // Tuning::fast() on a CRC link agrees on no checksum (RFC 1146); its super-segments
    // must still reach the NIC to be cut, loaned data and all.
    for mtu in [1500, 9000, 65535] {
        for (elide, tso) in [(true, true), (false, true), (true, false)] {
            let mut h = HostConfig::with_mtu(mtu);
            h.stack.tuning = Tuning {
                checksum_elision: elide,
                segmentation_offload: tso,
                ..Tuning::fast()
            };
            h.nic = probestack::driver::NicConfig {
                header_split: true,
                ..h.nic.with_offloads()
            };
            let mut p = Pair::new(h.clone(), h).unwrap();
            let total = 4 << 20;
            loaned_transfer(&mut p, 65536, total, 0, false);
            let c = |k| p.a.ledger().counters().get(k);
            let what = format!("mtu {mtu} elide {elide} tso {tso}");
            assert_eq!(c(Counter::IpDropNeedFrag), 0, "{what}");
            assert_eq!(
                c(Counter::TcpNoChecksumIn) > 0,
                elide,
                "{what}: elision as configured"
            );
            if tso && mtu < 65535 {
                // Super-segments: far fewer segments than one per MSS.
                let full = (total / (mtu - 52)) as u64;
                assert!(c(Counter::TcpSegmentsOut) < full / 2, "{what}");
            }
        }
    }
}
