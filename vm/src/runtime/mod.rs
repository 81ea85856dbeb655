//! The runtime services beneath the execution core ([`crate::interp`]):
//! the heap and its collector, buffered output, printing values, the
//! builtins, runtime errors and their tracebacks, the native stack limit,
//! and the never-moving memory regions the value stack and frame records
//! live in. Nothing here runs bytecode or knows about tiers.

pub mod builtins;
pub mod error;
pub mod heap;
pub mod heap_limit;
pub mod native_stack;
pub mod output;
pub mod print;
pub mod region;
pub mod spin;

pub use error::{RuntimeError, TraceEntry};
pub use output::{Output, PendingOutput};
