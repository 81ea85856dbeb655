//! The formats other tools read: pprof, the Firefox Profiler's and
//! speedscope's. Each module builds its format from a loaded
//! [`VmProfile`](super::load::VmProfile) and writes it.

pub mod firefox;
pub mod pprof;
pub mod speedscope;
