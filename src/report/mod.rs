//! `toyvm report FILE`: reads a profile written by `toyvm run --vmprof`
//! and prints a call tree and a flat profile, or collapsed stacks
//! (`--folded`), and/or draws an SVG flame graph (`--flamegraph`).

mod folded;
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

    /// Also write an SVG flame graph to OUT.
    #[arg(long, value_name = "OUT.svg")]
    flamegraph: Option<PathBuf>,

    /// Leave call-tree nodes under this share of all samples out of the
    /// report.
    #[arg(long, value_name = "PERCENT", default_value_t = 0.5)]
    min_percent: f64,

    /// A profile written by `toyvm run --vmprof FILE`.
    file: PathBuf,
}

/// Runs `toyvm report`; errors are printed as `error: FILE: why`.
pub fn run(args: ReportArgs) -> Result<u8, ()> {
    let fail = |why: String| eprintln!("error: {}: {why}", args.file.display());
    let profile = load::load(&args.file).map_err(fail)?;
    let stdout = std::io::stdout();
    let mut stdout = stdout.lock();
    let printed = if args.folded {
        folded::folded_lines(&profile)
            .iter()
            .try_for_each(|line| writeln!(stdout, "{line}"))
    } else {
        stdout.write_all(text::render(&profile, args.min_percent).as_bytes())
    };
    // A closed pipe (`| head`) is not an error worth reporting.
    if let Err(e) = printed.and_then(|()| stdout.flush())
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        eprintln!("error: writing the report: {e}");
        return Err(());
    }
    if let Some(svg) = &args.flamegraph {
        draw(&profile, svg)?;
        eprintln!("wrote the flame graph to {}", svg.display());
    }
    Ok(0)
}

/// Writes the flame graph of `profile` to `svg`.
fn draw(profile: &load::ToyProfile, svg: &std::path::Path) -> Result<(), ()> {
    let lines = folded::folded_lines(profile);
    let fail = |why: String| eprintln!("error: {}: {why}", svg.display());
    let file = std::fs::File::create(svg).map_err(|e| fail(format!("cannot create: {e}")))?;
    let mut out = std::io::BufWriter::new(file);
    let title = format!("toyvm: {}", profile.script);
    folded::write_flamegraph(&lines, &title, &mut out).map_err(fail)?;
    out.flush().map_err(|e| fail(format!("cannot write: {e}")))
}
