//! The socket layer: the application's interface to the stack (DESIGN.md §1). Each
//! transport has its sockets here, as handles into the stack.

pub mod blocking;
pub mod tcp;
pub mod udp;
