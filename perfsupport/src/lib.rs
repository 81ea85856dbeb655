//! VM-agnostic profiler support (perf maps, jitdump, VMProf-style sampling).
pub mod vmprof;
