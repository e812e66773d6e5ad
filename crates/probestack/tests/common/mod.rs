//! Helpers shared by integration tests: `netns` for the ones that touch Linux networking
//! (`tap.rs`, `packet.rs`), `transfer` for bulk TCP in the simulation and the connection it runs
//! on (`tcp.rs`, `offload.rs`, `multihomed.rs`), `capture` for comparing the frames two code paths send (`tcp.rs`,
//! `udp.rs`), `tamper` for a device that loses, holds back or copies frames (`tap.rs`,
//! `tcp.rs`, `zero_copy.rs`), `router` for one with a router behind it that answers with
//! ICMP errors (`tcp.rs`, `icmp_errors.rs`), `conversation` for the proptest settings of
//! the random conversations and the tuning they draw (`tcp_conversations.rs`,
//! `tcp_smoltcp.rs`, `tcp_linux.rs`, `udp.rs`, `udp_linux.rs`), `datagrams` for what the random
//! UDP traffic shares (`udp.rs`, `udp_linux.rs`), `wire_rules` for TCP's rules checked on
//! the wire (`tcp_conversations.rs`, `tcp_linux.rs`). Each test file uses
//! a part of them.
#![allow(dead_code, unused_macros, unused_imports)]

pub mod capture;
pub mod conversation;
pub mod datagrams;
pub mod netns;
pub mod router;
pub mod tamper;
pub mod transfer;
pub mod wire_rules;
