//! Creating profiler output files safely in shared directories such as `/tmp`.
//!
//! Profiler files live at predictable paths (`/tmp/perf-<pid>.map`,
//! `<dir>/jit-<pid>.dump`), often in a world-writable directory. Anyone could
//! plant a symlink there that points at a file we must never write (the
//! classic `/tmp` race), or leave a file behind that another user owns. So
//! every file this crate writes is created by [`create_replacing_stale`]:
//!
//! * `O_CREAT | O_EXCL | O_NOFOLLOW`: the call creates a **new** inode or
//!   fails. It never follows a symlink, never opens a FIFO or device, and never
//!   reuses a file whose contents someone else controls.
//! * Close-on-exec (Rust's standard library always passes `O_CLOEXEC`), so
//!   a child started with `exec` does not inherit the descriptor.
//! * The mode is set with `fchmod` after creation, so the process umask cannot
//!   make the file unreadable for `perf`, which may run as another user. Use
//!   [`PROFILER_FILE_MODE`] (0644): readable by everyone, writable only by us.
//!
//! # Stale files
//!
//! A file at our path that exists *before we have written anything* was left
//! by an earlier process with the same pid (pids are reused; perf maps are
//! never deleted). It is replaced by `unlink` + exclusive create, but only if
//! it is a regular file owned by our effective uid (`lstat`, so a symlink is
//! seen as a symlink). A symlink, a directory, a device, or a file owned by
//! another user is refused with an error: we never delete or write something
//! we do not own. If another process wins the race between our `unlink` and
//! our create, we try again a few times and then give up.
//!
//! # Errors
//!
//! Every failure is an [`io::Error`] whose message names the path and the
//! step that failed, ready for the VM to print once. Nothing here panics.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use parking_lot::Mutex;

/// Mode of every file this crate creates: `rw-r--r--`.
///
/// perf may read the files as another user (for example `sudo perf report`
/// on a map written by an unprivileged VM), so they must be world-readable;
/// nobody but the owner may write them.
pub(crate) const PROFILER_FILE_MODE: u32 = 0o644;

/// How often [`create_replacing_stale`] retries when a file reappears between
/// our `unlink` and our exclusive create.
const MAX_CREATE_ATTEMPTS: u32 = 4;

/// How the new file is opened for writing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WriteMode {
    /// `O_WRONLY | O_APPEND`: every `write` lands at the current end of the file,
    /// so other writers appending to the same file (cranelift-jit appends to
    /// `/tmp/perf-<pid>.map` under `perf record`) never overwrite our lines.
    Append,
    /// `O_RDWR`: needed for files that are also memory-mapped, such as the
    /// jitdump marker mapping (`mmap` needs a readable descriptor).
    ReadWrite,
    /// `O_WRONLY`: plain sequential writing by this process only.
    Write,
}

// ANCHOR: create_output_file
/// Creates a new file at `path` for writing, the way this crate creates its
/// own files, for a VM's other profiler output (reports, flame graphs, ...):
///
/// * a **new inode** (`O_CREAT | O_EXCL | O_NOFOLLOW`): never opened through
///   a symbolic link, never a FIFO or device someone planted;
/// * mode **0644** whatever the umask: readable by everyone (perf or a
///   viewer may run as another user), writable only by the owner;
/// * **close-on-exec**, so a child started with `exec` does not inherit it;
/// * a regular file of ours already at `path` (an earlier run's output) is
///   replaced; a symlink, a directory, a device or another user's file is an
///   error, and nothing is deleted or written.
///
/// ```
/// # fn main() -> std::io::Result<()> {
/// use std::io::Write;
/// # let dir = std::env::temp_dir().join(format!("psupport-doc-out-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir)?;
/// let path = dir.join("profile.svg");
/// let mut file = perfsupport::create_output_file(&path)?;
/// file.write_all(b"<svg/>")?;
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok(())
/// # }
/// ```
///
/// # Errors
///
/// An [`io::Error`] naming the path and the step that failed: a missing or
/// read-only directory, something other than our own regular file at
/// `path`, or a file that keeps reappearing while it is replaced.
pub fn create_output_file(path: &Path) -> io::Result<File> {
    create_replacing_stale(path, PROFILER_FILE_MODE, WriteMode::Write)
}
// ANCHOR_END: create_output_file

/// Creates a new file at `path` with permissions `mode`, replacing a stale
/// file left there by an earlier process.
///
/// See the [module documentation](self) for the exact rules. In short: the
/// returned file is a fresh inode we created, never reached through a symlink,
/// owned by us, with exactly `mode` (typically [`PROFILER_FILE_MODE`]).
///
/// Call this only for a path nothing in this process has written yet: an
/// existing file is treated as stale and deleted.
///
/// # Errors
///
/// * the directory does not exist, is read-only, or is not searchable;
/// * something that is not a regular file (symlink, directory, FIFO, device)
///   is at `path`;
/// * a file owned by another user is at `path`;
/// * `path` keeps reappearing while we try to replace it.
pub(crate) fn create_replacing_stale(
    path: &Path,
    mode: u32,
    write_mode: WriteMode,
) -> io::Result<File> {
    let mut last_error = None;
    for _ in 0..MAX_CREATE_ATTEMPTS {
        match create_exclusive(path, mode, write_mode) {
            Ok(file) => return set_exact_mode(file, path, mode),
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
                remove_stale(path)?;
                last_error = Some(err);
            }
            Err(err) => return Err(with_context(err, "cannot create", path)),
        }
    }
    let err = last_error.unwrap_or_else(|| io::Error::from(io::ErrorKind::AlreadyExists));
    Err(with_context(
        err,
        "gave up replacing a file that keeps reappearing at",
        path,
    ))
}

/// Opens `path` with `O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC`.
fn create_exclusive(path: &Path, mode: u32, write_mode: WriteMode) -> io::Result<File> {
    let mut options = OpenOptions::new();
    match write_mode {
        WriteMode::Append => options.append(true),
        WriteMode::ReadWrite => options.read(true).write(true),
        WriteMode::Write => options.write(true),
    };
    // `create_new` is O_CREAT | O_EXCL: the open fails with EEXIST when
    // anything, even a dangling symlink, is at `path`. O_NOFOLLOW is redundant
    // with O_EXCL on Linux; it documents the intent and guards odd platforms.
    options
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// Deletes the stale file at `path` if it is a regular file owned by us.
fn remove_stale(path: &Path) -> io::Result<()> {
    let metadata = match std::fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        // Someone removed it between our open and this check: just retry.
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(with_context(err, "cannot inspect existing", path)),
    };
    let file_type = metadata.file_type();
    if file_type.is_symlink() {
        return Err(refusal(path, "it is a symbolic link"));
    }
    if !file_type.is_file() {
        return Err(refusal(path, "it is not a regular file"));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let our_uid = unsafe { libc::geteuid() };
    if metadata.uid() != our_uid {
        return Err(refusal(
            path,
            &format!(
                "it is owned by uid {}, not by us (uid {our_uid})",
                metadata.uid()
            ),
        ));
    }
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(with_context(err, "cannot remove stale", path)),
    }
}

/// Sets exactly `mode`, undoing whatever the umask removed.
fn set_exact_mode(file: File, path: &Path, mode: u32) -> io::Result<File> {
    file.set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(|err| with_context(err, "cannot set permissions of", path))?;
    Ok(file)
}

fn refusal(path: &Path, reason: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!("refusing to replace {}: {reason}", path.display()),
    )
}

/// A path this process writes, recorded so a second writer in the same
/// process cannot mistake our file for a stale one and delete it.
///
/// A sink that wrote to its file keeps the claim for good: after it
/// finishes, its file must still survive for `perf report` / `perf
/// inject`, so a later sink in the same process must not replace it. Only
/// a sink that wrote nothing gives its claim back ([`PathClaim::release`]).
#[derive(Debug)]
pub(crate) struct PathClaim {
    path: PathBuf,
}

static CLAIMED_PATHS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

impl PathClaim {
    /// Claims `path`, failing with `ResourceBusy` if this process already
    /// wrote it (a conflict inside the process, not a file in the way).
    pub(crate) fn claim(path: &Path) -> io::Result<PathClaim> {
        let mut claimed = CLAIMED_PATHS.lock();
        if claimed.iter().any(|p| p == path) {
            return Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                format!("{} is already written by this process", path.display()),
            ));
        }
        claimed.push(path.to_path_buf());
        Ok(PathClaim {
            path: path.to_path_buf(),
        })
    }

    /// The claimed path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Gives the path back, for a sink that wrote nothing there: a later
    /// sink of this process may create it again (replacing the empty file).
    pub(crate) fn release(self) {
        CLAIMED_PATHS.lock().retain(|p| p != &self.path);
    }
}

/// Prefixes an error with what we tried to do and the path, keeping its kind.
pub(crate) fn with_context(err: io::Error, what: &str, path: &Path) -> io::Error {
    io::Error::new(err.kind(), format!("{what} {}: {err}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn scratch_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "perfsupport-safe-file-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        dir
    }

    #[test]
    fn creates_new_file_with_exact_mode() {
        let dir = scratch_dir("new");
        let path = dir.join("out.map");
        let mut file =
            create_replacing_stale(&path, PROFILER_FILE_MODE, WriteMode::Append).expect("create");
        file.write_all(b"hello\n").expect("write");
        let metadata = std::fs::metadata(&path).expect("stat");
        assert_eq!(metadata.permissions().mode() & 0o7777, PROFILER_FILE_MODE);
        assert_eq!(std::fs::read(&path).expect("read"), b"hello\n");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn replaces_stale_file_owned_by_us() {
        let dir = scratch_dir("stale");
        let path = dir.join("out.map");
        std::fs::write(&path, b"old contents of a dead process\n").expect("plant");
        let mut file = create_replacing_stale(&path, PROFILER_FILE_MODE, WriteMode::ReadWrite)
            .expect("replace");
        file.write_all(b"new\n").expect("write");
        let mut contents = String::new();
        File::open(&path)
            .and_then(|mut f| f.read_to_string(&mut contents))
            .expect("read back");
        assert_eq!(contents, "new\n");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn refuses_symlink_and_leaves_its_target_alone() {
        let dir = scratch_dir("symlink");
        let target = dir.join("precious");
        std::fs::write(&target, b"keep me").expect("plant target");
        let path = dir.join("out.map");
        std::os::unix::fs::symlink(&target, &path).expect("plant symlink");
        let err = create_replacing_stale(&path, PROFILER_FILE_MODE, WriteMode::Append)
            .expect_err("must refuse a symlink");
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert_eq!(std::fs::read(&target).expect("read target"), b"keep me");
        assert!(
            std::fs::symlink_metadata(&path)
                .expect("lstat")
                .file_type()
                .is_symlink()
        );
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn refuses_directory_at_path() {
        let dir = scratch_dir("dir");
        let path = dir.join("out.map");
        std::fs::create_dir(&path).expect("plant dir");
        let err = create_replacing_stale(&path, PROFILER_FILE_MODE, WriteMode::Append)
            .expect_err("must refuse a directory");
        assert!(err.to_string().contains("not a regular file"), "{err}");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn refuses_file_owned_by_someone_else() {
        let dir = scratch_dir("foreign");
        let path = dir.join("out.map");
        std::fs::write(&path, b"someone else's").expect("plant");
        // We run as root in CI, so chown works; as a normal user it fails and
        // the ownership check is then exercised by nobody-owned files only.
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            std::os::unix::fs::chown(&path, Some(65534), Some(65534)).expect("chown");
            let err = create_replacing_stale(&path, PROFILER_FILE_MODE, WriteMode::Append)
                .expect_err("must refuse a foreign file");
            assert!(err.to_string().contains("owned by uid 65534"), "{err}");
            assert_eq!(std::fs::read(&path).expect("read"), b"someone else's");
        } else {
            let err = create_replacing_stale(
                Path::new("/proc/self/perfsupport-no-such"),
                PROFILER_FILE_MODE,
                WriteMode::Append,
            )
            .expect_err("procfs is not writable");
            assert!(err.to_string().contains("cannot create"), "{err}");
        }
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn missing_and_read_only_directories_are_errors() {
        let err = create_replacing_stale(
            Path::new("/nonexistent-perfsupport-dir/out.map"),
            PROFILER_FILE_MODE,
            WriteMode::Append,
        )
        .expect_err("missing dir");
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(
            err.to_string()
                .contains("/nonexistent-perfsupport-dir/out.map"),
            "{err}"
        );
        // /proc is not writable even for root.
        let err = create_replacing_stale(
            Path::new("/proc/perfsupport-test.map"),
            PROFILER_FILE_MODE,
            WriteMode::Append,
        )
        .expect_err("read-only dir");
        assert!(err.to_string().contains("cannot create"), "{err}");
    }
}
