//! What the ledger accounts: layers, sides, and one enum of fine operations, each of which
//! knows its category in paper 001, its class in paper 000, whether it touches data, and its
//! place in the categories of Cai et al. (SIGCOMM 2021).

use std::fmt;

/// The layer a probe's time belongs to (paper 000 Figure 10; DESIGN.md §1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Layer {
    Socket,
    Udp,
    Tcp,
    Ip,
    Link,
    Driver,
}

impl Layer {
    pub const ALL: [Layer; 6] = [
        Layer::Socket,
        Layer::Udp,
        Layer::Tcp,
        Layer::Ip,
        Layer::Link,
        Layer::Driver,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            Layer::Socket => "socket",
            Layer::Udp => "udp",
            Layer::Tcp => "tcp",
            Layer::Ip => "ip",
            Layer::Link => "link",
            Layer::Driver => "driver",
        }
    }
}

/// Which way the data was going.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Side {
    Send,
    Receive,
}

impl Side {
    pub const ALL: [Side; 2] = [Side::Send, Side::Receive];

    pub const fn name(self) -> &'static str {
        match self {
            Side::Send => "send",
            Side::Receive => "receive",
        }
    }
}

/// The categories of paper 001 (Kay & Pasquale, SIGCOMM 1993, §3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Category {
    DataMove,
    Checksum,
    ProtSpec,
    Mbuf,
    OpSys,
    ErrorChk,
    DataStruct,
}

impl Category {
    pub const ALL: [Category; 7] = [
        Category::DataMove,
        Category::Checksum,
        Category::ProtSpec,
        Category::Mbuf,
        Category::OpSys,
        Category::ErrorChk,
        Category::DataStruct,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            Category::DataMove => "DataMove",
            Category::Checksum => "Checksum",
            Category::ProtSpec => "ProtSpec",
            Category::Mbuf => "Mbuf",
            Category::OpSys => "OpSys",
            Category::ErrorChk => "ErrorChk",
            Category::DataStruct => "DataStruct",
        }
    }

    /// DataMove and Checksum touch every byte of the message; the rest do not (paper 001
    /// §3: "data-touching" vs "non-data-touching" overheads).
    pub const fn touches_data(self) -> bool {
        matches!(self, Category::DataMove | Category::Checksum)
    }
}

/// The operation classes of paper 000 (Kay & Pasquale, USENIX 1993, Figure 1), with COPY
/// split into its three components (Figures 3, 8, 9).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Class000 {
    Checksum,
    UserCopy,
    DeviceCopy,
    CacheClear,
    MallocFree,
    Other,
}

impl Class000 {
    pub const ALL: [Class000; 6] = [
        Class000::Checksum,
        Class000::UserCopy,
        Class000::DeviceCopy,
        Class000::CacheClear,
        Class000::MallocFree,
        Class000::Other,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            Class000::Checksum => "checksum",
            Class000::UserCopy => "user_copy",
            Class000::DeviceCopy => "device_copy",
            Class000::CacheClear => "cache_clear",
            Class000::MallocFree => "malloc_free",
            Class000::Other => "other",
        }
    }

    /// The four coarse classes of paper 000: CHECKSUM, COPY, MALLOC/FREE, OTHER.
    pub const fn coarse(self) -> &'static str {
        match self {
            Class000::Checksum => "checksum",
            Class000::UserCopy | Class000::DeviceCopy | Class000::CacheClear => "copy",
            Class000::MallocFree => "malloc_free",
            Class000::Other => "other",
        }
    }
}

/// The categories of Cai et al., "Understanding Host Network Stack Overheads" (SIGCOMM
/// 2021), for a modern view of the same run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CaiCategory {
    DataCopy,
    TcpIp,
    Netdev,
    Skb,
    Memory,
    Lock,
    Scheduling,
    Etc,
}

impl CaiCategory {
    pub const ALL: [CaiCategory; 8] = [
        CaiCategory::DataCopy,
        CaiCategory::TcpIp,
        CaiCategory::Netdev,
        CaiCategory::Skb,
        CaiCategory::Memory,
        CaiCategory::Lock,
        CaiCategory::Scheduling,
        CaiCategory::Etc,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            CaiCategory::DataCopy => "data_copy",
            CaiCategory::TcpIp => "tcp/ip",
            CaiCategory::Netdev => "netdev",
            CaiCategory::Skb => "skb",
            CaiCategory::Memory => "memory",
            CaiCategory::Lock => "lock",
            CaiCategory::Scheduling => "scheduling",
            CaiCategory::Etc => "etc",
        }
    }
}

/// Declares the operations with their metadata in one table, so that adding one is one line.
macro_rules! operations {
    ($( $(#[$doc:meta])* $op:ident = $name:literal, $cat:ident, $c000:ident, $cai:ident; )*) => {
        /// One fine-grained operation of protocol processing.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Op {
            $( $(#[$doc])* $op, )*
        }

        impl Op {
            /// Every operation, in declaration order.
            pub const ALL: &'static [Op] = &[$(Op::$op),*];

            /// Stable snake_case name, used in exports.
            pub const fn name(self) -> &'static str {
                match self { $(Op::$op => $name,)* }
            }

            /// The paper 001 category.
            pub const fn category(self) -> Category {
                match self { $(Op::$op => Category::$cat,)* }
            }

            /// The paper 000 class.
            pub const fn class000(self) -> Class000 {
                match self { $(Op::$op => Class000::$c000,)* }
            }

            /// The Cai et al. (2021) category.
            pub const fn cai(self) -> CaiCategory {
                match self { $(Op::$op => CaiCategory::$cai,)* }
            }
        }
    };
}

operations! {
    /// Copying message data between the application and the stack (paper 001: user-kernel copy).
    UserCopy = "user_copy", DataMove, UserCopy, DataCopy;
    /// Copying data between a socket buffer and a segment inside the stack: TCP's send
    /// buffer into the frame (retransmittable data stays behind), and a segment's data into
    /// the receive buffer. BSD queued mbufs here instead; in paper 000's classes it is
    /// counted with the user copy, the copy the socket layer makes.
    SocketCopy = "socket_copy", DataMove, UserCopy, DataCopy;
    /// The CPU copying a frame into or out of device memory: PIO (paper 000 Table 2).
    DeviceCopy = "device_copy", DataMove, DeviceCopy, Netdev;
    /// Invalidating the cache before a receive DMA (paper 000). x86 DMA is cache-coherent,
    /// so probestack never records it; it stays in the taxonomy so tables line up with the paper.
    CacheClear = "cache_clear", DataMove, CacheClear, Netdev;
    /// Computing or verifying an Internet checksum over data or headers.
    Checksum = "checksum", Checksum, Checksum, Etc;
    /// The interface between the socket layer and a protocol (udp_usrreq, tcp_usrreq).
    Interface = "interface", ProtSpec, Other, TcpIp;
    /// Ethernet framing and demultiplexing.
    LinkProto = "link_proto", ProtSpec, Other, Netdev;
    /// ARP resolution and cache work.
    Arp = "arp", ProtSpec, Other, TcpIp;
    /// IP header work: validation, routing, header build, fragmentation, dispatch.
    IpProto = "ip_proto", ProtSpec, Other, TcpIp;
    /// UDP header work.
    UdpProto = "udp_proto", ProtSpec, Other, TcpIp;
    /// TCP protocol processing: state machine, windows, timers' logic, options.
    TcpProto = "tcp_proto", ProtSpec, Other, TcpIp;
    /// Finding the PCB (socket) a segment belongs to.
    Demux = "demux", ProtSpec, Other, TcpIp;
    /// Connecting and disconnecting a PCB (4.3BSD's pseudo-connect on sendto).
    PcbConnect = "pcb_connect", ProtSpec, Other, TcpIp;
    /// Allocating a packet buffer.
    BufAlloc = "buf_alloc", Mbuf, MallocFree, Skb;
    /// Freeing a packet buffer.
    BufFree = "buf_free", Mbuf, MallocFree, Skb;
    /// Other buffer work: prepending, trimming, chain manipulation.
    BufMisc = "buf_misc", Mbuf, Other, Skb;
    /// Allocation from the general-purpose allocator outside the buffer pool.
    MemAlloc = "mem_alloc", Mbuf, MallocFree, Memory;
    /// Handling a device notification (the interrupt and soft-interrupt handler).
    Notify = "notify", OpSys, Other, Netdev;
    /// Scheduling work for later (soft-interrupt scheduling, queueing to the stack's poll).
    Schedule = "schedule", OpSys, Other, Scheduling;
    /// Waking a reader or writer waiting on a socket.
    Wakeup = "wakeup", OpSys, Other, Scheduling;
    /// Blocking until a socket is ready.
    Sleep = "sleep", OpSys, Other, Scheduling;
    /// Checking socket state before an operation.
    SocketCheck = "socket_check", ErrorChk, Other, Etc;
    /// Checking the arguments of a call (buffer sizes, addresses).
    ArgCheck = "arg_check", ErrorChk, Other, Etc;
    /// Socket buffer (send and receive queue) work.
    SocketBuffer = "socket_buffer", DataStruct, Other, TcpIp;
    /// IP reassembly (defragmentation) queue work.
    DefragQueue = "defrag_queue", DataStruct, Other, TcpIp;
    /// Device transmit and receive queues.
    DeviceQueue = "device_queue", DataStruct, Other, Netdev;
    /// TCP out-of-order (reassembly) queue work.
    ReorderQueue = "reorder_queue", DataStruct, Other, TcpIp;
    /// Timer management.
    Timer = "timer", DataStruct, Other, TcpIp;
}

impl Op {
    /// Whether the operation touches every byte of the message.
    pub const fn touches_data(self) -> bool {
        self.category().touches_data()
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_metadata_consistent() {
        let mut names: Vec<_> = Op::ALL.iter().map(|o| o.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Op::ALL.len());
        for &op in Op::ALL {
            // Paper 000's data-touching classes are exactly paper 001's data-touching
            // categories.
            let c = op.class000();
            let data_class = matches!(
                c,
                Class000::Checksum
                    | Class000::UserCopy
                    | Class000::DeviceCopy
                    | Class000::CacheClear
            );
            assert_eq!(data_class, op.touches_data(), "{op}");
        }
        assert_eq!(Op::Checksum.class000().coarse(), "checksum");
        assert_eq!(Op::DeviceCopy.class000().coarse(), "copy");
        assert_eq!(Op::BufAlloc.class000().coarse(), "malloc_free");
    }
}
