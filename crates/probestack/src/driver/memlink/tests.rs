use super::*;
use crate::driver::PcapWriter;
use crate::probe::Ledger;
use crate::rng::Rng;
use crate::time::{Clock, RealClock, VirtualClock};

fn cx(ledger: &Ledger, now: Instant) -> DeviceContext<'_> {
    DeviceContext { now, ledger }
}

/// A frame of `len` bytes carrying `seq` in its first four bytes and random bytes after,
/// in a buffer with headroom and 4 bytes of tailroom, as the stack allocates.
fn frame(rng: &mut Rng, seq: u32, len: usize) -> PacketBuf {
    let mut b = PacketBuf::new(len, 64, 4).unwrap();
    rng.fill(b.data_mut());
    if len >= 4 {
        b.data_mut()[..4].copy_from_slice(&seq.to_be_bytes());
    }
    b
}

fn seq_of(b: &PacketBuf) -> u32 {
    let d = b.data();
    u32::from_be_bytes([d[0], d[1], d[2], d[3]])
}

fn drain(nic: &mut MemoryNic, ledger: &Ledger, now: Instant) -> Vec<PacketBuf> {
    let mut v = Vec::new();
    while let Some(rx) = nic.receive(&cx(ledger, now)) {
        assert_eq!(rx.checksum, RxChecksum::None);
        v.push(rx.frame);
    }
    v
}

fn cfg(copy_mode: CopyMode) -> NicConfig {
    NicConfig {
        copy_mode,
        ..NicConfig::default()
    }
}

#[test]
fn nics_are_send_and_report_their_caps() {
    fn send<T: Send>() {}
    send::<MemoryNic>();
    send::<PcapWriter<MemoryNic, Vec<u8>>>();
    let (a, b) = MemoryLink::pair(NicConfig::bsd(), NicConfig::fast()).unwrap();
    assert_eq!(
        a.caps(),
        DeviceCaps {
            scatter_gather: true,
            by_reference_min: 4096,
            header_split: false,
            mtu: 1500,
            has_crc: true,
            copy_mode: CopyMode::Pio,
            checksum_offload: ChecksumOffload::default(),
            tso_max: 0,
        }
    );
    assert_eq!(b.caps().mtu, 65535);
    assert_eq!(b.caps().copy_mode, CopyMode::Dma);
    assert!(format!("{a:?}").contains("MemoryNic"));
}

#[test]
fn frames_cross_intact_both_ways_in_every_copy_mode() {
    let modes = [CopyMode::Pio, CopyMode::Dma];
    for ma in modes {
        for mb in modes {
            let (mut a, mut b) = MemoryLink::pair(cfg(ma), cfg(mb)).unwrap();
            let (la, lb) = (Ledger::new(), Ledger::new());
            let mut rng = Rng::new(1);
            let t = Instant::from_micros(5);
            let lens = [0usize, 1, 14, 60, 61, 64, 100, 1000, 1513, 1514];
            // Three rounds, so that PIO device blocks go round and are reused.
            for round in 0..3 {
                let mut sent_ab = Vec::new();
                let mut sent_ba = Vec::new();
                for (i, &len) in lens.iter().enumerate() {
                    let f = frame(&mut rng, i as u32, len);
                    sent_ab.push(f.data().to_vec());
                    a.transmit(f, TxMeta::default(), &cx(&la, t)).unwrap();
                    let g = frame(&mut rng, i as u32, len);
                    sent_ba.push(g.data().to_vec());
                    b.transmit(g, TxMeta::default(), &cx(&lb, t)).unwrap();
                }
                // The stack gives each buffer back when done with it.
                let mut got_b = Vec::new();
                for f in drain(&mut b, &lb, t) {
                    got_b.push(f.data().to_vec());
                    b.recycle(f);
                }
                let mut got_a = Vec::new();
                for f in drain(&mut a, &la, t) {
                    got_a.push(f.data().to_vec());
                    a.recycle(f);
                }
                assert_eq!(got_b, sent_ab, "{ma:?} -> {mb:?} round {round}");
                assert_eq!(got_a, sent_ba, "{mb:?} -> {ma:?} round {round}");
            }
            let n = 3 * lens.len() as u64;
            for (nic, l) in [(&a, &la), (&b, &lb)] {
                let s = nic.stats();
                assert_eq!((s.tx_frames, s.rx_frames), (n, n));
                assert_eq!(s.tx_bytes, s.rx_bytes);
                assert_eq!(s.rx_bad_fcs + s.tx_bounced + s.rx_overrun, 0);
                assert_eq!(l.counters().get(Counter::DriverFramesOut), n);
                assert_eq!(l.counters().get(Counter::DriverFramesIn), n);
                assert_eq!(l.counters().get(Counter::DriverDropBadFcs), 0);
            }
            // A PIO sender's device blocks came back to it, from a PIO receiver that
            // emptied them or from a DMA receiver's stack that recycled them.
            if ma == CopyMode::Pio {
                assert!(!a.spares_in.is_empty(), "{ma:?} {mb:?}");
            }
        }
    }
}

#[test]
fn dma_hands_the_buffer_over_and_pio_copies() {
    let (mut a, mut b) = MemoryLink::pair(cfg(CopyMode::Dma), cfg(CopyMode::Dma)).unwrap();
    let l = Ledger::new();
    let f = PacketBuf::from_slice(&[7u8; 100], 32).unwrap();
    // No tailroom: the FCS cannot go in place, so the NIC copies into a buffer with room.
    a.transmit(f, TxMeta::default(), &cx(&l, Instant::ZERO))
        .unwrap();
    assert_eq!(a.stats().tx_bounced, 1);
    assert_eq!(l.counters().get(Counter::DriverTxBounce), 1);
    let mut f = PacketBuf::new(100, 32, 4).unwrap();
    f.data_mut().fill(9);
    a.transmit(f, TxMeta::default(), &cx(&l, Instant::ZERO))
        .unwrap();
    assert_eq!(a.stats().tx_bounced, 1);
    let got = drain(&mut b, &l, Instant::ZERO);
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].data(), &[7u8; 100][..]);
    // DMA: the very buffer, its headroom kept, the FCS trimmed off into the tailroom.
    assert_eq!(got[1].data(), &[9u8; 100][..]);
    assert_eq!((got[1].headroom(), got[1].tailroom()), (32, 4));

    let (mut a, mut b) = MemoryLink::pair(cfg(CopyMode::Pio), cfg(CopyMode::Pio)).unwrap();
    let f = PacketBuf::from_slice(&[5u8; 60], 0).unwrap();
    a.transmit(f, TxMeta::default(), &cx(&l, Instant::ZERO))
        .unwrap();
    let got = drain(&mut b, &l, Instant::ZERO);
    assert_eq!(got[0].data(), &[5u8; 60][..]);
    // PIO receive copies into a host buffer with the stack's headroom.
    assert_eq!(got[0].headroom(), HEADROOM);
    // A recycled buffer serves the next PIO receive.
    b.recycle(PacketBuf::new(0, 0, 4096).unwrap());
    assert!(!b.rx_pool.is_empty());
}

#[test]
fn pio_copies_are_charged_to_the_host_and_the_crc_to_the_device() {
    if !Ledger::enabled() {
        return;
    }
    for mode in [CopyMode::Pio, CopyMode::Dma] {
        let (mut a, mut b) = MemoryLink::pair(cfg(mode), cfg(mode)).unwrap();
        let (la, lb) = (Ledger::new(), Ledger::new());
        la.set_sample_every(1);
        lb.set_sample_every(1);
        for i in 0..10 {
            {
                let _m = la.message(1000);
                let f = frame(&mut Rng::new(i), i as u32, 1014);
                a.transmit(f, TxMeta::default(), &cx(&la, Instant::ZERO))
                    .unwrap();
            }
            {
                let _m = lb.message(1000);
                assert!(b.receive(&cx(&lb, Instant::ZERO)).is_some());
            }
        }
        let cell = |l: &Ledger, side: Side, op: Op| {
            l.snapshot()
                .merged()
                .cells
                .iter()
                .find(|c| c.layer == Layer::Driver && c.side == side && c.op == op)
                .map_or(0, |c| c.count)
        };
        let copies = if mode == CopyMode::Pio { 10 } else { 0 };
        assert_eq!(cell(&la, Side::Send, Op::DeviceCopy), copies, "{mode:?}");
        assert_eq!(cell(&lb, Side::Receive, Op::DeviceCopy), copies, "{mode:?}");
        assert_eq!(cell(&la, Side::Send, Op::DeviceQueue), 10);
        assert_eq!(cell(&lb, Side::Receive, Op::DeviceQueue), 10);
    }
}

#[test]
fn mtu_bounds() {
    for mtu in [0, 575, 65536, usize::MAX / 2] {
        let c = NicConfig {
            mtu,
            ..NicConfig::default()
        };
        assert_eq!(
            MemoryLink::pair(c, NicConfig::default()).unwrap_err(),
            ConfigError::Mtu {
                mtu,
                min: 576,
                max: 65535
            }
        );
        assert!(MemoryLink::pair(NicConfig::default(), c).is_err());
    }
    let l = Ledger::new();
    for mode in [CopyMode::Pio, CopyMode::Dma] {
        for mtu in [576, 1500, 9000, 65535] {
            let c = NicConfig {
                mtu,
                copy_mode: mode,
                ..NicConfig::default()
            };
            let (mut a, mut b) = MemoryLink::pair(c, c).unwrap();
            let max = mtu + 14;
            let err = a
                .transmit(
                    PacketBuf::new(max + 1, 0, 4).unwrap(),
                    TxMeta::default(),
                    &cx(&l, Instant::ZERO),
                )
                .unwrap_err();
            assert_eq!(err, DeviceError::TooLarge { len: max + 1, max });
            assert_eq!(a.stats().tx_too_large, 1);
            let f = frame(&mut Rng::new(mtu as u64), 1, max);
            let bytes = f.data().to_vec();
            a.transmit(f, TxMeta::default(), &cx(&l, Instant::ZERO))
                .unwrap();
            let got = drain(&mut b, &l, Instant::ZERO);
            assert_eq!(got.len(), 1);
            assert_eq!(got[0].data(), &bytes[..]);
        }
    }
    // A receiver with a smaller MTU drops a giant, as a NIC would.
    let big = NicConfig {
        mtu: 9000,
        ..NicConfig::default()
    };
    let (mut a, mut b) = MemoryLink::pair(big, NicConfig::default()).unwrap();
    a.transmit(
        PacketBuf::new(3000, 0, 4).unwrap(),
        TxMeta::default(),
        &cx(&l, Instant::ZERO),
    )
    .unwrap();
    assert!(drain(&mut b, &l, Instant::ZERO).is_empty());
    assert_eq!(b.stats().rx_too_long, 1);
    assert_eq!(l.counters().get(Counter::DriverDropTooLong), 1);
}

#[test]
fn other_config_errors() {
    let bad = [
        (
            NicConfig {
                tx_queue_depth: 0,
                ..NicConfig::default()
            },
            "tx_queue_depth 0 is not within 1..=65536",
        ),
        (
            NicConfig {
                rx_queue_depth: MAX_QUEUE_DEPTH + 1,
                ..NicConfig::default()
            },
            "rx_queue_depth 65537 is not within 1..=65536",
        ),
        (
            NicConfig {
                coalesce_frames: 0,
                ..NicConfig::default()
            },
            "coalesce_frames must be at least 1",
        ),
        (
            NicConfig {
                rx_faults: FaultConfig {
                    reorder: -0.1,
                    ..FaultConfig::none()
                },
                ..NicConfig::default()
            },
            "fault probability reorder = -0.1 is not within 0..=1",
        ),
        (
            NicConfig {
                mtu: 100,
                ..NicConfig::default()
            },
            "MTU 100 is not within 576..=65535",
        ),
    ];
    for (c, msg) in bad {
        let e = MemoryLink::pair(NicConfig::default(), c).unwrap_err();
        assert_eq!(e.to_string(), msg);
    }
}

#[test]
fn a_full_transmit_queue_refuses_and_counts() {
    let c = NicConfig {
        tx_queue_depth: 4,
        ..NicConfig::default()
    };
    let (mut a, mut b) = MemoryLink::pair(c, NicConfig::default()).unwrap();
    let l = Ledger::new();
    let mut rng = Rng::new(2);
    for i in 0..4 {
        assert!(a.tx_ready());
        a.transmit(
            frame(&mut rng, i, 60),
            TxMeta::default(),
            &cx(&l, Instant::ZERO),
        )
        .unwrap();
    }
    assert!(!a.tx_ready());
    assert_eq!(
        a.transmit(
            frame(&mut rng, 9, 60),
            TxMeta::default(),
            &cx(&l, Instant::ZERO)
        ),
        Err(DeviceError::QueueFull)
    );
    assert_eq!(l.counters().get(Counter::DriverDropQueueFull), 1);
    assert_eq!(a.stats().tx_queue_full, 1);
    assert_eq!(a.stats().tx_frames, 4);
    // The receiver takes the frames off the ring, and the queue has room again.
    let lb = Ledger::new();
    assert!(b.take_notification(&cx(&lb, Instant::ZERO)));
    assert!(a.tx_ready());
    let got = drain(&mut b, &lb, Instant::ZERO);
    assert_eq!(got.iter().map(seq_of).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
}

#[test]
fn a_slow_receiver_pushes_back_on_the_sender() {
    let c = NicConfig {
        rx_queue_depth: 3,
        ..NicConfig::default()
    };
    let tx = NicConfig {
        tx_queue_depth: 4,
        ..NicConfig::default()
    };
    let (mut a, mut b) = MemoryLink::pair(tx, c).unwrap();
    let l = Ledger::new();
    let mut rng = Rng::new(3);
    for i in 0..4 {
        a.transmit(
            frame(&mut rng, i, 60),
            TxMeta::default(),
            &cx(&l, Instant::ZERO),
        )
        .unwrap();
    }
    assert!(b.take_notification(&cx(&l, Instant::ZERO)));
    // Three in the receive queue; the fourth waits in the ring; one more fits there.
    assert_eq!((b.rx_pending(), b.in_flight()), (3, 1));
    for i in 4..7 {
        assert!(a.tx_ready());
        a.transmit(
            frame(&mut rng, i, 60),
            TxMeta::default(),
            &cx(&l, Instant::ZERO),
        )
        .unwrap();
    }
    assert!(!a.tx_ready());
    assert_eq!(
        a.transmit(
            frame(&mut rng, 7, 60),
            TxMeta::default(),
            &cx(&l, Instant::ZERO)
        ),
        Err(DeviceError::QueueFull)
    );
    let got = drain(&mut b, &l, Instant::ZERO);
    assert_eq!(
        got.iter().map(seq_of).collect::<Vec<_>>(),
        (0..7).collect::<Vec<_>>()
    );
    assert_eq!(b.stats().rx_overrun, 0);
}

#[test]
fn a_full_queue_of_unnotified_frames_waits_for_the_timer_not_now() {
    // N larger than the queue: the queue fills before N frames arrive; the frames left in
    // the ring must not make the deadline "now" (a simulator would spin), the timer must.
    let c = NicConfig {
        rx_queue_depth: 2,
        coalesce_frames: 8,
        coalesce_time: Duration::from_micros(40),
        ..NicConfig::default()
    };
    let (mut a, mut b) = MemoryLink::pair(NicConfig::default(), c).unwrap();
    let l = Ledger::new();
    let mut rng = Rng::new(4);
    let t = Instant::from_micros(10);
    for i in 0..4 {
        a.transmit(frame(&mut rng, i, 60), TxMeta::default(), &cx(&l, t))
            .unwrap();
    }
    assert!(!b.take_notification(&cx(&l, t)));
    assert_eq!((b.rx_pending(), b.in_flight()), (2, 2));
    assert_eq!(b.next_deadline(), Some(Instant::from_micros(50)));
    assert!(b.take_notification(&cx(&l, Instant::from_micros(50))));
    let got = drain(&mut b, &l, Instant::from_micros(50));
    assert_eq!(got.iter().map(seq_of).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
}

#[test]
fn duplicates_can_overrun_the_receive_queue() {
    let c = NicConfig {
        rx_queue_depth: 3,
        rx_faults: FaultConfig {
            duplicate: 1.0,
            ..FaultConfig::seeded(1)
        },
        ..NicConfig::default()
    };
    let (mut a, mut b) = MemoryLink::pair(NicConfig::default(), c).unwrap();
    let l = Ledger::new();
    let mut rng = Rng::new(3);
    for i in 0..2 {
        a.transmit(
            frame(&mut rng, i, 60),
            TxMeta::default(),
            &cx(&l, Instant::ZERO),
        )
        .unwrap();
    }
    assert!(b.take_notification(&cx(&l, Instant::ZERO)));
    assert_eq!(b.rx_pending(), 3);
    let got = drain(&mut b, &l, Instant::ZERO);
    assert_eq!(got.iter().map(seq_of).collect::<Vec<_>>(), vec![0, 0, 1]);
    assert_eq!(b.stats().rx_overrun, 1);
    assert_eq!(l.counters().get(Counter::DriverDropRxOverrun), 1);
}

#[test]
fn the_link_goes_down_with_the_peer() {
    let (mut a, b) = MemoryLink::pair(NicConfig::default(), NicConfig::default()).unwrap();
    let l = Ledger::new();
    drop(b);
    // Room to send, but whatever is sent is lost.
    assert!(a.tx_ready() && !a.link_up());
    assert_eq!(
        a.transmit(
            PacketBuf::new(60, 0, 4).unwrap(),
            TxMeta::default(),
            &cx(&l, Instant::ZERO)
        ),
        Err(DeviceError::LinkDown)
    );
    assert!(a.receive(&cx(&l, Instant::ZERO)).is_none());
}

#[test]
fn a_flip_the_crc_catches_is_dropped_and_counted() {
    for mode in [CopyMode::Pio, CopyMode::Dma] {
        let rx = NicConfig {
            copy_mode: mode,
            rx_faults: FaultConfig {
                flip_caught: 1.0,
                ..FaultConfig::seeded(11)
            },
            ..NicConfig::default()
        };
        let (mut a, mut b) = MemoryLink::pair(cfg(mode), rx).unwrap();
        let (la, lb) = (Ledger::new(), Ledger::new());
        let mut rng = Rng::new(4);
        for i in 0..200 {
            let len = 14 + (i as usize * 7) % 1500;
            a.transmit(
                frame(&mut rng, i, len),
                TxMeta::default(),
                &cx(&la, Instant::ZERO),
            )
            .unwrap();
        }
        assert!(!b.take_notification(&cx(&lb, Instant::ZERO)));
        assert!(drain(&mut b, &lb, Instant::ZERO).is_empty());
        assert_eq!(b.fault_stats().flipped_caught, 200);
        assert_eq!(b.stats().rx_bad_fcs, 200);
        assert_eq!(lb.counters().get(Counter::DriverDropBadFcs), 200);
        assert_eq!(lb.counters().get(Counter::DriverFaultFlipCaught), 200);
        assert_eq!(lb.counters().get(Counter::DriverFramesIn), 0);
    }
}

#[test]
fn a_flip_with_the_crc_recomputed_arrives_corrupted() {
    for mode in [CopyMode::Pio, CopyMode::Dma] {
        let rx = NicConfig {
            copy_mode: mode,
            rx_faults: FaultConfig {
                flip_passed: 1.0,
                ..FaultConfig::seeded(12)
            },
            ..NicConfig::default()
        };
        let (mut a, mut b) = MemoryLink::pair(cfg(mode), rx).unwrap();
        let l = Ledger::new();
        let mut rng = Rng::new(5);
        let mut sent = Vec::new();
        for i in 0..200 {
            let f = frame(&mut rng, i, 100 + i as usize);
            sent.push(f.data().to_vec());
            a.transmit(f, TxMeta::default(), &cx(&l, Instant::ZERO))
                .unwrap();
        }
        let got = drain(&mut b, &l, Instant::ZERO);
        assert_eq!(got.len(), 200);
        for (g, s) in got.iter().zip(&sent) {
            assert_eq!(g.len(), s.len());
            let bits: u32 = g
                .data()
                .iter()
                .zip(s)
                .map(|(x, y)| (x ^ y).count_ones())
                .sum();
            assert!((1..=2).contains(&bits), "{bits}");
            // The Ethernet header is intact; the datagram is not.
            assert_eq!(&g.data()[..14], &s[..14]);
        }
        assert_eq!(b.stats().rx_bad_fcs, 0);
        assert_eq!(b.fault_stats().flipped_passed, 200);
    }
}

/// Sends `n` frames 1 µs apart from `a` to `b` under `faults` with a virtual clock,
/// polling as a stack would, and returns the sequence numbers `b` received with their
/// arrival times, and the wire's stats.
fn run_faulty(faults: FaultConfig, n: u32) -> (Vec<(u32, Instant)>, FaultStats, NicStats) {
    let rx = NicConfig {
        rx_faults: faults,
        tx_queue_depth: 1024,
        rx_queue_depth: 65536,
        ..NicConfig::default()
    };
    let (mut a, mut b) = MemoryLink::pair(NicConfig::default(), rx).unwrap();
    let (la, lb) = (Ledger::new(), Ledger::new());
    let clock = VirtualClock::new();
    let mut rng = Rng::new(6);
    let mut out = Vec::new();
    for i in 0..n {
        clock.advance(Duration::from_micros(1));
        a.transmit(
            frame(&mut rng, i, 80),
            TxMeta::default(),
            &cx(&la, clock.now()),
        )
        .unwrap();
        if i % 7 == 0 {
            let now = clock.now();
            while let Some(f) = b.receive(&cx(&lb, now)) {
                out.push((seq_of(&f.frame), now));
            }
        }
    }
    // Run the clock on until nothing is left, as a stack's poll loop would.
    while let Some(t) = b.next_deadline() {
        clock.advance_to(t);
        let now = clock.now();
        let _ = b.take_notification(&cx(&lb, now));
        while let Some(f) = b.receive(&cx(&lb, now)) {
            out.push((seq_of(&f.frame), now));
        }
        if b.in_flight() == 0 && b.rx_pending() == 0 {
            break;
        }
    }
    assert_eq!(b.in_flight(), 0);
    (out, b.fault_stats(), b.stats())
}

#[test]
fn faults_through_the_link_are_near_their_probabilities_and_replay_from_the_seed() {
    let faults = FaultConfig {
        drop: 0.05,
        duplicate: 0.03,
        reorder: 0.04,
        flip_caught: 0.02,
        flip_passed: 0.01,
        latency: Duration::from_micros(30),
        jitter: Duration::from_micros(10),
        ..FaultConfig::seeded(77)
    };
    let n = 20_000u32;
    let (out, fs, ns) = run_faulty(faults, n);
    let n64 = n as u64;
    let near = |count: u64, p: f64| {
        let sd = (n64 as f64 * p * (1.0 - p)).sqrt();
        (count as f64 - n64 as f64 * p).abs() <= 8.0 * sd + 1.0
    };
    assert_eq!(fs.frames, n64);
    assert!(near(fs.dropped, 0.05), "{fs:?}");
    assert!(near(fs.duplicated, 0.95 * 0.03), "{fs:?}");
    assert!(near(fs.flipped_caught, 0.95 * 1.03 * 0.02), "{fs:?}");
    assert!(near(fs.reordered, 0.95 * 1.03 * 0.04 / 1.04), "{fs:?}");
    // Every frame that crossed was delayed.
    assert_eq!(fs.delayed, n64 - fs.dropped + fs.duplicated);
    assert_eq!(ns.rx_bad_fcs, fs.flipped_caught);
    assert_eq!(
        out.len() as u64,
        n64 - fs.dropped + fs.duplicated - fs.flipped_caught
    );
    // Nothing arrived before its latency: frame i was sent at (i + 1) µs.
    for &(q, at) in &out {
        assert!(at >= Instant::from_micros(q as u64 + 1 + 30), "{q} {at}");
    }
    // Same seed, same run; another seed, another run.
    let again = run_faulty(faults, n);
    assert_eq!((out.clone(), fs, ns), again);
    let other = run_faulty(FaultConfig { seed: 78, ..faults }, n);
    assert_ne!(other.0, out);
}

#[test]
fn a_delayed_frame_is_seen_only_when_its_time_comes() {
    let rx = NicConfig {
        rx_faults: FaultConfig {
            latency: Duration::from_micros(100),
            ..FaultConfig::none()
        },
        ..NicConfig::default()
    };
    let (mut a, mut b) = MemoryLink::pair(NicConfig::default(), rx).unwrap();
    let l = Ledger::new();
    assert_eq!(b.next_deadline(), None);
    let t0 = Instant::from_micros(1000);
    a.transmit(
        frame(&mut Rng::new(1), 1, 60),
        TxMeta::default(),
        &cx(&l, t0),
    )
    .unwrap();
    // In the ring, not yet on the wire: the deadline is the earliest it can arrive.
    assert_eq!(b.next_deadline(), Some(Instant::from_micros(1100)));
    assert!(!b.take_notification(&cx(&l, Instant::from_micros(1099))));
    assert!(b.receive(&cx(&l, Instant::from_micros(1099))).is_none());
    assert_eq!(b.next_deadline(), Some(Instant::from_micros(1100)));
    assert!(b.take_notification(&cx(&l, Instant::from_micros(1100))));
    assert!(b.receive(&cx(&l, Instant::from_micros(1100))).is_some());
    assert_eq!(b.next_deadline(), None);
}

#[test]
fn one_notification_per_frame_with_n1_t0() {
    let (mut a, mut b) = MemoryLink::pair(NicConfig::default(), NicConfig::default()).unwrap();
    let l = Ledger::new();
    let clock = VirtualClock::new();
    let mut rng = Rng::new(7);
    let mut notes = 0;
    for i in 0..50 {
        clock.advance(Duration::from_micros(3));
        a.transmit(
            frame(&mut rng, i, 60),
            TxMeta::default(),
            &cx(&l, clock.now()),
        )
        .unwrap();
        assert!(b.take_notification(&cx(&l, clock.now())));
        notes += 1;
        assert!(!b.take_notification(&cx(&l, clock.now())));
        assert_eq!(drain(&mut b, &l, clock.now()).len(), 1);
    }
    assert_eq!(notes, 50);
    assert_eq!(b.stats().notifications, 50);
    assert_eq!(l.counters().get(Counter::DriverNotifications), 50);
}

#[test]
fn coalescing_notifies_after_n_frames_or_t_whichever_first() {
    let rx = NicConfig {
        coalesce_frames: 8,
        coalesce_time: Duration::from_micros(100),
        ..NicConfig::default()
    };
    let (mut a, mut b) = MemoryLink::pair(NicConfig::default(), rx).unwrap();
    let l = Ledger::new();
    let mut rng = Rng::new(8);
    let send = |a: &mut MemoryNic, rng: &mut Rng, t: u64| {
        a.transmit(
            frame(rng, t as u32, 60),
            TxMeta::default(),
            &cx(&l, Instant::from_micros(t)),
        )
        .unwrap();
    };
    let us = Instant::from_micros;
    // 20 frames 1 µs apart, the host looking every µs: notifications at the 8th and the
    // 16th frame, and 100 µs after the 17th.
    let mut notified_at = Vec::new();
    let mut received = 0;
    for t in 0..300u64 {
        if t < 20 {
            send(&mut a, &mut rng, t);
        }
        if b.take_notification(&cx(&l, us(t))) {
            notified_at.push(t);
            received += drain(&mut b, &l, us(t)).len();
        }
    }
    assert_eq!(notified_at, vec![7, 15, 116]);
    assert_eq!(received, 20);
    // Three frames, then the host looks only much later: one notification, raised when
    // the timer ran out, and the deadline said when.
    for t in [1000, 1010, 1020] {
        send(&mut a, &mut rng, t);
    }
    assert!(!b.take_notification(&cx(&l, us(1050))));
    assert_eq!(b.next_deadline(), Some(us(1100)));
    assert!(b.take_notification(&cx(&l, us(5000))));
    assert!(!b.take_notification(&cx(&l, us(5000))));
    assert_eq!(drain(&mut b, &l, us(5000)).len(), 3);
    assert_eq!(b.next_deadline(), None);
    assert_eq!(b.stats().notifications, 4);
}

#[test]
fn frames_taken_before_a_notification_need_none() {
    let rx = NicConfig {
        coalesce_frames: 4,
        coalesce_time: Duration::from_micros(100),
        ..NicConfig::default()
    };
    let (mut a, mut b) = MemoryLink::pair(NicConfig::default(), rx).unwrap();
    let l = Ledger::new();
    let mut rng = Rng::new(9);
    for i in 0..3 {
        a.transmit(
            frame(&mut rng, i, 60),
            TxMeta::default(),
            &cx(&l, Instant::ZERO),
        )
        .unwrap();
    }
    // A busy-polling host takes them without waiting for the interrupt.
    assert_eq!(drain(&mut b, &l, Instant::ZERO).len(), 3);
    assert_eq!(b.next_deadline(), None);
    assert!(!b.take_notification(&cx(&l, Instant::from_millis(1))));
}

#[test]
fn a_batch_budget_left_over_keeps_the_deadline_due() {
    let rx = NicConfig {
        coalesce_frames: 4,
        coalesce_time: Duration::from_micros(100),
        ..NicConfig::default()
    };
    let (mut a, mut b) = MemoryLink::pair(NicConfig::default(), rx).unwrap();
    let l = Ledger::new();
    let mut rng = Rng::new(10);
    let t = Instant::from_micros(10);
    for i in 0..4 {
        a.transmit(frame(&mut rng, i, 60), TxMeta::default(), &cx(&l, t))
            .unwrap();
    }
    assert!(b.take_notification(&cx(&l, t)));
    // The stack's budget is 2 frames: 2 are left, notified; the device asks for a poll.
    assert!(b.receive(&cx(&l, t)).is_some());
    assert!(b.receive(&cx(&l, t)).is_some());
    assert_eq!(b.next_deadline(), Some(t));
    assert_eq!(drain(&mut b, &l, t).len(), 2);
    assert_eq!(b.next_deadline(), None);
}

#[test]
fn two_threads_push_a_million_frames_through_the_link_in_order() {
    const N: u32 = 1_000_000;
    let (mut a, mut b) = MemoryLink::pair(NicConfig::default(), NicConfig::default()).unwrap();
    let clock = RealClock::new();
    let sender = std::thread::spawn(move || {
        let l = Ledger::new();
        let mut i = 0u32;
        while i < N && a.link_up() {
            if !a.tx_ready() {
                std::thread::yield_now();
                continue;
            }
            let mut f = PacketBuf::new(60, 0, 4).unwrap();
            f.data_mut()[..4].copy_from_slice(&i.to_be_bytes());
            f.data_mut()[59] = i as u8;
            a.transmit(f, TxMeta::default(), &cx(&l, clock.now()))
                .unwrap();
            i += 1;
        }
        (a.stats(), l.counters().get(Counter::DriverDropQueueFull))
    });
    let l = Ledger::new();
    let mut next = 0u32;
    let mut spins = 0u64;
    while next < N {
        match b.receive(&cx(&l, clock.now())) {
            Some(rx) => {
                assert_eq!(seq_of(&rx.frame), next);
                assert_eq!(rx.frame.data()[59], next as u8);
                next += 1;
            }
            None => {
                spins += 1;
                // A stuck link fails instead of hanging: the sender finished and nothing
                // is left.
                if spins.is_multiple_of(1_000_000) && b.in_flight() == 0 && sender.is_finished() {
                    break;
                }
                std::thread::yield_now();
            }
        }
    }
    let (a_stats, full) = sender.join().unwrap();
    assert_eq!(next, N);
    assert_eq!(a_stats.tx_frames, N as u64);
    assert_eq!(full, 0);
    assert_eq!(b.stats().rx_frames, N as u64);
    assert_eq!(b.stats().rx_bad_fcs, 0);
    assert!(b.receive(&cx(&l, clock.now())).is_none());
}

#[test]
fn two_threads_in_pio_mode_with_faults_lose_only_what_the_wire_dropped() {
    const N: u32 = 200_000;
    let rx = NicConfig {
        copy_mode: CopyMode::Pio,
        rx_faults: FaultConfig {
            drop: 0.01,
            flip_caught: 0.01,
            ..FaultConfig::seeded(99)
        },
        ..NicConfig::default()
    };
    let (mut a, mut b) = MemoryLink::pair(cfg(CopyMode::Pio), rx).unwrap();
    let clock = RealClock::new();
    let sender = std::thread::spawn(move || {
        let l = Ledger::new();
        let mut rng = Rng::new(1);
        let mut i = 0u32;
        while i < N && a.link_up() {
            if a.tx_ready() {
                let f = frame(&mut rng, i, 60 + (i as usize % 1400));
                a.transmit(f, TxMeta::default(), &cx(&l, clock.now()))
                    .unwrap();
                i += 1;
            } else {
                std::thread::yield_now();
            }
        }
    });
    let l = Ledger::new();
    let mut last: Option<u32> = None;
    let mut got = 0u64;
    loop {
        match b.receive(&cx(&l, clock.now())) {
            Some(rx) => {
                let s = seq_of(&rx.frame);
                assert!(last.is_none_or(|p| s > p), "{last:?} then {s}");
                assert_eq!(rx.frame.len(), 60 + (s as usize % 1400));
                last = Some(s);
                got += 1;
                b.recycle(rx.frame);
            }
            None if sender.is_finished() && b.in_flight() == 0 => break,
            None => std::thread::yield_now(),
        }
    }
    sender.join().unwrap();
    let fs = b.fault_stats();
    assert_eq!(fs.frames, N as u64);
    assert_eq!(got, N as u64 - fs.dropped - fs.flipped_caught);
    assert_eq!(b.stats().rx_bad_fcs, fs.flipped_caught);
    assert!(fs.dropped > 0 && fs.flipped_caught > 0);
}
