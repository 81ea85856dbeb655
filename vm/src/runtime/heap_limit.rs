//! The heap limit (`--max-heap`): its default, relative to the machine,
//! and the `512M` / `4G` notation it is given in.

/// Default heap limit: half of the memory this process may use (physical
/// memory, or a cgroup's `memory.max` if lower), so that a runaway script
/// stops with `out of memory` long before the kernel's OOM killer or an
/// allocation failure would end the process. 1 GiB if neither is known.
pub fn default_max_heap() -> usize {
    let available = [physical_memory(), cgroup_memory_max()]
        .into_iter()
        .flatten()
        .min();
    available.map_or(1 << 30, |bytes| bytes / 2)
}

fn physical_memory() -> Option<usize> {
    // SAFETY: sysconf only reads system configuration.
    let (pages, page_size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let pages = usize::try_from(pages).ok().filter(|&p| p > 0)?;
    let page_size = usize::try_from(page_size).ok().filter(|&p| p > 0)?;
    Some(pages.saturating_mul(page_size))
}

/// The cgroup v2 memory limit of this process, if it has one.
fn cgroup_memory_max() -> Option<usize> {
    let text = std::fs::read_to_string("/sys/fs/cgroup/memory.max").ok()?;
    text.trim().parse().ok()
}

/// Parses a byte count: digits with an optional binary suffix `K`, `M`,
/// `G` or `T` (powers of 1024, either case, an optional trailing `B` or
/// `iB`): `512M`, `4G`, `1048576`. Zero is refused (nothing could run).
pub fn parse_size(text: &str) -> Result<usize, String> {
    let bad = || format!("invalid size {text:?} (expected e.g. 512M, 4G or a byte count)");
    let upper = text.trim().to_ascii_uppercase();
    let number = upper
        .strip_suffix("IB")
        .or_else(|| upper.strip_suffix('B'))
        .unwrap_or(&upper);
    let (digits, shift) = match number.char_indices().last() {
        Some((i, 'K')) => (&number[..i], 10),
        Some((i, 'M')) => (&number[..i], 20),
        Some((i, 'G')) => (&number[..i], 30),
        Some((i, 'T')) => (&number[..i], 40),
        _ => (number, 0),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let value: usize = digits.parse().map_err(|_| bad())?;
    let bytes = value
        .checked_mul(1 << shift)
        .ok_or_else(|| format!("size {text:?} is too large"))?;
    if bytes == 0 {
        return Err(format!("size {text:?} must be more than 0"));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_suffixes() {
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert_eq!(parse_size("4g"), Ok(4 << 30));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size("2TB"), Ok(2 << 40));
    }

    #[test]
    fn bad_sizes_are_errors() {
        for bad in ["", "M", "-1G", "1.5G", "12Q", "0", "0K", " ", "G1"] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
        assert!(parse_size("99999999999999999999T").is_err());
        assert!(parse_size("100000000T").is_err());
    }

    #[test]
    fn the_default_is_a_fraction_of_the_machine() {
        let default = default_max_heap();
        assert!(default >= 1 << 20, "{default}");
        if let Some(physical) = physical_memory() {
            assert!(default <= physical / 2, "{default} > half of {physical}");
        }
    }
}
