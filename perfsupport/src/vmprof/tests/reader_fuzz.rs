//! Bounded fuzzing of the reader: random bytes, random records after a
//! valid header, and mutations of a valid profile must give a profile or a
//! clear error, never a panic.

use crate::vmprof::format::{Encoder, Timeval};
use crate::vmprof::{ReadError, parse_profile};

/// xorshift64*: deterministic, so a failure names a reproducible case.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn valid_profile() -> Vec<u8> {
    let mut enc = Encoder::new();
    enc.header(1000, "toyvm");
    enc.start_time(Timeval {
        sec: 1_700_000_000,
        usec: 0,
    });
    enc.meta("os", "linux");
    enc.meta("interp", "toyvm");
    for (id, name) in [
        (8, "toy:<main>:1:a.toy"),
        (12, "toy:fib:3:a.toy"),
        (16, "toy:add:9:a.toy"),
    ] {
        enc.code_name(id, name);
    }
    for stack in [&[8u64, 12, 12, 16][..], &[8, 12], &[8]] {
        enc.sample(stack, 42);
    }
    enc.trailer(Timeval {
        sec: 1_700_000_002,
        usec: 0,
    });
    enc.bytes().to_vec()
}

/// Parses `data`; a panic fails the test with the case number.
fn parse_case(data: &[u8]) -> Result<usize, ReadError> {
    parse_profile(data).map(|p| p.samples.len())
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng(0x0123_4567_89AB_CDEF);
    for _ in 0..20_000 {
        let len = rng.below(200);
        let data = rng.bytes(len);
        if let Err(e) = parse_case(&data) {
            assert!(!e.to_string().is_empty());
        }
    }
}

#[test]
fn random_records_after_a_valid_header_never_panic() {
    let mut rng = Rng(0xDEAD_BEEF_F00D_CAFE);
    let valid = valid_profile();
    let header = &valid[..50]; // static header + HEADER record
    for _ in 0..20_000 {
        let mut data = header.to_vec();
        for _ in 0..rng.below(6) {
            // A known marker followed by random words, often small ones so
            // that lengths and depths are plausible.
            data.push(1 + rng.below(8) as u8);
            for _ in 0..rng.below(5) {
                let word = if rng.below(2) == 0 {
                    rng.below(40) as u64
                } else {
                    rng.next()
                };
                data.extend_from_slice(&word.to_le_bytes());
            }
            let tail = rng.below(20);
            data.extend(rng.bytes(tail));
        }
        let _ = parse_case(&data);
    }
}

#[test]
fn mutations_of_a_valid_profile_never_panic() {
    let mut rng = Rng(0x5EED_0000_0000_0001);
    let valid = valid_profile();
    assert_eq!(parse_case(&valid).unwrap(), 3);
    let (mut ok, mut err) = (0, 0);
    for _ in 0..30_000 {
        let mut data = valid.clone();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(data.len().max(1));
            match rng.below(5) {
                0 => data[at] = rng.next() as u8,
                1 => data[at] ^= 1 << rng.below(8),
                2 => data.insert(at, rng.next() as u8),
                3 if !data.is_empty() => {
                    data.remove(at);
                }
                _ => data.truncate(at),
            }
            if data.is_empty() {
                break;
            }
        }
        match parse_case(&data) {
            Ok(_) => ok += 1,
            Err(_) => err += 1,
        }
    }
    // Both outcomes occur: the mutations reach past the header checks.
    assert!(ok > 100 && err > 100, "ok {ok}, err {err}");
}
