//! `toyvm report FILE`: reads a vmprof profile (written by `toyvm run
//! --vmprof` or by any other VM, see [`load`]) and prints a call tree and a
//! flat profile (and with `--lines` the hottest lines of each function),
//! or collapsed stacks (`--folded`), and/or draws an SVG flame graph
//! (`--flamegraph`).

mod folded;
mod lines;
mod load;
mod text;
mod tree;

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

/// Options of `toyvm report`.
#[derive(Args)]
pub struct ReportArgs {
    /// Print collapsed stacks (`<main>;outer;inner 123`, the input of
    /// flame-graph tools) instead of the report.
    #[arg(long)]
    folded: bool,

    /// Also print the hottest lines of each function, with their source
    /// text (a profile recorded with `run --vmprof-lines`; the source files
    /// are read from where the profile names them).
    #[arg(long, conflicts_with = "folded")]
    lines: bool,

    /// Also write an SVG flame graph to OUT.
    #[arg(long, value_name = "OUT.svg")]
    flamegraph: Option<PathBuf>,

    /// Leave call-tree nodes under this share of all samples out of the
    /// report.
    #[arg(long, value_name = "PERCENT", default_value_t = 0.5)]
    min_percent: f64,

    /// A vmprof profile: written by `toyvm run --vmprof FILE`, or by any
    /// VM that writes the vmprof format (CPython's `python -m vmprof`...).
    file: PathBuf,
}

impl ReportArgs {
    /// What `toyvm report` reads and writes (see [`crate::files`]).
    pub fn files(&self) -> crate::files::Files {
        crate::files::Files {
            inputs: vec![self.file.clone()],
            outputs: (self.flamegraph.iter())
                .map(|path| crate::files::Output {
                    option: "--flamegraph",
                    path: path.clone(),
                })
                .collect(),
        }
    }
}

/// Runs `toyvm report`; errors are printed as `error: FILE: why`.
pub fn run(args: ReportArgs) -> Result<u8, ()> {
    let fail = |why: String| say!("error: {}: {why}", args.file.display());
    let loaded = load::load(&args.file).map_err(fail)?;
    if let Some(why) = &loaded.incomplete {
        warn!("{}: {why}", args.file.display());
    }
    let profile = loaded.profile;
    let stdout = std::io::stdout();
    let mut stdout = stdout.lock();
    let printed = if args.folded {
        folded::folded_lines(&profile)
            .iter()
            .try_for_each(|line| writeln!(stdout, "{line}"))
    } else {
        let mut report = text::render(&profile, args.min_percent);
        if args.lines {
            report += &lines::render(&profile, &lines::read_source);
        }
        stdout.write_all(report.as_bytes())
    };
    // A closed pipe (`| head`) is not an error worth reporting.
    if let Err(e) = printed.and_then(|()| stdout.flush())
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        say!("error: writing the report: {e}");
        return Err(());
    }
    if let Some(svg) = &args.flamegraph {
        draw(&profile, svg)?;
        say!("wrote the flame graph to {}", svg.display());
    }
    Ok(0)
}

/// Writes the flame graph of `profile` to `svg`, a file created safely (a
/// symlink or another user's file there is refused, the mode is 0644 under
/// any umask; see `perfsupport::safe_file`).
fn draw(profile: &load::VmProfile, svg: &std::path::Path) -> Result<(), ()> {
    use perfsupport::create_output_file;
    let lines = folded::folded_lines(profile);
    let fail = |why: String| say!("error: {}: {why}", svg.display());
    if lines.is_empty() {
        fail("the profile has no samples: there is nothing to draw".into());
        return Err(());
    }
    let file = create_output_file(svg).map_err(|e| fail(format!("cannot create: {e}")))?;
    let mut out = std::io::BufWriter::new(file);
    let title = match &profile.script {
        Some(script) => format!("{}: {script}", profile.interp),
        None => profile.interp.clone(),
    };
    folded::write_flamegraph(&lines, &title, &mut out).map_err(fail)?;
    out.flush().map_err(|e| fail(format!("cannot write: {e}")))
}
