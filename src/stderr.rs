//! Messages on stderr that never panic: `eprintln!` panics when stderr is
//! a full disk or a broken pipe, and a message that cannot be shown must
//! not turn a clean exit status into a crash (101).
//!
//! Every warning has the same prefix, `toyvm: warning: `.

use std::io::Write;

/// Writes one line to stderr, ignoring failure.
pub fn line(args: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr().lock(), "{args}");
}

/// `say!("...", ...)`: one line on stderr (see [`line`]).
macro_rules! say {
    ($($arg:tt)*) => { $crate::stderr::line(format_args!($($arg)*)) };
}

/// `warn!("...", ...)`: one `toyvm: warning: ...` line on stderr.
macro_rules! warn {
    ($($arg:tt)*) => {
        $crate::stderr::line(format_args!("toyvm: warning: {}", format_args!($($arg)*)))
    };
}
