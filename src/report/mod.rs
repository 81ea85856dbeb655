//! `toyvm report FILE`: reads a vmprof profile (written by `toyvm run
//! --vmprof` or by any other VM, see [`load`]) and writes it as text (a
//! call tree and a flat profile; with `--lines` the hottest lines of each
//! function), collapsed stacks, pprof, the Firefox Profiler's format or
//! speedscope's (`--format`, [`export`]), and/or draws an SVG flame graph
//! (`--flamegraph`). `--diff BEFORE` compares two profiles ([`diff`]).

mod diff;
mod export;
mod folded;
mod lines;
mod load;
mod text;
mod tree;

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};

/// What `toyvm report` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// The call tree and the flat profile.
    Text,
    /// Collapsed stacks (`<main>;outer;inner 123`), the input of
    /// flame-graph tools.
    Folded,
    /// A gzip-compressed `profile.proto` for `go tool pprof`, Pyroscope,
    /// Parca... (binary: needs -o).
    Pprof,
    /// The Firefox Profiler's format (profiler.firefox.com).
    Firefox,
    /// speedscope's format (www.speedscope.app).
    Speedscope,
}

/// Options of `toyvm report`.
#[derive(Args)]
pub struct ReportArgs {
    /// What to write.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,

    /// The same as `--format folded`.
    #[arg(long, conflicts_with = "format")]
    folded: bool,

    /// Write to FILE instead of standard output (required for pprof).
    #[arg(short = 'o', long = "output", value_name = "FILE", value_parser = crate::non_empty_path)]
    output: Option<PathBuf>,

    /// Also print the hottest lines of each function, with their source
    /// text (text format; a profile recorded with `run --vmprof-lines`; the
    /// source files are read from where the profile names them). With
    /// --folded, name each frame `function:LINE` (a line-level flame graph).
    #[arg(long)]
    lines: bool,

    /// Also write an SVG flame graph to OUT (with --diff: a differential
    /// one, red where AFTER spends more, blue where less).
    #[arg(long, value_name = "OUT.svg", value_parser = crate::non_empty_path)]
    flamegraph: Option<PathBuf>,

    /// Leave call-tree nodes under this share of all samples out of the
    /// report (and, with --lines, functions and lines).
    #[arg(long, value_name = "PERCENT", default_value_t = 0.5)]
    min_percent: f64,

    /// Compare FILE (after a change) with BEFORE: the functions whose share
    /// of the samples changed most (`toyvm report --diff BEFORE AFTER`).
    #[arg(long, value_name = "BEFORE", value_parser = crate::non_empty_path)]
    diff: Option<PathBuf>,

    /// A vmprof profile: written by `toyvm run --vmprof FILE`, or by any
    /// VM that writes the vmprof format (CPython's `python -m vmprof`...).
    file: PathBuf,
}

impl ReportArgs {
    /// What `toyvm report` reads and writes (see [`crate::files`]).
    pub fn files(&self) -> crate::files::Files {
        let output = |option: &'static str, path: &PathBuf| crate::files::Output {
            option,
            path: path.clone(),
        };
        crate::files::Files {
            inputs: self.diff.iter().chain([&self.file]).cloned().collect(),
            outputs: (self.flamegraph.iter().map(|p| output("--flamegraph", p)))
                .chain(self.output.iter().map(|p| output("-o", p)))
                .collect(),
        }
    }

    fn format(&self) -> Format {
        if self.folded {
            Format::Folded
        } else {
            self.format
        }
    }
}

/// Runs `toyvm report`; errors are printed as `error: FILE: why`.
pub fn run(args: ReportArgs) -> Result<u8, ()> {
    let format = args.format();
    if let Some(why) = refused(&args, format) {
        say!("error: {why}");
        return Err(());
    }
    let keep_order = format == Format::Firefox;
    let profile = load_reporting(&args.file, keep_order)?;
    if let Some(before) = &args.diff {
        let before = load_reporting(before, false)?;
        let text = diff::render(&before.profile, &profile.profile);
        emit(&args, |out| out.write_all(text.as_bytes()))?;
        if let Some(svg) = &args.flamegraph {
            let lines = diff::differential_lines(&before.profile, &profile.profile)
                .map_err(|why| say!("error: {why}"))?;
            draw(&lines, &profile.profile, svg)?;
            say!("wrote the differential flame graph to {}", svg.display());
        }
        return Ok(0);
    }
    let profile = &profile.profile;
    if args.lines && format == Format::Folded && !profile.has_lines {
        say!(
            "error: {}: --folded --lines needs a profile recorded with `toyvm run --vmprof FILE --vmprof-lines`",
            args.file.display()
        );
        return Err(());
    }
    let written = emit(&args, |out| match format {
        Format::Text => {
            out.write_all(text::render(profile, args.min_percent).as_bytes())?;
            if args.lines {
                out.write_all(
                    lines::render(profile, args.min_percent, &lines::read_source).as_bytes(),
                )?;
            }
            Ok(())
        }
        Format::Folded => folded::write_folded(profile, args.lines, out),
        Format::Pprof => export::pprof::write(profile, out),
        Format::Firefox => export::firefox::write(profile, &profile.order, out),
        Format::Speedscope => export::speedscope::write(profile, out),
    });
    written?;
    if let Some(svg) = &args.flamegraph {
        draw(&folded::folded_stacks(profile, args.lines), profile, svg)?;
        say!("wrote the flame graph to {}", svg.display());
    }
    Ok(0)
}

/// Why these options do not go together, if they do not.
fn refused(args: &ReportArgs, format: Format) -> Option<String> {
    if format == Format::Pprof && args.output.is_none() {
        return Some("--format pprof writes binary data: give the file with -o FILE".into());
    }
    if args.lines && !matches!(format, Format::Text | Format::Folded) {
        return Some(
            "--lines goes with the text report or collapsed stacks (--format text or folded)"
                .into(),
        );
    }
    if args.diff.is_some() && (format != Format::Text || args.lines) {
        return Some("--diff writes a text report (and with --flamegraph a differential flame graph); it takes no --format, --folded or --lines".into());
    }
    None
}

/// Loads `path`, printing why it cannot be used.
fn load_reporting(path: &Path, keep_order: bool) -> Result<load::Loaded, ()> {
    let loaded =
        load::load(path, keep_order).map_err(|why| say!("error: {}: {why}", path.display()))?;
    if let Some(why) = &loaded.incomplete {
        warn!("{}: {why}", path.display());
    }
    Ok(loaded)
}

/// Runs `write` on `-o FILE` (created safely) or on standard output,
/// buffered; says what failed. A closed pipe (`| head`) is not an error
/// worth reporting.
fn emit(
    args: &ReportArgs,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), ()> {
    match &args.output {
        Some(path) => {
            let fail = |e: std::io::Error| say!("error: {}: cannot write: {e}", path.display());
            let file = perfsupport::create_output_file(path).map_err(fail)?;
            let mut out = std::io::BufWriter::with_capacity(1 << 16, file);
            write(&mut out).and_then(|()| out.flush()).map_err(fail)
        }
        None => {
            let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
            match write(&mut out).and_then(|()| out.flush()) {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                    say!("error: writing the report: {e}");
                    Err(())
                }
                _ => Ok(()),
            }
        }
    }
}

/// Writes the flame graph of the collapsed `lines` to `svg`, a file created
/// safely (a symlink or another user's file there is refused, the mode is
/// 0644 under any umask; see `perfsupport::safe_file`).
fn draw(lines: &[String], profile: &load::VmProfile, svg: &Path) -> Result<(), ()> {
    let fail = |why: String| say!("error: {}: {why}", svg.display());
    if lines.is_empty() {
        fail("the profile has no samples: there is nothing to draw".into());
        return Err(());
    }
    let file =
        perfsupport::create_output_file(svg).map_err(|e| fail(format!("cannot create: {e}")))?;
    let mut out = std::io::BufWriter::new(file);
    let title = match &profile.script {
        Some(script) => format!("{}: {}", profile.interp, text::printable(script)),
        None => profile.interp.clone(),
    };
    folded::write_flamegraph(lines, &title, &mut out).map_err(fail)?;
    out.flush().map_err(|e| fail(format!("cannot write: {e}")))
}
