//! A profiling harness: the memory NICs alone, no stack. A hands its NIC bursts of 32
//! frames (buffers from its pool, as a stack's), B's NIC gives them up after a
//! notification and B frees them into its pool, as `lab peers`' "devices alone" table does
//! through smoltcp's device interface. For callgrind or perf.
//!
//! `cargo run --release -p probestack --example nic_frames -- [FRAME_BYTES] [BURSTS] [HEADROOM]`

mod harness;

use probestack::buf::{Pool, HEADROOM};
use probestack::driver::{Device, DeviceContext, MemoryLink, NicConfig, TxMeta};
use probestack::probe::Ledger;
use probestack::time::{Clock, RealClock};

fn main() {
    let len: usize = harness::arg(1, 106);
    let bursts: usize = harness::arg(2, 100_000);
    let headroom: usize = harness::arg(3, HEADROOM);
    let config = NicConfig::default();
    let (mut a, mut b) = MemoryLink::pair(config, config).expect("memory link");
    let pool = |nic: &dyn Device| {
        let mut p = Pool::with_cache(true);
        p.set_depot(nic.buffer_depot());
        p
    };
    let (mut pool_a, mut pool_b) = (pool(&a), pool(&b));
    let ledger = Ledger::new();
    let clock = RealClock::new();
    let (mut sent, mut got) = (0u64, 0u64);
    let start = std::time::Instant::now();
    for _ in 0..bursts {
        let cx = DeviceContext {
            now: clock.now(),
            ledger: &ledger,
        };
        for _ in 0..32 {
            let Ok(mut frame) = pool_a.alloc(len, headroom) else {
                continue;
            };
            frame.data_mut().fill(0xA5);
            let frame = pool_a.detach(frame);
            if a.transmit(frame, TxMeta::default(), &cx).is_ok() {
                sent += 1;
            }
        }
        if b.take_notification(&cx) {
            while let Some(rx) = b.receive(&cx) {
                got += std::hint::black_box(rx.frame.data()[0] == 0xA5) as u64;
                pool_b.free(rx.frame);
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "sent {sent} received {got} in {secs:.3} s: {:.1} ns per frame",
        secs * 1e9 / got.max(1) as f64
    );
}
