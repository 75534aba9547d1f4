//! Shared pieces of the streaming benchmark: the monotonic clock both sides
//! stamp with, a minimal HTTP/1.1 reader, and the llama-server event shapes.

pub mod client;
pub mod clock;
pub mod continuation;
pub mod ctl;
pub mod events;
pub mod http;
pub mod plain;
pub mod procs;
pub mod proxies;
