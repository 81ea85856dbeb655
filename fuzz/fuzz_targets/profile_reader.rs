//! The `--vmprof` profile reader (what `toyvm report` loads) on arbitrary
//! bytes: a profile or an error, never a panic, a hang or a huge
//! allocation.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(profile) = perfsupport::vmprof::parse_profile(data) {
        for sample in &profile.samples {
            for &id in &sample.stack {
                let _ = profile.name(id);
            }
        }
    }
});
