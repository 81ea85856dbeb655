//! Test-only modules of [`vmprof`](super), compiled only under `cfg(test)`:
//! tests too large to sit beside the code they check, kept out of the
//! production files. Each module's own tests stay in its `mod tests`.

mod reader_fuzz;
