//! probestack: a user-space TCP/IP and UDP/IP stack that measures itself.
//!
//! The modules follow the data flow of a frame (see `DESIGN.md` in the project's shared
//! folder): [`wire`] parses and emits each protocol's bytes, and [`checksum`] computes the
//! Internet checksum with interchangeable kernels.

pub mod buf;
pub mod checksum;
pub mod driver;
pub mod fuzz;
pub mod hash;
pub mod ip;
pub mod link;
pub mod probe;
pub mod rng;
#[cfg(target_os = "linux")]
pub mod runner;
pub mod sim;
pub mod socket;
pub mod stack;
pub mod tcp;
pub mod time;
pub mod tuning;
pub mod udp;
pub mod wire;
