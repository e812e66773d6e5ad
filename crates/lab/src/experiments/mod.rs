//! The lab's experiments, one module each. Each has a `run` that returns serialisable
//! results and a `tables` that renders them.

pub mod bulk;
pub mod checksum;
pub mod cpu;
pub mod discard;
pub mod echo;
pub mod mix;
pub mod overhead;
pub mod peers;
pub mod ping;
pub mod throughput;
