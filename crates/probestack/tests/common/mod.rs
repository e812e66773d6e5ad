//! Helpers shared by the integration tests that touch Linux networking (`tap.rs`,
//! `packet.rs`). Each test file uses a part of them.
#![allow(dead_code)]

pub mod netns;
