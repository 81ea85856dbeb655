//! The jitdump reader (what `toyvm jitdump` decodes) on arbitrary bytes: a
//! dump or an error naming an offset, never a panic, a hang or a huge
//! allocation.
#![no_main]

use libfuzzer_sys::fuzz_target;
use perfsupport::jitdump::reader::{self, Record};

fuzz_target!(|data: &[u8]| {
    if let Ok((_, records)) = reader::read(data) {
        for at in &records {
            if let Record::DebugInfo { entries, .. } = &at.record {
                assert!(entries.len() <= data.len());
            }
        }
    }
});
