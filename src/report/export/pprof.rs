//! `toyvm report --format pprof`: a gzip-compressed `profile.proto`, what
//! `go tool pprof` reads and what every service that speaks pprof ingests
//! (Grafana Pyroscope, Parca, Google Cloud Profiler, speedscope).
//!
//! The messages are declared here with `prost`'s derive, field for field
//! from google/pprof's `proto/profile.proto` (only the fields toyvm
//! fills): no `protoc` and no build script, and `prost` is the protobuf
//! crate the Rust ecosystem maintains. The `pprof` crate has the same types
//! but is a whole sampling profiler with its dependencies.
//!
//! What goes in:
//!
//! * two sample types, `samples/count` and `cpu/nanoseconds`, the period
//!   `cpu/nanoseconds` from the profile's interval;
//! * one `Sample` per distinct stack, its locations leaf first, its values
//!   the number of samples and that many periods of CPU time;
//! * one `Function` per Toy function (name, file, start line), and one
//!   `Location` per function and line: the line each frame was executing
//!   when the profile has lines (`run --vmprof-lines`), else the line the
//!   function starts at.
//!
//! pprof shortens a function name by dropping what looks like C++ template
//! arguments, `<...>`: `<main>` and `<jit compiler>` would show as
//! `<unknown>`. Their `name` is written with the single angle quotation
//! marks `‹main›` instead ([`pprof_name`]); `system_name` keeps `<main>`.

use std::collections::HashMap;
use std::io::Write;

use prost::Message;

use crate::report::load::VmProfile;

/// `profile.proto`'s `Profile` (the fields toyvm writes).
#[derive(Clone, PartialEq, Message)]
pub struct Profile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// `string_table[0]` is `""`; every string field is an index here.
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    pub period: i64,
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
}

/// A sample type or the period's type: `type` and `unit` are string indexes.
#[derive(Clone, PartialEq, Message)]
pub struct ValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// One stack and its values (one per sample type).
#[derive(Clone, PartialEq, Message)]
pub struct Sample {
    /// Leaf first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
}

/// A place in the code: here one function at one line.
#[derive(Clone, PartialEq, Message)]
pub struct Location {
    /// Nonzero.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

/// A function and a line in it.
#[derive(Clone, PartialEq, Message)]
pub struct Line {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    #[prost(int64, tag = "2")]
    pub line: i64,
}

/// A function: name, file and first line (string indexes for the first two).
#[derive(Clone, PartialEq, Message)]
pub struct Function {
    /// Nonzero.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    #[prost(int64, tag = "4")]
    pub filename: i64,
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}

/// The string table under construction.
#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Strings {
        let mut strings = Strings::default();
        strings.get("");
        strings
    }

    fn get(&mut self, text: &str) -> i64 {
        if let Some(&at) = self.index.get(text) {
            return at;
        }
        let at = self.table.len() as i64;
        self.table.push(text.to_owned());
        self.index.insert(text.to_owned(), at);
        at
    }
}

// ANCHOR: pprof_name
/// `name` as pprof shows it whole: `<` and `>` as `‹` and `›` (see the
/// module docs).
pub fn pprof_name(name: &str) -> String {
    name.replace('<', "‹").replace('>', "›")
}
// ANCHOR_END: pprof_name

/// Builds the `Profile` message of `profile`.
pub fn build(profile: &VmProfile) -> Profile {
    let mut strings = Strings::new();
    let period_ns = i64::try_from(profile.period_us.saturating_mul(1000)).unwrap_or(i64::MAX);
    let functions: Vec<Function> = (profile.frames.iter().enumerate())
        .map(|(i, frame)| Function {
            id: i as u64 + 1,
            name: strings.get(&pprof_name(&frame.name)),
            system_name: strings.get(&frame.name),
            filename: strings.get(&frame.file),
            start_line: i64::from(frame.line),
        })
        .collect();
    let mut locations: Vec<Location> = Vec::new();
    let mut location_of: HashMap<(usize, u32), u64> = HashMap::new();
    let mut samples = Vec::with_capacity(profile.stacks.len());
    for stack in &profile.stacks {
        let mut ids = Vec::with_capacity(stack.frames.len());
        for (depth, &frame) in stack.frames.iter().enumerate().rev() {
            let line = match stack.lines.get(depth) {
                Some(&line) if line != 0 => line,
                _ => profile.frames[frame].line,
            };
            let id = *location_of.entry((frame, line)).or_insert_with(|| {
                locations.push(Location {
                    id: locations.len() as u64 + 1,
                    line: vec![Line {
                        function_id: frame as u64 + 1,
                        line: i64::from(line),
                    }],
                });
                locations.len() as u64
            });
            ids.push(id);
        }
        let count = i64::try_from(stack.count).unwrap_or(i64::MAX);
        samples.push(Sample {
            location_id: ids,
            value: vec![count, count.saturating_mul(period_ns)],
        });
    }
    let sample_type = vec![
        ValueType {
            r#type: strings.get("samples"),
            unit: strings.get("count"),
        },
        ValueType {
            r#type: strings.get("cpu"),
            unit: strings.get("nanoseconds"),
        },
    ];
    let period_type = Some(ValueType {
        r#type: strings.get("cpu"),
        unit: strings.get("nanoseconds"),
    });
    let comment = profile
        .script
        .as_deref()
        .map(|script| vec![strings.get(&format!("{} profile of {script}", profile.interp))])
        .unwrap_or_default();
    Profile {
        sample_type,
        sample: samples,
        location: locations,
        function: functions,
        time_nanos: profile.start_ns,
        duration_nanos: i64::try_from(profile.samples)
            .unwrap_or(i64::MAX)
            .saturating_mul(period_ns),
        period_type,
        period: period_ns,
        comment,
        string_table: strings.table,
    }
}

/// Writes `profile` as a gzip-compressed `profile.proto` to `out`.
pub fn write(profile: &VmProfile, out: impl Write) -> std::io::Result<()> {
    let message = build(profile).encode_to_vec();
    let mut gzip = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    gzip.write_all(&message)?;
    gzip.finish()?.flush()
}
