//! One TCP connection: the transmission control block (TCB) of RFC 9293 §3.3.1 and the
//! event processing of §3.10, free of buffers-in-flight and devices.
//!
//! The connection owns its send and receive buffers ([`SendBuffer`], [`RecvBuffer`]) and the bookkeeping of
//! its out-of-order queue; it never builds a frame. [`Connection::input`] takes a parsed
//! segment, and [`Connection::next_segment`] says what to send next as a header plus a
//! range of the send buffer, which `tcp::output` turns into a frame (copying and, per the
//! Tuning, checksumming the data on the way). Timers are deadlines the stack polls.
//!
//! What it implements, with the sources followed:
//!
//! - every state of the RFC 9293 §3.3.2 diagram, simultaneous open and close, half-close,
//!   TIME-WAIT for 2·MSL;
//! - RST and SYN handling with the RFC 5961 checks: a RST is accepted only at exactly
//!   RCV.NXT, one elsewhere in the window and any SYN in a synchronized state draw a
//!   challenge ACK (rate-limited, §7), and ACKs outside [SND.UNA − MAX.SND.WND, SND.NXT]
//!   are dropped (§5);
//! - MSS (RFC 9293 §3.7.1), window scaling and timestamps with PAWS (RFC 7323), SACK
//!   (RFC 2018) with a scoreboard steering retransmission in recovery;
//! - the RFC 6298 timer with Karn's rule, slow start and congestion avoidance (RFC 5681),
//!   fast retransmit and NewReno recovery (RFC 6582), the initial window of RFC 6928;
//! - Nagle's algorithm and sender silly-window avoidance (RFC 9293 §3.8.6.2.1), receiver
//!   SWS avoidance (§3.8.6.2.2), delayed ACKs at least every second segment (RFC 1122
//!   §4.2.3.2, RFC 5681 §4.2), zero-window probes (§3.8.6.1), keepalives (RFC 1122
//!   §4.2.3.6);
//! - Jacobson's header prediction (4.4BSD `tcp_input`) as a separate path for the expected
//!   pure ACK and the expected in-order data segment;
//! - RFC 1146's alternate checksum negotiation, as paper 000 proposes it: both SYNs name
//!   "no checksum" and only then do data segments go without one.

use crate::buf::ExtBuf;
use crate::checksum::Kernel;
use crate::ip::IpFields;
use crate::probe::{Counter, Layer, Ledger, Op, Sampling, Side};
use crate::tcp::assembler::Assembler;
use crate::tcp::recv_buffer::{Chunk, Failed, RecvBuffer, Verified};
use crate::tcp::rtt::{RtoConfig, RttEstimator, RttTimer};
use crate::tcp::scoreboard::Scoreboard;
use crate::tcp::send_buffer::{Cuts, SendBuffer};
use crate::time::{Duration, Instant};
use crate::wire::tcp::{AltChecksum, Control, SeqNumber, TcpRepr, TcpTimestamp, MAX_WINDOW_SHIFT};
use crate::wire::Ipv4Address;

/// The states of RFC 9293 §3.3.2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    Closed,
    Listen,
    SynSent,
    SynReceived,
    Established,
    FinWait1,
    FinWait2,
    CloseWait,
    Closing,
    LastAck,
    TimeWait,
}

impl State {
    /// After the handshake: the states in which a SYN is an error (RFC 9293 §3.10.7.4).
    pub fn is_synchronized(self) -> bool {
        !matches!(
            self,
            State::Closed | State::Listen | State::SynSent | State::SynReceived
        )
    }

    /// The states in which data from the peer is still accepted (before its FIN).
    fn accepts_data(self) -> bool {
        matches!(self, State::Established | State::FinWait1 | State::FinWait2)
    }

    /// The states in which the application may still queue data to send.
    pub fn can_send(self) -> bool {
        matches!(
            self,
            State::SynSent | State::SynReceived | State::Established | State::CloseWait
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            State::Closed => "CLOSED",
            State::Listen => "LISTEN",
            State::SynSent => "SYN-SENT",
            State::SynReceived => "SYN-RECEIVED",
            State::Established => "ESTABLISHED",
            State::FinWait1 => "FIN-WAIT-1",
            State::FinWait2 => "FIN-WAIT-2",
            State::CloseWait => "CLOSE-WAIT",
            State::Closing => "CLOSING",
            State::LastAck => "LAST-ACK",
            State::TimeWait => "TIME-WAIT",
        }
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a connection ended other than by an orderly close.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnError {
    /// The peer answered the SYN with a RST (nothing listening).
    Refused,
    /// The peer reset the connection.
    Reset,
    /// Retransmissions or keepalive probes went unanswered.
    TimedOut,
    /// ICMP said the peer's network, or the peer, cannot be reached (RFC 9293 §3.9.2.2's
    /// soft errors): kept as the connection's soft error, and given instead of `TimedOut`
    /// if the connection times out.
    NetUnreachable,
    HostUnreachable,
    /// ICMP said a segment's header was at fault (parameter problem, a soft error too).
    ProtocolError,
}

/// Settings of a connection; the stack's defaults, changeable per socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpConfig {
    /// Send buffer bytes.
    pub send_buffer: usize,
    /// Receive buffer bytes (the most window advertised).
    pub recv_buffer: usize,
    /// Nagle's algorithm (RFC 9293 §3.7.4); off is TCP_NODELAY.
    pub nagle: bool,
    /// How long an ACK may be delayed (RFC 1122 §4.2.3.2, RFC 9293 MUST-40: under 0.5
    /// s; a connection takes at most [`MAX_DELAYED_ACK`]).
    pub delayed_ack: Duration,
    /// The retransmission timer's bounds.
    pub rto: RtoConfig,
    /// Retransmissions of one segment before the connection is given up.
    pub max_retransmissions: u32,
    /// Retransmissions of a SYN before connecting is given up. The default, 7, keeps a
    /// SYN going for three minutes (RFC 9293 MUST-23, RFC 1122 §4.2.3.5): from the
    /// initial RTO of 1 s the timeouts come 1, 2, 4, ..., 32, 60 and 60 s apart, and
    /// connecting is given up 183 s after the first SYN (Linux's default of 6 gives up
    /// at 127 s).
    pub max_syn_retransmissions: u32,
    /// Retransmissions of a passive open's SYN-ACK before the half-open connection is
    /// given up: 6, 123 s (Linux's `tcp_synack_retries` is 5). It holds a place in the
    /// listener's backlog meanwhile, so it is not kept as long as an active open.
    pub max_syn_ack_retransmissions: u32,
    /// The maximum segment lifetime; TIME-WAIT lasts twice this (RFC 9293 §3.4.2).
    pub msl: Duration,
    /// Idle time before keepalive probes (RFC 1122 §4.2.3.6, RFC 9293 MUST-25 and
    /// MUST-28: off by default; [`KEEPALIVE_IDLE`], two hours, the default interval to
    /// turn them on with), the interval between probes and how many go unanswered before
    /// the connection is dropped.
    pub keepalive: Option<Duration>,
    pub keepalive_interval: Duration,
    pub keepalive_probes: u32,
    /// The TTL and DSCP of the connection's segments (RFC 9293 MUST-48, MUST-49;
    /// `Stack::tcp_set_ip_fields`); by default the stack's TTL and DSCP 0.
    pub ip_fields: IpFields,
    /// Explicit Congestion Notification (RFC 3168; RFC 9293 SHLD-8): ask for it in the
    /// SYN, and agree to a peer that asks. Off by default, so that nothing changes for a
    /// peer or a path that mishandles it unless the application says so.
    pub ecn: bool,
    /// Offer window scaling, timestamps and SACK in the SYN.
    pub window_scaling: bool,
    pub timestamps: bool,
    pub sack: bool,
    /// The most out-of-order islands kept (the rest are dropped and counted).
    pub max_ooo_ranges: usize,
    /// RFC 6928's initial window, in segments.
    pub initial_window_segments: usize,
    /// How long a fully closed socket waits in FIN-WAIT-2 for the peer's FIN.
    pub fin_wait2_timeout: Duration,
    /// A listener whose backlog is full answers SYNs with SYN cookies (RFC 4987 §3.6,
    /// [`syn_cookie`](super::syn_cookie)) instead of dropping them.
    pub syn_cookies: bool,
    /// RACK's two ideas (RFC 8985) on the SACK scoreboard: a retransmission lost too is
    /// found from the data SACKed after it, and a first segment with SACKed data above it
    /// is deemed lost once the reordering window passes. Off: RFC 6675's `IsLost` and
    /// early retransmit only.
    pub rack: bool,
    /// Tail loss probes (RFC 8985 §7), with SACK.
    pub tail_loss_probes: bool,
    /// Limited Transmit (RFC 3042; RFC 5681 §3.2 step 1's SHOULD), on connections
    /// without SACK: the first and second duplicate ACKs each let one segment of new
    /// data go past the congestion window, so that a small flight still brings the
    /// duplicate ACKs fast retransmit waits for.
    pub limited_transmit: bool,
    /// A congestion response is undone when D-SACKs show that every retransmission it
    /// made was unneeded (RFC 3708's detection; [`Connection`]'s `Undo`), and a fast
    /// retransmit so undone raises DupThresh past the reordering it met. Off: a fast
    /// retransmit or timeout that reordering or delay caused keeps its reduced window, and
    /// DupThresh stays 3.
    pub spurious_undo: bool,
}

impl TcpConfig {
    /// The socket buffer memory a connection with this configuration reserves: its send
    /// and receive buffers, allocated when it is made.
    pub fn buffer_bytes(&self) -> usize {
        self.send_buffer.saturating_add(self.recv_buffer)
    }
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            send_buffer: 1 << 20,
            recv_buffer: 1 << 20,
            nagle: true,
            delayed_ack: Duration::from_millis(40),
            rto: RtoConfig::default(),
            max_retransmissions: 12,
            max_syn_retransmissions: 7,
            max_syn_ack_retransmissions: 6,
            msl: Duration::from_secs(30),
            keepalive: None,
            keepalive_interval: Duration::from_secs(75),
            keepalive_probes: 9,
            ip_fields: IpFields::default(),
            ecn: false,
            window_scaling: true,
            timestamps: true,
            sack: true,
            max_ooo_ranges: 32,
            initial_window_segments: 10,
            fin_wait2_timeout: Duration::from_secs(60),
            syn_cookies: true,
            rack: true,
            tail_loss_probes: true,
            limited_transmit: true,
            spurious_undo: true,
        }
    }
}

/// The header of a segment to send and the send-buffer bytes it carries: `tcp::output`
/// builds the frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outgoing {
    /// The header (its `payload` is empty; the data comes from the send buffer).
    pub repr: TcpRepr<'static>,
    /// Where the data starts in the send buffer, counted from its head.
    pub data_offset: usize,
    pub data_len: usize,
    /// The peers agreed to go without checksums and this segment may (not SYN or RST).
    pub no_checksum: bool,
    /// Retransmission (counted by the caller).
    pub retransmission: bool,
    /// A super-segment for the device to cut into segments of this many data bytes
    /// (TCP segmentation offload); 0 for an ordinary segment.
    pub gso_size: u16,
    /// Sent ECN-capable, ECT(0) in the IP header: new data on a connection that agreed
    /// to ECN (RFC 3168 §6.1.1; never a SYN, a pure ACK, a retransmission or a window
    /// probe, §6.1.4-6).
    pub ect: bool,
}

impl Outgoing {
    /// A segment of header alone: SYN, FIN, a pure ACK, a keepalive probe.
    fn header_only(repr: TcpRepr<'static>, no_checksum: bool, retransmission: bool) -> Outgoing {
        Outgoing {
            repr,
            data_offset: 0,
            data_len: 0,
            no_checksum,
            retransmission,
            gso_size: 0,
            ect: false,
        }
    }
}

/// A RST to send in reply to a segment that belongs to no connection state (RFC 9293
/// §3.10.7.1 and the unacceptable-ACK cases of §3.10.7.3-4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RstReply {
    pub seq: SeqNumber,
    pub ack: Option<SeqNumber>,
}

impl RstReply {
    /// The RST answering `seg` when no connection exists (RFC 9293 §3.10.7.1): if the
    /// segment has an ACK, `<SEQ=SEG.ACK><CTL=RST>`; otherwise
    /// `<SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>`. A RST is never answered.
    pub fn for_segment(seg: &TcpRepr) -> Option<RstReply> {
        if seg.control == Control::Rst {
            return None;
        }
        Some(match seg.ack_number {
            Some(ack) => RstReply {
                seq: ack,
                ack: None,
            },
            None => RstReply {
                seq: SeqNumber(0),
                ack: Some(seg.seq_number + seg.segment_len()),
            },
        })
    }
}

/// Why a data segment is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Send {
    /// At SND.NXT (new data, or again after a timeout went back).
    Next,
    /// A range loss recovery chose; SND.NXT stays.
    Retransmit,
    /// A zero-window probe.
    Probe,
}

/// What the retransmission timer's deadline is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LossTimer {
    /// The retransmission timeout (RFC 6298).
    Retransmit,
    /// A tail loss probe (RFC 8985 §7, `arm_loss_probe`).
    LossProbe,
    /// The end of the reordering window (`reorder_window`).
    ReorderWindow,
}

/// Loss recovery in progress (RFC 6582).
#[derive(Clone, Copy, Debug)]
struct Recovery {
    /// SND.MAX when recovery began: an ACK past it ends recovery.
    recover: SeqNumber,
    /// The highest byte retransmitted in this recovery (RFC 6675's HighRxt), where the
    /// search for the next lost range resumes.
    high_rxt: SeqNumber,
    /// Once the segment at SND.UNA has been retransmitted in this recovery: SND.MAX then
    /// (or later, see `ack_new_data`). Data SACKed above it was sent after that
    /// retransmission, so enough of it shows the retransmission lost too
    /// (`head_retransmission_lost`).
    head_resent_below: Option<SeqNumber>,
}

/// A congestion response that may prove unneeded (RFC 3708 §3): the window before it, and
/// the ranges it retransmitted that no D-SACK has reported yet. When a D-SACK has covered
/// each, the segments were not lost but delayed or reordered, and the window goes back to
/// what it was (the response Linux makes, `tcp_try_undo_dsack`; RFC 4015 makes the same
/// for a timeout Eifel finds spurious). An undone fast retransmit also raises DupThresh
/// above the segments that overtook the late one (`reordering`), as Linux raises
/// `tp->reordering`, so the same reordering is not taken for a loss again; a real loss is
/// then still found by the reordering window, a loss probe or the timer. A range counts
/// only when one D-SACK block covers it whole, so a super-segment resent after a timeout
/// (the receiver reports its duplicates segment by segment) is never taken as unneeded. A
/// network that duplicates the original of a retransmitted segment can still fool it, as
/// RFC 3708 §5 says.
#[derive(Clone, Copy, Debug)]
struct Undo {
    cwnd: usize,
    ssthresh: usize,
    unproven: [Option<(SeqNumber, SeqNumber)>; UNDO_RANGES],
    /// A D-SACK has covered one of the ranges.
    proven: bool,
    /// For a fast retransmit, the most segments SACKed above SND.UNA during its recovery:
    /// if the one it deemed lost was only late, this many arrived before it, reordering
    /// that deep, which DupThresh must then exceed.
    reordering: usize,
}

/// The most retransmissions a congestion response can make and still be undone: one
/// that reordering or delay caused resends a segment or two.
const UNDO_RANGES: usize = 4;

impl Undo {
    /// `[start, end)` was retransmitted: false when the response has made more
    /// retransmissions than it can follow (it will not be undone).
    fn resent(&mut self, start: SeqNumber, end: SeqNumber) -> bool {
        match self.unproven.iter_mut().find(|r| r.is_none()) {
            Some(slot) => {
                *slot = Some((start, end));
                true
            }
            None => false,
        }
    }

    /// A D-SACK reported `[l, r)` received twice: the ranges it covers were not needed.
    fn dsack(&mut self, l: SeqNumber, r: SeqNumber) {
        for slot in &mut self.unproven {
            if slot.is_some_and(|(start, end)| l.le(start) && end.le(r)) {
                *slot = None;
                self.proven = true;
            }
        }
    }

    /// Every range retransmitted has been reported unneeded.
    fn all_proven(&self) -> bool {
        self.proven && self.unproven.iter().all(Option::is_none)
    }
}

/// Counts of what happened to this connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnStats {
    pub segments_in: u64,
    pub segments_out: u64,
    pub retransmitted_segments: u64,
    pub timeouts: u64,
    pub fast_retransmits: u64,
    /// Tail loss probes sent (RFC 8985 §7), and those that repaired a loss.
    pub loss_probes: u64,
    pub loss_probe_repairs: u64,
    /// Fast retransmits started when the reordering window passed (`reorder_window`).
    pub reorder_window_losses: u64,
    /// Retransmissions of the first unacknowledged segment found lost during recovery and
    /// sent again (`Counter::TcpLostRetransmissions`).
    pub lost_retransmissions: u64,
    /// Congestion responses undone because D-SACKs reported all their retransmissions
    /// (`Counter::TcpSpuriousUndos`).
    pub spurious_undos: u64,
    pub hp_ack_hits: u64,
    pub hp_data_hits: u64,
    pub hp_misses: u64,
    pub dup_acks_in: u64,
    pub ooo_segments_in: u64,
    pub ooo_dropped: u64,
    pub challenge_acks: u64,
    pub bytes_acked: u64,
    pub bytes_received: u64,
}

/// Where a connection's writes are copied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum SendCopy {
    /// Into the send buffer's ring, and from there into each segment's frame.
    #[default]
    Ring,
    /// Into shared blocks whose slices segments carry by reference
    /// (`Tuning::tcp_send_by_reference`, on a route whose device gathers), while segments
    /// are at least `min_segment` bytes (the device's
    /// [`by_reference_min`](crate::driver::DeviceCaps::by_reference_min)); with `sum`,
    /// summed as they are copied (the segments' checksums then need no pass over the
    /// data).
    Shared {
        sum: Option<Kernel>,
        min_segment: usize,
    },
}

/// What zero-copy receive (paper 004 §3.1) hands the application uncopied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ZeroCopyRx {
    /// Off: reads copy.
    Off,
    /// Whole pages that a NIC with header/data split deposited page-aligned
    /// ([`DeviceCaps::header_split`](crate::driver::DeviceCaps::header_split)); the odd
    /// rest, and anything else, copied: paper 004's page remapping.
    Pages,
    /// Data that arrived by reference (a sender's loan or shared blocks, carried across
    /// by a device that hands fragments over), as it came: in user space a reference
    /// needs no page boundaries. Anything else copied.
    AsSent,
}

/// The transmission control block.
pub struct Connection {
    pub(crate) state: State,
    pub(crate) local: (Ipv4Address, u16),
    pub(crate) remote: (Ipv4Address, u16),
    config: TcpConfig,

    // Send sequence variables (RFC 9293 §3.3.1), plus SND.MAX, the highest sent.
    iss: SeqNumber,
    snd_una: SeqNumber,
    snd_nxt: SeqNumber,
    snd_max: SeqNumber,
    /// The byte a zero-window probe sent past all the data sent before, while SND.MAX is
    /// just past it ([`data_max`](Self::data_max)).
    probe_byte: Option<SeqNumber>,
    /// SND.WND in bytes (scaled).
    snd_wnd: usize,
    max_snd_wnd: usize,
    snd_wl1: SeqNumber,
    snd_wl2: SeqNumber,
    snd_shift: u8,
    /// The MSS for segments we send (the peer's MSS option, our MTU).
    snd_mss: usize,

    // Receive sequence variables.
    irs: SeqNumber,
    rcv_nxt: SeqNumber,
    rcv_shift: u8,
    /// The right edge of the window last advertised: never moved left (RFC 9293
    /// §3.8.6.2.2's "shrinking the window" is strongly discouraged).
    rcv_adv: SeqNumber,
    /// The MSS we advertise (from our interface's MTU).
    rcv_mss: usize,

    pub(crate) tx: SendBuffer,
    pub(crate) rx: RecvBuffer,
    /// Zero-copy receive: what the application may take uncopied.
    pub(crate) zero_copy_rx: ZeroCopyRx,
    /// Where writes are copied: set by the stack from the route
    /// (`Tuning::tcp_send_by_reference`).
    pub(crate) send_copy: SendCopy,
    ooo: Assembler,
    /// The sequence number of a FIN received beyond RCV.NXT, processed when the data before
    /// it has arrived.
    fin_seq: Option<SeqNumber>,
    /// The peer's FIN is in: RCV.NXT counts it.
    fin_in: bool,
    /// The application will send no more (shutdown or close): a FIN follows the data.
    fin_queued: bool,
    /// Our FIN's sequence number, fixed when the application shut down sending.
    fin_out: Option<SeqNumber>,
    /// The application has released the socket: nobody will read.
    pub(crate) released: bool,
    /// The last soft ICMP error (RFC 9293 §3.9.2.2) since the peer last acknowledged new
    /// data.
    soft_error: Option<ConnError>,

    // ECN (RFC 3168 §6.1).
    /// Both SYNs agreed to it.
    ecn_enabled: bool,
    /// A segment came with CE set: every ACK carries ECE until the peer's CWR (§6.1.3).
    ece_pending: bool,
    /// The window was reduced (for an ECE, or a loss): the next new data segment carries
    /// CWR.
    cwr_pending: bool,
    /// SND.NXT at the last reduction: an ECE is answered once a window of data (§6.1.2).
    ecn_recover: SeqNumber,
    /// The segment the stack is about to [`input`](Self::input) arrived with CE in its
    /// IP header (set by the stack only then, cleared by `input`).
    pub(crate) ce_in: bool,

    // Urgent data (RFC 9293 §3.8.5): each pointer names the octet after the urgent data.
    /// SND.UP while the peer has not acknowledged everything up to it.
    snd_up: Option<SeqNumber>,
    /// RCV.UP while the application has not read up to it.
    rcv_up: Option<SeqNumber>,
    /// RCV.UP arrived or advanced since the application last asked (MUST-32's signal).
    urgent_signal: bool,

    // Options in force.
    ts_enabled: bool,
    /// Added to the timestamp clock in our TSvals ([`Connection::ts_now`]); set by the
    /// stack when it makes the connection.
    pub(crate) ts_offset: u32,
    ts_recent: u32,
    /// When TS.Recent was last set (RFC 7323 §5.5's TS.Recent.Age).
    ts_recent_at: Instant,
    /// RFC 7323's Last.ACK.sent: the ACK field of the last segment sent, the sequence
    /// number a segment must start at or before for its TSval to be echoed (§4.3).
    last_ack_sent: SeqNumber,
    sack_enabled: bool,
    /// Whether we ask for, and whether the peers agreed to, no checksums (RFC 1146).
    want_no_checksum: bool,
    no_checksum: bool,

    // ACK generation.
    ack_now: bool,
    /// The ACK is owed for out-of-order data or data filling a gap (RFC 5681 §4.2): one
    /// the stack sends at once even where it batches ACKs (`tcp_output_per_batch`).
    ack_at_once: bool,
    unacked_segments: u32,
    delack_deadline: Option<Instant>,
    /// A segment shorter than the MSS is among those whose ACK is delayed.
    short_unacked: bool,
    /// Data flows both ways (Linux's pingpong mode, roughly): set when data goes out,
    /// cleared when the delayed-ACK timer fires (nothing answered in time). A connection
    /// that only receives acknowledges a short segment as soon as the application's read
    /// drains the buffer ([`Self::ack_if_drained`]); one that sends data lets the ACK
    /// ride on it.
    interactive: bool,
    /// When data was last sent, for RFC 5681 §4.1's restart after idle.
    last_data_sent: Option<Instant>,

    // Timers.
    rtx_deadline: Option<Instant>,
    /// What `rtx_deadline` is for: the retransmission timeout, or, armed in its place
    /// because it comes sooner, a tail loss probe's or the reordering window's.
    rtx_timer: LossTimer,
    /// The loss probe sent and not yet acknowledged: SND.MAX after it (RFC 8985's
    /// `TLP.end_seq`), and whether it was a retransmission (`TLP.is_retrans`).
    tlp_end: Option<(SeqNumber, bool)>,
    /// The probe's timeout passed with new data to send: one segment of it goes, past
    /// the congestion window (with `probe_now`, which `next_segment` looks at first).
    tlp_new_data: bool,
    /// A D-SACK came while a retransmitted probe was out: the probe was not needed.
    tlp_dsacked: bool,
    /// The reordering window in quarters of the least RTT, 1 to 4 (RFC 8985 §6.2's
    /// `reo_wnd_mult`): widened by a D-SACK, which says a segment arrived twice (a
    /// retransmission that was not needed, or the network's copy).
    reo_wnd_mult: u32,
    /// RFC 8985's RACK.min_RTT: the least round trip the sender timed, and when; a
    /// sample replaces it when lower, or when it is [`MIN_RTT_WINDOW`] old.
    min_rtt: Option<(Duration, Instant)>,
    /// Recoveries left before the window narrows back to a quarter (`reo_wnd_persist`).
    reo_wnd_persist: u32,
    /// SND.NXT when the window last widened: one widening per round trip
    /// (`dsack_round`).
    dsack_round: Option<SeqNumber>,
    /// A duplicate segment's range, reported as the first SACK block of the next ACK
    /// (RFC 2883 §4, a D-SACK block).
    dsack: Option<(SeqNumber, SeqNumber)>,
    /// The last congestion response, while it may still be undone (`spurious_undo`).
    undo: Option<Undo>,
    /// The end of what the last recovery retransmitted, when it ended below that: those
    /// retransmissions may still be on their way, and a response that begins before
    /// SND.UNA passes it cannot be undone (a D-SACK of its own retransmission of such a
    /// segment shows only that the earlier one arrived, not that the original did; Linux
    /// counts retransmissions in flight into `undo_retrans` for the same reason).
    resent_beyond_recovery: Option<SeqNumber>,
    persist_deadline: Option<Instant>,
    persist_backoff: u32,
    /// The end of the last short segment sent (Minshall's Nagle).
    snd_sml: SeqNumber,
    keepalive_deadline: Option<Instant>,
    keepalive_sent: u32,
    /// Whether the last segment input took passed its state's checks
    /// ([`segment_accepted`](Self::segment_accepted)).
    accepted: bool,
    close_deadline: Option<Instant>,
    rtt: RttEstimator,
    rtt_timer: RttTimer,
    retries: u32,
    /// In SYN-SENT, the SYN went again at once after an ACK for an older connection
    /// ([`input_syn_sent`](Self::input_syn_sent)); once per open.
    syn_resent_at_once: bool,
    /// An acceptable ACK arrived since the last retransmission or persist timeout: the
    /// peer is there, so a probe's timeout does not count toward giving up
    /// ([`count_probe_timeout`](Self::count_probe_timeout)).
    acked_since_timeout: bool,
    /// A zero-window probe is due.
    probe_now: bool,
    /// A keepalive probe is due.
    keepalive_probe: bool,
    /// The retransmissions of a segment reached R1: the stack is to give IP negative
    /// advice about the way to the peer (RFC 1122 §4.2.3.5).
    negative_advice: bool,
    /// Both SYNs carried the window scale option.
    ws_agreed: bool,

    // Congestion control (RFC 5681, RFC 6582).
    cwnd: usize,
    ssthresh: usize,
    dup_acks: u32,
    /// Bytes Limited Transmit sent past the congestion window since the first duplicate
    /// ACK of the current run (RFC 5681 §3.2 step 2 leaves them out of FlightSize).
    limited_sent: usize,
    recovery: Option<Recovery>,
    /// A retransmission the next call to `next_segment` sends first.
    rtx_pending: Option<(SeqNumber, usize)>,
    scoreboard: Scoreboard,
    /// Bytes acked in congestion avoidance not yet turned into cwnd growth.
    ca_acked: usize,

    /// RFC 5961 §7: challenge ACKs sent in the current second.
    challenge_window: (Instant, u32),
    /// The next pure ACK is a challenge ACK, and carries the standard checksum even on a
    /// connection that agreed to none (RFC 1146): like a keepalive probe or a
    /// retransmission after a timeout ([`Connection::omits_checksum`]), it asks whether
    /// the peer is still the end that agreed (a new incarnation in SYN-SENT would drop
    /// it as corrupt).
    challenge_checksum: bool,
    /// When the last ACK went out in answer to an invalid segment without data
    /// ([`OUT_OF_WINDOW_ACK_INTERVAL`]).
    invalid_ack_at: Option<Instant>,

    pub(crate) error: Option<ConnError>,
    pub(crate) stats: ConnStats,
    /// The Ethernet and IP headers toward the peer, for the stack's output
    /// (`Tuning::tcp_header_template`; [`super::template`]): kept here because a
    /// connection's remote address is fixed, never read by the state machine.
    pub(crate) link_template: Option<crate::link::template::LinkTemplate>,
    /// The source route its segments take (RFC 9293 MUST-51, MUST-53), behind a pointer
    /// as almost no connection has one; its segments then go through the layers.
    pub(crate) source_route: Option<Box<crate::ip::RouteTo>>,
    /// Bytes of IP options its segments carry: they come out of each segment's data
    /// (RFC 9293 §3.7.1, Eff.snd.MSS).
    ip_option_bytes: usize,
}

/// Challenge ACKs per second (RFC 5961 §7 suggests a limit; Linux uses 1000 per host).
const CHALLENGE_ACK_LIMIT: u32 = 100;

/// The least time between two ACKs a connection sends in answer to segments without data
/// (pure ACKs, SYNs) that fail PAWS or fall outside the window: Linux's
/// `tcp_invalid_ratelimit` default (500 ms; Neal Cardwell's 2015 commits 032ee423 and
/// f2b2c582, "mitigate ACK loops"). An end of a desynchronized connection (data injected
/// into one end, RFC 5961 §5's blind injection, or a middlebox's rewriting) finds the
/// other's ACKs outside its window and answers each with an ACK of its own, which the
/// other finds outside its window, or acknowledging what it never sent, in turn: an ACK
/// loop, endless at wire speed (the fuzz fixture's injected segment drew one,
/// `src/fuzz.rs`). Segments with data or a FIN are always answered (a spurious
/// retransmission asks for its duplicate ACK; data cannot loop). Challenge ACKs keep
/// their own limit (RFC 5961 §7, [`CHALLENGE_ACK_LIMIT`] a second), which bounds a loop
/// of them; Linux also holds them to this interval.
const OUT_OF_WINDOW_ACK_INTERVAL: Duration = Duration::from_millis(500);

/// R1 of RFC 1122 §4.2.3.5: after this many retransmissions of a segment TCP gives IP
/// negative advice (it recommends at least 3).
const NEGATIVE_ADVICE_RETRIES: u32 = 3;

/// The default idle time before keepalive probes, for an application that turns them on
/// without an interval of its own (`Stack::tcp_set_keepalive(h, Some(KEEPALIVE_IDLE))`):
/// two hours, RFC 9293 MUST-28's least (Linux's `tcp_keepalive_time` too).
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(2 * 60 * 60);

/// The longest a connection delays an ACK, whatever [`TcpConfig::delayed_ack`] asks: RFC
/// 9293 MUST-40 (RFC 1122 §4.2.3.2) has it under half a second.
pub const MAX_DELAYED_ACK: Duration = Duration::from_millis(499);

/// How long TS.Recent stays a guide for PAWS (RFC 7323 §5.5: 24 days, under half the
/// range of the fastest timestamp clock the RFC allows, 1 ms a tick).
const PAWS_IDLE_LIMIT: Duration = Duration::from_secs(24 * 24 * 60 * 60);

/// How long a least RTT stands for RACK's reordering window before a newer sample
/// replaces it, as Linux's `tcp_min_rtt_wlen` (300 s): a path whose round trip grew
/// (a new route) would otherwise keep a window sized for the old one.
const MIN_RTT_WINDOW: Duration = Duration::from_secs(300);

/// The timestamp clock: one tick per millisecond (RFC 7323 §5.4 asks for 1 ms to 1 s).
fn ts_clock(now: Instant) -> u32 {
    (now.as_nanos() / 1_000_000) as u32
}

/// Whether timestamp `a` is before `b` on the wrapping clock (RFC 7323 §5.2).
fn tsval_before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// The window shift that lets `buffer` bytes be advertised (RFC 7323 §2.3).
fn shift_for(buffer: usize) -> u8 {
    let mut shift = 0u8;
    while shift < MAX_WINDOW_SHIFT && (buffer >> shift) > 0xffff {
        shift += 1;
    }
    shift
}

impl Connection {
    /// A connection in CLOSED with its buffers, about to become SYN-SENT
    /// ([`connect`](Self::connect)) or SYN-RECEIVED ([`accept_syn`](Self::accept_syn)).
    /// `mss` is the largest segment our interface carries (MTU − 40).
    pub fn new(
        local: (Ipv4Address, u16),
        remote: (Ipv4Address, u16),
        config: TcpConfig,
        iss: SeqNumber,
        mss: usize,
        no_checksum: bool,
    ) -> Connection {
        let mss = mss.clamp(64, 65495);
        let config = TcpConfig {
            delayed_ack: config.delayed_ack.min(MAX_DELAYED_ACK),
            ..config
        };
        Connection {
            state: State::Closed,
            local,
            remote,
            iss,
            snd_una: iss,
            snd_nxt: iss,
            snd_max: iss,
            probe_byte: None,
            snd_wnd: 0,
            max_snd_wnd: 0,
            snd_wl1: SeqNumber(0),
            snd_wl2: iss,
            snd_shift: 0,
            // RFC 9293 §3.7.1: 536 when the peer sends no MSS option.
            snd_mss: 536.min(mss),
            irs: SeqNumber(0),
            rcv_nxt: SeqNumber(0),
            rcv_shift: 0,
            rcv_adv: SeqNumber(0),
            rcv_mss: mss,
            tx: SendBuffer::new(config.send_buffer),
            rx: RecvBuffer::new(config.recv_buffer),
            zero_copy_rx: ZeroCopyRx::Off,
            send_copy: SendCopy::Ring,
            ooo: Assembler::new(config.max_ooo_ranges),
            fin_seq: None,
            fin_queued: false,
            fin_out: None,
            fin_in: false,
            released: false,
            soft_error: None,
            ecn_enabled: false,
            ece_pending: false,
            cwr_pending: false,
            ecn_recover: SeqNumber(0),
            ce_in: false,
            snd_up: None,
            rcv_up: None,
            urgent_signal: false,
            ts_enabled: false,
            ts_offset: 0,
            ts_recent: 0,
            ts_recent_at: Instant::ZERO,
            last_ack_sent: SeqNumber(0),
            sack_enabled: false,
            want_no_checksum: no_checksum,
            no_checksum: false,
            ack_now: false,
            ack_at_once: false,
            unacked_segments: 0,
            delack_deadline: None,
            short_unacked: false,
            interactive: false,
            last_data_sent: None,
            rtx_deadline: None,
            rtx_timer: LossTimer::Retransmit,
            tlp_end: None,
            tlp_new_data: false,
            tlp_dsacked: false,
            reo_wnd_mult: 1,
            min_rtt: None,
            reo_wnd_persist: 0,
            dsack_round: None,
            dsack: None,
            undo: None,
            resent_beyond_recovery: None,
            persist_deadline: None,
            persist_backoff: 0,
            snd_sml: iss,
            keepalive_deadline: None,
            keepalive_sent: 0,
            accepted: false,
            close_deadline: None,
            rtt: RttEstimator::new(config.rto),
            rtt_timer: RttTimer::new(),
            retries: 0,
            syn_resent_at_once: false,
            acked_since_timeout: false,
            probe_now: false,
            keepalive_probe: false,
            negative_advice: false,
            ws_agreed: false,
            cwnd: 0,
            ssthresh: usize::MAX,
            dup_acks: 0,
            limited_sent: 0,
            recovery: None,
            rtx_pending: None,
            scoreboard: Scoreboard::new(),
            ca_acked: 0,
            challenge_window: (Instant::ZERO, 0),
            challenge_checksum: false,
            invalid_ack_at: None,
            error: None,
            stats: ConnStats::default(),
            link_template: None,
            source_route: None,
            ip_option_bytes: 0,
            config,
        }
    }

    pub fn state(&self) -> State {
        self.state
    }

    pub fn config(&self) -> &TcpConfig {
        &self.config
    }

    /// Turns Nagle's algorithm on or off (TCP_NODELAY is off).
    pub fn set_nagle(&mut self, on: bool) {
        self.config.nagle = on;
    }

    /// Changes the keepalive idle time (`None`: off).
    pub fn set_keepalive(&mut self, idle: Option<Duration>, now: Instant) {
        self.config.keepalive = idle;
        self.keepalive_deadline = idle.map(|d| now + d);
        self.keepalive_sent = 0;
    }

    /// The send and receive MSS in force.
    pub fn mss(&self) -> (usize, usize) {
        (self.snd_mss, self.rcv_mss)
    }

    /// Whether the application has shut down sending.
    pub fn fin_queued(&self) -> bool {
        self.fin_queued
    }

    /// Whether the peers agreed to go without checksums (RFC 1146).
    pub fn checksum_elided(&self) -> bool {
        self.no_checksum
    }

    pub fn window_shifts(&self) -> (u8, u8) {
        (self.snd_shift, self.rcv_shift)
    }

    pub fn timestamps_enabled(&self) -> bool {
        self.ts_enabled
    }

    pub fn sack_enabled(&self) -> bool {
        self.sack_enabled
    }

    pub fn cwnd(&self) -> usize {
        self.cwnd
    }

    /// DupThresh in force: 3, or more once a fast retransmit proved unneeded showed
    /// deeper reordering (`TcpConfig::spurious_undo`).
    pub fn dup_thresh(&self) -> usize {
        self.scoreboard.dup_thresh()
    }

    pub fn stats(&self) -> ConnStats {
        self.stats
    }

    /// RCV.NXT and SND.NXT, for tests and the out-of-window injection checks.
    /// Out-of-order ranges held (at most `max_ooo_ranges`), for the fuzz targets' bounds.
    pub(crate) fn ooo_range_count(&self) -> usize {
        self.ooo.range_count()
    }

    pub fn rcv_nxt(&self) -> SeqNumber {
        self.rcv_nxt
    }

    pub fn snd_nxt(&self) -> SeqNumber {
        self.snd_nxt
    }

    pub fn snd_una(&self) -> SeqNumber {
        self.snd_una
    }

    /// The receive window as it would be advertised now, in bytes.
    pub fn rcv_wnd(&self) -> usize {
        self.rx.free()
    }

    /// Whether RCV.NXT is where `seq` would be delivered in order with nothing queued out
    /// of order ahead of `len` bytes: the case in which data may be copied (and summed)
    /// into the receive buffer before the segment is processed.
    pub fn in_order_fits(&self, seq: SeqNumber, len: usize) -> bool {
        self.state.accepts_data()
            && seq == self.rcv_nxt
            && len <= self.receive_window()
            && self
                .ooo
                .ranges()
                .next()
                .is_none_or(|(start, _)| start >= len)
    }

    /// Whether `len` bytes of data at `seq` that arrived in fragments can go into the
    /// receive buffer by reference (`Tuning::tcp_send_by_reference`): they are the next
    /// data, nothing waits out of order, and they fit. A zero-copy receive connection on
    /// a header-splitting NIC keeps its own rule (whole pages only).
    ///
    /// Behind unverified segments (`Tuning::tcp_verify_on_read`), the next data is the
    /// data after them, and the room is what they leave.
    pub(crate) fn stages_by_reference(&self, seq: SeqNumber, len: usize) -> bool {
        let behind = self.rx.unverified();
        self.zero_copy_rx != ZeroCopyRx::Pages
            && self.nothing_out_of_order()
            && self.in_order_fits(seq - behind, len + behind)
    }

    /// Whether `seg`, whose `len` bytes of data arrived by reference, may wait unverified
    /// for the application's read (`Tuning::tcp_verify_on_read`): header prediction's
    /// pure in-order data segment (see [`predicted`](Self::predicted)) in its narrowest
    /// form, the one whose header asks nothing of the connection until the data is
    /// taken: it acknowledges nothing new, leaves the window as it was, passes PAWS, and
    /// follows any unverified segment before it; a copying reader; nothing out of order,
    /// no urgent data, no ECN signal. Everything it does then (RCV.NXT, TS.Recent, the
    /// ACK owed) waits for the checksum.
    pub(crate) fn defers_verification(&self, seg: &TcpRepr, len: usize) -> bool {
        let ts_ok = match (self.ts_enabled, seg.timestamp) {
            (false, _) => true,
            (true, Some(ts)) => !tsval_before(ts.tsval, self.ts_recent),
            (true, None) => false,
        };
        self.state == State::Established
            && self.zero_copy_rx == ZeroCopyRx::Off
            && seg.control == Control::None
            && len > 0
            && seg.ack_number == Some(self.snd_una)
            && usize::from(seg.window_len) << self.snd_shift == self.snd_wnd
            && seg.urgent_pointer.is_none()
            && !seg.ece
            && !seg.cwr
            && self.snd_nxt == self.snd_max
            && self.recovery.is_none()
            && self.dup_acks == 0
            && !(self.sack_enabled && seg.sack_ranges[0].is_some())
            && ts_ok
            && self.stages_by_reference(seg.seq_number, len)
    }

    /// Whether no data waits out of order.
    pub fn nothing_out_of_order(&self) -> bool {
        self.ooo.is_empty()
    }

    /// The sequence number of the head of the send buffer: the first data byte not yet
    /// acknowledged (one past the SYN while it is unacknowledged).
    fn tx_head_seq(&self) -> SeqNumber {
        if self.snd_una == self.iss {
            self.iss + 1
        } else {
            self.snd_una
        }
    }

    /// The send buffer's bytes already sent (from its head to SND.NXT) and not yet sent.
    #[inline]
    fn sent_and_unsent(&self) -> (usize, usize) {
        let sent = self
            .snd_nxt
            .bytes_since(self.tx_head_seq())
            .min(self.tx.len());
        (sent, self.tx.len() - sent)
    }

    /// The sequence number of our FIN, once the application has shut down writing.
    fn fin_seq_out(&self) -> Option<SeqNumber> {
        self.fin_out
    }

    /// The application will send no more: the FIN's place is after the queued data.
    fn queue_fin(&mut self) {
        if !self.fin_queued {
            self.fin_queued = true;
            self.fin_out = Some(self.tx_head_seq() + self.tx.len());
        }
    }

    /// The most data one segment carries: the MSS less the options it will carry
    /// (RFC 9293 §3.7.1: the MSS counts data only, so options come out of it).
    pub(crate) fn segment_data_max(&self) -> usize {
        let mut options = self.ip_option_bytes;
        if self.ts_enabled {
            options += 12;
        }
        // The SACK option as `header` writes it: a D-SACK block first, then the
        // out-of-order ranges, as many as fit. (Until the thirty-second session the
        // D-SACK block was left out here, and a segment carrying one went over the
        // peer's MSS by its bytes; found by the watch on the wire with smoltcp as the
        // peer, tests/tcp_smoltcp.rs.)
        if self.sack_enabled && (!self.ooo.is_empty() || self.dsack.is_some()) {
            let max_blocks = if self.ts_enabled { 3 } else { 4 };
            let blocks = usize::from(self.dsack.is_some()) + self.ooo.range_count();
            options += 4 + 8 * blocks.min(max_blocks);
        }
        self.snd_mss.saturating_sub(options).max(1)
    }

    /// Sends its segments along `route` (or directly), with the route's option bytes out
    /// of each segment's data.
    pub(crate) fn set_source_route(&mut self, route: Option<crate::ip::RouteTo>) {
        self.ip_option_bytes = route.map_or(0, |r| r.extras.options.len());
        self.source_route = route.map(Box::new);
        self.link_template = None;
    }

    /// What its datagrams carry beyond a plain header: its source route's option, if it
    /// has one.
    pub(crate) fn ip_extras(&self) -> crate::ip::IpExtras {
        self.source_route
            .as_deref()
            .map_or(crate::ip::IpExtras::NONE, |r| r.extras)
    }

    /// How a RST this connection sends goes: by its route, with its TTL and DSCP (RFC
    /// 9293 SHLD-22), as its other segments.
    pub(crate) fn send_path(&self) -> super::SendPath {
        super::SendPath {
            extras: self.ip_extras(),
            fields: self.config.ip_fields,
        }
    }

    /// Whether our FIN has been acknowledged.
    fn fin_acked(&self) -> bool {
        self.fin_seq_out().is_some_and(|f| self.snd_una.gt(f))
    }

    fn flight_size(&self) -> usize {
        self.snd_max.bytes_since(self.snd_una)
    }

    // ------------------------------------------------------------------------------------
    // Opening and closing (RFC 9293 §3.10.1-4).

    /// Active OPEN: CLOSED → SYN-SENT; the SYN goes out at the next `next_segment`.
    pub fn connect(&mut self) {
        self.state = State::SynSent;
        self.rcv_shift = if self.config.window_scaling {
            shift_for(self.config.recv_buffer)
        } else {
            0
        };
        self.cwnd = self.snd_mss;
    }

    /// A SYN arrived at a listener: this new connection enters SYN-RECEIVED with the
    /// peer's options, and the SYN-ACK goes out at the next `next_segment`. `offer_*` say
    /// what the listener's host would have offered in its own SYN.
    pub fn accept_syn(&mut self, syn: &TcpRepr, now: Instant) {
        self.state = State::SynReceived;
        self.irs = syn.seq_number;
        self.rcv_nxt = syn.seq_number + 1;
        self.rcv_adv = self.rcv_nxt;
        self.last_ack_sent = self.rcv_nxt;
        self.snd_wnd = usize::from(syn.window_len);
        self.max_snd_wnd = self.snd_wnd;
        self.snd_wl1 = syn.seq_number;
        self.negotiate(syn, now);
        self.cwnd = self.snd_mss;
    }

    /// The ACK `ack` completed a handshake whose SYN-ACK carried a SYN cookie (RFC 4987
    /// §3.6) with ISN `iss` and MSS `peer_mss`: this new connection starts in ESTABLISHED
    /// as SYN-RECEIVED would have left it, our SYN acknowledged, with none of the options
    /// the cookie SYN-ACK did not offer (window scaling, timestamps, SACK, RFC 1146). The
    /// caller then gives `ack` to [`input`](Self::input) for its data.
    pub fn accept_cookie_ack(
        &mut self,
        ack: &TcpRepr,
        iss: SeqNumber,
        peer_mss: u16,
        now: Instant,
    ) {
        self.state = State::Established;
        self.iss = iss;
        self.snd_una = iss + 1;
        self.snd_nxt = iss + 1;
        self.snd_max = iss + 1;
        self.snd_sml = iss + 1;
        self.snd_mss = usize::from(peer_mss).clamp(64, self.rcv_mss);
        self.irs = ack.seq_number - 1;
        self.rcv_nxt = ack.seq_number;
        // The window the cookie SYN-ACK advertised (`Stack::tcp_send_syn_cookie`, no
        // scaling), which the ACK's data may fill.
        self.rcv_adv = self.rcv_nxt + self.config.recv_buffer.min(usize::from(u16::MAX));
        self.last_ack_sent = self.rcv_nxt;
        self.snd_wnd = usize::from(ack.window_len);
        self.max_snd_wnd = self.snd_wnd;
        self.snd_wl1 = ack.seq_number;
        self.snd_wl2 = iss + 1;
        (self.snd_shift, self.rcv_shift, self.ws_agreed) = (0, 0, false);
        (self.ts_enabled, self.sack_enabled, self.no_checksum) = (false, false, false);
        if let Some(d) = self.config.keepalive {
            self.keepalive_deadline = Some(now + d);
        }
        self.cwnd = self.initial_window();
    }

    /// The options of the peer's SYN: what each side offered and both agreed.
    fn negotiate(&mut self, syn: &TcpRepr, now: Instant) {
        if let Some(mss) = syn.max_seg_size {
            self.snd_mss = usize::from(mss).clamp(64, self.rcv_mss);
        }
        // RFC 7323 §2.2: scaling only when both SYNs carry the option.
        match (self.config.window_scaling, syn.window_shift()) {
            (true, Some(shift)) => {
                self.snd_shift = shift;
                self.rcv_shift = shift_for(self.config.recv_buffer);
                self.ws_agreed = true;
            }
            _ => {
                self.snd_shift = 0;
                self.rcv_shift = 0;
                self.ws_agreed = false;
            }
        }
        if let (true, Some(ts)) = (self.config.timestamps, syn.timestamp) {
            self.ts_enabled = true;
            self.set_ts_recent(ts.tsval, now);
        } else {
            self.ts_enabled = false;
        }
        self.sack_enabled = self.config.sack && syn.sack_permitted;
        // RFC 3168 §6.1.1: an ECN-setup SYN has ECE and CWR, the SYN-ACK agreeing to it
        // ECE alone.
        let ecn_setup = if self.state == State::SynSent {
            syn.ece && !syn.cwr
        } else {
            syn.ece && syn.cwr
        };
        self.ecn_enabled = self.config.ecn && ecn_setup;
        self.ecn_recover = self.iss;
        // RFC 1146: in force only when both SYNs name the same algorithm.
        self.no_checksum =
            self.want_no_checksum && syn.alt_checksum_request == Some(AltChecksum::NoChecksum);
        if let Some(d) = self.config.keepalive {
            self.keepalive_deadline = Some(now + d);
        }
    }

    /// Queues data to send; returns bytes taken (fewer than offered when the buffer is
    /// full). The caller checks the state first.
    pub fn send_slices(&mut self, data: &[u8]) -> usize {
        match self.send_copy {
            // A small write to an empty queue goes to the ring (as `push_shared` would
            // send it), without the cuts' arithmetic and the call: a request/response
            // connection's every write.
            SendCopy::Shared { sum, min_segment }
                if self.snd_mss >= min_segment && self.tx.writes_shared(data.len()) =>
            {
                // No sums where the peers agreed on no checksum (RFC 1146).
                let sum = sum.filter(|_| !self.no_checksum);
                // New data goes from SND.MAX in segments of the most data one carries.
                let cuts = Cuts {
                    next: self.snd_max.bytes_since(self.tx_head_seq()),
                    every: self.segment_data_max(),
                };
                self.tx.push_shared(data, sum, Some(cuts))
            }
            _ => self.tx.push(data),
        }
    }

    /// Queues loaned memory to send without a copy (zero-copy send); returns bytes taken
    /// (fewer than offered when the buffer is full). The connection holds slices of the
    /// loan until they are acknowledged. The caller checks the state first.
    pub fn send_loan(&mut self, data: &ExtBuf) -> usize {
        self.tx.push_loan(data)
    }

    /// Queues data to send as urgent data (RFC 9293 §3.8.5, SEND with the URGENT flag):
    /// as [`send_slices`](Self::send_slices), then SND.UP moves to the octet after the
    /// last byte taken (MUST-62), and every segment sent before that octet carries URG
    /// and a pointer to it ([`urgent_field`](Self::urgent_field)). Taking nothing marks
    /// nothing: an urgent indication needs at least one octet of data.
    pub fn send_urgent(&mut self, data: &[u8]) -> usize {
        let n = self.send_slices(data);
        if n > 0 {
            self.snd_up = Some(self.tx_head_seq() + self.tx.len());
        }
        n
    }

    /// The urgent pointer of a segment that starts at `seq`: SND.UP's offset from it,
    /// while SND.UP lies ahead of it. An offset too large for the 16-bit field is sent as
    /// 0xFFFF when that still points past everything sent so far, telling the peer that
    /// urgent data is coming (a later segment says where it ends), and otherwise not at
    /// all; Linux's `tcp_transmit_skb` makes the same choice. So urgent data of any
    /// length (MUST-31) is signalled from its first segment.
    fn urgent_field(&self, seq: SeqNumber) -> Option<u16> {
        let up = self.snd_up?;
        if !up.gt(seq) {
            return None;
        }
        match u16::try_from(up.bytes_since(seq)) {
            Ok(offset) => Some(offset),
            Err(_) => (seq + 0xFFFF).gt(self.snd_nxt).then_some(0xFFFF),
        }
    }

    /// The sixth step of RFC 9293 §3.10.7.4: RCV.UP becomes the later of itself and the
    /// segment's pointer, and the application is signalled when urgent data arrives with
    /// none pending or the pointer advances (MUST-32). A pointer at or behind what the
    /// application has read, or one that does not advance, says nothing new and is
    /// ignored (a receiver "should be robust to invalid urgent pointer values").
    fn note_urgent(&mut self, seq: SeqNumber, pointer: u16, ledger: &Ledger) {
        let up = seq + usize::from(pointer);
        if !up.gt(self.read_seq()) || self.rcv_up.is_some_and(|current| !up.gt(current)) {
            return;
        }
        self.rcv_up = Some(up);
        self.urgent_signal = true;
        ledger.counters().inc(Counter::TcpUrgentSignals);
    }

    /// The sequence number of the next byte the application reads: RCV.NXT less the
    /// bytes received and not yet read, and less the peer's FIN once that is in.
    fn read_seq(&self) -> SeqNumber {
        self.rcv_nxt - (self.rx.len() + usize::from(self.fin_in))
    }

    /// Urgent data not yet read (MUST-33): the bytes from the application's next read up
    /// to RCV.UP, counting any that have not arrived yet; 0 in normal mode. The urgent
    /// data is read in line, in order with the rest (as RFC 6093 advises, and as a
    /// BSD socket with `SO_OOBINLINE` reads it).
    pub fn urgent_remaining(&self) -> usize {
        match self.rcv_up {
            Some(up) if up.gt(self.read_seq()) => up.bytes_since(self.read_seq()),
            _ => 0,
        }
    }

    /// The TTL and DSCP its segments go with.
    pub fn ip_fields(&self) -> IpFields {
        self.config.ip_fields
    }

    /// Sets the TTL and DSCP of the segments sent from now on (a change mid-connection is
    /// allowed, RFC 9293 SHLD-21; the connection's header template is rebuilt for it).
    pub fn set_ip_fields(&mut self, fields: IpFields) {
        self.config.ip_fields = fields;
        self.link_template = None;
    }

    /// Whether urgent data arrived with none pending, or its pointer advanced, since the
    /// last call (MUST-32's signal, which BSD gives as SIGURG); asking clears it.
    pub fn take_urgent_signal(&mut self) -> bool {
        std::mem::take(&mut self.urgent_signal)
    }

    /// After a read: back to normal mode once the application has read up to RCV.UP, so
    /// that a pointer left behind is never compared again once sequence numbers wrap.
    fn note_urgent_read(&mut self) {
        if self.rcv_up.is_some_and(|up| !up.gt(self.read_seq())) {
            self.rcv_up = None;
        }
    }

    /// The application reads: bytes come out of the receive buffer, and once it is empty,
    /// unverified segments, each summed as it is copied (`kernel`) and taken by TCP if it
    /// checks. Opening the window may call for a window update.
    #[inline]
    pub fn recv_into(
        &mut self,
        dst: &mut [u8],
        kernel: Kernel,
        ledger: &Ledger,
        now: Instant,
    ) -> usize {
        let mut n = self.rx.pop_into(dst);
        if n < dst.len() && self.rx.unverified() > 0 {
            n += self.recv_unverified(&mut dst[n..], kernel, ledger, now);
        }
        if n > 0 {
            self.note_urgent_read();
            self.note_window_opened();
            self.ack_if_drained();
        }
        n
    }

    /// The unverified segments' part of [`recv_into`](Self::recv_into), out of line (a
    /// read of ordinary data never calls it): as many as `dst` takes, verified as they
    /// are copied. Returns the bytes copied.
    #[inline(never)]
    fn recv_unverified(
        &mut self,
        dst: &mut [u8],
        kernel: Kernel,
        ledger: &Ledger,
        now: Instant,
    ) -> usize {
        let mut n = 0;
        while n < dst.len() && self.rx.unverified() > 0 {
            match self.verify_next(&mut dst[n..], kernel, ledger, now) {
                Some(copied) => n += copied,
                None => break,
            }
        }
        n
    }

    /// An unverified segment was kept (`defers_verification`). Its ACK is owed once it
    /// checks, by the delayed-ACK timeout at the latest (RFC 1122 §4.2.3.2's bound on
    /// any ACK's delay): if no read has verified it by then, the timer does
    /// (`Stack::tcp_timers`), as Linux's delayed-ACK timer ran a prequeue its reader
    /// left.
    pub(crate) fn note_deferred(&mut self, now: Instant) {
        if self.delack_deadline.is_none() {
            self.delack_deadline = Some(now + self.config.delayed_ack);
        }
    }

    /// Verifies every unverified segment where it lies (no read took them): before a
    /// segment TCP input processes in full, a zero-copy read, or when a timer of the
    /// connection runs. Returns whether all checked.
    #[inline(never)]
    pub fn verify_unread(&mut self, kernel: Kernel, ledger: &Ledger, now: Instant) -> bool {
        let had = self.rx.unverified() > 0;
        while self.rx.unverified() > 0 {
            if self.verify_next(&mut [], kernel, ledger, now).is_none() {
                return false;
            }
        }
        if had {
            // Data became readable: as after input, a read may drain it.
            self.ack_if_drained();
        }
        true
    }

    /// The front unverified segment verified as [`RecvBuffer::verify_front`] does it,
    /// then taken as the header-predicted data segment it is, or dropped with those
    /// behind it. Returns the bytes copied, `None` if it failed.
    fn verify_next(
        &mut self,
        dst: &mut [u8],
        kernel: Kernel,
        ledger: &Ledger,
        now: Instant,
    ) -> Option<usize> {
        let counters = ledger.counters();
        match self.rx.verify_front(dst, kernel)? {
            Ok(v) => {
                let counter = if dst.is_empty() {
                    Counter::TcpVerifiedUnread
                } else {
                    Counter::TcpVerifiedOnRead
                };
                counters.inc(counter);
                self.take_verified(v, now);
                counters.inc(Counter::TcpPredictionDataHits);
                Some(v.copied)
            }
            Err(Failed { behind }) => {
                counters.inc(Counter::TcpDropBadChecksum);
                counters.add(Counter::TcpDropBehindBadChecksum, behind as u64);
                None
            }
        }
    }

    /// The segment input is taking passed its state's checks: noted
    /// ([`segment_accepted`](Self::segment_accepted)), and the keepalive timer restarted.
    #[inline]
    fn accept(&mut self, now: Instant) {
        self.accepted = true;
        self.restart_keepalive(now);
    }

    /// A segment accepted (at input, or once verified): the keepalive timer restarted
    /// (RFC 1122 §4.2.3.6: keepalives only after an idle interval). Not for one the
    /// connection dropped: a peer that is gone would be kept for good by stale or blind
    /// segments (Linux likewise times the idle interval from accepted segments).
    fn restart_keepalive(&mut self, now: Instant) {
        if let Some(d) = self.config.keepalive {
            self.keepalive_deadline = Some(now + d);
            self.keepalive_sent = 0;
        }
    }

    /// What input does for header prediction's in-order data segment, done for an
    /// unverified one that checked (its data is readable already).
    fn take_verified(&mut self, v: Verified, now: Instant) {
        self.stats.segments_in += 1;
        self.restart_keepalive(now);
        // The segment starts at RCV.NXT. It passed PAWS when it was kept; TS.Recent may
        // have moved on since.
        if v.tsval.is_some_and(|t| !tsval_before(t, self.ts_recent)) {
            self.update_ts_recent(self.rcv_nxt, v.tsval, now);
        }
        self.rcv_nxt += v.len;
        self.stats.bytes_received += v.len as u64;
        self.schedule_ack(now, v.len);
        self.stats.hp_data_hits += 1;
    }

    /// The application takes the front of the stream for a zero-copy read (pages by
    /// reference, other bytes copied; at most `max`). Unverified segments are verified
    /// first ([`verify_unread`](Self::verify_unread)): there is no copy to sum them in.
    pub fn take_chunk(
        &mut self,
        max: usize,
        kernel: Kernel,
        ledger: &Ledger,
        now: Instant,
    ) -> Option<Chunk> {
        self.verify_unread(kernel, ledger, now);
        let chunk = self.rx.take_chunk(max)?;
        self.note_urgent_read();
        self.note_window_opened();
        self.ack_if_drained();
        Some(chunk)
    }

    /// A read that drained the receive buffer of a connection that only receives
    /// acknowledges a short segment whose ACK was being delayed, at once (Linux's
    /// `tcp_cleanup_rbuf`, for a connection not in pingpong mode): the sender may be
    /// holding its next short segment until that ACK comes (Nagle), and nothing more will
    /// arrive to make it the second of two. Else a bulk writer's last short segments
    /// waited out the delayed-ACK timer (40 ms in `lab bulk`'s `zero_copy` runs).
    fn ack_if_drained(&mut self) {
        if self.short_unacked
            && !self.interactive
            && self.delack_deadline.is_some()
            && self.rx.is_empty()
        {
            self.ack_now = true;
        }
    }

    /// After the application took data: an update is due once the window can move right
    /// by two segments or half the buffer (RFC 9293 §3.8.6.2.2, receiver SWS avoidance).
    /// Not after the peer's FIN: it sends no more data, so the window means nothing to it,
    /// and a peer that has since closed (LAST-ACK answered) would answer the update with
    /// a RST (Linux's `tcp_cleanup_rbuf` sends none once `RCV_SHUTDOWN` is set).
    fn note_window_opened(&mut self) {
        if !self.state.accepts_data() {
            return;
        }
        let advertised = self.rcv_adv.bytes_since(self.rcv_nxt);
        // What the window field can say: free space past it cannot be offered, and an
        // "update" offering the same window is a duplicate ACK to the peer (three of
        // them, from reads of a large buffer under a field of 65,535 without window
        // scaling, set off a fast retransmission of a FIN, whose late copy then drew a
        // RST from the closed end; found by tests/tcp_conversations.rs).
        let possible = self.rx.free().min(0xffff << self.rcv_shift);
        if possible > advertised {
            let gain = possible - advertised;
            if gain >= 2 * self.rcv_mss || gain >= self.rx.capacity() / 2 {
                self.ack_now = true;
            }
        }
    }

    /// Shutdown for writing (CLOSE of RFC 9293 §3.10.4 while the peer may still send):
    /// a FIN follows the queued data.
    pub fn shutdown_write(&mut self) {
        match self.state {
            State::SynSent if !self.tx.is_empty() => {
                // Data written while the handshake is under way must not be lost: the
                // FIN waits behind it, and the SYN-ACK moves us to FIN-WAIT-1 (the
                // treatment RFC 9293 §3.10.4 gives SYN-RECEIVED with pending data).
                self.queue_fin();
            }
            State::SynSent | State::Closed | State::Listen => {
                // RFC 9293 §3.10.4: with nothing queued the TCB goes, and with it the
                // SYN's retransmission timer (left running, it would time the closed
                // connection out).
                self.state = State::Closed;
                self.clear_timers();
            }
            State::SynReceived | State::Established => {
                self.queue_fin();
                self.state = State::FinWait1;
            }
            State::CloseWait => {
                self.queue_fin();
                self.state = State::LastAck;
            }
            _ => {}
        }
    }

    /// ABORT (RFC 9293 §3.10.5): the caller sends the RST this returns, if any, and the
    /// connection is CLOSED. The RST's `<SEQ=SND.NXT>` is
    /// [`acceptable_seq`](Self::acceptable_seq).
    pub fn abort(&mut self) -> Option<RstReply> {
        let rst = matches!(
            self.state,
            State::SynReceived
                | State::Established
                | State::FinWait1
                | State::FinWait2
                | State::CloseWait
        )
        .then_some(RstReply {
            seq: self.acceptable_seq(),
            ack: None,
        });
        self.state = State::Closed;
        self.clear_timers();
        rst
    }

    /// The application let go of the socket: with data it never read, the peer is reset
    /// (RFC 1122 §4.2.2.13, RFC 9293 SHLD-3), also from CLOSING and LAST-ACK (where an
    /// ABORT would not, as Linux's `tcp_close` does), but never from TIME-WAIT, where the
    /// peer's stream has come whole and the 2·MSL wait must run its course (MUST-13; in
    /// Linux the timewait socket outlives the application's); otherwise the connection
    /// closes in an orderly way and a FIN-WAIT-2 with no FIN coming ends after
    /// `fin_wait2_timeout`, counted from when the FIN was acknowledged or, if it was
    /// before (the application shut down first), from now, as Linux's `tcp_close` does.
    /// (A connection let go in FIN-WAIT-2 once stayed for good when its peer had gone
    /// without a word: its RST lost, or a quiet ABORT from LAST-ACK.)
    pub fn release(&mut self, now: Instant) -> Option<RstReply> {
        self.released = true;
        if !self.rx.is_empty() {
            return match self.state {
                State::TimeWait => None,
                State::Closing | State::LastAck => {
                    let seq = self.acceptable_seq();
                    self.state = State::Closed;
                    self.clear_timers();
                    Some(RstReply { seq, ack: None })
                }
                _ => self.abort(),
            };
        }
        self.shutdown_write();
        if self.state == State::FinWait2 && self.close_deadline.is_none() {
            self.close_deadline = Some(now + self.config.fin_wait2_timeout);
        }
        None
    }

    fn clear_timers(&mut self) {
        self.rtx_deadline = None;
        self.rtx_timer = LossTimer::Retransmit;
        self.persist_deadline = None;
        self.delack_deadline = None;
        self.keepalive_deadline = None;
        self.close_deadline = None;
    }

    fn enter_time_wait(&mut self, now: Instant) {
        self.state = State::TimeWait;
        self.clear_timers();
        self.close_deadline = Some(now + self.config.msl + self.config.msl);
    }

    /// Our timestamp clock as this connection's TSvals read it: the stack's millisecond
    /// clock plus the offset for the pair of hosts ([`IsnGenerator::ts_offset`]).
    ///
    /// [`IsnGenerator::ts_offset`]: crate::tcp::isn::IsnGenerator::ts_offset
    fn ts_now(&self, now: Instant) -> u32 {
        ts_clock(now).wrapping_add(self.ts_offset)
    }

    /// A SYN for this connection in TIME-WAIT that may open a new incarnation of it (RFC
    /// 9293 §3.6.1 MAY-2, after RFC 1122 §4.2.2.13): the SYN must be newer than anything
    /// the old incarnation saw, by RFC 6191 §2's test. If the old incarnation used
    /// timestamps and the SYN carries one, its TSval must be above TS.Recent (or equal
    /// to it with a sequence number past RCV.NXT); otherwise its sequence number must be
    /// past RCV.NXT. On success the connection is closed, and the answer is its SND.NXT:
    /// the new incarnation's ISS must lie beyond it (MAY-2's first condition), so that
    /// the old incarnation's segments still in flight fall outside the new windows.
    /// Anything else (an older SYN, another state) returns `None` and leaves the
    /// connection as it is, for `input` to answer with a challenge ACK.
    ///
    /// MAY-2's second condition, going back to TIME-WAIT if the SYN turns out to be an
    /// old duplicate, is not kept: as in Linux, whose `tcp_timewait_state_process` makes
    /// the same test, the SYN's connection goes its own way.
    pub fn reopen_time_wait(&mut self, syn: &TcpRepr) -> Option<SeqNumber> {
        if self.state != State::TimeWait || syn.control != Control::Syn || syn.ack_number.is_some()
        {
            return None;
        }
        let newer_seq = syn.seq_number.gt(self.rcv_nxt);
        let newer = match syn.timestamp {
            Some(ts) if self.ts_enabled => {
                tsval_before(self.ts_recent, ts.tsval) || (ts.tsval == self.ts_recent && newer_seq)
            }
            _ => newer_seq,
        };
        if !newer {
            return None;
        }
        self.state = State::Closed;
        self.clear_timers();
        Some(self.snd_nxt)
    }

    /// Whether the connection has ended and its PCB can go once the application lets go.
    pub fn is_closed(&self) -> bool {
        self.state == State::Closed
    }

    // ------------------------------------------------------------------------------------
    // Segment arrival (RFC 9293 §3.10.7).

    /// Whether the last segment [`input`](Self::input) took passed the checks of its
    /// state (RFC 9293 §3.10.7: in SYN-SENT an acceptable SYN; in a synchronized state
    /// the window, PAWS and RFC 5961's ACK test), so that what it says of the path (a
    /// source route, RFC 9293 MUST-53 and SHLD-24) may be believed: a blind segment
    /// with the four-tuple must not turn the connection's route.
    pub fn segment_accepted(&self) -> bool {
        self.accepted
    }

    /// Processes a segment for this connection. `data_in_rx` says the payload was already
    /// copied (and verified) into the receive buffer's free space at RCV.NXT (see
    /// [`in_order_fits`](Self::in_order_fits)). Returns a RST to send in reply, if one is
    /// due.
    pub fn input(
        &mut self,
        s: impl Sampling,
        seg: &TcpRepr,
        data_in_rx: bool,
        header_prediction: bool,
        ledger: &Ledger,
        now: Instant,
    ) -> Option<RstReply> {
        self.stats.segments_in += 1;
        self.accepted = false;
        match self.state {
            State::Closed => return RstReply::for_segment(seg),
            State::Listen => return None,
            State::SynSent => return self.input_syn_sent(seg, now),
            _ => {}
        }
        let ce = self.ce_in && std::mem::take(&mut self.ce_in);
        if header_prediction && !ce {
            let _p = ledger.probe(s, Layer::Tcp, Side::Receive, Op::TcpProto);
            if self.predicted(s, seg, data_in_rx, ledger, now) {
                self.accept(now);
                return None;
            }
            self.stats.hp_misses += 1;
            ledger.counters().inc(Counter::TcpPredictionMisses);
        }
        let _p = ledger.probe(s, Layer::Tcp, Side::Receive, Op::TcpProto);
        if self.ecn_enabled && ce {
            self.ecn_ce_in(seg, ledger);
        }
        self.input_synchronized(s, seg, data_in_rx, ledger, now)
    }

    /// RFC 3168 §6.1.3 for a segment that came with CE on a connection that agreed to
    /// ECN (before the usual processing, which may drop it): data in the window owes ECEs
    /// from now on, until the peer's CWR.
    fn ecn_ce_in(&mut self, seg: &TcpRepr, ledger: &Ledger) {
        let in_window = seg.seq_number.ge(self.rcv_nxt)
            && seg.seq_number.lt(self.rcv_nxt + self.rx.free().max(1));
        if in_window && !seg.payload.is_empty() {
            self.ece_pending = true;
            ledger.counters().inc(Counter::TcpEcnCeIn);
        }
    }

    /// RFC 3168 §6.1.2-3 for a segment the window, PAWS and RFC 5961's ACK test took, on
    /// a connection that agreed to ECN: the peer's CWR ends the ECEs owed; an ECE from the
    /// peer acknowledging data in flight reduces the window as a loss would, once a window
    /// of data and not during loss recovery, which reduced it already. Only after those
    /// tests (as Linux's `tcp_ack` after `tcp_validate_incoming`): a blind segment with
    /// the four-tuple and a plausible ACK must not halve the sender's window or silence
    /// the receiver's echo.
    fn ecn_ack_in(&mut self, seg: &TcpRepr, ack: SeqNumber, ledger: &Ledger) {
        if seg.cwr {
            self.ece_pending = false;
        }
        let answered = self.snd_una.lt(self.ecn_recover);
        if seg.ece && ack.ge(self.snd_una) && self.recovery.is_none() && !answered {
            self.halve_ssthresh();
            self.cwnd = self.ssthresh;
            self.ca_acked = 0;
            self.ecn_recover = self.snd_nxt;
            ledger.counters().inc(Counter::TcpEcnReductions);
        }
    }

    /// Whether the connection agreed to ECN (RFC 3168).
    pub fn ecn_enabled(&self) -> bool {
        self.ecn_enabled
    }

    /// For a connection that agreed to ECN, whether a segment of `len` bytes sent as
    /// `kind` goes ECN-capable: new data only, never a retransmission (RFC 3168 §6.1.5)
    /// or a window probe (§6.1.6); the first such segment after a window reduction
    /// carries CWR (§6.1.2). Out of line: off the path of a connection without ECN.
    #[cold]
    #[inline(never)]
    fn ecn_new_data(
        &mut self,
        kind: Send,
        retransmission: bool,
        len: usize,
        repr: &mut TcpRepr,
    ) -> bool {
        let ect = kind == Send::Next && !retransmission && len > 0;
        if ect && self.cwr_pending {
            self.cwr_pending = false;
            repr.cwr = true;
        }
        ect
    }

    /// Jacobson's header prediction (4.4BSD `tcp_input`): in ESTABLISHED, a segment with
    /// only ACK set (PSH allowed), at RCV.NXT, advertising the same window, while nothing
    /// is being retransmitted, is either a pure ACK for new data or pure in-order data
    /// acking nothing new. Each takes a short path; everything else returns `false` for
    /// the full one. Both paths do exactly what the full path would.
    fn predicted(
        &mut self,
        s: impl Sampling,
        seg: &TcpRepr,
        data_in_rx: bool,
        ledger: &Ledger,
        now: Instant,
    ) -> bool {
        if self.state != State::Established
            || seg.control != Control::None
            || seg.urgent_pointer.is_some()
            || seg.ece
            || seg.cwr
            || seg.seq_number != self.rcv_nxt
            || self.snd_nxt != self.snd_max
            || self.recovery.is_some()
            || self.sack_enabled && seg.sack_ranges[0].is_some()
        {
            return false;
        }
        let Some(ack) = seg.ack_number else {
            return false;
        };
        let window = usize::from(seg.window_len) << self.snd_shift;
        let len = seg.payload.len();
        // Jacobson's predicate wants the window unchanged. Here it may move as long as it
        // neither opens nor closes (the persist timer is the slow path's): a receiver whose
        // reader lags advertises a new window with every ACK, and the §3.10.7.4 update
        // rule holds for every in-order segment with an acceptable ACK, so taking it is
        // the same work the slow path would do. Output runs after input either way.
        let window_ok = window == self.snd_wnd || (window > 0 && self.snd_wnd > 0);
        if !window_ok
            || self.dup_acks != 0
            || ack.lt(self.snd_una)
            || ack.gt(self.snd_max)
            || (len == 0 && ack == self.snd_una && window == self.snd_wnd)
            || (len > 0 && (!self.ooo.is_empty() || len > self.receive_window()))
        {
            return false;
        }
        // PAWS and the timestamp to echo (RFC 7323 §4.3, §5.3).
        if self.ts_enabled {
            match seg.timestamp {
                Some(ts) if !tsval_before(ts.tsval, self.ts_recent) => {}
                _ => return false,
            }
        }
        // Predicted: the pure ACK of new data, a pure window update (a reader made room;
        // the same ACK with the same window would be a duplicate, for the slow path), or
        // in-order data that fits, possibly acknowledging new data too (4.4BSD took only
        // data that acknowledged nothing new; Linux's fast path takes both, which is what
        // a request/response exchange sends).
        // 4.4BSD also wanted cwnd >= the send window, i.e. no growth to do; like FreeBSD
        // today we grow cwnd here, so slow start takes the fast path too.
        self.update_ts_recent(seg.seq_number, seg.timestamp.map(|ts| ts.tsval), now);
        self.snd_wnd = window;
        self.max_snd_wnd = self.max_snd_wnd.max(window);
        self.snd_wl1 = seg.seq_number;
        self.snd_wl2 = ack;
        if ack.gt(self.snd_una) {
            self.ack_new_data(ack, seg, now);
        }
        if len == 0 {
            self.stats.hp_ack_hits += 1;
            ledger.counters().inc(Counter::TcpPredictionAckHits);
        } else {
            self.accept_in_order(s, seg.payload, data_in_rx, ledger);
            self.schedule_ack(now, len);
            self.stats.hp_data_hits += 1;
            ledger.counters().inc(Counter::TcpPredictionDataHits);
        }
        true
    }

    /// A segment starting at `seq` with `tsval` was taken, having passed PAWS.
    fn update_ts_recent(&mut self, seq: SeqNumber, tsval: Option<u32>, now: Instant) {
        // RFC 7323 §4.3, §5.3 R3: remember the TSval of a segment starting at or before
        // the last ACK sent. With an ACK delayed, the segments after the first it will
        // acknowledge start past it, so the ACK echoes the earliest, and the sender's
        // round trip counts the delay. (Until the thirty-third session the test was
        // against RCV.NXT, which every in-order segment passes: the ACK echoed the
        // latest.)
        if let (true, Some(tsval)) = (self.ts_enabled, tsval) {
            if seq.le(self.last_ack_sent) {
                self.set_ts_recent(tsval, now);
            }
        }
    }

    fn set_ts_recent(&mut self, tsval: u32, now: Instant) {
        self.ts_recent = tsval;
        self.ts_recent_at = now;
    }

    /// Whether `tsval` fails PAWS (RFC 7323 §5.3 R1): older than TS.Recent, unless
    /// TS.Recent is older than [`PAWS_IDLE_LIMIT`] (§5.5): after so long idle the peer's
    /// clock may have moved on by half its range or more, and its every timestamp would
    /// look old; TS.Recent is then no guide, and the segment is taken.
    fn paws_rejects(&self, tsval: u32, now: Instant) -> bool {
        tsval_before(tsval, self.ts_recent)
            && now.saturating_since(self.ts_recent_at) <= PAWS_IDLE_LIMIT
    }

    /// RFC 9293 §3.10.7.3: SYN-SENT.
    fn input_syn_sent(&mut self, seg: &TcpRepr, now: Instant) -> Option<RstReply> {
        let acceptable_ack = match seg.ack_number {
            Some(ack) => {
                if ack.le(self.iss) || ack.gt(self.snd_max) {
                    // Not for our SYN: reset it unless it is a RST.
                    if seg.control == Control::Rst {
                        return None;
                    }
                    // Most likely the peer's challenge ACK from an older connection on
                    // these ports, which it still holds (RFC 5961 §4: a host that lost a
                    // connection, or a TIME-WAIT that takes no new SYN). The RST ends it
                    // there, so the SYN goes again at once, behind the RST, instead of a
                    // retransmission timeout later (Linux's `tcp_rcv_synsent_state_process`
                    // resends it after two ticks); once per open, so that a peer whose
                    // state the RST does not clear is not answered SYN for ACK.
                    if !self.syn_resent_at_once && self.retries == 0 {
                        self.syn_resent_at_once = true;
                        self.snd_nxt = self.iss;
                    }
                    return Some(RstReply {
                        seq: ack,
                        ack: None,
                    });
                }
                true
            }
            None => false,
        };
        if seg.control == Control::Rst {
            // RFC 5961 §3.2 / RFC 9293: a RST is acceptable only with an acceptable ACK.
            if acceptable_ack {
                self.error = Some(ConnError::Refused);
                self.state = State::Closed;
                self.clear_timers();
            }
            return None;
        }
        if seg.control != Control::Syn {
            return None;
        }
        self.accept(now);
        self.irs = seg.seq_number;
        self.rcv_nxt = seg.seq_number + 1;
        self.rcv_adv = self.rcv_nxt;
        self.last_ack_sent = self.rcv_nxt;
        self.negotiate(seg, now);
        self.cwnd = self.initial_window();
        if let Some(ack) = seg.ack_number {
            // Our SYN is acknowledged: ESTABLISHED, and whatever ICMP said of the way
            // the SYN took is answered (as new data acknowledged clears it later on).
            self.snd_una = ack;
            self.soft_error = None;
            if self.snd_nxt.lt(ack) {
                self.snd_nxt = ack;
            }
            // RFC 7323 §2.2: a SYN's window, the SYN-ACK's too, is never scaled. (Until
            // the thirty-second session it was: a peer with a shift of s seemed to offer
            // 2^s times its window until its next segment, and a large first write
            // overran it; found by the watch on the wire, tests/common/wire_rules.rs.)
            self.snd_wnd = usize::from(seg.window_len);
            self.max_snd_wnd = self.snd_wnd;
            self.snd_wl1 = seg.seq_number;
            self.snd_wl2 = ack;
            self.handshake_done();
            self.take_rtt_sample(ack, seg, now);
            self.retries = 0;
            self.rtx_deadline = None;
            self.state = State::Established;
            if self.fin_queued {
                self.state = State::FinWait1;
            }
            self.ack_now = true;
        } else {
            // Simultaneous open (RFC 9293 Figure 8): SYN-RECEIVED, our SYN again with ACK.
            self.state = State::SynReceived;
            self.snd_wnd = usize::from(seg.window_len);
            self.snd_wl1 = seg.seq_number;
            self.snd_nxt = self.iss;
            self.rtt_timer.cancel();
        }
        None
    }

    /// The handshake completes: if its timer expired on the way, data starts from the
    /// RTO of RFC 6298 §5.7 ([`RttEstimator::handshake_timed_out`]; a sample the
    /// completing ACK brings then supersedes it).
    fn handshake_done(&mut self) {
        if self.stats.timeouts > 0 {
            self.rtt.handshake_timed_out();
        }
    }

    /// The RTT sample, if any, of `seg`, an ACK that advanced SND.UNA to `ack`: the timed
    /// segment's round trip if it covers it (RFC 6298 §3); else, for an ACK of data sent
    /// more than once, which Karn's algorithm cannot time, the time since the TSval the
    /// peer echoes (RFC 7323 §4.2's RTTM: the echo is of the copy that arrived, §4.3).
    /// Like Linux (`tcp_ack_update_rtt`), the echo is used only where the sender's own
    /// timing has nothing, being a millisecond tick beside it, and then only as
    /// [`RttEstimator::sample_echoed`] takes it. Either ends an RTO's back-off, which
    /// Karn's algorithm alone keeps until new data is timed: on a lossy path, for many
    /// timeouts.
    fn take_rtt_sample(&mut self, ack: SeqNumber, seg: &TcpRepr, now: Instant) {
        let resent = self.rtt_timer.acked_resent(ack);
        match (self.rtt_timer.on_ack(ack, now), resent, seg.timestamp) {
            (Some(rtt), _, _) => {
                self.rtt.sample(rtt);
                let replaced = |(min, at): (Duration, Instant)| {
                    rtt <= min || now.saturating_since(at) > MIN_RTT_WINDOW
                };
                if self.min_rtt.is_none_or(replaced) {
                    self.min_rtt = Some((rtt, now));
                }
            }
            // Only an echo of the latest retransmission or later: an older one is of a
            // copy sent before it whose ACK was lost (or the timeout came early), and its
            // round trip would count the wait for the timeout (RFC 3522's Eifel test
            // tells a spurious retransmission the same way). With the first
            // retransmission's time instead, `examples/tcp_loss` through 20% loss took
            // three times as long: an ACK lost after a retransmission filled the hole made
            // the next echo a timeout long, and RTO grew on itself.
            (None, Some(latest), Some(ts))
                if self.ts_enabled && !tsval_before(ts.tsecr, self.ts_now(latest)) =>
            {
                if let Some(rtt) = self.echoed_rtt(ts.tsecr, now) {
                    self.rtt.sample_echoed(rtt);
                }
            }
            _ => {}
        }
    }

    /// The round trip since this end's timestamp clock read `tsecr`, at least one tick (a
    /// round trip within the millisecond, as Linux counts it). None for an echo of zero
    /// (Linux's "no echo"; our clock reads zero only in a simulation's first
    /// millisecond), from the future, or older than the longest RTO: not a TSval this
    /// connection sent for data still unacknowledged.
    fn echoed_rtt(&self, tsecr: u32, now: Instant) -> Option<Duration> {
        let ticks = u64::from(self.ts_now(now).wrapping_sub(tsecr));
        if tsecr == 0 || ticks > self.rtt.config().max.as_millis() {
            return None;
        }
        Some(Duration::from_millis(ticks.max(1)))
    }

    /// RFC 5681 §4.1: with nothing in flight and no data sent for longer than the RTO, the
    /// ACKs that clocked the congestion window out have stopped, and it may no longer say
    /// what the path takes: cwnd goes back to at most the restart window, min(IW, cwnd)
    /// (Linux's `tcp_slow_start_after_idle`, on by default, halves it per RTO idle down
    /// to the same).
    #[inline]
    fn restart_after_idle(&mut self, now: Instant) {
        let Some(last) = self.last_data_sent else {
            return;
        };
        let idle = now.saturating_since(last);
        if self.rtt.outlasts(idle) && self.snd_una == self.snd_max {
            self.cwnd = self.cwnd.min(self.initial_window());
        }
    }

    /// The initial congestion window (RFC 6928: min(10·MSS, max(2·MSS, 14600)), with
    /// the segment count configurable).
    fn initial_window(&self) -> usize {
        let n = self.config.initial_window_segments.max(1);
        (n * self.snd_mss).min((2 * self.snd_mss).max(14600))
    }

    /// Whether to answer `seg`, a segment failing PAWS or outside the window, with an
    /// ACK: always when it holds data or a FIN; a pure ACK or a SYN no sooner than
    /// [`OUT_OF_WINDOW_ACK_INTERVAL`] after the last such answer (counted as
    /// `tcp.invalid_acks_suppressed` when not).
    fn may_answer_invalid(&mut self, seg: &TcpRepr, now: Instant, ledger: &Ledger) -> bool {
        if seg.segment_len() > 0 && seg.control != Control::Syn {
            return true;
        }
        if self
            .invalid_ack_at
            .is_some_and(|t| now.saturating_since(t) < OUT_OF_WINDOW_ACK_INTERVAL)
        {
            ledger.counters().inc(Counter::TcpInvalidAcksSuppressed);
            return false;
        }
        self.invalid_ack_at = Some(now);
        true
    }

    fn send_challenge_ack(&mut self, now: Instant, ledger: &Ledger) {
        if now.saturating_since(self.challenge_window.0) >= Duration::from_secs(1) {
            self.challenge_window = (now, 0);
        }
        if self.challenge_window.1 < CHALLENGE_ACK_LIMIT {
            self.challenge_window.1 += 1;
            self.ack_now = true;
            self.challenge_checksum = true;
            self.stats.challenge_acks += 1;
            ledger.counters().inc(Counter::TcpChallengeAcks);
        } else {
            ledger.counters().inc(Counter::TcpChallengeAcksSuppressed);
        }
    }

    /// RFC 9293 §3.10.7.4: every state after SYN-SENT.
    fn input_synchronized(
        &mut self,
        s: impl Sampling,
        seg: &TcpRepr,
        data_in_rx: bool,
        ledger: &Ledger,
        now: Instant,
    ) -> Option<RstReply> {
        let seg_len = seg.segment_len();
        let window = self.receive_window();

        // PAWS (RFC 7323 §5.3): a segment with an older timestamp is a duplicate. Once
        // timestamps are on, a segment without one is dropped silently (§3.2), RSTs
        // excepted.
        if self.ts_enabled && seg.control != Control::Rst {
            match seg.timestamp {
                Some(ts) if self.paws_rejects(ts.tsval, now) => {
                    ledger.counters().inc(Counter::TcpDropPaws);
                    self.ack_now |= self.may_answer_invalid(seg, now, ledger);
                    return None;
                }
                Some(_) => {}
                None => {
                    ledger.counters().inc(Counter::TcpDropNoTimestamp);
                    return None;
                }
            }
        }

        // SYN in a synchronized state (RFC 9293 §3.10.7.4 fourth, RFC 5961 §4.2): a
        // challenge ACK, whatever its sequence number, so it is asked before the window.
        // In SYN-RECEIVED the peer's own SYN again means our SYN-ACK was lost: resend it.
        // (Its SYN-ACK, in a simultaneous open, goes on to the checks below.)
        let seq = seg.seq_number;
        if seg.control == Control::Syn {
            if self.state != State::SynReceived || seq != self.irs {
                self.send_challenge_ack(now, ledger);
                return None;
            }
            if seg.ack_number.is_none() {
                self.snd_nxt = self.iss;
                return None;
            }
        }

        // First: is the segment in the window?
        let acceptable = match (seg_len, window) {
            (0, 0) => seq == self.rcv_nxt,
            // An ACK up to the right edge inclusive, as BSD's and Linux's tests take it:
            // one from a sender that filled the window exactly carries the edge. (A RST
            // there is outside, RFC 5961 §3.2.)
            (0, w) if seg.control == Control::Rst => {
                seq.ge(self.rcv_nxt) && seq.lt(self.rcv_nxt + w)
            }
            (0, w) => seq.ge(self.rcv_nxt) && seq.le(self.rcv_nxt + w),
            (_, 0) => false,
            (n, w) => {
                let last = seq + (n - 1);
                (seq.ge(self.rcv_nxt) && seq.lt(self.rcv_nxt + w))
                    || (last.ge(self.rcv_nxt) && last.lt(self.rcv_nxt + w))
            }
        };
        // A zero window still takes ACKs and RSTs at RCV.NXT (RFC 9293 §3.10.7.4 note).
        let zero_window_ack = window == 0 && seq == self.rcv_nxt;
        if !acceptable && !zero_window_ack {
            if seg.control != Control::Rst {
                ledger.counters().inc(Counter::TcpDropOutOfWindow);
                self.ack_now |= self.may_answer_invalid(seg, now, ledger);
                let end = seq + seg.payload.len();
                if !seg.payload.is_empty() && end.le(self.rcv_nxt) {
                    self.note_duplicate(seq, end);
                }
            }
            // A retransmission of the FIN TIME-WAIT acknowledged (it ends at RCV.NXT, so
            // it is never in the window): our ACK was lost, and the 2·MSL wait starts
            // over (RFC 9293 §3.10.7.4, eighth step; as BSD's tcp_twcheck and Linux do).
            if self.state == State::TimeWait
                && seg.control == Control::Fin
                && seq + seg_len == self.rcv_nxt
            {
                self.close_deadline = Some(now + self.config.msl + self.config.msl);
            }
            return None;
        }

        // Second: RST (RFC 5961 §3.2).
        if seg.control == Control::Rst {
            if seq != self.rcv_nxt {
                self.send_challenge_ack(now, ledger);
                return None;
            }
            ledger.counters().inc(Counter::TcpResetsIn);
            self.error = match self.state {
                // A passive open goes back to LISTEN: the listener keeps going and this
                // embryonic connection disappears unseen (the error with it). One that
                // came from SYN-SENT (simultaneous open) was refused (RFC 9293
                // §3.10.7.4), which its application must hear rather than end-of-stream.
                State::SynReceived => Some(ConnError::Refused),
                State::Closing | State::LastAck | State::TimeWait => None,
                _ => Some(ConnError::Reset),
            };
            self.state = State::Closed;
            self.clear_timers();
            return None;
        }

        // Third (security/precedence) is not used; fourth (SYN) was asked above.

        // Fifth: the ACK field.
        let ack = seg.ack_number?;
        if self.state == State::SynReceived {
            if ack.le(self.snd_una) || ack.gt(self.snd_max) {
                return Some(RstReply {
                    seq: ack,
                    ack: None,
                });
            }
            self.state = State::Established;
            // Before the ACK's own sample below, which supersedes the fallback.
            self.handshake_done();
            self.snd_wnd = usize::from(seg.window_len) << self.snd_shift;
            self.max_snd_wnd = self.snd_wnd;
            self.snd_wl1 = seq;
            self.snd_wl2 = ack;
            self.cwnd = self.initial_window();
            if self.fin_queued {
                self.state = State::FinWait1;
            }
        }
        // RFC 5961 §5: acceptable ACKs lie in [SND.UNA − MAX.SND.WND, SND.MAX].
        if ack.gt(self.snd_max) {
            ledger.counters().inc(Counter::TcpDropAckTooNew);
            self.send_challenge_ack(now, ledger);
            return None;
        }
        if ack.lt(self.snd_una - self.max_snd_wnd.max(1)) {
            ledger.counters().inc(Counter::TcpDropAckTooOld);
            self.send_challenge_ack(now, ledger);
            return None;
        }
        self.accept(now);
        self.update_ts_recent(seg.seq_number, seg.timestamp.map(|ts| ts.tsval), now);
        if self.ecn_enabled {
            self.ecn_ack_in(seg, ack, ledger);
        }
        self.acked_since_timeout = true;
        // Bytes this ACK's SACK blocks report for the first time.
        let mut newly_sacked = 0;
        if self.sack_enabled {
            let blocks: [Option<(SeqNumber, SeqNumber)>; 4] = seg
                .sack_ranges
                .map(|b| b.map(|(l, r)| (SeqNumber(l), SeqNumber(r))));
            let mut list = [(SeqNumber(0), SeqNumber(0)); 4];
            let mut n = 0;
            for b in blocks.into_iter().flatten() {
                list[n] = b;
                n += 1;
            }
            if n > 0 {
                // RFC 2883 §4: a first block below the cumulative ACK, or inside the
                // second, reports a segment that arrived twice.
                let (l, r) = list[0];
                let inside_second = n > 1 && list[1].0.le(l) && r.le(list[1].1);
                if r.le(ack) || inside_second {
                    self.widen_reorder_window();
                    self.tlp_dsacked = true;
                    if let Some(u) = self.undo.as_mut() {
                        u.dsack(l, r);
                    }
                }
                newly_sacked = self
                    .scoreboard
                    .add_blocks(&list[..n], self.snd_una, self.snd_max);
                if self.recovery.is_some() {
                    if let Some(u) = self.undo.as_mut() {
                        let sacked = self.scoreboard.sacked_bytes();
                        u.reordering = u.reordering.max(sacked.div_ceil(self.snd_mss.max(1)));
                    }
                }
            }
        }

        let window_field = usize::from(seg.window_len) << self.snd_shift;
        let advanced = ack.gt(self.snd_una);
        if advanced {
            self.ack_new_data(ack, seg, now);
        } else if ack == self.snd_una
            && seg.payload.is_empty()
            && seg.control == Control::None
            && window_field == self.snd_wnd
            && self.snd_max != self.snd_una
            && (newly_sacked > 0 || !self.sack_enabled)
        {
            // RFC 5681 §2's duplicate ACK; with SACK, RFC 6675 §2's: one that SACKs data
            // not SACKed before. An ACK for a segment that arrived twice (the network's
            // copy, or a retransmission that was not needed) carries only a D-SACK and
            // says nothing of a loss.
            self.stats.dup_acks_in += 1;
            self.on_dup_ack(ledger);
        }
        // Any ACK that SACKs new data can show the first unacknowledged segment lost: one
        // that also moves SND.UNA, or whose window differs (so not a duplicate). With one
        // ACK per receive batch no duplicate ACK may follow to say so (RFC 6675 looks
        // only at duplicate ACKs; Linux, as here, at any ACK that brings SACK
        // information).
        if newly_sacked > 0
            && self.recovery.is_none()
            && self.snd_max != self.snd_una
            && self.head_lost()
        {
            self.enter_recovery(ledger);
        } else if newly_sacked > 0 && self.head_retransmission_lost() {
            self.resend_head(ledger);
        } else if self.rtx_timer != LossTimer::ReorderWindow
            && (newly_sacked > 0 && self.head_retransmission_late()
                || (newly_sacked > 0 || advanced)
                    && self.config.rack
                    && !self.scoreboard.is_empty()
                    && self.recovery.is_none()
                    && self.snd_max != self.snd_una
                    && self.retries == 0)
        {
            // In recovery, data sent after the head's retransmission SACKed, too little
            // for `head_retransmission_lost`; outside it, SACKed data above a first
            // segment `head_lost` does not find lost: when the window ends, it is (RACK's
            // rule, RFC 8985 §6.2, in sequence space). In the retransmission timer's
            // place, as it is sooner.
            if let Some(at) = self.reorder_window().map(|w| now + w) {
                if self.rtx_deadline.is_none_or(|d| at < d) {
                    self.rtx_deadline = Some(at);
                    self.rtx_timer = LossTimer::ReorderWindow;
                }
            }
        }
        if self.undo.is_some_and(|u| u.all_proven()) {
            self.undo_response(ledger);
        }
        // The send window (RFC 9293 §3.10.7.4, SND.WL1/WL2), and from every segment
        // whose ACK advances SND.UNA, as Linux's `tcp_may_update_window` takes it: a
        // resent segment of the peer's, older than SND.WL1, carries its newest ACK and
        // window, and with the window left as it was, SND.UNA + SND.WND moved past the
        // peer's right edge by as much as the window had shrunk (found by the watch on
        // the wire, tests/common/wire_rules.rs). SND.WL1 does not move back.
        if advanced || self.snd_wl1.lt(seq) || (self.snd_wl1 == seq && self.snd_wl2.le(ack)) {
            let was_zero = self.snd_wnd == 0;
            self.snd_wnd = window_field;
            self.max_snd_wnd = self.max_snd_wnd.max(self.snd_wnd);
            if self.snd_wl1.lt(seq) {
                self.snd_wl1 = seq;
            }
            self.snd_wl2 = ack;
            if was_zero && self.snd_wnd > 0 {
                self.persist_deadline = None;
                self.persist_backoff = 0;
                // The probes' count of unanswered ones ends with them. Nothing in flight
                // but the probes' byte, past the data sent (until the thirty-fifth
                // session this asked for SND.MAX, which that byte always passes, so the
                // count went on into the data's retransmissions: a window probed across
                // link cuts, then opened, gave its data the timeouts left).
                if self.snd_una == self.data_max() {
                    self.retries = 0;
                }
            }
        }

        // State changes on our FIN being acknowledged.
        if self.fin_acked() {
            match self.state {
                State::FinWait1 => {
                    self.state = State::FinWait2;
                    if self.released {
                        self.close_deadline = Some(now + self.config.fin_wait2_timeout);
                    }
                }
                State::Closing => self.enter_time_wait(now),
                State::LastAck => {
                    self.state = State::Closed;
                    self.clear_timers();
                    return None;
                }
                _ => {}
            }
        }
        if self.state == State::TimeWait {
            // Nothing more to take in (a retransmitted FIN is out of the window, above).
            return None;
        }

        // Sixth: URG, in the states that take data (the urgent data itself is delivered
        // in line with the rest). Seventh: the data.
        if let Some(pointer) = seg.urgent_pointer {
            if self.state.accepts_data() {
                self.note_urgent(seq, pointer, ledger);
            }
        }
        if !seg.payload.is_empty() {
            if !self.state.accepts_data() {
                // After the peer's FIN nothing more can come; ignore (RFC 9293).
            } else if self.released {
                // Nobody will read it: reset (RFC 1122 §4.2.2.13; as Linux does).
                ledger.counters().inc(Counter::TcpDataAfterClose);
                let rst = RstReply {
                    seq: self.acceptable_seq(),
                    ack: None,
                };
                self.state = State::Closed;
                self.clear_timers();
                return Some(rst);
            } else {
                self.receive_data(s, seg, data_in_rx, ledger, now);
            }
        }

        // Eighth: FIN.
        if seg.control == Control::Fin && self.state.accepts_data() || self.fin_seq.is_some() {
            let fin = self.fin_seq.unwrap_or(seq + seg.payload.len());
            if seg.control == Control::Fin && fin.ge(self.rcv_nxt) {
                self.fin_seq = Some(fin);
            }
            if self.fin_seq == Some(self.rcv_nxt) && self.state.accepts_data() {
                self.fin_seq = None;
                self.rcv_nxt += 1;
                self.fin_in = true;
                self.ack_now = true;
                ledger.counters().inc(Counter::TcpFinsIn);
                match self.state {
                    State::Established => self.state = State::CloseWait,
                    State::FinWait1 => {
                        if self.fin_acked() {
                            self.enter_time_wait(now);
                        } else {
                            self.state = State::Closing;
                        }
                    }
                    State::FinWait2 => self.enter_time_wait(now),
                    _ => {}
                }
            } else if seg.control == Control::Fin {
                self.ack_now = true;
            }
        }
        None
    }

    /// New data acknowledged (up to `ack`, by `seg`): the send buffer, the RTT, the timers
    /// and the congestion window (RFC 5681 §3.1, RFC 6582 §3.2 for partial ACKs).
    fn ack_new_data(&mut self, ack: SeqNumber, seg: &TcpRepr, now: Instant) {
        // Whether the window was what held the sender back (RFC 7661's "cwnd-limited",
        // in Linux's form: in slow start, while cwnd is under twice the flight). A flow
        // held back by the receiver's window or the application does not grow cwnd,
        // which would otherwise climb without bound and stop restraining bursts.
        let flight = self.flight_size();
        let cwnd_limited = if self.cwnd < self.ssthresh {
            self.cwnd < 2 * flight
        } else {
            flight + self.snd_mss >= self.cwnd
        };
        let mut acked = ack.bytes_since(self.snd_una);
        self.stats.bytes_acked += acked as u64;
        if self.snd_una == self.iss {
            // The SYN's sequence number.
            acked -= 1;
        }
        let data = acked.min(self.tx.len());
        self.tx.consume(data);
        self.snd_una = ack;
        if self.snd_nxt.lt(ack) {
            self.snd_nxt = ack;
        }
        if self.snd_up.is_some_and(|up| !up.gt(ack)) {
            // Everything urgent is acknowledged: out of urgent mode.
            self.snd_up = None;
        }
        // The peer is reached: an earlier ICMP error says nothing now.
        self.soft_error = None;
        self.scoreboard.advance(ack);
        self.take_rtt_sample(ack, seg, now);
        self.retries = 0;
        // The peer is taking data: probes start from the base interval again (4.4BSD).
        self.persist_backoff = 0;
        self.rtx_deadline = if self.snd_una == self.snd_max {
            None
        } else {
            Some(now + self.rtt.rto())
        };
        // A new first segment: the loss probe and the reordering window start afresh.
        self.rtx_timer = LossTimer::Retransmit;

        match self.recovery {
            Some(r) if ack.lt(r.recover) => {
                // Partial ACK: retransmit the next hole, deflate by what was acked, add
                // back one MSS (RFC 6582 §3.2 step 3).
                self.cwnd = self.cwnd.saturating_sub(data) + self.snd_mss;
                let from = if r.high_rxt.gt(ack) { r.high_rxt } else { ack };
                // The new first segment, if already retransmitted, went before SND.MAX
                // now (a later mark than its own, so a later finding, never a false one).
                let resent_below = r.high_rxt.gt(ack).then_some(self.snd_max);
                if let Some(r) = self.recovery.as_mut() {
                    r.head_resent_below = resent_below;
                }
                self.queue_retransmission(from);
            }
            Some(r) => {
                // Full ACK: leave recovery (RFC 6582 §3.2 step 4, option 1).
                self.resent_beyond_recovery = r.high_rxt.gt(ack).then_some(r.high_rxt);
                self.cwnd = self
                    .ssthresh
                    .min(self.flight_size().max(self.snd_mss) + self.snd_mss);
                self.recovery = None;
                self.dup_acks = 0;
                self.rtx_pending = None;
                self.recovery_ended();
            }
            None if !cwnd_limited => self.dup_acks = 0,
            None => {
                self.dup_acks = 0;
                if self.cwnd < self.ssthresh {
                    // Slow start (RFC 5681 §3.1, with RFC 3465's L = 2·SMSS).
                    self.cwnd += data.min(2 * self.snd_mss);
                } else {
                    // Congestion avoidance: one MSS per window of data acked.
                    self.ca_acked += data;
                    if self.ca_acked >= self.cwnd {
                        self.ca_acked -= self.cwnd;
                        self.cwnd += self.snd_mss;
                    }
                }
            }
        }
        if let Some((end, retransmitted)) = self.tlp_end {
            if ack.ge(end) {
                // RFC 8985 §7.4: the probe is answered. A retransmitted probe that no
                // D-SACK shows was unneeded repaired a loss: the congestion response of
                // a fast recovery (unless one is under way).
                self.tlp_end = None;
                if retransmitted && !self.tlp_dsacked && self.recovery.is_none() {
                    self.halve_ssthresh();
                    self.cwnd = self.ssthresh;
                    self.stats.loss_probe_repairs += 1;
                }
            }
        }
        self.arm_loss_probe(now);
    }

    /// RFC 8985 §7.2: with more than a segment in flight, outside recovery and with no
    /// probe outstanding, a tail loss probe is due two smoothed RTTs after the last new
    /// data went or new data was acknowledged, plus a timer tick (`TLP_MIN_EXTRA`, so a
    /// smoothed RTT near zero does not fire it at once); armed in the retransmission
    /// timer's place when it comes sooner. With SACK only (the probe's ACK is read by the
    /// SACK rules: early retransmit, the reordering window). A flight of one segment gets
    /// none: RFC 8985 adds the peer's worst-case delayed ACK then (200 ms), which makes the
    /// probe no sooner than the retransmission timer with its 200 ms minimum (and the
    /// arming, on every request/response segment, cost 72 of `tcp_rr`'s instructions a
    /// transaction).
    #[inline]
    fn arm_loss_probe(&mut self, now: Instant) {
        if self.snd_max.bytes_since(self.snd_una) <= self.snd_mss
            || !self.sack_enabled
            || !self.config.tail_loss_probes
            || self.tlp_end.is_some()
            || self.recovery.is_some()
            || self.retries != 0
            || self.rtx_timer == LossTimer::ReorderWindow
        {
            return;
        }
        let Some(srtt) = self.rtt.srtt() else {
            return;
        };
        let pto = Duration::from_nanos(2 * srtt.as_nanos()) + TLP_MIN_EXTRA;
        let rto_at = match self.rtx_deadline {
            Some(d) if self.rtx_timer == LossTimer::Retransmit => d,
            _ => now + self.rtt.rto(),
        };
        if now + pto < rto_at {
            self.rtx_deadline = Some(now + pto);
            self.rtx_timer = LossTimer::LossProbe;
        }
    }

    /// A recovery or a timeout begins: a probe outstanding or about to go is forgotten
    /// (RFC 8985 §7.1; the recovery makes its own congestion response).
    fn forget_loss_probe(&mut self) {
        self.tlp_end = None;
        if std::mem::take(&mut self.tlp_new_data) {
            self.probe_now = false;
        }
    }

    /// RFC 8985 §7.3: the probe's timeout passed. One segment goes: new data if there is
    /// some and the receiver's window takes it (past the congestion window), else the
    /// last segment sent again; then the retransmission timer runs.
    fn send_loss_probe(&mut self, now: Instant, ledger: &Ledger) {
        let (_, unsent) = self.sent_and_unsent();
        let in_flight = self.snd_nxt.bytes_since(self.snd_una);
        if unsent > 0 && self.snd_wnd > in_flight {
            // Sent by `next_segment`, as the persist timer's probes are.
            self.tlp_new_data = true;
            self.probe_now = true;
        } else {
            let data_end = self.tx_head_seq() + self.tx.len();
            let sent_end = if data_end.lt(self.snd_max) {
                data_end
            } else {
                self.snd_max
            };
            let len = sent_end.bytes_since(self.snd_una).min(self.snd_mss);
            self.rtx_pending = Some((sent_end - len, len));
            self.tlp_end = Some((self.snd_max, true));
            self.tlp_dsacked = false;
        }
        self.rtx_deadline = Some(now + self.rtt.rto());
        self.stats.loss_probes += 1;
        ledger.counters().inc(Counter::TcpLossProbes);
    }

    /// Queues for retransmission the next range of the recovery: with SACK, the next
    /// lost hole at or after `from`; without, the segment at `from`.
    fn queue_retransmission(&mut self, from: SeqNumber) {
        let range = if self.sack_enabled && !self.scoreboard.is_empty() {
            self.scoreboard
                .next_lost(from, self.snd_mss)
                .or(Some((from, self.snd_mss)))
        } else {
            Some((from, self.snd_mss))
        };
        if let Some((start, len)) = range {
            let end = self.snd_max;
            if start.lt(end) {
                let len = len.min(end.bytes_since(start));
                self.rtx_pending = Some((start, len));
            }
        }
    }

    /// RFC 5681 §3.2 and RFC 6582 §3.2: the third duplicate ACK starts fast retransmit;
    /// later ones inflate the window.
    fn on_dup_ack(&mut self, ledger: &Ledger) {
        if self.dup_acks == 0 {
            self.limited_sent = 0;
        }
        self.dup_acks += 1;
        if let Some(r) = self.recovery {
            self.cwnd += self.snd_mss;
            if self.sack_enabled {
                // One more lost range per ACK, as the scoreboard shows them.
                let from = if r.high_rxt.gt(self.snd_una) {
                    r.high_rxt
                } else {
                    self.snd_una
                };
                // A retransmission of the first segment waiting to go keeps its turn.
                let head_waits = self.rtx_pending.is_some_and(|(s, _)| s == self.snd_una);
                if let Some(range) = self.scoreboard.next_lost(from, self.snd_mss) {
                    if !head_waits {
                        self.rtx_pending = Some(range);
                    }
                }
            }
            return;
        }
        // RFC 6675 §5 step (2.b) (and RFC 5827 for a short flight): with SACK, the first
        // segment is also lost once the scoreboard says so (`head_lost`), even before the
        // third duplicate ACK: a receiver that answers a batch of out-of-order segments
        // with one ACK (as probestack's `tcp_output_per_batch` does) may send fewer than
        // three.
        // (RFC 5681 §3.2's three, or more once reordering has been seen: `Undo`.)
        let thresh = u32::try_from(self.scoreboard.dup_thresh()).unwrap_or(u32::MAX);
        let lost = self.dup_acks == thresh || (self.dup_acks < thresh && self.head_lost());
        if lost {
            self.enter_recovery(ledger);
        }
    }

    /// Whether the SACK scoreboard shows the segment at SND.UNA lost: RFC 6675's `IsLost`
    /// (three segments' worth SACKed above it), or, with fewer than four segments
    /// outstanding and no room to send another full segment (so no more ACKs will come
    /// to make three), RFC 5827's early retransmit in its SACK form: all the outstanding
    /// segments but one SACKed. The room counts the congestion window as well as the
    /// receiver's (Linux's reading, `tcp_may_send_now`; RFC 5827 names only the
    /// receiver's, leaving a congestion window that is full to Limited Transmit, whose
    /// segments would bring more duplicate ACKs a round trip later: early retransmit
    /// does not wait for them).
    fn head_lost(&self) -> bool {
        if !self.sack_enabled || self.snd_mss == 0 {
            return false;
        }
        if self.scoreboard.is_lost(self.snd_una, self.snd_mss) {
            return true;
        }
        let outstanding = self.snd_max.bytes_since(self.snd_una);
        let segments = outstanding.div_ceil(self.snd_mss);
        if !(2..4).contains(&segments) {
            return false;
        }
        // RFC 5827 §2: no unsent data, or no room for another segment.
        let (_, unsent) = self.sent_and_unsent();
        if unsent > 0 && self.snd_wnd.min(self.cwnd) >= outstanding + self.snd_mss {
            return false;
        }
        self.scoreboard.sacked_bytes().div_ceil(self.snd_mss) >= segments - 1
    }

    /// In recovery, whether the retransmission of the segment at SND.UNA was lost as well:
    /// the scoreboard shows, of the data sent after that retransmission, as much SACKed
    /// as `IsLost` asks above a byte (RFC 6675 §4: three segments' worth or three
    /// ranges). This is RACK's idea (RFC 8985: a segment is lost once enough sent after
    /// it has been delivered) in sequence space, as Linux's `tcp_mark_lost_retrans` had
    /// it before RACK; RFC 6675 alone never finds a lost retransmission, which then
    /// waits for the retransmission timer.
    fn head_retransmission_lost(&self) -> bool {
        self.head_resent_mark()
            .is_some_and(|mark| self.scoreboard.is_lost(mark - 1, self.snd_mss))
    }

    /// With `rack`, in a recovery that has resent the segment at SND.UNA, SND.MAX then
    /// (`Recovery::head_resent_below`): data above it was sent after the retransmission.
    fn head_resent_mark(&self) -> Option<SeqNumber> {
        match self.recovery {
            Some(Recovery {
                head_resent_below: Some(mark),
                ..
            }) if self.config.rack => Some(mark),
            _ => None,
        }
    }

    /// In recovery, whether data sent after the retransmission of the segment at SND.UNA
    /// has been SACKed, and that segment not acknowledged: the retransmission is late, and
    /// lost if the reordering window passes before it is acknowledged (with fewer SACKed
    /// than `head_retransmission_lost` asks; in a small window no more may come).
    fn head_retransmission_late(&self) -> bool {
        self.head_resent_mark()
            .is_some_and(|mark| self.scoreboard.any_sacked_above(mark - 1))
    }

    /// How long after an ACK that SACKs data above SND.UNA the segment there is deemed
    /// lost, when the scoreboard's rules (`head_lost`) have not found it so: a quarter of
    /// the least RTT, no more than SRTT. This is RACK's reordering window (RFC 8985 §6.2,
    /// `min(reo_wnd_mult · min_RTT / 4, SRTT)`; SRTT / 4 until the thirty-fourth session,
    /// which `examples/tcp_loss` found slower: README "TCP") in a simplified form: RACK
    /// deems a segment lost when a segment sent after it was delivered and its own RTT
    /// plus the window has passed since it was sent; the SACKed data was sent after
    /// SND.UNA's segment, so that moment is at the latest this ACK's arrival plus the
    /// window. (Not so after a timeout, when the SACKed
    /// data may be an original sent before the first segment's retransmission: the window
    /// is not asked until an ACK of new data sets `retries` to 0.) It finds a loss in a
    /// short flight, too short for `IsLost` and too long or too full for early
    /// retransmit, without waiting for the retransmission timer (200 ms at least).
    /// `None` before the first RTT sample.
    fn reorder_window(&self) -> Option<Duration> {
        let quarters = u64::from(self.reo_wnd_mult.clamp(1, 4));
        let (srtt, (min, _)) = (self.rtt.srtt()?, self.min_rtt?);
        let window = min.as_nanos() / 4 * quarters;
        Some(Duration::from_nanos(window.min(srtt.as_nanos())))
    }

    /// A D-SACK came: the reordering window widens by a quarter of the least RTT, at most
    /// once a round trip and up to SRTT, and stays so for 16 recoveries (RFC 8985 §6.2; a
    /// retransmission that was not needed means reordering went past the window).
    fn widen_reorder_window(&mut self) {
        if self.dsack_round.is_some_and(|round| self.snd_una.ge(round)) {
            self.dsack_round = None;
        }
        if self.dsack_round.is_none() {
            self.dsack_round = Some(self.snd_nxt);
            self.reo_wnd_mult = (self.reo_wnd_mult + 1).min(4);
            self.reo_wnd_persist = 16;
        }
    }

    /// A recovery ended: after 16 without a D-SACK the window is a quarter again.
    fn recovery_ended(&mut self) {
        self.reo_wnd_persist = self.reo_wnd_persist.saturating_sub(1);
        if self.reo_wnd_persist == 0 {
            self.reo_wnd_mult = 1;
        }
    }

    /// A duplicate of data already received, `[start, end)`: reported in the next ACK's
    /// first SACK block (RFC 2883), when SACK is in use, an ACK sent at once even in a
    /// batch, so that each duplicate is reported (the sender counts them to learn that
    /// its retransmissions were not needed, `Undo`).
    fn note_duplicate(&mut self, start: SeqNumber, end: SeqNumber) {
        if self.sack_enabled {
            self.dsack = Some((start, end));
            self.ack_at_once = true;
        }
    }

    /// Sends the segment at SND.UNA again within the same recovery (no second congestion
    /// response: one per recovery, RFC 6582 §3.2, RFC 6675 §5).
    fn resend_head(&mut self, ledger: &Ledger) {
        let outstanding = self.snd_max.bytes_since(self.snd_una);
        self.rtx_pending = Some((self.snd_una, self.snd_mss.min(outstanding)));
        if let Some(r) = self.recovery.as_mut() {
            // Set again when the retransmission goes.
            r.head_resent_below = None;
        }
        self.stats.lost_retransmissions += 1;
        ledger.counters().inc(Counter::TcpLostRetransmissions);
    }

    /// A congestion response begins: the window before it is kept, to be put back if
    /// D-SACKs show its retransmissions were not needed (`Undo`).
    fn begin_undo(&mut self, reordering: usize) {
        let resent_before = self
            .resent_beyond_recovery
            .is_some_and(|end| end.gt(self.snd_una));
        self.undo = (self.config.spurious_undo && !resent_before).then_some(Undo {
            cwnd: self.cwnd,
            ssthresh: self.ssthresh,
            unproven: [None; UNDO_RANGES],
            proven: false,
            reordering,
        });
    }

    /// Every retransmission of the last congestion response was reported unneeded: once
    /// recovery is over, the window and threshold go back to what they were before it
    /// (never lower than now).
    fn undo_response(&mut self, ledger: &Ledger) {
        if self.recovery.is_some() {
            return;
        }
        if let Some(u) = self.undo.take() {
            self.cwnd = self.cwnd.max(u.cwnd);
            self.ssthresh = self.ssthresh.max(u.ssthresh);
            if u.reordering >= self.scoreboard.dup_thresh() {
                self.scoreboard.set_dup_thresh(u.reordering + 1);
            }
            self.stats.spurious_undos += 1;
            ledger.counters().inc(Counter::TcpSpuriousUndos);
        }
    }

    /// The congestion response's threshold: half the data in flight, at least two segments
    /// (RFC 5681 §3.1, equation 4). Every window reduction comes through here, and on a
    /// connection with ECN the next new data announces it with CWR (RFC 3168 §6.1.2).
    fn halve_ssthresh(&mut self) {
        self.halve_ssthresh_of(self.flight_size());
    }

    /// ssthresh = max(`flight` / 2, 2·SMSS) (RFC 5681 equation (4)).
    fn halve_ssthresh_of(&mut self, flight: usize) {
        self.ssthresh = (flight / 2).max(2 * self.snd_mss);
        if self.ecn_enabled {
            self.cwr_pending = true;
        }
    }

    /// Fast retransmit: the segment at SND.UNA goes again at once and NewReno recovery
    /// begins (RFC 5681 §3.2 steps 2-3, RFC 6582 §3.2).
    fn enter_recovery(&mut self, ledger: &Ledger) {
        let sacked = self.scoreboard.sacked_bytes().div_ceil(self.snd_mss.max(1));
        self.begin_undo(sacked);
        let flight = self.flight_size();
        // Without the data Limited Transmit sent (RFC 5681 §3.2 step 2).
        self.halve_ssthresh_of(flight.saturating_sub(self.limited_sent));
        // Inflated by the segments that have left the network (RFC 5681 §3.2 step 4's
        // three): DupThresh of them, as many as it took to find the loss.
        self.cwnd = self.ssthresh + self.scoreboard.dup_thresh() * self.snd_mss;
        self.forget_loss_probe();
        self.recovery = Some(Recovery {
            recover: self.snd_max,
            high_rxt: self.snd_una,
            head_resent_below: None,
        });
        self.rtx_pending = Some((self.snd_una, self.snd_mss.min(flight)));
        self.rtt_timer.cancel();
        self.stats.fast_retransmits += 1;
        ledger.counters().inc(Counter::TcpFastRetransmits);
    }

    /// Data in the window: in order straight into the receive buffer, out of order into
    /// the out-of-order queue (whose bytes also sit in the receive buffer's free space).
    fn receive_data(
        &mut self,
        s: impl Sampling,
        seg: &TcpRepr,
        data_in_rx: bool,
        ledger: &Ledger,
        now: Instant,
    ) {
        let mut seq = seg.seq_number;
        let mut data = seg.payload;
        // Trim what was already received.
        if seq.lt(self.rcv_nxt) {
            let dup = self.rcv_nxt.bytes_since(seq).min(data.len());
            self.note_duplicate(seq, seq + dup);
            self.ack_now = true;
            data = &data[dup..];
            seq += dup;
        }
        // Trim what lies past the window.
        let window = self.receive_window();
        let offset = seq.bytes_since(self.rcv_nxt);
        if offset >= window {
            // Only a shut window lets data this far (the acceptance test's note).
            ledger.counters().inc(Counter::TcpDropZeroWindow);
            self.ack_now = true;
            return;
        }
        let data = &data[..data.len().min(window - offset)];
        if data.is_empty() {
            self.ack_now = true;
            return;
        }
        if offset == 0 && self.ooo.is_empty() {
            self.accept_in_order(s, data, data_in_rx, ledger);
            self.schedule_ack(now, data.len());
            return;
        }
        // Out of order, or filling a hole.
        let _p = ledger.probe(s, Layer::Tcp, Side::Receive, Op::ReorderQueue);
        if offset > 0 {
            self.stats.ooo_segments_in += 1;
            ledger.counters().inc(Counter::TcpOutOfOrderSegments);
            if self.ooo.holds(offset, data.len()) {
                // A duplicate of queued data: a D-SACK block, then (refreshed by the add
                // below, so reported first) the SACK block holding it (RFC 2883 §4).
                self.note_duplicate(seq, seq + data.len());
            }
        }
        if self.ooo.add(offset, data.len()).is_err() {
            self.stats.ooo_dropped += 1;
            ledger.counters().inc(Counter::TcpDropOutOfOrderFull);
            self.ack_now = true;
            return;
        }
        if !(data_in_rx && offset == 0) {
            let _c = ledger.probe(s, Layer::Socket, Side::Receive, Op::SocketCopy);
            self.rx.write_unreadable(offset, data);
        }
        let ready = self.ooo.take_front();
        if ready > 0 {
            self.rx.commit(ready);
            self.rcv_nxt += ready;
            self.stats.bytes_received += ready as u64;
        }
        // RFC 5681 §4.2: ACK at once for out-of-order data and for data filling a gap.
        self.ack_now = true;
        self.ack_at_once = true;
    }

    /// Whether input just made an ACK owed at once (out-of-order data, or data filling a
    /// gap; RFC 5681 §4.2), clearing the mark. A receiver that batches its ACKs still
    /// sends these one by one: they are the duplicate ACKs and SACK blocks the sender's
    /// loss recovery counts on.
    pub fn take_ack_at_once(&mut self) -> bool {
        std::mem::take(&mut self.ack_at_once)
    }

    /// In-order data with nothing queued out of order: into the receive buffer.
    #[inline]
    fn accept_in_order(
        &mut self,
        s: impl Sampling,
        data: &[u8],
        data_in_rx: bool,
        ledger: &Ledger,
    ) {
        let _p = ledger.probe(s, Layer::Socket, Side::Receive, Op::SocketCopy);
        if !data_in_rx {
            self.rx.write_unreadable(0, data);
        }
        let n = self.rx.commit(data.len());
        self.rcv_nxt += n;
        self.stats.bytes_received += n as u64;
    }

    /// Delayed ACK (RFC 1122 §4.2.3.2, RFC 5681 §4.2): at once for every second
    /// segment, otherwise within the delay.
    fn schedule_ack(&mut self, now: Instant, len: usize) {
        self.unacked_segments += 1;
        if len < self.rcv_mss {
            self.short_unacked = true;
        }
        if self.unacked_segments >= 2 {
            self.ack_now = true;
        } else if self.delack_deadline.is_none() {
            self.delack_deadline = Some(now + self.config.delayed_ack);
        }
    }

    // ------------------------------------------------------------------------------------
    // Output (after 4.4BSD `tcp_output`).

    /// RCV.WND for the acceptance test and the trimming of data (RFC 9293 §3.10.7.4):
    /// the receive buffer's free space, as BSD takes it (`sbspace`, which may exceed what
    /// receiver silly-window avoidance advertised), but nothing after a zero window was
    /// advertised, as Linux has it. A zero-window probe's byte is then answered, not
    /// taken into space the sender was never offered: taken, it is acknowledged to a
    /// sender that did not count the probe in SND.NXT, whose later segments then sit one
    /// byte below RCV.NXT, and two ends probing each other dropped each other's ACKs as
    /// old for good (found by tests/tcp_conversations.rs).
    #[inline]
    fn receive_window(&self) -> usize {
        if self.rcv_adv.gt(self.rcv_nxt) {
            self.rx.free()
        } else {
            0
        }
    }

    /// The window field to advertise and the right edge it sets, never left of the last
    /// (RFC 9293 §3.8.6.2.2, with receiver SWS avoidance: a window opening by less than
    /// min(MSS, half the buffer) is not offered).
    fn window_to_advertise(&self) -> (u16, SeqNumber) {
        let free = self.rx.free();
        let already = if self.rcv_adv.gt(self.rcv_nxt) {
            self.rcv_adv.bytes_since(self.rcv_nxt)
        } else {
            0
        };
        let threshold = self.rcv_mss.min(self.rx.capacity() / 2);
        let shift = self.rcv_shift;
        let field = if free >= already + threshold {
            free >> shift
        } else {
            // The field that keeps the edge advertised before: RCV.NXT has moved by
            // bytes, not by units of the scale, so it is rounded up (as Linux's
            // `tcp_select_window` aligns it), lest the edge step left (RFC 9293
            // SHLD-14), unless the buffer cannot hold the bytes the rounding adds.
            let up = (already + (1usize << shift) - 1) >> shift;
            if up << shift <= free {
                up
            } else {
                already >> shift
            }
        };
        let field = field.min(0xffff);
        let edge = self.rcv_nxt + (field << self.rcv_shift);
        let edge = if edge.gt(self.rcv_adv) {
            edge
        } else {
            self.rcv_adv
        };
        (field as u16, edge)
    }

    fn header(&self, seq: SeqNumber, control: Control, now: Instant) -> TcpRepr<'static> {
        let (window, _) = self.window_to_advertise();
        let syn = control == Control::Syn;
        let ack = (self.state != State::SynSent).then_some(self.rcv_nxt);
        let mut repr = TcpRepr {
            src_port: self.local.1,
            dst_port: self.remote.1,
            control,
            seq_number: seq,
            ack_number: ack,
            // RFC 7323 §2.2: the window of a SYN is never scaled.
            window_len: if syn {
                self.rx.free().min(0xffff) as u16
            } else {
                window
            },
            ..TcpRepr::default()
        };
        if syn {
            repr.max_seg_size = Some(self.rcv_mss.min(0xffff) as u16);
            let offer = self.state == State::SynSent;
            if self.config.window_scaling && (offer || self.ws_agreed) {
                repr.window_scale = Some(if offer {
                    shift_for(self.config.recv_buffer)
                } else {
                    self.rcv_shift
                });
            }
            if self.config.sack && (offer || self.sack_enabled) {
                repr.sack_permitted = true;
            }
            if self.config.timestamps && (offer || self.ts_enabled) {
                repr.timestamp = Some(TcpTimestamp {
                    tsval: self.ts_now(now),
                    tsecr: if offer { 0 } else { self.ts_recent },
                });
            }
            if self.want_no_checksum && (offer || self.no_checksum) {
                repr.alt_checksum_request = Some(AltChecksum::NoChecksum);
            }
            if self.config.ecn && (offer || self.ecn_enabled) {
                repr.ece = true;
                repr.cwr = offer;
            }
        } else {
            repr.urgent_pointer = self.urgent_field(seq);
            repr.ece = self.ece_pending;
            if self.ts_enabled {
                repr.timestamp = Some(TcpTimestamp {
                    tsval: self.ts_now(now),
                    tsecr: self.ts_recent,
                });
            }
            if self.sack_enabled && (!self.ooo.is_empty() || self.dsack.is_some()) {
                // With timestamps, 3 blocks fit in the 40 option bytes (RFC 2018 §3).
                let fit = if self.ts_enabled { 3 } else { 4 };
                // A D-SACK block goes first (RFC 2883 §4).
                let first = usize::from(self.dsack.is_some());
                if let Some((l, r)) = self.dsack {
                    repr.sack_ranges[0] = Some((l.0, r.0));
                }
                let blocks = self.ooo.sack_ranges().into_iter().flatten();
                for (n, (start, end)) in blocks.take(fit - first).enumerate() {
                    let l = self.rcv_nxt + start;
                    let r = self.rcv_nxt + end;
                    repr.sack_ranges[first + n] = Some((l.0, r.0));
                }
            }
        }
        repr
    }

    /// What to send next, if anything; call until `None`. Updates the sequence variables
    /// and timers as if the segment was sent. `tso_max`: for a device that segments
    /// (TCP segmentation offload), the most new data one super-segment may carry; 0 for
    /// one segment per frame.
    pub fn next_segment(&mut self, now: Instant, tso_max: usize) -> Option<Outgoing> {
        match self.state {
            State::Closed | State::Listen => return None,
            State::SynSent | State::SynReceived => {
                if self.snd_nxt == self.iss {
                    return Some(self.emit_syn(now));
                }
                if self.state == State::SynSent {
                    return None;
                }
            }
            // Closed in SYN-RECEIVED, and the timer went back to an unacknowledged SYN:
            // the SYN goes again first, then the FIN after it.
            State::FinWait1 | State::Closing if self.snd_nxt == self.iss => {
                return Some(self.emit_syn(now));
            }
            State::TimeWait => {
                return self.ack_now.then(|| self.emit_pure_ack(now));
            }
            _ => {}
        }

        // A retransmission chosen by loss recovery goes first.
        if let Some((seq, len)) = self.rtx_pending.take() {
            if seq.ge(self.snd_una) && seq.lt(self.snd_max) {
                if let Some(out) = self.emit_range(seq, len, Send::Retransmit, now) {
                    if let Some(r) = self.recovery.as_mut() {
                        let end = seq + out.data_len;
                        if end.gt(r.high_rxt) {
                            r.high_rxt = end;
                        }
                        if seq == self.snd_una {
                            r.head_resent_below = Some(self.snd_max);
                        }
                    }
                    return Some(out);
                }
            }
        }

        let head = self.tx_head_seq();
        let (sent, unsent) = self.sent_and_unsent();
        self.restart_after_idle(now);
        let limited = if self.dup_acks == 0 {
            0
        } else {
            self.limited_transmit()
        };
        let window = self.snd_wnd.min(self.cwnd + limited);
        let in_flight = self.snd_nxt.bytes_since(self.snd_una);
        let usable = window.saturating_sub(in_flight);
        let mss = self.segment_data_max();
        let fin_pending = self.fin_queued
            && matches!(
                self.state,
                State::FinWait1 | State::LastAck | State::Closing
            )
            && !self.fin_acked();
        let fin_seq = self.fin_seq_out();
        let fin_unsent = fin_pending && fin_seq.is_some_and(|f| self.snd_nxt.le(f));
        // Nagle in Minshall's form (as Linux has it): a short segment waits only while an
        // earlier short one is unacknowledged, not while any data is, so the short tail
        // of a bulk write does not wait for the peer's delayed ACK of the full segments
        // before it. In flight means sent and not acknowledged: after a timeout took
        // SND.NXT back, the short segment is to be sent again, not waited for (else the
        // tail of a stream would wait for its own acknowledgement forever).
        let short_in_flight = self.snd_sml.gt(self.snd_una) && self.snd_sml.le(self.snd_nxt);
        // In urgent mode data goes at once, Nagle or not (as Linux's `tcp_nagle_test`),
        // and in segments of one frame each, so that each carries its own urgent pointer.
        let urgent = self.snd_up.is_some();
        let short_may_go = !short_in_flight || !self.config.nagle || fin_unsent || urgent;
        // A segment with CWR goes alone too: cut from a super-segment, each frame would
        // repeat it.
        let tso_max = if urgent || self.cwr_pending {
            0
        } else {
            tso_max
        };
        let mut len = unsent.min(usable).min(tso_max.max(mss));
        if len > mss && (len < unsent || !short_may_go) {
            // A super-segment holds whole segments; its short tail goes with it only
            // when the tail ends the data and Nagle's test lets a short segment go, as
            // it would without the offload. (Else a writer of 64 KiB at MTU 65535 sent
            // a full segment and a 53-byte one per write, each short one past Nagle.)
            len -= len % mss;
        }

        // A probe the timers asked for: a tail loss probe's new data, a zero-window probe
        // or the override of silly-window avoidance.
        if std::mem::take(&mut self.probe_now) && unsent > 0 {
            if std::mem::take(&mut self.tlp_new_data) {
                // The tail loss probe: one segment of new data, whatever the congestion
                // window says (RFC 8985 §7.3).
                let len = unsent.min(mss).min(self.snd_wnd.saturating_sub(in_flight));
                if len > 0 {
                    let seq = self.snd_nxt;
                    self.tlp_end = Some((seq + len, false));
                    let out = self.emit_range(seq, len, Send::Next, now);
                    self.tlp_end = Some((self.snd_max, false));
                    return out;
                }
            }
            if self.snd_wnd == 0 {
                // Zero-window probe: one byte past the window (RFC 9293 §3.8.6.1).
                return self.emit_range(head + sent, 1, Send::Probe, now);
            }
            if len > 0 {
                // The override timeout of RFC 1122 §4.2.3.4: a window too small for
                // silly-window avoidance, with nothing in flight to bring a larger one,
                // gets what fits.
                let seq = self.snd_nxt;
                return self.emit_range(seq, len, Send::Next, now);
            }
        }
        if self.keepalive_probe {
            // RFC 1122 §4.2.3.6: an ACK one byte behind draws an ACK from a live peer.
            self.keepalive_probe = false;
            if matches!(self.state, State::Established | State::CloseWait) {
                // With the standard checksum, even where none was agreed (RFC 1146): the
                // probe asks whether the peer is still the end that agreed, and one that
                // lost the connection drops an unchecksummed segment as corrupt instead of
                // answering with the RST that ends this one.
                let repr = self.header(self.snd_una - 1, Control::None, now);
                self.note_ack_sent(&repr);
                return Some(Outgoing::header_only(repr, false, false));
            }
        }

        if len > 0 {
            // Sender silly-window avoidance and Nagle (RFC 9293 §3.8.6.2.1, RFC 1122
            // §4.2.3.4): send a full segment; or everything left, if Nagle allows it or
            // is off; or at least half the largest window seen.
            let all = len == unsent;
            // The first of the data a timeout took back goes as the window allows: the
            // avoidance decides how new data is cut, and this data passed it or went by
            // the override timer. Held back, with nothing in flight to bring an ACK and
            // the retransmission timer running (so no persist timer to override it), it
            // would never go again, and the timeouts would end the connection.
            let resend = in_flight == 0 && self.snd_nxt.lt(self.data_max());
            let ok = len >= mss
                || (all && short_may_go)
                || resend
                || (self.max_snd_wnd > 0 && len >= self.max_snd_wnd / 2);
            if ok {
                let seq = self.snd_nxt;
                if !len.is_multiple_of(mss) {
                    self.snd_sml = seq + len;
                }
                if limited > 0 {
                    let past_cwnd = (in_flight + len).saturating_sub(self.cwnd);
                    self.limited_sent += past_cwnd.min(len);
                }
                return self.emit_range(seq, len, Send::Next, now);
            }
        }
        if fin_unsent && unsent == 0 && fin_seq == Some(self.snd_nxt) {
            return Some(self.emit_fin(now));
        }
        // Data held back with nothing in flight: the window is shut or too small to use
        // (cwnd is at least a segment), and no ACK will come to change that. The persist
        // timer probes it (RFC 9293 §3.8.6.1) or overrides silly-window avoidance.
        if unsent > 0 && self.rtx_deadline.is_none() && self.persist_deadline.is_none() {
            self.persist_deadline = Some(now + self.persist_timeout());
        }
        if self.ack_now {
            return Some(self.emit_pure_ack(now));
        }
        None
    }

    /// Limited Transmit (RFC 3042, RFC 5681 §3.2 step 1): how far past the congestion
    /// window new data may go after the first or second duplicate ACK outside recovery,
    /// one segment each (FlightSize at most cwnd + 2·SMSS), and only new data (not what
    /// a timeout took back). The receiver's window still bounds it, and cwnd is not
    /// changed. A DupThresh raised past three by reordering (`Undo`) keeps the two: RFC
    /// 3042 grants no more.
    ///
    /// Only on a connection without SACK, where the count of duplicate ACKs is the only
    /// sign of a loss. With SACK the scoreboard finds it sooner (`IsLost`, early
    /// retransmit, the reordering window), and the extra segments only hold places in
    /// the recovery's window, which counts every byte sent and not acknowledged:
    /// measured with `examples/tcp_loss` over 200 seeds, 4 MiB, Limited Transmit made
    /// the transfer take 0.60 as long at 2% loss and 0.40 at 5% without SACK; with it,
    /// 0.93 at 2% but 1.10 at 5% and 1.09 at 10% (README "TCP", loss recovery).
    fn limited_transmit(&self) -> usize {
        if !self.config.limited_transmit
            || self.sack_enabled
            || self.recovery.is_some()
            || self.snd_nxt != self.snd_max
        {
            return 0;
        }
        self.dup_acks.min(2) as usize * self.snd_mss
    }

    /// The persist timer: for a shut window, the RTO doubled per unanswered probe, 200
    /// ms to 60 s (RFC 9293 §3.8.6.1, SHLD-30; until the thirty-fifth session the
    /// doubling stopped at 64 RTOs, 12.8 s at the 200 ms floor); for a window open but
    /// too small to use, RFC 1122 §4.2.3.4's override timeout, the RTO kept within 0.2-1
    /// s and never backed off.
    fn persist_timeout(&self) -> Duration {
        let rto = self.rtt.rto().as_nanos();
        let (t, max) = if self.snd_wnd == 0 {
            let backed_off = rto.saturating_mul(1u64 << self.persist_backoff.min(16));
            (backed_off, Duration::from_secs(60))
        } else {
            (rto, Duration::from_secs(1))
        };
        Duration::from_nanos(t.clamp(Duration::from_millis(200).as_nanos(), max.as_nanos()))
    }

    /// Bookkeeping common to every segment carrying an ACK. The right edge the segment
    /// advertises comes from its window field, which [`header`](Self::header) set from
    /// [`window_to_advertise`](Self::window_to_advertise) (nothing that decision reads
    /// has changed since), so the window is decided once per segment.
    fn note_ack_sent(&mut self, repr: &TcpRepr) {
        self.ack_now = false;
        // A D-SACK block is reported once (RFC 2883 §4).
        self.dsack = None;
        self.unacked_segments = 0;
        self.short_unacked = false;
        self.delack_deadline = None;
        if let Some(ack) = repr.ack_number {
            self.last_ack_sent = ack;
        }
        if repr.control != Control::Syn {
            // RFC 7323 §2.3: the field is the window shifted right by our scale.
            let edge = self.rcv_nxt + (usize::from(repr.window_len) << self.rcv_shift);
            if edge.gt(self.rcv_adv) {
                self.rcv_adv = edge;
            }
        }
        self.stats.segments_out += 1;
    }

    fn emit_syn(&mut self, now: Instant) -> Outgoing {
        let control = Control::Syn;
        let mut repr = self.header(self.iss, control, now);
        // Once the peer's SYN is in (SYN-RECEIVED, or closed from there), it is a SYN-ACK.
        if self.state != State::SynSent {
            repr.ack_number = Some(self.rcv_nxt);
            // Never back: an ACK sent in SYN-RECEIVED (to an unacceptable segment) may
            // have offered the scaled window, larger than a SYN-ACK's unscaled one. (Until
            // the thirty-third session a SYN-ACK sent again pulled the recorded edge back
            // to its own; the windows after it, each rounded down to the scale unit from
            // that edge, then moved the edge left by more than a unit.)
            let edge = self.rcv_nxt + usize::from(repr.window_len);
            if edge.gt(self.rcv_adv) {
                self.rcv_adv = edge;
            }
        }
        let retransmission = self.snd_max != self.iss;
        self.snd_nxt = self.iss + 1;
        // Never back: a FIN may already have followed the SYN.
        if self.snd_nxt.gt(self.snd_max) {
            self.snd_max = self.snd_nxt;
        }
        if retransmission {
            self.rtt_timer.resent(self.snd_nxt, now);
        } else {
            self.rtt_timer.start(self.snd_nxt, now);
        }
        if self.rtx_deadline.is_none() {
            self.rtx_deadline = Some(now + self.rtt.rto());
        }
        self.note_ack_sent(&repr);
        Outgoing::header_only(repr, false, retransmission)
    }

    /// The sequence number of a segment without data, SYN or FIN (a pure ACK, a RST the
    /// connection sends itself): the first octet never sent (SND.MAX, RFC 9293's SND.NXT),
    /// not `snd_nxt`, which a timeout took back to SND.UNA: the peer may hold everything
    /// up to SND.MAX already, and would drop a segment below its RCV.NXT as old. Two ends
    /// both retransmitting after timeouts then dropped each other's ACKs for good, and an
    /// abort's RST left the peer open (both found by tests/tcp_conversations.rs). So
    /// 4.4BSD's `tcp_output` fills in an ACK-only segment ("we want the sequence number of
    /// the next unsent octet"); like Linux's `tcp_acceptable_seq`, not past the peer's
    /// window, should it have shrunk (or a window probe's byte have gone past it).
    fn acceptable_seq(&self) -> SeqNumber {
        let edge = self.snd_una + self.snd_wnd;
        if self.snd_max.le(edge) {
            self.snd_max
        } else if edge.gt(self.snd_nxt) {
            edge
        } else {
            self.snd_nxt
        }
    }

    /// An ACK without data, at [`acceptable_seq`](Self::acceptable_seq).
    fn emit_pure_ack(&mut self, now: Instant) -> Outgoing {
        let seq = self.acceptable_seq();
        let repr = self.header(seq, Control::None, now);
        self.note_ack_sent(&repr);
        let no_checksum = self.no_checksum && !std::mem::take(&mut self.challenge_checksum);
        Outgoing::header_only(repr, no_checksum, false)
    }

    fn emit_fin(&mut self, now: Instant) -> Outgoing {
        let seq = self.snd_nxt;
        let repr = self.header(seq, Control::Fin, now);
        let retransmission = self.snd_max.gt(seq);
        self.snd_nxt = seq + 1;
        if self.snd_nxt.gt(self.snd_max) {
            self.snd_max = self.snd_nxt;
        }
        if self.rtx_deadline.is_none() {
            self.rtx_deadline = Some(now + self.rtt.rto());
        }
        self.note_ack_sent(&repr);
        Outgoing::header_only(repr, self.omits_checksum(), retransmission)
    }

    /// Whether data and FIN segments go without a checksum: the peers agreed to it (RFC
    /// 1146), and no retransmission timeout has gone unanswered. After one, segments
    /// carry the standard checksum until an ACK ends the back-off: the silence may be a
    /// peer that lost the connection (it restarted, or its TIME-WAIT gave way), whose
    /// stack drops an unchecksummed segment as corrupt; with the checksum it answers with
    /// the RST that ends this connection in one more timeout rather than after every
    /// retransmission (about 15 minutes with the defaults).
    fn omits_checksum(&self) -> bool {
        self.no_checksum && self.rtt.backoff_count() == 0
    }

    /// A data segment for [seq, seq+len) of the send buffer (clamped to the data held),
    /// with FIN when it ends the data and FIN is due.
    /// The end of the data sent in segments of data, which SND.MAX is but for a
    /// zero-window probe's byte sent past it (RFC 9293 §3.8.6.1): the data after the
    /// window opens is sent for the first time, though it starts with that byte (which
    /// the peer's shut window did not take), and is timed, counted and cut as new data.
    /// (4.4BSD counts it as sent again.)
    fn data_max(&self) -> SeqNumber {
        match self.probe_byte {
            Some(p) if p + 1 == self.snd_max => p,
            _ => self.snd_max,
        }
    }

    fn emit_range(
        &mut self,
        seq: SeqNumber,
        len: usize,
        kind: Send,
        now: Instant,
    ) -> Option<Outgoing> {
        let head = self.tx_head_seq();
        let offset = seq.bytes_since(head);
        if offset > self.tx.len() {
            return None;
        }
        let mss = self.segment_data_max();
        // Only new data goes out in super-segments (its caller sized `len`); a
        // retransmission or probe is one segment at most.
        let len = if kind == Send::Next {
            len
        } else {
            len.min(mss)
        };
        let len = len.min(self.tx.len() - offset);
        let end = seq + len;
        let fin = kind != Send::Probe
            && self.fin_queued
            && matches!(
                self.state,
                State::FinWait1 | State::LastAck | State::Closing
            )
            && offset + len == self.tx.len();
        if len == 0 && !fin {
            return None;
        }
        let control = if fin { Control::Fin } else { Control::None };
        let mut repr = self.header(seq, control, now);
        // PSH when the segment empties the buffer (RFC 9293 §3.9.1.2).
        repr.psh = offset + len == self.tx.len();
        let seg_end = end + usize::from(fin);
        // Sent before: a byte of it went already, if only as a probe's (so not
        // ECN-capable, RFC 3168 §6.1.5-6); sent again: it starts below the data sent.
        let sent_before = seq.lt(self.snd_max);
        let retransmission = kind == Send::Retransmit || (sent_before && seq.lt(self.data_max()));
        match kind {
            Send::Next | Send::Retransmit if retransmission => {
                // Karn: no RTT sample from a segment sent twice.
                self.rtt_timer.resent(seg_end, now);
                self.stats.retransmitted_segments += 1;
                if self.undo.as_mut().is_some_and(|u| !u.resent(seq, end)) {
                    self.undo = None;
                }
            }
            Send::Next => self.rtt_timer.start(seg_end, now),
            _ => {}
        }
        if kind == Send::Next && seg_end.gt(self.snd_nxt) {
            self.snd_nxt = seg_end;
        }
        if seg_end.gt(self.snd_max) {
            self.snd_max = seg_end;
            self.probe_byte = (kind == Send::Probe).then_some(seq);
        }
        // A window probe is timed by the persist timer, not the retransmission timer,
        // so a peer that keeps its window shut is never given up on.
        if kind != Send::Probe && self.rtx_deadline.is_none() {
            self.rtx_deadline = Some(now + self.rtt.rto());
        }
        if kind != Send::Probe {
            self.persist_deadline = None;
        }
        if kind == Send::Next {
            self.arm_loss_probe(now);
        }
        if len > 0 {
            self.interactive = true;
            self.last_data_sent = Some(now);
        }
        let ect = self.ecn_enabled && self.ecn_new_data(kind, sent_before, len, &mut repr);
        self.note_ack_sent(&repr);
        Some(Outgoing {
            repr,
            data_offset: offset,
            data_len: len,
            no_checksum: self.omits_checksum(),
            retransmission,
            gso_size: if len > mss { mss as u16 } else { 0 },
            ect,
        })
    }

    // ------------------------------------------------------------------------------------
    // Timers.

    /// The earliest deadline of this connection's timers.
    ///
    /// Asked of every connection at every poll (for the timers due and for the stack's
    /// next deadline), so it is written out rather than as an iterator chain.
    pub fn next_deadline(&self) -> Option<Instant> {
        use crate::time::earlier;
        let d = earlier(self.rtx_deadline, self.persist_deadline);
        let d = earlier(d, self.delack_deadline);
        let d = earlier(d, self.keepalive_deadline);
        earlier(d, self.close_deadline)
    }

    /// Whether [`next_segment`](Self::next_segment) would return `None` and change
    /// nothing, found cheaply: the common case of a connection with nothing to send (a
    /// read that opened no window worth announcing, input that only started the delayed
    /// ACK timer, the call after the last segment went). TCP output asks this first and
    /// returns before looking up the route or deciding anything. It is conservative:
    /// `false` in every state but the usual ones, and then `next_segment` decides.
    ///
    /// In ESTABLISHED and CLOSE-WAIT, with no FIN queued, `next_segment` sends only a
    /// retransmission loss recovery chose, a probe or keepalive the timers asked for,
    /// data not yet sent, or an ACK owed; with none of these it returns `None` having
    /// changed nothing (the persist timer is armed only with unsent data). In TIME-WAIT
    /// it sends only an ACK owed; CLOSED and LISTEN send nothing.
    pub fn output_idle(&self) -> bool {
        match self.state {
            State::Closed | State::Listen => true,
            State::TimeWait => !self.ack_now,
            State::Established | State::CloseWait => {
                // No unsent data: exactly `next_segment`'s `unsent == 0`.
                let sent = self.snd_nxt.bytes_since(self.tx_head_seq());
                !self.ack_now
                    && !self.probe_now
                    && !self.keepalive_probe
                    && !self.fin_queued
                    && self.rtx_pending.is_none()
                    && sent >= self.tx.len()
            }
            _ => false,
        }
    }

    /// Whether output is waiting (an ACK owed, data or a FIN that could go).
    pub fn wants_output(&self) -> bool {
        self.ack_now || self.rtx_pending.is_some() || self.probe_now
    }

    /// Runs the timers that are due. Returns a RST to send when the connection is
    /// dropped on a timeout.
    pub fn on_timers(&mut self, now: Instant, ledger: &Ledger) -> Option<RstReply> {
        if self.close_deadline.is_some_and(|d| d <= now) {
            self.close_deadline = None;
            if matches!(self.state, State::TimeWait | State::FinWait2) {
                self.state = State::Closed;
                self.clear_timers();
                return None;
            }
        }
        if self.delack_deadline.is_some_and(|d| d <= now) {
            self.delack_deadline = None;
            self.ack_now = true;
            // Nothing answered in time: data no longer flows both ways.
            self.interactive = false;
            ledger.counters().inc(Counter::TcpDelayedAcks);
        }
        if self.rtx_deadline.is_some_and(|d| d <= now) {
            self.rtx_deadline = None;
            // One timer for three events, as Linux's `icsk_pending` has it.
            let outstanding = self.snd_una != self.snd_max;
            let quiet = self.recovery.is_none() && outstanding;
            match std::mem::replace(&mut self.rtx_timer, LossTimer::Retransmit) {
                LossTimer::Retransmit => {
                    if let Some(rst) = self.retransmit_timeout(now, ledger) {
                        return Some(rst);
                    }
                }
                LossTimer::LossProbe if quiet => self.send_loss_probe(now, ledger),
                LossTimer::ReorderWindow
                    if quiet && !self.scoreboard.is_empty() && self.state.is_synchronized() =>
                {
                    // Still no ACK for the first segment, and SACKed data above it.
                    self.stats.reorder_window_losses += 1;
                    ledger.counters().inc(Counter::TcpReorderWindowLosses);
                    self.enter_recovery(ledger);
                    self.rtx_deadline = Some(now + self.rtt.rto());
                }
                LossTimer::ReorderWindow if self.head_retransmission_late() => {
                    // The head's retransmission still unacknowledged, data sent after
                    // it SACKed: lost too.
                    self.resend_head(ledger);
                    self.rtx_deadline = Some(now + self.rtt.rto());
                }
                // Recovery began, or all was acknowledged, since: the retransmission
                // timer runs on.
                _ if outstanding => self.rtx_deadline = Some(now + self.rtt.rto()),
                _ => {}
            }
            if self.state == State::Closed {
                return None;
            }
        }
        if self.persist_deadline.is_some_and(|d| d <= now) {
            self.persist_deadline = None;
            self.probe_now = true;
            if self.snd_wnd == 0 {
                self.persist_backoff += 1;
                ledger.counters().inc(Counter::TcpWindowProbes);
                // A peer that answers may keep its window shut for good (RFC 1122
                // §4.2.2.17); one that stops answering is given up on after as many
                // unanswered probes in a row as retransmissions of a segment, as Linux's
                // `tcp_probe_timer` does (its `probes_out` against `tcp_retries2`).
                // Before, a zero window left by a vanished peer was probed forever.
                self.count_probe_timeout();
                if self.retries > self.config.max_retransmissions {
                    ledger.counters().inc(Counter::TcpDropTimeout);
                    self.error = Some(self.timed_out());
                    return self.abort();
                }
                if self.retries == NEGATIVE_ADVICE_RETRIES {
                    self.reached_r1();
                }
            }
            self.persist_deadline = Some(now + self.persist_timeout());
        }
        if self.keepalive_deadline.is_some_and(|d| d <= now) {
            // Keepalives probe an idle connection (RFC 1122 §4.2.3.6). With data or a FIN
            // in flight or waiting, the retransmission and persist timers are asking the
            // peer already (and a peer keeping its window shut may do so for good, RFC
            // 1122 §4.2.2.17); past ESTABLISHED and CLOSE-WAIT no probe is sent. Either
            // way the idle interval starts again, as Linux's `tcp_keepalive_timer`
            // probes only with nothing in flight or queued. (Counted as probes that were
            // never sent, they timed out a connection whose zero window was being probed.)
            let idle = matches!(self.state, State::Established | State::CloseWait)
                && self.snd_una == self.snd_max
                && self.tx.is_empty();
            if !idle {
                self.keepalive_deadline = self.config.keepalive.map(|d| now + d);
                self.keepalive_sent = 0;
                return None;
            }
            if self.keepalive_sent >= self.config.keepalive_probes {
                self.error = Some(self.timed_out());
                return self.abort();
            }
            self.keepalive_sent += 1;
            ledger.counters().inc(Counter::TcpKeepalives);
            // The same probe unanswered R1 times: negative advice, as for a segment
            // retransmitted (RFC 1122 §4.2.3.5), so that a link address gone stale or
            // wrong (an ARP reply corrupted past its CRC) is asked again before the
            // connection is given up on.
            if self.keepalive_sent == NEGATIVE_ADVICE_RETRIES {
                self.negative_advice = true;
            }
            self.keepalive_deadline = Some(now + self.config.keepalive_interval);
            // The probe is an ACK one byte behind (RFC 1122 §4.2.3.6), sent below.
            self.keepalive_probe = true;
        }
        None
    }

    /// R1 timeouts in a row of one segment or probe unanswered (RFC 1122 §4.2.3.5, RFC
    /// 9293 §3.8.3): negative advice to IP (MUST-20), and on a synchronized connection
    /// the application told of the delivery problem (SHLD-9), by the soft error
    /// `TimedOut` unless ICMP gave one, kept until the peer acknowledges new data.
    fn reached_r1(&mut self) {
        self.negative_advice = true;
        if self.state.is_synchronized() {
            self.soft_error.get_or_insert(ConnError::TimedOut);
        }
    }

    /// The timeout of a probe into a shut window (the persist timer's, or a retransmission
    /// that became one): toward giving up counts only a run of them the peer left
    /// unanswered; any acceptable ACK since the last starts the count again (RFC 1122
    /// §4.2.2.17: a receiver that answers may keep its window shut for good; Linux resets
    /// its `probes_out` on any ACK).
    fn count_probe_timeout(&mut self) {
        if std::mem::take(&mut self.acked_since_timeout) {
            self.retries = 0;
        } else {
            self.retries += 1;
        }
    }

    /// RFC 6298 §5.4-5.7 and RFC 5681 §3.1: retransmit from SND.UNA with a loss window of
    /// one segment, back off, give up after too many tries.
    ///
    /// With the peer's window shut (a receiver that shrank it, or a stale ACK the network
    /// delivered after a newer one and RFC 9293's SND.WL1/WL2 test let through) the data
    /// in flight cannot be sent again as the window allows: the timeout sends its first
    /// byte as a zero-window probe instead, which a receiver acknowledges with its window
    /// (RFC 9293 §3.8.6.1: retransmit regularly even when the window is zero; Linux's
    /// `tcp_retransmit_timer` likewise turns its retransmissions into probes). And while
    /// the peer answers, such timeouts do not count toward giving up (RFC 1122 §4.2.2.17:
    /// a receiver may keep its window shut indefinitely): only those in a row that it
    /// left unanswered do. Before, a window shut with data in flight sent nothing at each
    /// timeout until the connection timed out.
    fn retransmit_timeout(&mut self, now: Instant, ledger: &Ledger) -> Option<RstReply> {
        let shut = self.state.is_synchronized() && self.snd_wnd == 0;
        if shut {
            self.count_probe_timeout();
        } else {
            self.acked_since_timeout = false;
            self.retries += 1;
        }
        let limit = match self.state {
            State::SynSent => self.config.max_syn_retransmissions,
            State::SynReceived => self.config.max_syn_ack_retransmissions,
            _ => self.config.max_retransmissions,
        };
        if self.retries > limit {
            ledger.counters().inc(Counter::TcpDropTimeout);
            self.error = Some(self.timed_out());
            return self.abort();
        }
        self.stats.timeouts += 1;
        ledger.counters().inc(Counter::TcpRetransmitTimeouts);
        if self.retries == NEGATIVE_ADVICE_RETRIES {
            self.reached_r1();
        }
        self.rtt.back_off();
        self.rtt_timer.cancel();
        if self.state.is_synchronized() {
            // The first timeout of a run starts a response (one during recovery keeps
            // the recovery's, which holds the window before both).
            if self.retries == 1 && self.recovery.is_none() {
                self.begin_undo(0);
            }
            self.halve_ssthresh();
            self.cwnd = self.snd_mss;
        }
        self.recovery = None;
        self.dup_acks = 0;
        self.rtx_pending = None;
        self.scoreboard.clear();
        self.forget_loss_probe();
        self.recovery_ended();
        // Go back: everything from SND.UNA is sent again as the window allows.
        self.snd_nxt = self.snd_una;
        self.rtx_deadline = Some(now + self.rtt.rto());
        if shut {
            self.probe_now = true;
            ledger.counters().inc(Counter::TcpWindowProbes);
        }
        None
    }

    // ------------------------------------------------------------------------------------
    // ICMP.

    /// Whether the last timeout reached R1 (and clears it): IP should hear negative
    /// advice about the way to the peer.
    pub fn take_negative_advice(&mut self) -> bool {
        std::mem::take(&mut self.negative_advice)
    }

    /// Whether `seq`, quoted by an ICMP error, is data in flight: RFC 5927 §4.1's check
    /// that keeps a blind attacker from forging errors against the connection.
    pub fn quotes_data_in_flight(&self, seq: SeqNumber) -> bool {
        seq.ge(self.snd_una) && seq.lt(self.snd_max)
    }

    /// An ICMP error about the segment starting at `seq` (RFC 9293 §3.9.2.2; the stack
    /// says which `error` its type and code mean, and whether it is `hard`). One that
    /// does not quote data in flight is ignored (RFC 5927 §4.1). A soft error never
    /// aborts the connection (MUST-56): it is kept for the application
    /// ([`soft_error`](Self::soft_error), SHLD-25) and given as the connection's error if
    /// it times out. A hard one aborts a connection still handshaking (SHLD-26): in
    /// SYN-SENT, and in SYN-RECEIVED, where a passive open's embryonic connection would
    /// otherwise hold its place in the listener's backlog while its SYN-ACKs went on for
    /// two minutes (Linux's `tcp_req_err` drops it likewise); later it is kept as a soft
    /// one, as RFC 5461 §4 advises, since it is more often a middlebox's or an attacker's
    /// than the truth about a live connection. Returns whether it was taken.
    pub fn icmp_error(&mut self, seq: SeqNumber, error: ConnError, hard: bool) -> bool {
        if !self.quotes_data_in_flight(seq) || self.state == State::Closed {
            return false;
        }
        if hard && matches!(self.state, State::SynSent | State::SynReceived) {
            self.error = Some(error);
            self.state = State::Closed;
            self.clear_timers();
        } else {
            self.soft_error = Some(error);
        }
        true
    }

    /// The last soft error since the peer last acknowledged new data: ICMP's (RFC 9293
    /// SHLD-25), or `TimedOut` after R1 timeouts in a row (SHLD-9).
    pub fn soft_error(&self) -> Option<ConnError> {
        self.soft_error
    }

    /// The error a connection that gives up takes: the soft error ICMP reported, if
    /// any, else `TimedOut` (as Linux reports `sk_err_soft`).
    fn timed_out(&self) -> ConnError {
        self.soft_error.unwrap_or(ConnError::TimedOut)
    }

    /// An ICMP fragmentation-needed says the path carries datagrams of at most `mtu`
    /// (RFC 1191 §6.5): segments shrink to fit, never grow; what was in flight was too big
    /// and lost, so it goes again at once, from SND.UNA, without the congestion response
    /// of a timeout (the loss says nothing about congestion). Returns whether the MSS fell.
    pub fn path_mtu_reduced(&mut self, mtu: usize) -> bool {
        let mss = mtu.saturating_sub(IP_TCP_HEADERS);
        if mss >= self.snd_mss || !self.state.is_synchronized() {
            return false;
        }
        self.snd_mss = mss;
        self.cwnd = self.cwnd.max(self.snd_mss);
        self.rtt_timer.cancel();
        self.recovery = None;
        self.dup_acks = 0;
        self.rtx_pending = None;
        self.scoreboard.clear();
        self.snd_nxt = self.snd_una;
        true
    }
}

/// What a tail loss probe waits beyond two smoothed RTTs: Linux's `TCP_TIMEOUT_MIN`, 2 ms
/// (`tcp_schedule_loss_probe`), the timer granularity RFC 8985 §7.2 leaves to the
/// implementation.
const TLP_MIN_EXTRA: Duration = Duration::from_millis(2);

/// The IPv4 and TCP headers without options: what the MSS leaves out of an MTU.
pub const IP_TCP_HEADERS: usize = 40;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tcp::send_buffer::Piece;

    const END_A: (Ipv4Address, u16) = (Ipv4Address::new(198, 18, 0, 1), 40000);
    const END_B: (Ipv4Address, u16) = (Ipv4Address::new(198, 18, 0, 2), 5001);
    /// The stream's bytes repeat with a prime period, so a misplaced byte shows.
    const PERIOD: u64 = 251;

    /// A small deterministic generator (xorshift64*), enough to pick test actions.
    struct Dice(u64);

    impl Dice {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
        }
    }

    /// Everything `next_segment` may change.
    #[allow(clippy::type_complexity)]
    fn output_state(
        c: &Connection,
    ) -> (
        [SeqNumber; 4],
        (bool, bool, bool, u32),
        [Option<Instant>; 3],
        Option<(SeqNumber, usize)>,
        ConnStats,
    ) {
        (
            [c.snd_nxt, c.snd_max, c.snd_sml, c.rcv_adv],
            (
                c.ack_now,
                c.probe_now,
                c.keepalive_probe,
                c.unacked_segments,
            ),
            [c.delack_deadline, c.rtx_deadline, c.persist_deadline],
            c.rtx_pending,
            c.stats,
        )
    }

    /// Checks the fast test against the full one: a connection `output_idle` calls idle
    /// has nothing to send and `next_segment` changes nothing. Returns whether it was idle.
    fn check_idle(c: &mut Connection, now: Instant) -> bool {
        if !c.output_idle() {
            return false;
        }
        let before = output_state(c);
        assert!(
            c.next_segment(now, 0).is_none(),
            "idle in {} but had a segment",
            c.state
        );
        assert_eq!(output_state(c), before, "idle in {} but changed", c.state);
        true
    }

    /// Sends what `from` has, each segment reaching `to` unless `lose` says otherwise.
    /// Returns the segments sent.
    fn flush(
        from: &mut Connection,
        to: &mut Connection,
        ledger: &Ledger,
        now: Instant,
        mut lose: impl FnMut() -> bool,
    ) -> usize {
        let mut sent = 0;
        while sent < 200 {
            check_idle(from, now);
            let expected_edge = from.window_to_advertise().1;
            let Some(out) = from.next_segment(now, 0) else {
                break;
            };
            if out.repr.control != Control::Syn {
                // The edge recorded is the one the window decision gave, whichever segment
                // carried it.
                assert_eq!(from.rcv_adv, expected_edge, "the edge of {:?}", out.repr);
            }
            sent += 1;
            let mut payload = Vec::with_capacity(out.data_len);
            from.tx
                .for_each_piece(out.data_offset, out.data_len, None, |piece| match piece {
                    Piece::Copy(s) => payload.extend_from_slice(s),
                    Piece::Loaned(e) | Piece::Shared(e, _) => payload.extend_from_slice(&e),
                });
            if lose() {
                continue;
            }
            let seg = TcpRepr {
                payload: &payload,
                ..out.repr
            };
            // A RST in reply (to a connection a timeout aborted) is not delivered.
            let _ = to.input(crate::probe::TESTED, &seg, false, true, ledger, now);
        }
        sent
    }

    /// Writes the next bytes of the pattern stream, as urgent data if `urgent`.
    fn write(c: &mut Connection, written: &mut u64, n: u64, urgent: bool) {
        if !c.state.can_send() || c.fin_queued {
            return;
        }
        let data: Vec<u8> = (*written..*written + n)
            .map(|i| (i % PERIOD) as u8)
            .collect();
        *written += if urgent {
            c.send_urgent(&data)
        } else {
            c.send_slices(&data)
        } as u64;
    }

    /// Reads up to `n` bytes and checks them against the pattern stream.
    fn read(c: &mut Connection, read: &mut u64, n: usize) {
        let mut buf = vec![0u8; n];
        // Never unverified data here: segments reach these connections directly.
        let got = c.recv_into(&mut buf, Kernel::best(), &Ledger::new(), Instant::ZERO);
        for (i, b) in buf[..got].iter().enumerate() {
            assert_eq!(
                u64::from(*b),
                (*read + i as u64) % PERIOD,
                "byte {}",
                *read + i as u64
            );
        }
        *read += got as u64;
    }

    /// Random traffic both ways (writes, reads, losses, timers, closes) between two
    /// connections joined by hand; before every `next_segment`, the connection is asked
    /// `output_idle`, and whenever it says idle, `next_segment` must send nothing and
    /// change nothing. Small buffers make zero windows and the persist timer happen;
    /// losses make retransmissions, SACK and recovery.
    #[test]
    fn output_idle_agrees_with_next_segment() {
        let ledger = Ledger::new();
        let config = TcpConfig {
            send_buffer: 12_000,
            recv_buffer: 6_000,
            keepalive: Some(Duration::from_secs(2)),
            keepalive_interval: Duration::from_millis(500),
            ..TcpConfig::default()
        };
        let mut idle_seen = 0;
        for seed in 1..=24u64 {
            let mut dice = Dice(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
            let mut now = Instant::from_nanos(1_000_000_000);
            let mut a = Connection::new(END_A, END_B, config, SeqNumber(1000), 1460, false);
            a.connect();
            let syn = a.next_segment(now, 0).expect("SYN");
            let mut b = Connection::new(END_B, END_A, config, SeqNumber(9_000_000), 1460, false);
            b.accept_syn(&syn.repr, now);
            flush(&mut b, &mut a, &ledger, now, || false);
            flush(&mut a, &mut b, &ledger, now, || false);
            assert_eq!((a.state, b.state), (State::Established, State::Established));

            let (mut a_written, mut b_written, mut a_read, mut b_read) = (0, 0, 0, 0);
            let loss = dice.below(4) * 5; // percent
            for _ in 0..400 {
                idle_seen += usize::from(check_idle(&mut a, now));
                idle_seen += usize::from(check_idle(&mut b, now));
                match dice.below(20) {
                    0..=3 => {
                        let urgent = dice.below(8) == 0;
                        write(&mut a, &mut a_written, 1 + dice.below(3000), urgent);
                    }
                    4..=5 => write(&mut b, &mut b_written, 1 + dice.below(200), false),
                    6..=8 => read(&mut b, &mut b_read, 1 + dice.below(4000) as usize),
                    9..=10 => read(&mut a, &mut a_read, 1 + dice.below(4000) as usize),
                    11..=13 => {
                        flush(&mut a, &mut b, &ledger, now, || dice.below(100) < loss);
                    }
                    14..=16 => {
                        flush(&mut b, &mut a, &ledger, now, || dice.below(100) < loss);
                    }
                    17..=18 => {
                        now += Duration::from_millis(dice.below(400));
                        for c in [&mut a, &mut b] {
                            if c.next_deadline().is_some_and(|d| d <= now) {
                                assert!(c.on_timers(now, &ledger).is_none() || c.is_closed());
                            }
                        }
                    }
                    _ => {
                        if dice.below(10) == 0 {
                            let c = if dice.below(2) == 0 { &mut a } else { &mut b };
                            c.shutdown_write();
                        }
                    }
                }
                // B's urgent data never reaches past what A wrote, however segments
                // were lost and resent.
                assert!(b.urgent_remaining() as u64 <= a_written - b_read);
            }
        }
        assert!(
            idle_seen > 1000,
            "the idle test held only {idle_seen} times"
        );
    }

    /// Two connections joined by hand, ESTABLISHED, with SACK (and timestamps) agreed.
    fn established(ledger: &Ledger, now: Instant) -> (Connection, Connection) {
        established_with(TcpConfig::default(), ledger, now)
    }

    fn established_with(
        config: TcpConfig,
        ledger: &Ledger,
        now: Instant,
    ) -> (Connection, Connection) {
        let mut a = Connection::new(END_A, END_B, config, SeqNumber(1000), 1460, false);
        a.connect();
        let syn = a.next_segment(now, 0).expect("SYN");
        let mut b = Connection::new(END_B, END_A, config, SeqNumber(9_000_000), 1460, false);
        b.accept_syn(&syn.repr, now);
        flush(&mut b, &mut a, ledger, now, || false);
        flush(&mut a, &mut b, ledger, now, || false);
        assert_eq!((a.state, b.state), (State::Established, State::Established));
        assert_eq!((a.sack_enabled, b.sack_enabled), (config.sack, config.sack));
        (a, b)
    }

    /// RACK's reordering window is a quarter of the least RTT the sender timed (RFC 8985
    /// §6.2, RACK.min_RTT), not of SRTT, which queueing inflates; a least RTT 300 s old
    /// gives way to the next sample (`MIN_RTT_WINDOW`, as Linux's `tcp_min_rtt_wlen`).
    #[test]
    fn the_reordering_window_is_a_quarter_of_the_least_rtt() {
        let ledger = Ledger::new();
        let t0 = Instant::from_millis(1_000);
        let (mut a, mut b) = established(&ledger, t0);
        let mut written = 0;
        // One timed round trip of `rtt` starting at `at`.
        let mut exchange = |a: &mut Connection, b: &mut Connection, at: Instant, rtt: u64| {
            write(a, &mut written, 1000, false);
            assert_eq!(flush(a, b, &ledger, at, || false), 1);
            b.ack_now = true;
            assert_eq!(
                flush(b, a, &ledger, at + Duration::from_millis(rtt), || false),
                1
            );
        };
        // The handshake's round trip took no time: a least RTT of zero, for 300 s.
        assert_eq!(a.reorder_window(), Some(Duration::ZERO));
        let later = t0 + MIN_RTT_WINDOW + Duration::from_secs(1);
        exchange(&mut a, &mut b, later, 10);
        exchange(&mut a, &mut b, later + Duration::from_secs(1), 40);
        // SRTT (0, then 10 and 40 ms) is 6.1 ms: a quarter of it would be 1.5 ms.
        let srtt = a.rtt.srtt().unwrap();
        assert!(srtt < Duration::from_micros(8_000), "{srtt:?}");
        assert_eq!(a.reorder_window(), Some(Duration::from_micros(2_500)));
        // Another 300 s on, the least RTT is the next sample's.
        exchange(
            &mut a,
            &mut b,
            later + MIN_RTT_WINDOW + Duration::from_secs(2),
            40,
        );
        let srtt = a.rtt.srtt().unwrap();
        assert!(srtt > Duration::from_millis(10), "{srtt:?}");
        assert_eq!(a.reorder_window(), Some(Duration::from_millis(10)));
        // Widened by D-SACKs to four quarters, it stops at SRTT.
        a.reo_wnd_mult = 4;
        assert_eq!(a.reorder_window(), Some(srtt));
    }

    /// Limited Transmit (RFC 3042; RFC 5681 §3.2 step 1) on a connection without SACK:
    /// with the congestion window full, the first and second duplicate ACKs each send one
    /// segment of new data; the third starts fast retransmit, with ssthresh half the
    /// flight before those two segments (§3.2 step 2). With the switch off, or with SACK,
    /// duplicate ACKs send nothing new.
    #[test]
    fn limited_transmit_sends_new_data_on_two_duplicate_acks_without_sack() {
        for (sack, on) in [(false, true), (false, false), (true, true)] {
            let ledger = Ledger::new();
            let now = Instant::from_nanos(1_000_000_000);
            // Unscaled, so that the duplicate ACKs carry exactly the window the SYN-ACK
            // offered (65,535 bytes is no multiple of a scale).
            let config = TcpConfig {
                sack,
                timestamps: false,
                window_scaling: false,
                limited_transmit: on,
                ..TcpConfig::default()
            };
            let (mut a, _b) = established_with(config, &ledger, now);
            let mut written = 0;
            write(&mut a, &mut written, 40 * 1460, false);
            let mss = a.snd_mss;
            let mut flight = 0;
            while let Some(out) = a.next_segment(now, 0) {
                flight += out.data_len;
            }
            assert_eq!(flight, a.cwnd, "a full congestion window");
            // The n-th duplicate ACK: with SACK, one more segment past the lost first
            // one SACKed (RFC 6675's duplicate ACK brings SACK news).
            let (una, rcv_nxt) = (a.snd_una, a.rcv_nxt);
            let window_len = u16::try_from(a.snd_wnd).unwrap();
            let dup = |n: usize| TcpRepr {
                src_port: END_B.1,
                dst_port: END_A.1,
                seq_number: rcv_nxt,
                ack_number: Some(una),
                window_len,
                sack_ranges: [
                    sack.then_some(((una + mss).0, (una + (n + 1) * mss).0)),
                    None,
                    None,
                    None,
                ],
                ..TcpRepr::default()
            };
            for n in 1..=2 {
                let max = a.snd_max;
                let seg = dup(n);
                assert!(a
                    .input(crate::probe::TESTED, &seg, false, true, &ledger, now)
                    .is_none());
                assert_eq!(a.dup_acks, n as u32);
                let out = a.next_segment(now, 0);
                if on && !sack {
                    let out = out.expect("a segment of new data");
                    let sent = (out.repr.seq_number, out.data_len);
                    assert_eq!(sent, (max, mss), "duplicate ACK {n}");
                } else {
                    assert!(out.is_none(), "duplicate ACK {n}: {out:?}");
                }
            }
            if sack {
                continue;
            }
            let seg = dup(3);
            assert!(a
                .input(crate::probe::TESTED, &seg, false, true, &ledger, now)
                .is_none());
            let out = a.next_segment(now, 0).expect("the fast retransmission");
            assert_eq!(out.repr.seq_number, a.snd_una);
            assert_eq!(a.ssthresh, (flight / 2).max(2 * mss));
        }
    }

    /// ECE and CWR count only on a segment the connection accepts (the window, PAWS,
    /// RFC 5961's ACK test): a blind segment with the four-tuple, an ACK for data in
    /// flight and ECE outside the window neither halves the window nor, with CWR, ends
    /// the ECEs owed; the same flags in the window do both (RFC 3168 §6.1.2-3).
    #[test]
    fn ece_and_cwr_count_only_on_an_acceptable_segment() {
        let ledger = Ledger::new();
        let now = Instant::from_nanos(1_000_000_000);
        let config = TcpConfig {
            ecn: true,
            timestamps: false,
            ..TcpConfig::default()
        };
        let (mut a, mut b) = established_with(config, &ledger, now);
        assert!(a.ecn_enabled && b.ecn_enabled);
        let mut written = 0;
        write(&mut a, &mut written, 20 * 1460, false);
        while a.next_segment(now, 0).is_some() {}
        let reductions = || ledger.counters().get(Counter::TcpEcnReductions);
        let flags = |seq: SeqNumber, ack: SeqNumber, ece: bool, cwr: bool| TcpRepr {
            src_port: END_B.1,
            dst_port: END_A.1,
            seq_number: seq,
            ack_number: Some(ack),
            window_len: u16::MAX,
            ece,
            cwr,
            ..TcpRepr::default()
        };
        let (cwnd, ack) = (a.cwnd, a.snd_una + a.snd_mss);
        let blind = flags(a.rcv_nxt + 1_000_000_000, ack, true, false);
        a.input(crate::probe::TESTED, &blind, false, true, &ledger, now);
        assert_eq!(
            (a.cwnd, a.snd_una, reductions()),
            (cwnd, ack - a.snd_mss, 0)
        );
        b.ece_pending = true;
        let blind = flags(b.rcv_nxt + 1_000_000_000, b.snd_una, false, true);
        b.input(crate::probe::TESTED, &blind, false, true, &ledger, now);
        assert!(b.ece_pending, "a blind CWR ended the ECEs");

        let seg = flags(a.rcv_nxt, ack, true, false);
        a.input(crate::probe::TESTED, &seg, false, true, &ledger, now);
        assert_eq!(reductions(), 1);
        assert!(a.cwnd < cwnd, "{} against {cwnd}", a.cwnd);
        let seg = flags(b.rcv_nxt, b.snd_una, false, true);
        b.input(crate::probe::TESTED, &seg, false, true, &ledger, now);
        assert!(!b.ece_pending);
    }

    /// An ACK waits no longer than [`MAX_DELAYED_ACK`], under half a second (RFC 9293
    /// MUST-40), however long the configuration asks.
    #[test]
    fn an_ack_is_delayed_under_half_a_second_whatever_the_configuration() {
        let ledger = Ledger::new();
        let now = Instant::from_nanos(1_000_000_000);
        for (asked, delay) in [
            (Duration::from_millis(40), Duration::from_millis(40)),
            (Duration::from_secs(2), MAX_DELAYED_ACK),
        ] {
            let config = TcpConfig {
                delayed_ack: asked,
                ..TcpConfig::default()
            };
            let (mut a, mut b) = established_with(config, &ledger, now);
            let mut written = 0;
            write(&mut a, &mut written, 100, false);
            assert_eq!(flush(&mut a, &mut b, &ledger, now, || false), 1);
            assert_eq!(b.delack_deadline, Some(now + delay), "{asked:?}");
        }
    }

    /// With a window scale, the edge the window field says does not step left while the
    /// reader lags a little (RFC 9293 SHLD-14): RCV.NXT moves by bytes, not by units of
    /// the scale, so the field is rounded up where the buffer holds the bytes that adds
    /// (here the reader takes 1,000 bytes of each 1,001, too little to open the window by
    /// a segment, so the edge advertised before is kept). Rounded down, it stepped back
    /// by up to a unit less one. (Where the buffer cannot hold the rounding, a reader
    /// that reads nothing, it still does: the buffer is fixed, where Linux's
    /// `tcp_select_window` rounds up and overcommits memory.)
    #[test]
    fn a_scaled_window_keeps_its_edge_while_the_reader_lags() {
        let ledger = Ledger::new();
        let now = Instant::from_nanos(1_000_000_000);
        let config = TcpConfig {
            timestamps: false,
            recv_buffer: 1 << 20,
            send_buffer: 1 << 20,
            ..TcpConfig::default()
        };
        let (mut a, mut b) = established_with(config, &ledger, now);
        assert!(b.rcv_shift >= 4, "shift {}", b.rcv_shift);
        let wire_edge = |b: &Connection| {
            let (field, _) = b.window_to_advertise();
            b.rcv_nxt + (usize::from(field) << b.rcv_shift)
        };
        let mut edge = wire_edge(&b);
        let (mut written, mut taken) = (0, 0);
        for round in 0..200 {
            write(&mut a, &mut written, 1001, false);
            flush(&mut a, &mut b, &ledger, now, || false);
            read(&mut b, &mut taken, 1000);
            let now_edge = wire_edge(&b);
            assert!(
                now_edge.ge(edge),
                "round {round}: {} after {}",
                now_edge.0,
                edge.0
            );
            b.note_ack_sent(&b.header(b.snd_nxt, Control::None, now));
            edge = now_edge;
        }
    }

    /// Urgent data (RFC 9293 §3.8.5) between two connections joined by hand: the segment
    /// carries a pointer past the urgent data (MUST-62); RCV.UP moves only forward, with
    /// one signal per move (MUST-32); the count of urgent bytes to read falls as the
    /// application reads (MUST-33); the sender leaves urgent mode once it is all
    /// acknowledged.
    #[test]
    fn urgent_pointers_move_forward_and_signal_once_each() {
        let ledger = Ledger::new();
        let now = Instant::from_nanos(1_000_000_000);
        let (mut a, mut b) = established(&ledger, now);
        let start = b.read_seq();
        let (mut written, mut read_b) = (0, 0);
        write(&mut a, &mut written, 100, false);
        write(&mut a, &mut written, 20, true);
        let out = a.next_segment(now, 0).expect("the data");
        assert_eq!((out.data_len, out.repr.urgent_pointer), (120, Some(120)));
        a.snd_nxt = a.snd_una; // as if lost: flushed again below
        flush(&mut a, &mut b, &ledger, now, || false);
        assert!(b.take_urgent_signal());
        assert!(!b.take_urgent_signal(), "one signal per pointer");
        assert_eq!(b.urgent_remaining(), 120);
        // A pointer that does not advance, or one behind the reading, is no news.
        b.note_urgent(start, 120, &ledger);
        b.note_urgent(start, 7, &ledger);
        assert!(!b.take_urgent_signal());
        assert_eq!(b.urgent_remaining(), 120);
        // More urgent data moves it on: a second signal.
        write(&mut a, &mut written, 10, true);
        flush(&mut a, &mut b, &ledger, now, || false);
        assert!(b.take_urgent_signal());
        assert_eq!(b.urgent_remaining(), 130);
        read(&mut b, &mut read_b, 125);
        assert_eq!(b.urgent_remaining(), 5);
        read(&mut b, &mut read_b, 5);
        assert_eq!((b.urgent_remaining(), b.rcv_up), (0, None), "normal mode");
        b.note_urgent(start, 50, &ledger);
        assert_eq!((b.rcv_up, b.take_urgent_signal()), (None, false));
        assert_eq!(ledger.counters().get(Counter::TcpUrgentSignals), 2);
        // B's ACK takes A out of urgent mode: its next segment has no pointer.
        flush(&mut b, &mut a, &ledger, now, || false);
        assert_eq!(a.snd_up, None);
        write(&mut a, &mut written, 10, false);
        let out = a.next_segment(now, 0).expect("the data");
        assert_eq!(out.repr.urgent_pointer, None);
    }

    /// Urgent data longer than the 16-bit field reaches (MUST-31): its first segments
    /// point 0xFFFF ahead, the rest exactly; each segment is one frame, even where the
    /// device would take super-segments, so that each carries its own pointer.
    #[test]
    fn long_urgent_data_is_signalled_from_its_first_segment() {
        let ledger = Ledger::new();
        let now = Instant::from_nanos(1_000_000_000);
        let (mut a, _b) = established(&ledger, now);
        a.snd_wnd = 1 << 20;
        a.cwnd = 1 << 20;
        let mut written = 0;
        write(&mut a, &mut written, 100_000, true);
        assert_eq!(written, 100_000);
        let end = a.snd_una + 100_000;
        let mut segments = 0;
        while let Some(out) = a.next_segment(now, 65_000) {
            assert!(out.data_len <= a.snd_mss, "a super-segment in urgent mode");
            let seq = out.repr.seq_number;
            let want = end.bytes_since(seq).min(0xFFFF) as u16;
            assert_eq!(
                out.repr.urgent_pointer,
                Some(want),
                "at {}",
                seq.bytes_since(a.snd_una)
            );
            segments += 1;
        }
        assert!(segments > 60, "{segments} segments");
    }

    /// A response begun while the last recovery's retransmissions above SND.UNA may be in
    /// flight cannot be undone; one begun after SND.UNA passed them can, unless the switch
    /// is off.
    #[test]
    fn a_response_begun_over_the_last_recoverys_retransmissions_cannot_be_undone() {
        let ledger = Ledger::new();
        let now = Instant::from_nanos(1_000_000_000);
        let (mut a, _b) = established(&ledger, now);
        let mut written = 0;
        write(&mut a, &mut written, 20_000, false);
        while a.next_segment(now, 0).is_some_and(|o| o.data_len > 0) {}
        let una = a.snd_una;
        // The last recovery ended with a retransmission above SND.UNA perhaps in flight: a
        // D-SACK of this recovery's would not show the original arrived.
        a.resent_beyond_recovery = Some(una + 1000);
        a.enter_recovery(&ledger);
        assert!(a.undo.is_none());
        // Once SND.UNA has passed them, it can be.
        a.recovery = None;
        a.resent_beyond_recovery = Some(una);
        a.enter_recovery(&ledger);
        assert!(a.undo.is_some());
        // Not with the switch off.
        a.recovery = None;
        a.config.spurious_undo = false;
        a.enter_recovery(&ledger);
        assert!(a.undo.is_none());
    }

    /// After a retransmission timeout, the ACK of the segment sent again ends the RTO's
    /// back-off when timestamps say which copy arrived (RFC 7323 §4.2); without
    /// timestamps Karn's algorithm takes no sample and the back-off stays (RFC 6298 §5).
    /// Until the thirty-third session the echo was not used at all.
    #[test]
    fn an_ack_of_resent_data_ends_the_back_off_only_with_timestamps() {
        for timestamps in [true, false] {
            let ledger = Ledger::new();
            let start = Instant::from_nanos(1_000_000_000);
            let config = TcpConfig {
                timestamps,
                ..TcpConfig::default()
            };
            let (mut a, mut b) = established_with(config, &ledger, start);
            assert_eq!(a.ts_enabled, timestamps);
            // The handshake's round trip took no time: SRTT 0, RTO its minimum.
            let base = a.rtt.rto();
            assert_eq!(base, config.rto.min);
            let backed_off = base + base;
            let mut written = 0;
            write(&mut a, &mut written, 1000, false);
            assert!(a.next_segment(start, 0).is_some_and(|o| o.data_len == 1000)); // lost
            let resend = start + base;
            assert!(a.retransmit_timeout(resend, &ledger).is_none());
            assert_eq!(a.rtt.rto(), backed_off);
            assert_eq!(flush(&mut a, &mut b, &ledger, resend, || false), 1);
            b.ack_now = true;
            let acked = resend + Duration::from_millis(5);
            assert_eq!(flush(&mut b, &mut a, &ledger, acked, || false), 1);
            assert_eq!(a.snd_una, a.snd_max, "all acknowledged");
            // A round trip of 5 ms, under the RTO: SRTT is left to the sender's own timing.
            assert_eq!(a.rtt.srtt(), Some(Duration::ZERO));
            assert_eq!(a.rtt.rto(), if timestamps { base } else { backed_off });
        }
    }

    /// A delayed ACK echoes the TSval of the earliest segment it acknowledges (RFC 7323
    /// §4.3 (1)), so the sender's round trip counts the receiver's delay; a segment that
    /// fills a hole is echoed at once (§4.3 (3)).
    #[test]
    fn a_delayed_ack_echoes_the_earliest_segment_it_acknowledges() {
        let ledger = Ledger::new();
        let t0 = Instant::from_millis(1_000);
        let (mut a, mut b) = established(&ledger, t0);
        let mut written = 0;
        let ms = Duration::from_millis;
        let full = a.segment_data_max() as u64;
        // Two full segments, 5 ms apart: the first's ACK waits for the second.
        write(&mut a, &mut written, full, false);
        assert_eq!(flush(&mut a, &mut b, &ledger, t0 + ms(5), || false), 1);
        assert!(
            b.next_segment(t0 + ms(5), 0).is_none(),
            "the ACK is delayed"
        );
        write(&mut a, &mut written, full, false);
        assert_eq!(flush(&mut a, &mut b, &ledger, t0 + ms(10), || false), 1);
        let ack = b
            .next_segment(t0 + ms(10), 0)
            .expect("every second segment");
        assert_eq!(ack.repr.timestamp.unwrap().tsecr, ts_clock(t0 + ms(5)));
        // Out of order: the ACK sent at once echoes TS.Recent as it was, the segment
        // after a hole being past the last ACK; the segment filling the hole is echoed.
        write(&mut a, &mut written, 2 * full, false);
        let first = a.next_segment(t0 + ms(20), 0).expect("lost");
        assert_eq!(first.data_len as u64, full);
        assert_eq!(flush(&mut a, &mut b, &ledger, t0 + ms(21), || false), 1);
        let dup = b
            .next_segment(t0 + ms(21), 0)
            .expect("a duplicate ACK at once");
        assert_eq!(dup.repr.timestamp.unwrap().tsecr, ts_clock(t0 + ms(5)));
        a.snd_nxt = first.repr.seq_number; // sent again
        assert_eq!(flush(&mut a, &mut b, &ledger, t0 + ms(30), || false), 2);
        let filled = b
            .next_segment(t0 + ms(30), 0)
            .expect("the hole filled: at once");
        assert_eq!(filled.repr.timestamp.unwrap().tsecr, ts_clock(t0 + ms(30)));
    }

    /// Segments kept unverified for the application's read (`Tuning::tcp_verify_on_read`)
    /// keep RFC 7323 §4.3's rule when the read takes them: the first after the last ACK
    /// sets TS.Recent, the one behind it does not, and the ACK echoes the earlier.
    #[test]
    fn segments_verified_on_read_echo_the_earliest_too() {
        let ledger = Ledger::new();
        let t0 = Instant::from_millis(1_000);
        let (_a, mut b) = established(&ledger, t0);
        let data: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        for tsval in [5005, 5010] {
            let mut frags = vec![ExtBuf::new(data.clone())];
            // The "header" sum that completes the data's to all ones: it checks.
            let header = crate::checksum::Accumulator::with_seed(crate::checksum::finish(
                crate::checksum::sum(&data),
            ));
            b.rx.defer(&mut frags, data.len(), header, Some(tsval));
            b.note_deferred(t0);
        }
        let mut got = vec![0u8; 2 * data.len()];
        let now = t0 + Duration::from_millis(1);
        assert_eq!(b.recv_into(&mut got, Kernel::best(), &ledger, now), 2000);
        assert_eq!(b.ts_recent, 5005);
        b.ack_now = true;
        let ack = b.next_segment(now, 0).expect("the ACK");
        assert_eq!(ack.repr.ack_number, Some(b.rcv_nxt));
        assert_eq!(ack.repr.timestamp.unwrap().tsecr, 5005);
    }

    /// PAWS drops a segment whose TSval is older than TS.Recent, but not after TS.Recent
    /// has gone 24 days without an update (RFC 7323 §5.5): by then the peer's millisecond
    /// clock has moved on by more than half its range, and its every TSval looks old.
    #[test]
    fn paws_forgets_a_timestamp_idle_for_24_days() {
        let ledger = Ledger::new();
        let t0 = Instant::from_millis(1_000);
        let (mut a, mut b) = established(&ledger, t0);
        let (mut written, mut got) = (0, 0);
        let day = Duration::from_secs(24 * 60 * 60);
        let drops = || ledger.counters().get(Counter::TcpDropPaws);
        // A segment from the past is a duplicate while TS.Recent is fresh.
        write(&mut a, &mut written, 100, false);
        let mut out = a.next_segment(t0 + day, 0).expect("data");
        let ts = out.repr.timestamp.as_mut().unwrap();
        ts.tsval = b.ts_recent.wrapping_sub(1);
        let payload: Vec<u8> = (0..100).map(|i| (i % PERIOD) as u8).collect();
        let seg = TcpRepr {
            payload: &payload,
            ..out.repr
        };
        let _ = b.input(crate::probe::TESTED, &seg, false, true, &ledger, t0 + day);
        assert_eq!(drops(), 1);
        // 25 days on, A's clock has gone 2^31 ticks past B's TS.Recent: it looks older,
        // and is taken all the same.
        let later = t0 + Duration::from_secs(25 * 24 * 60 * 60);
        assert!(tsval_before(ts_clock(later), b.ts_recent));
        a.snd_nxt = a.snd_una;
        assert_eq!(flush(&mut a, &mut b, &ledger, later, || false), 1);
        assert_eq!(drops(), 1);
        read(&mut b, &mut got, 100);
        assert_eq!(got, 100);
        assert_eq!(b.ts_recent, ts_clock(later), "the new TS.Recent");
    }

    /// A handshake whose SYN or SYN-ACK timed out starts its data with an RTO of 3 s
    /// (RFC 6298 §5.7), on both sides, when it took no RTT sample; one that did (the
    /// SYN-ACK's echo of the SYN sent again) starts from the sample.
    #[test]
    fn data_after_a_handshake_that_timed_out_starts_from_three_seconds() {
        for timestamps in [false, true] {
            let ledger = Ledger::new();
            let config = TcpConfig {
                timestamps,
                ..TcpConfig::default()
            };
            let t0 = Instant::from_millis(1_000);
            let mut a = Connection::new(END_A, END_B, config, SeqNumber(1000), 1460, false);
            a.connect();
            assert!(a.next_segment(t0, 0).is_some(), "the SYN, lost");
            let t1 = t0 + config.rto.initial;
            assert!(a.retransmit_timeout(t1, &ledger).is_none());
            let syn = a.next_segment(t1, 0).expect("the SYN again");
            let mut b = Connection::new(END_B, END_A, config, SeqNumber(9_000_000), 1460, false);
            b.accept_syn(&syn.repr, t1);
            assert!(b.next_segment(t1, 0).is_some(), "the SYN-ACK, lost");
            let t2 = t1 + config.rto.initial;
            assert!(b.retransmit_timeout(t2, &ledger).is_none());
            assert_eq!(flush(&mut b, &mut a, &ledger, t2, || false), 1);
            let t3 = t2 + Duration::from_millis(10);
            assert_eq!(flush(&mut a, &mut b, &ledger, t3, || false), 1);
            assert_eq!((a.state, b.state), (State::Established, State::Established));
            let three = Duration::from_secs(3);
            if timestamps {
                // The SYN-ACK echoes the SYN sent again, 1 s before (B's first SYN-ACK
                // was lost too): A's first sample, the whole wait.
                assert_eq!(a.rtt.srtt(), Some(Duration::from_secs(1)));
            } else {
                assert_eq!(a.rtt.rto(), three);
            }
            // B's SYN-ACK sent again was answered 10 ms after; without the echo, nothing
            // times it (Karn).
            if timestamps {
                assert_eq!(b.rtt.srtt(), Some(Duration::from_millis(10)));
            } else {
                assert_eq!(b.rtt.rto(), three);
            }
        }
    }

    /// After more than an RTO with no data sent and nothing in flight, cwnd goes back to
    /// the restart window (RFC 5681 §4.1); a shorter pause leaves it.
    #[test]
    fn a_sender_idle_for_an_rto_restarts_from_the_initial_window() {
        let ledger = Ledger::new();
        let t0 = Instant::from_millis(1_000);
        let (mut a, mut b) = established(&ledger, t0);
        let (mut written, mut got) = (0, 0);
        let mut t = t0;
        // Grow cwnd well past the initial window.
        for _ in 0..20 {
            write(&mut a, &mut written, 20_000, false);
            flush(&mut a, &mut b, &ledger, t, || false);
            b.ack_now = true;
            flush(&mut b, &mut a, &ledger, t, || false);
            read(&mut b, &mut got, 1 << 20);
            t += Duration::from_millis(1);
        }
        let iw = a.initial_window();
        assert!(a.cwnd > 2 * iw, "cwnd {} grew", a.cwnd);
        assert_eq!(a.snd_una, a.snd_max, "nothing in flight");
        let grown = a.cwnd;
        // A pause shorter than the RTO changes nothing.
        let rto = a.rtt.rto();
        t += Duration::from_nanos(rto.as_nanos() - 1_000_000);
        write(&mut a, &mut written, 100, false);
        flush(&mut a, &mut b, &ledger, t, || false);
        assert_eq!(a.cwnd, grown);
        b.ack_now = true;
        flush(&mut b, &mut a, &ledger, t, || false);
        // Longer: the next write goes out in the restart window.
        t += rto + Duration::from_millis(1);
        write(&mut a, &mut written, 200_000, false);
        let sent = flush(&mut a, &mut b, &ledger, t, || false);
        assert_eq!(a.cwnd, iw);
        assert_eq!(sent, iw / a.segment_data_max());
    }

    /// The echo of a TSval is a round trip only if it could be one this connection sent:
    /// not zero, not from the future, not older than the longest RTO; and a round trip
    /// inside the millisecond counts as one tick.
    #[test]
    fn an_echoed_timestamp_is_a_round_trip_only_within_bounds() {
        let ledger = Ledger::new();
        let now = Instant::from_millis(100_000);
        let (a, _b) = established(&ledger, now);
        let ms = Duration::from_millis;
        assert_eq!(a.echoed_rtt(100_000, now), Some(ms(1)));
        assert_eq!(a.echoed_rtt(99_993, now), Some(ms(7)));
        assert_eq!(a.echoed_rtt(100_001, now), None, "from the future");
        assert_eq!(a.echoed_rtt(0, now), None, "no echo");
        let max = a.rtt.config().max.as_millis() as u32;
        assert_eq!(a.echoed_rtt(100_000 - max, now), Some(a.rtt.config().max));
        assert_eq!(a.echoed_rtt(100_000 - max - 1, now), None, "too old");
    }

    /// A segment that arrives twice draws an ACK whose first SACK block is the duplicate
    /// (a D-SACK block, RFC 2883 §4), once; a segment only partly old reports its old
    /// part. The sender, given that ACK, widens its reordering window by a quarter of the
    /// least RTT once per round trip (RFC 8985 §6.2), up to SRTT.
    #[test]
    fn a_duplicate_segment_is_reported_by_a_d_sack_block_that_widens_the_window() {
        let ledger = Ledger::new();
        let now = Instant::from_nanos(1_000_000_000);
        let (mut a, mut b) = established(&ledger, now);
        let mut written = 0;
        write(&mut a, &mut written, 2000, false);
        let out = a.next_segment(now, 0).expect("data");
        let payload: Vec<u8> = (0..out.data_len as u64)
            .map(|i| (i % PERIOD) as u8)
            .collect();
        let seg = TcpRepr {
            payload: &payload,
            ..out.repr
        };
        let (start, end) = (seg.seq_number, seg.seq_number + payload.len());
        // The rest goes too, and stays in flight (not delivered).
        assert!(a.next_segment(now, 0).is_some_and(|o| o.data_len > 0));
        for _ in 0..2 {
            let _ = b.input(crate::probe::TESTED, &seg, false, true, &ledger, now);
        }
        let ack = b.next_segment(now, 0).expect("an ACK at once");
        assert_eq!(ack.repr.sack_ranges[0], Some((start.0, end.0)));
        assert_eq!(ack.repr.sack_ranges[1], None);
        // Reported once.
        b.ack_now = true;
        assert_eq!(b.next_segment(now, 0).unwrap().repr.sack_ranges[0], None);
        // Half old: the old half is reported.
        let half = TcpRepr {
            seq_number: start + payload.len() / 2,
            payload: &payload[..payload.len() / 2],
            ..seg
        };
        let _ = b.input(crate::probe::TESTED, &half, false, true, &ledger, now);
        let ack2 = b.next_segment(now, 0).expect("an ACK at once");
        assert_eq!(
            ack2.repr.sack_ranges[0],
            Some(((start + payload.len() / 2).0, end.0))
        );
        // A duplicate of queued out-of-order data: the D-SACK block, then the SACK block
        // that holds it.
        let ahead = TcpRepr {
            seq_number: end + 1000,
            payload: &payload[..100],
            ..seg
        };
        let _ = b.input(crate::probe::TESTED, &ahead, false, true, &ledger, now);
        b.next_segment(now, 0).expect("an ACK at once");
        let inner = TcpRepr {
            seq_number: end + 1010,
            payload: &payload[..50],
            ..seg
        };
        let _ = b.input(crate::probe::TESTED, &inner, false, true, &ledger, now);
        let ack3 = b.next_segment(now, 0).expect("an ACK at once");
        assert_eq!(
            ack3.repr.sack_ranges[0],
            Some(((end + 1010).0, (end + 1060).0))
        );
        assert_eq!(
            ack3.repr.sack_ranges[1],
            Some(((end + 1000).0, (end + 1100).0))
        );

        // The sender: a quarter of the least RTT, then half after the D-SACK; once a
        // round trip (the second D-SACK comes while the data sent before the first is in
        // flight). One round trip of 400 µs, so that SRTT, the window's cap, is no less.
        let quarters = |c: &Connection| c.reorder_window().unwrap().as_micros() / 100;
        a.rtt = RttEstimator::new(a.config.rto);
        a.rtt.sample(Duration::from_micros(400));
        a.min_rtt = Some((Duration::from_micros(400), now));
        assert_eq!(quarters(&a), 1);
        // The ACKs come a round trip after the data went.
        let acked = now + Duration::from_micros(400);
        let _ = a.input(crate::probe::TESTED, &ack.repr, false, true, &ledger, acked);
        assert_eq!(quarters(&a), 2);
        let _ = a.input(
            crate::probe::TESTED,
            &ack2.repr,
            false,
            true,
            &ledger,
            acked,
        );
        assert_eq!(quarters(&a), 2);
        // Sixteen recoveries without one, and it is a quarter again.
        for _ in 0..16 {
            a.recovery_ended();
        }
        assert_eq!(quarters(&a), 1);
        // A D-SACK block inside the second block (a duplicate of queued data) widens it
        // too, in a new round.
        a.dsack_round = None;
        let _ = a.input(
            crate::probe::TESTED,
            &ack3.repr,
            false,
            true,
            &ledger,
            acked,
        );
        assert_eq!(quarters(&a), 2);
    }
}
