//! Packet capture in the classic pcap format, which Wireshark and tshark read.
//!
//! [`PcapSink`] writes the file: a global header (the nanosecond-resolution magic
//! 0xA1B23C4D, version 2.4, snaplen 262144, link type 1 = Ethernet), then one record per
//! frame (seconds, nanoseconds, captured length, original length, bytes). Everything is
//! written little-endian; readers learn the byte order from the magic. Frames are Ethernet
//! from the header onward without the FCS, which is what link type 1 means.
//!
//! [`PcapWriter`] wraps any [`Device`] and is a device itself, in the style of smoltcp's
//! `phy::PcapWriter`: every frame transmitted (once the device has taken it) and every
//! frame received goes to the sink, stamped with `cx.now`. A write error does not disturb
//! the device: the writer stops capturing and keeps the error for [`PcapWriter::take_error`].
//!
//! [`parse`] reads a capture back (either magic, either byte order): the tests use it, and
//! so can tools.

use std::fmt;
use std::io::{self, Write};

use super::{Device, DeviceCaps, DeviceContext, DeviceError, RxFrame, TxMeta};
use crate::buf::PacketBuf;
use crate::time::Instant;

/// The magic of a capture with microsecond timestamps.
pub const MAGIC_MICROS: u32 = 0xA1B2_C3D4;
/// The magic of a capture with nanosecond timestamps (what [`PcapSink`] writes).
pub const MAGIC_NANOS: u32 = 0xA1B2_3C4D;
pub const VERSION_MAJOR: u16 = 2;
pub const VERSION_MINOR: u16 = 4;
/// The longest record kept whole; longer frames are cut to it (none of ours is).
pub const SNAPLEN: u32 = 262_144;
/// LINKTYPE_ETHERNET.
pub const LINKTYPE_ETHERNET: u32 = 1;
/// Bytes of the global header.
pub const GLOBAL_HEADER_LEN: usize = 24;
/// Bytes of a record header.
pub const RECORD_HEADER_LEN: usize = 16;

/// Writes a pcap file.
#[derive(Debug)]
pub struct PcapSink<W: Write> {
    out: W,
    records: u64,
}

impl<W: Write> PcapSink<W> {
    /// Writes the global header to `out` (pass a `BufWriter` for a file).
    pub fn new(mut out: W) -> io::Result<PcapSink<W>> {
        let mut h = [0u8; GLOBAL_HEADER_LEN];
        h[0..4].copy_from_slice(&MAGIC_NANOS.to_le_bytes());
        h[4..6].copy_from_slice(&VERSION_MAJOR.to_le_bytes());
        h[6..8].copy_from_slice(&VERSION_MINOR.to_le_bytes());
        // thiszone (8..12) and sigfigs (12..16) are zero.
        h[16..20].copy_from_slice(&SNAPLEN.to_le_bytes());
        h[20..24].copy_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        out.write_all(&h)?;
        Ok(PcapSink { out, records: 0 })
    }

    /// Writes one record: `frame` seen at `time` (nanoseconds since the clock's origin,
    /// which the file shows as time since 1970).
    pub fn write_record(&mut self, time: Instant, frame: &[u8]) -> io::Result<()> {
        let ns = time.as_nanos();
        let secs = u32::try_from(ns / 1_000_000_000).unwrap_or(u32::MAX);
        let frac = (ns % 1_000_000_000) as u32;
        let orig = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        let incl = orig.min(SNAPLEN);
        let mut h = [0u8; RECORD_HEADER_LEN];
        h[0..4].copy_from_slice(&secs.to_le_bytes());
        h[4..8].copy_from_slice(&frac.to_le_bytes());
        h[8..12].copy_from_slice(&incl.to_le_bytes());
        h[12..16].copy_from_slice(&orig.to_le_bytes());
        self.out.write_all(&h)?;
        self.out.write_all(&frame[..incl as usize])?;
        self.records += 1;
        Ok(())
    }

    /// Records written.
    pub fn records(&self) -> u64 {
        self.records
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    pub fn get_ref(&self) -> &W {
        &self.out
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

/// Which frames a [`PcapWriter`] captures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PcapMode {
    #[default]
    Both,
    TxOnly,
    RxOnly,
}

/// A device that captures every frame another device sends and receives.
pub struct PcapWriter<D: Device, W: Write> {
    inner: D,
    sink: PcapSink<W>,
    mode: PcapMode,
    /// The first write error; capture stops after it.
    error: Option<io::Error>,
    /// The transmitted frame, kept until the device has accepted it.
    scratch: Vec<u8>,
}

impl<D: Device, W: Write> PcapWriter<D, W> {
    /// Wraps `inner`, writing the capture's global header to `out` at once.
    pub fn new(inner: D, out: W, mode: PcapMode) -> io::Result<PcapWriter<D, W>> {
        Ok(PcapWriter {
            inner,
            sink: PcapSink::new(out)?,
            mode,
            error: None,
            scratch: Vec::new(),
        })
    }

    pub fn inner(&self) -> &D {
        &self.inner
    }

    pub fn inner_mut(&mut self) -> &mut D {
        &mut self.inner
    }

    pub fn sink(&self) -> &PcapSink<W> {
        &self.sink
    }

    /// The first write error, if capture stopped on one.
    pub fn take_error(&mut self) -> Option<io::Error> {
        self.error.take()
    }

    /// Flushes the capture.
    pub fn flush(&mut self) -> io::Result<()> {
        self.sink.flush()
    }

    /// The device and the sink.
    pub fn into_parts(self) -> (D, PcapSink<W>) {
        (self.inner, self.sink)
    }

    fn record(&mut self, time: Instant, frame: &[u8]) {
        if self.error.is_some() {
            return;
        }
        if let Err(e) = self.sink.write_record(time, frame) {
            self.error = Some(e);
        }
    }
}

impl<D: Device, W: Write> Device for PcapWriter<D, W> {
    fn caps(&self) -> DeviceCaps {
        self.inner.caps()
    }

    fn transmit(
        &mut self,
        frame: PacketBuf,
        meta: TxMeta,
        cx: &DeviceContext<'_>,
    ) -> Result<(), DeviceError> {
        if self.mode == PcapMode::RxOnly || self.error.is_some() {
            return self.inner.transmit(frame, meta, cx);
        }
        // The device takes the buffer; keep the bytes to record once it has accepted it.
        self.scratch.clear();
        self.scratch.extend_from_slice(frame.data());
        for f in frame.frags() {
            self.scratch.extend_from_slice(f);
        }
        self.inner.transmit(frame, meta, cx)?;
        let bytes = std::mem::take(&mut self.scratch);
        self.record(cx.now, &bytes);
        self.scratch = bytes;
        Ok(())
    }

    fn tx_ready(&self) -> bool {
        self.inner.tx_ready()
    }
    fn tx_room(&self) -> usize {
        self.inner.tx_room()
    }

    fn take_notification(&mut self, cx: &DeviceContext<'_>) -> bool {
        self.inner.take_notification(cx)
    }

    fn receive(&mut self, cx: &DeviceContext<'_>) -> Option<RxFrame> {
        let rx = self.inner.receive(cx)?;
        if self.mode != PcapMode::TxOnly {
            if rx.frame.has_frags() {
                // A split frame (header/data split): recorded whole.
                let mut bytes = std::mem::take(&mut self.scratch);
                bytes.clear();
                bytes.extend_from_slice(rx.frame.data());
                for f in rx.frame.frags() {
                    bytes.extend_from_slice(f);
                }
                self.record(cx.now, &bytes);
                self.scratch = bytes;
            } else {
                self.record(cx.now, rx.frame.data());
            }
        }
        Some(rx)
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.inner.next_deadline()
    }

    fn recycle(&mut self, frame: PacketBuf) {
        self.inner.recycle(frame)
    }

    fn buffer_depot(&self) -> Option<crate::buf::Depot> {
        self.inner.buffer_depot()
    }

    fn readiness_fd(&self) -> Option<i32> {
        self.inner.readiness_fd()
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.inner.counters()
    }
}

impl<D: Device + fmt::Debug, W: Write> fmt::Debug for PcapWriter<D, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PcapWriter")
            .field("inner", &self.inner)
            .field("mode", &self.mode)
            .field("records", &self.sink.records())
            .field("error", &self.error)
            .finish()
    }
}

/// A capture's global header, as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PcapHeader {
    /// Whether timestamps are in nanoseconds (else microseconds).
    pub nanos: bool,
    /// Whether the file is big-endian.
    pub big_endian: bool,
    pub version: (u16, u16),
    pub snaplen: u32,
    pub linktype: u32,
}

/// One record, as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PcapRecord {
    /// The timestamp in nanoseconds.
    pub time_ns: u64,
    /// The frame's length on the wire.
    pub orig_len: u32,
    /// The bytes captured.
    pub data: Vec<u8>,
}

/// Why a capture did not parse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PcapError {
    /// Not a classic pcap file (magic as read little-endian).
    BadMagic(u32),
    /// The file ends inside a header or a record (at this offset).
    Truncated { offset: usize },
    /// A record claims more bytes than the snaplen (at this offset).
    BadRecord { offset: usize },
}

impl fmt::Display for PcapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PcapError::BadMagic(m) => write!(f, "not a pcap file (magic {m:#010x})"),
            PcapError::Truncated { offset } => write!(f, "pcap file truncated at byte {offset}"),
            PcapError::BadRecord { offset } => {
                write!(f, "pcap record at byte {offset} is longer than the snaplen")
            }
        }
    }
}

impl std::error::Error for PcapError {}

/// Reads a whole capture.
pub fn parse(bytes: &[u8]) -> Result<(PcapHeader, Vec<PcapRecord>), PcapError> {
    let head = bytes
        .get(..GLOBAL_HEADER_LEN)
        .ok_or(PcapError::Truncated { offset: 0 })?;
    let magic_le = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
    let (nanos, big_endian) = match magic_le {
        MAGIC_MICROS => (false, false),
        MAGIC_NANOS => (true, false),
        m if m.swap_bytes() == MAGIC_MICROS => (false, true),
        m if m.swap_bytes() == MAGIC_NANOS => (true, true),
        m => return Err(PcapError::BadMagic(m)),
    };
    let u16_at = |b: &[u8], i: usize| {
        let v = [b[i], b[i + 1]];
        if big_endian {
            u16::from_be_bytes(v)
        } else {
            u16::from_le_bytes(v)
        }
    };
    let u32_at = |b: &[u8], i: usize| {
        let v = [b[i], b[i + 1], b[i + 2], b[i + 3]];
        if big_endian {
            u32::from_be_bytes(v)
        } else {
            u32::from_le_bytes(v)
        }
    };
    let header = PcapHeader {
        nanos,
        big_endian,
        version: (u16_at(head, 4), u16_at(head, 6)),
        snaplen: u32_at(head, 16),
        linktype: u32_at(head, 20),
    };
    let mut records = Vec::new();
    let mut at = GLOBAL_HEADER_LEN;
    while at < bytes.len() {
        let rh = bytes
            .get(at..at + RECORD_HEADER_LEN)
            .ok_or(PcapError::Truncated { offset: at })?;
        let secs = u32_at(rh, 0) as u64;
        let frac = u32_at(rh, 4) as u64;
        let incl = u32_at(rh, 8);
        let orig_len = u32_at(rh, 12);
        if incl > header.snaplen.max(SNAPLEN) {
            return Err(PcapError::BadRecord { offset: at });
        }
        let start = at + RECORD_HEADER_LEN;
        let data = bytes
            .get(start..start + incl as usize)
            .ok_or(PcapError::Truncated { offset: start })?;
        let time_ns = secs * 1_000_000_000 + if nanos { frac } else { frac * 1_000 };
        records.push(PcapRecord {
            time_ns,
            orig_len,
            data: data.to_vec(),
        });
        at = start + incl as usize;
    }
    Ok((header, records))
}

#[cfg(test)]
mod tests;
